"""An Evaluation → the model's next user message, through one template per status (prompts/feedback/).

Every section is computed for every status, so a template may use any of them; long logs are cut with
a visible marker so the model knows text is missing. A shape-general task's message has one row per workload
after its opening paragraph, and the template's detail is that of the workload the Evaluation shows (its first failing
one, else its slowest).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.loop.prompts import render
from tasks.expr import evaluate
from tasks.schema import Arch, Task
from tools.assemble import Diagnostic, render_grouped
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.stages import GPU_STAGES

MESSAGE_CHARS = 6000
DETAIL_CHARS = 2000


def cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` whole if it fits, else its head and tail around a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit - len(head)) :]
    return f"{head}\n[… {len(text) - len(head) - len(tail):,} characters cut …]\n{tail}"


def feedback_message(
    evaluation: Evaluation, task: Task, arch: Arch, *, turn: int, max_turns: int, target_speedup: float
) -> str:
    left = max_turns - turn
    shown = next((m for m in task.workloads if m.name == evaluation.shown_workload), task)
    values = {
        "turn": turn,
        "max_turns": max_turns,
        "turns_left": f"{left} turn{'s' if left != 1 else ''} left." if left > 0 else "That was the last turn.",
        "stages": stage_line(evaluation),
        "failure": failure_text(evaluation),
        "resources": resources(evaluation),
        "compiler_messages": compiler_messages(evaluation),
        "performance_warnings": performance_warnings(evaluation),
        "other_compiler_messages": compiler_messages(evaluation, performance=False),
        "sass_notes": _stage_message(evaluation, Stage.SASS) or "none",
        "static_targets": static_targets(evaluation),
        "gpu_skipped": next((s.message for s in evaluation.stages if s.name in GPU_STAGES), ""),
        "timing": timing_table(evaluation, shown),
        "counts": instruction_counts(evaluation, task, arch),
        "perf": where_time_goes(evaluation),
        "verdict": verdict(evaluation, task, arch, target_speedup),
        "target_speedup": f"{target_speedup:g}×",
        "diagnosis": diagnosis(evaluation),
        "crosschecks": _stage_message(evaluation, Stage.ABI) or "none applied",
    }
    text = render(f"feedback/{evaluation.status.value}.md", **values).strip()
    if evaluation.workloads:
        first, _, rest = text.partition("\n\n")  # after the template's opening paragraph
        text = f"{first}\n\n{workload_table(evaluation, task)}\n\n{rest}"
    return re.sub(r"\n{3,}", "\n\n", text)  # a section with nothing to say leaves no gap


def workload_table(evaluation: Evaluation, task: Task) -> str:
    """A shape-general attempt's row per workload (status, time, speedup), the overall figures, and whose detail
    follows."""
    axis = task.axis or "workload"
    library = task.baseline.library if task.baseline else "baseline"  # a file's definition may name none: "-" below
    rows = [f"| workload | {axis} | status | time (ms) | {library} (ms) | speedup |",
            "| --- | ---: | --- | ---: | ---: | ---: |"]  # fmt: skip

    def figure(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for w in evaluation.workloads or []:
        rows.append(f"| {w.name} | {w.dims.get(axis, '-')} | {w.status.value} | {figure(w.kernel_ms, 4)} | "
                    f"{figure(w.baseline_ms, 4)} | {figure(w.speedup, 3)} |")  # fmt: skip
    failing = evaluation.failing_workloads()
    wrong = [w for w in failing if w.status is not Status.UNVERIFIED]
    if not failing:
        overall = "Correct at every workload"
        if evaluation.speedup is not None and evaluation.speedup_geomean is not None:
            overall += (f"; speedup {evaluation.speedup:.3f}× (the minimum over the workloads, the one that counts), "
                        f"geomean {evaluation.speedup_geomean:.3f}×")  # fmt: skip
        whose = f"The detail below is the slowest workload's, {evaluation.shown_workload}."
    elif not wrong:
        overall = "Checked statically at every workload; not run on a GPU"
        whose = f"The detail below is {evaluation.shown_workload}'s."
    else:
        overall = f"Wrong at {len(wrong)} of {len(evaluation.workloads)} workloads: " + ", ".join(w.name for w in wrong)
        whose = f"The detail below is the first failing workload's, {evaluation.shown_workload}."
    intro = f"One answer must pass every workload of {task.definition}. Per workload:"
    return f"{intro}\n\n" + "\n".join(rows) + f"\n\n{overall}. {whose}"


def where_time_goes(evaluation: Evaluation) -> str:
    """The perf pass's table beside the library's kernels and its likely limiter (tools/gpu/perf.py), or why
    it was skipped; nothing when it did not run (a fast attempt, or eval.profile=counts)."""
    stage = evaluation.stage(Stage.PERF)
    if stage is None:
        return ""
    if stage.state is not StageState.PASSED:
        return f"Where the time goes: not measured ({stage.message})."
    return "Where the time goes (Nsight Compute on this GPU, one launch of each; the longest of each side):\n\n" + (
        stage.message
    )


def outcome_summary(evaluation: Evaluation, turn: int) -> str:
    """A turn in one line, for a history that no longer shows it whole: its status, and the failing stage's first
    line or the speedup."""
    text = f"turn {turn}: {evaluation.status.value}"
    failed = _failed(evaluation)
    if failed is not None:
        first = next((line.strip() for line in (failed.message or evaluation.message).splitlines() if line.strip()), "")
        return f"{text} at {failed.name.value}: {first[:200]}"
    if evaluation.speedup is not None:
        targets = {True: ", targets met", False: ", targets NOT met", None: ""}[evaluation.targets_met]
        return f"{text}: {evaluation.speedup:.3f}× the baseline{targets}"
    return text


def diagnosis(evaluation: Evaluation) -> str:
    """What compute-sanitizer said of a failed attempt (memcheck on a fault, racecheck on a mismatch), or ""."""
    parts = []
    for stage in (evaluation.stage(Stage.MEMCHECK), evaluation.stage(Stage.RACECHECK)):
        if stage is None or evaluation.status.value == "passed":
            continue
        if stage.state is StageState.FAILED:
            parts.append(cut(stage.message, 3000))
        elif stage.state is StageState.PASSED:
            parts.append(f"compute-sanitizer's {stage.name.value} found nothing on a run with other inputs: the "
                         "error may depend on the data or on timing.")  # fmt: skip
        else:
            parts.append(f"Not located ({stage.name.value} skipped): {stage.message}")
    return "".join(f"\n\n{p}" for p in parts)


def stage_line(evaluation: Evaluation) -> str:
    marks = {StageState.PASSED: "passed", StageState.FAILED: "FAILED", StageState.SKIPPED: "skipped"}
    return " → ".join(f"{s.name.value} {marks[s.state]}" for s in evaluation.stages)


def _failed(evaluation: Evaluation) -> StageResult | None:
    return next((s for s in evaluation.stages if s.state is StageState.FAILED), None)


def _stage_message(evaluation: Evaluation, name: Stage) -> str:
    stage = evaluation.stage(name)
    return cut(stage.message) if stage and stage.message else ""


def failure_text(evaluation: Evaluation) -> str:
    """The failing stage's message, and its structured detail where that says more (GPU stages; a hang's location
    is in the message already)."""
    stage = _failed(evaluation)
    if stage is None:
        return cut(evaluation.message)
    text = cut(stage.message or evaluation.message)
    detail = {k: v for k, v in stage.detail.items() if k != "hang"}
    if detail and stage.name in GPU_STAGES:
        text += "\n\nDetail: " + cut(json.dumps(detail, default=str), DETAIL_CHARS)
    return text


def resources(evaluation: Evaluation) -> str:
    stage = evaluation.stage(Stage.COMPILE)
    kernels = (stage.detail.get("kernels") if stage else None) or []
    lines = []
    for k in kernels:
        spills = k.get("spill_stores", 0) + k.get("spill_loads", 0)
        lines.append(
            f"- {k['name']}: {k.get('registers', 0)} registers, {spills} bytes of spill traffic, "
            f"{k.get('shared_bytes', 0)} bytes of static shared memory, {k.get('stack_bytes', 0)} bytes of stack"
        )
    return "\n".join(lines) or "- (no resource report)"


def _compiler_notes(evaluation: Evaluation) -> list[Diagnostic]:
    """The compile stage's warnings and info lines (ptxas's and NVRTC's), as recorded in its detail."""
    stage = evaluation.stage(Stage.COMPILE)
    recorded = (stage.detail.get("diagnostics") if stage else None) or []
    return [d for d in map(Diagnostic.model_validate, recorded) if d.severity != "error"]


def compiler_messages(evaluation: Evaluation, performance: bool = True) -> str:
    """Every warning and info line the compilers printed, per kernel, quoted; `performance=False`: those that do
    not say the kernel runs slowly (performance_warnings shows the others). "" when there are none."""
    notes = [d for d in _compiler_notes(evaluation) if performance or d.performance is None]
    if not notes:
        return ""
    return f"What the compilers said, per kernel (quoted):\n{cut(render_grouped(notes), DETAIL_CHARS)}"


def performance_warnings(evaluation: Evaluation) -> str:
    """The compilers' messages that say the kernel runs slowly (serialized wgmma, spills, local memory), each
    with its usual cause; "" when there are none."""
    slow = [d for d in _compiler_notes(evaluation) if d.performance is not None]
    if not slow:
        return ""
    return (
        "Performance warnings (ptxas says these make the kernel slower than it could be; quoted, with the usual "
        f"cause):\n{cut(render_grouped(slow, causes=True), MESSAGE_CHARS // 2)}"
    )


def static_targets(evaluation: Evaluation) -> str:
    stage = evaluation.stage(Stage.SASS)
    targets: dict[str, Any] = (stage.detail.get("targets") if stage else None) or {}
    lines = []
    for name, seen in targets.items():
        sass = ", ".join(f"{op} ×{n}" for op, n in list(seen.get("sass_matches", {}).items())[:4])
        where = f"in the SASS ({sass})" if seen.get("sass") else "NOT in the SASS"
        lines.append(f"- {name}: {'in' if seen.get('ptx') else 'not in'} the PTX, {where}")
    return "\n".join(lines) or "- (no SASS report)"


def timing_table(evaluation: Evaluation, task: Task) -> str:
    if evaluation.kernel_ms is None:
        return "Timing: not measured."
    flops = evaluate(task.flops, task.dims)
    rows = ["| | time (ms) | TFLOP/s |", "| --- | ---: | ---: |"]
    library = task.baseline.library if task.baseline else "no"
    measured = [("your kernel", evaluation.kernel_ms), (f"{library} baseline", evaluation.baseline_ms)]
    rows += [f"| {who} | {ms:.4f} | {flops / ms / 1e9:,.0f} |" for who, ms in measured if ms is not None]
    if evaluation.speedup is not None:  # under eval.speedup=paper it says so; the default (paired) reads as it did
        which = f" ({evaluation.headline_words()}; the one that counts)" if evaluation.speedup_figure else ""
        rows.append(f"\nSpeedup: {evaluation.speedup:.3f}× the baseline{which}.")
    rows += [f"timing: {flag}" for flag in evaluation.timing_flags]
    time_stage = evaluation.stage(Stage.TIME)
    if time_stage and time_stage.message:
        rows.append(cut(time_stage.message, 600))
    return "\n".join(rows)


def instruction_counts(evaluation: Evaluation, task: Task, arch: Arch) -> str:
    if evaluation.target_counts is None:
        stage = evaluation.stage(Stage.PROFILE)
        why = f" ({stage.message})" if stage and stage.message else ""
        return f"Executed target instructions: not counted{why}."
    lines = ["Executed target instructions (warp-level, counted by the profiler):"]
    for g in task.targets[arch]:
        need = "required" if g.required else "optional"
        lines.append(f"- {g.name} executed: {evaluation.target_counts.get(g.name, 0):,} ({need})")
    return "\n".join(lines)


def verdict(evaluation: Evaluation, task: Task, arch: Arch, target_speedup: float) -> str:
    """For a correct attempt: solved (Evaluation.solved), or what is still missing."""
    if evaluation.solved(target_speedup):
        return "Solved: correct, targets executed, and fast enough."
    missing = []
    if evaluation.targets_met is not True:
        counts = evaluation.target_counts or {}
        absent = [g.name for g in task.targets[arch] if g.required and not counts.get(g.name)]
        missing.append(f"the required target instructions did not all execute ({', '.join(absent) or 'not counted'})")
    if not evaluation.fast_enough(target_speedup):
        got = f"{evaluation.speedup:.3f}×" if evaluation.speedup is not None else "not measured"
        missing.append(f"the speedup ({got}) is below the target {target_speedup:g}×")
    return "Not solved yet: " + "; and ".join(missing) + "."
