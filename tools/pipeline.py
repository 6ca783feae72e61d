"""One attempt, stage by stage: extract → compile → sass → abi, then the GPU stages (tools/gpu/stages.py: run →
check → time → profile → perf, and the sanitizer's diagnoses).

The static steps run where the caller runs and leave a `Static` record, plain data that the repair loop
keeps between its nodes (its module in the run folder, the rest in its checkpointed state): `extract` (the
answer → a Solution and its concrete LaunchPlan) and `build` (compile, sass, abi → the CompiledModule).
`on_gpu` then runs the GPU stages of that module on a `Gpu` (tools/gpu/base.py), or `gpu_stages` where the
caller has already asked whether that GPU can run the arch. Each step stops at the first failing stage; without a GPU of
the solution's arch the GPU stages are `skipped` with the reason and the attempt is `unverified`, never
`passed`. The stage functions are also what `python -m tools.compile` reports.

A shape-general task (`<definition>_all`) is judged at each of its workloads: its plan and abi stages evaluate at
each workload's dims (one failure names the workloads it holds at), its module compiles once, and its GPU stages run
once per workload, each a request of the member task with the member's plan, so every `Gpu` (a local service, a
pool, the Dask pool) serves it unchanged. `combine` makes the one Evaluation of them: correct only when every
workload is, speedup the minimum over them (the paper's agent's rule) with the geometric mean beside it.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, Field

from tasks.schema import Arch, TargetGroup, Task
from tools import procs, sass
from tools import ptx as ptx_text
from tools.abi import check_abi
from tools.answer import AnswerError, extract_solution
from tools.assemble import CompileResult, compile_source, render_grouped
from tools.crosscheck import cross_check, cross_check_summary
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status, WorkloadResult
from tools.gpu.base import CompiledModule, Gpu, Unavailable
from tools.gpu.stages import skipped
from tools.options import EvalOptions, Profile
from tools.plan import LaunchPlan, SpecError, launch_dims, plan_launches
from tools.solution import Solution

FAILURE_STATUS = {
    Stage.EXTRACT: Status.EXTRACT_ERROR,
    Stage.COMPILE: Status.COMPILE_ERROR,
    Stage.SASS: Status.COMPILE_ERROR,
    Stage.ABI: Status.ABI_ERROR,
}
PENDING = "the GPU stages run in the next step"
T = TypeVar("T")


class Static(BaseModel):
    """What the static steps produced so far: their stages, and what the next step consumes."""

    stages: list[StageResult] = Field(default_factory=list)
    solution: Solution | None = None
    plan: LaunchPlan | None = None
    plans: dict[str, LaunchPlan] = Field(
        default_factory=dict, description="A shape-general task's plan at each workload, by member task name."
    )
    module: CompiledModule | None = Field(None, description="Set once compile, sass and abi all passed.")

    @property
    def failed(self) -> StageResult | None:
        return next((s for s in self.stages if s.state is StageState.FAILED), None)


def _timed(stage_fn: Callable[..., T]) -> Callable[..., T]:
    """Record the stage's wall time in its `seconds` (the stage is the result, or the result's first item)."""

    @functools.wraps(stage_fn)
    def timed(*args, **kwargs) -> T:
        start = time.perf_counter()
        out = stage_fn(*args, **kwargs)
        (out[0] if isinstance(out, tuple) else out).seconds = time.perf_counter() - start
        return out

    return timed


# ---------------------------------------------------------------------------------------- extract


def extract(task: Task, arch: Arch, *, answer: str | None = None, solution: Solution | None = None) -> Static:
    """The extract stage: the answer's Solution (or the given one) and its LaunchPlan at the task's dims (a
    shape-general task's: at each workload's too)."""
    stage, solution, plans = extract_stage(task, arch, answer, solution)
    plan = plans.pop(task.name, None)
    return Static(stages=[stage], solution=solution, plan=plan, plans=plans)


def workload_label(task: Task) -> str:
    """A member task named with its workload, for messages: 'gemm_n7168_k5120_m70 (M=70)'."""
    return f"{task.name} ({task.axis}={task.dims[task.axis]})" if task.axis else task.name


def at_workloads(problems: dict[str, str]) -> str:
    """Per-workload problems (member label → text) as one message, each distinct text once with where it holds."""
    where: dict[str, list[str]] = {}
    for label, text in problems.items():
        where.setdefault(text, []).append(label)
    return "\n".join(f"at {', '.join(labels)}: {text}" for text, labels in where.items())


@_timed
def extract_stage(
    task: Task, arch: Arch, answer: str | None, solution: Solution | None
) -> tuple[StageResult, Solution | None, dict[str, LaunchPlan]]:
    """The Solution and its plans by task name: the task's own, and each workload's of a shape-general task."""
    try:
        solution = solution or extract_solution(answer or "")
        plans = {task.name: plan_launches(solution.launch, task, arch)} if not task.general else {}
    except (AnswerError, SpecError) as e:
        return StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=str(e)), None, {}
    problems = {}
    for member in task.workloads:
        try:
            plans[member.name] = plan_launches(solution.launch, member, arch)
        except SpecError as e:
            problems[workload_label(member)] = str(e)
    if problems:
        message = (
            f"the launch spec fails at {len(problems)} of {len(task.workloads)} workloads:\n{at_workloads(problems)}"
        )
        return StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=message), None, {}
    if task.general:  # it reads as its largest workload, whose plan is already made
        plans[task.name] = plans[task.largest.name]
    detail = {"language": solution.language, "source_lines": solution.source.count("\n") + 1,
              "launches": len(solution.launch.launches), "solution_hash": solution.content_hash}  # fmt: skip
    return StageResult(name=Stage.EXTRACT, state=StageState.PASSED, detail=detail), solution, plans


# ---------------------------------------------------------------------------------- compile, sass, abi


@_timed
def compile_stage(language: str, source: str, arch: Arch, timeout_s: float) -> tuple[StageResult, CompileResult]:
    compiled = compile_source(language, source, arch, timeout_s)
    detail = compiled.model_dump(mode="json", exclude={"ptx", "log", "arch", "language"})
    if not compiled.ok:
        return StageResult(
            name=Stage.COMPILE, state=StageState.FAILED, message=compiled.message(), detail=detail
        ), compiled
    notes = render_grouped([d for d in compiled.diagnostics if d.severity != "error"])
    return StageResult(name=Stage.COMPILE, state=StageState.PASSED, message=notes, detail=detail), compiled


@_timed
def sass_stage(compiled: CompileResult, groups: list[TargetGroup], budget: procs.Budget | None = None) -> StageResult:
    """Opcode histograms per kernel, local-memory traffic, and which target groups the SASS holds."""
    try:
        opcodes = sass.full_opcodes(sass.disassemble(compiled.cubin, budget))
    except sass.SassTimeout as e:  # a module too large to disassemble in time is the kernel's problem
        return StageResult(name=Stage.SASS, state=StageState.FAILED, message=str(e))
    except sass.SassError as e:  # a tool failure, not the kernel's
        return StageResult(name=Stage.SASS, state=StageState.SKIPPED, message=f"nvdisasm unavailable: {e}")
    presence = sass.target_presence(groups, compiled.ptx, opcodes)
    kernels = sass.kernel_summaries(opcodes)
    notes = [
        f"{k.name}: local memory traffic {k.local_memory} (spills or a run-time-indexed array)"
        for k in kernels
        if k.local_memory
    ]
    missing = [g for g, p in presence.items() if not p.sass]
    if missing:
        notes.append(f"not in the SASS: {', '.join(missing)} (required at run time)")
    detail = {"kernels": [k.model_dump() for k in kernels], "targets": {g: p.model_dump() for g, p in presence.items()}}
    return StageResult(name=Stage.SASS, state=StageState.PASSED, message="\n".join(notes), detail=detail)


@_timed
def abi_stage(
    solution: Solution, compiled: CompileResult, task: Task, arch: Arch, plan: LaunchPlan,
    plans: dict[str, LaunchPlan] | None = None,
) -> StageResult:  # fmt: skip
    """The launch spec against the module's .entry parameter lists and directives, then the static
    cross-checks of tensor maps against the descriptors and mbarrier byte counts (tools/crosscheck.py); a
    shape-general task's at each workload (`plans`), its failure naming the workloads it holds at."""
    if not task.general:
        return _abi(solution, compiled, task, arch, plan)
    results = [(m, _abi(solution, compiled, m, arch, (plans or {})[m.name])) for m in task.workloads]
    failed = {workload_label(m): r.message for m, r in results if r.state is StageState.FAILED}
    if failed:
        problems = [p for _, r in results for p in r.detail.get("problems", [])]
        message = f"fails at {len(failed)} of {len(results)} workloads:\n{at_workloads(failed)}"
        return StageResult(name=Stage.ABI, state=StageState.FAILED, message=message,
                           detail={"problems": list(dict.fromkeys(problems))})  # fmt: skip
    largest = next(r for m, r in results if m is task.largest)  # the task reads as it: its check is the task's
    return largest.model_copy(update={"detail": {**largest.detail, "workloads": [m.name for m in task.workloads]}})


def _abi(solution: Solution, compiled: CompileResult, task: Task, arch: Arch, plan: LaunchPlan) -> StageResult:
    entries = ptx_text.entries(compiled.ptx)
    problems = check_abi(solution.launch, entries, arch, launch_dims(task, arch.sm_count), compiled.kernels)
    if problems:
        return StageResult(name=Stage.ABI, state=StageState.FAILED, message="\n".join(problems),
                           detail={"problems": problems})  # fmt: skip
    checks = cross_check(compiled.ptx, plan, task, arch, solution.language)
    detail = {"entries": {n: [p.describe() for p in e.params] for n, e in entries.items()},
              "crosschecks": [c.model_dump() for c in checks]}  # fmt: skip
    mismatches = [c.message for c in checks if c.verdict == "mismatch"]
    if mismatches:
        return StageResult(name=Stage.ABI, state=StageState.FAILED, message="\n".join(mismatches),
                           detail={**detail, "problems": mismatches})  # fmt: skip
    return StageResult(name=Stage.ABI, state=StageState.PASSED, message=cross_check_summary(checks), detail=detail)


def build(static: Static, task: Task, arch: Arch, options: EvalOptions) -> Static:
    """compile → sass → abi on an extracted solution; the record gains the module when all three pass."""
    if static.failed or static.solution is None or static.plan is None:
        return static
    sol = static.solution
    budget = procs.Budget(options.static_timeout_s)  # compile and sass share it; abi only reads text
    stage, compiled = compile_stage(sol.language, sol.source, arch, budget.left())
    stages = [*static.stages, stage]
    if stage.state is StageState.FAILED:
        return static.model_copy(update={"stages": stages})
    stages.append(sass_stage(compiled, task.targets[arch], budget))  # skipped if nvdisasm is missing: our tool
    if stages[-1].state is not StageState.FAILED:
        stages.append(abi_stage(sol, compiled, task, arch, static.plan, static.plans))
    if stages[-1].state is StageState.FAILED:
        return static.model_copy(update={"stages": stages})
    disassembled = next(s for s in stages if s.name is Stage.SASS)  # skipped without nvdisasm: no opcodes
    opcodes = ({k["name"]: k["opcodes"] for k in disassembled.detail["kernels"]}
               if disassembled.state is StageState.PASSED else None)  # fmt: skip
    module = CompiledModule(language=sol.language, ptx=compiled.ptx, cubin=compiled.cubin, plan=static.plan,
                            launch=sol.launch, kernels=compiled.kernels, opcodes=opcodes,
                            cuda_source=sol.source if sol.language == "cuda" else None)  # fmt: skip
    return static.model_copy(update={"stages": stages, "module": module})


# ---------------------------------------------------------------------------------------- verdicts


def evaluation(static: Static, task: Task, arch: Arch, gpu_reason: str = PENDING) -> Evaluation:
    """The Evaluation the static steps alone support: the failed stage's status, or `unverified` with the
    GPU stages skipped for `gpu_reason`."""
    failed = static.failed
    if failed is not None:
        return _finish(static, task, arch, FAILURE_STATUS[failed.name], f"{failed.name} failed: {failed.message}")
    if task.general:
        return combine(task, [evaluation(static, member, arch, gpu_reason) for member in task.workloads])
    outcome = skipped(gpu_reason)
    return _finish(static, task, arch, outcome.status, outcome.message, static.stages + outcome.stages)


def on_gpu(static: Static, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu) -> Evaluation:
    """The GPU stages of the built module on `gpu`; skipped (with the reason) where it cannot run them."""
    if static.failed or static.module is None:
        return evaluation(static, task, arch)
    reason = gpu.unavailable_reason(arch)
    if reason:
        return evaluation(static, task, arch, reason)
    return gpu_stages(static, task, arch, options, gpu)


def gpu_stages(static: Static, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu) -> Evaluation:
    """The GPU stages of a built module on a `gpu` the caller has found able to run `arch` (the repair loop asks
    once per run, a round trip to the scheduler on a Dask pool). A shape-general task's run at each workload."""
    if task.general:
        return _at_each_workload(static, task, arch, options, gpu)
    outcome = gpu.evaluate(task, arch, static.module, options.for_family(task.family))
    return _finish(static, task, arch, outcome.status, outcome.message, static.stages + outcome.stages,
                   device=outcome.device, worker=outcome.worker, **outcome.metrics.evaluation_fields())  # fmt: skip


def _member(static: Static, member: Task) -> Static:
    """A shape-general task's static record as its member at one workload sees it: that workload's plan."""
    plan = static.plans[member.name]
    module = static.module.model_copy(update={"plan": plan}) if static.module else None
    return static.model_copy(update={"plan": plan, "plans": {}, "module": module})


def _at_each_workload(static: Static, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu) -> Evaluation:
    """The GPU stages at every workload, then the perf pass (when the options want it) on the slowest one: it is run
    again with the pass, and that run is its row. The passes after the counts wait for the slowest to be known."""
    wants_perf = options.profile in (Profile.AUTO, Profile.PERF)
    first = options.model_copy(update={"profile": Profile.COUNTS}) if wants_perf else options
    results = [gpu_stages(_member(static, m), m, arch, first, gpu) for m in task.workloads]
    if wants_perf and all(e.correct for e in results):
        slowest = min(range(len(results)), key=lambda i: _speed(results[i]))
        if options.wants_perf(results[slowest].speedup):
            member = task.workloads[slowest]
            again = options.model_copy(update={"profile": Profile.PERF})
            results[slowest] = gpu_stages(_member(static, member), member, arch, again, gpu)
    return combine(task, results)


def _speed(evaluation: Evaluation) -> float:
    """The order 'slowest' means: the lowest speedup first, an untimed workload last."""
    return evaluation.speedup if evaluation.speedup is not None else math.inf


def combine(task: Task, results: list[Evaluation]) -> Evaluation:
    """A shape-general task's one Evaluation of its workloads' (in its workloads' order): correct only when every
    workload is; speedup the minimum over them (the paper's agent's rule) of whichever figure is the headline
    (eval.speedup), other_speedup the minimum of the other, their geometric mean beside it; the stages
    and figures those of its first failing workload, else its slowest; the message naming the failing workloads."""
    rows = [_row(e, m) for e, m in zip(results, task.workloads, strict=True)]
    failing = [i for i, e in enumerate(results) if not e.correct]
    wrong = [i for i in failing if results[i].status is not Status.UNVERIFIED]
    update: dict = {"task": task.name, "workloads": rows}
    if not failing:
        shown = min(range(len(results)), key=lambda i: _speed(results[i]))
        speedups = [e.speedup for e in results]
        timed = None not in speedups
        if timed:
            update["speedup_geomean"] = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
            others = [e.other_speedup for e in results]  # the figure beside the headline, its minimum too
            update["other_speedup"] = None if None in others else min(others)
        else:  # the minimum over some of the workloads is no minimum
            update |= {"speedup": None, "speedup_interval": None, "other_speedup": None}
        met = [e.targets_met for e in results]
        update["targets_met"] = None if None in met else all(met)
        update["message"] = f"correct at all {len(rows)} workloads of {task.definition}" + (
            f"; speedup {min(speedups):.2f}× at the slowest, {workload_label(task.workloads[shown])}, geomean "
            f"{update['speedup_geomean']:.2f}×"
            if timed
            else ""
        )
    else:
        shown = (wrong or failing)[0]
        if wrong:
            names = ", ".join(f"{workload_label(task.workloads[i])} {results[i].status}" for i in wrong)
            passed = [workload_label(m) for m, e in zip(task.workloads, results, strict=True) if e.correct]
            update["message"] = (
                f"wrong at {len(wrong)} of {len(rows)} workloads of {task.definition}: {names}"
                + (f"; correct at {', '.join(passed)}" if passed else "")
                + f". The first failing one, {workload_label(task.workloads[shown])}: {results[shown].message}"
            )
        else:
            update["message"] = f"at every workload ({len(rows)}): {results[shown].message}"
    update["shown_workload"] = task.workloads[shown].name
    record = results[shown]
    return Evaluation.model_validate({**dict(record), **update})


def _row(evaluation: Evaluation, member: Task) -> WorkloadResult:
    e = evaluation
    return WorkloadResult(name=member.name, dims=member.dims, status=e.status, message=e.message,
                          kernel_ms=e.kernel_ms, baseline_ms=e.baseline_ms, speedup=e.speedup, tflops=e.tflops,
                          targets_met=e.targets_met, device=e.device, worker=e.worker)  # fmt: skip


def _finish(
    static: Static, task: Task, arch: Arch, status: Status, message: str, stages: list[StageResult] | None = None,
    **metrics,
) -> Evaluation:  # fmt: skip
    return Evaluation(
        task=task.name,
        arch=arch,
        status=status,
        message=message,
        stages=stages if stages is not None else list(static.stages),
        solution_hash=static.solution.content_hash if static.solution else None,
        **metrics,
    )


def evaluate_answer(
    answer: str, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: Gpu | None = None
) -> Evaluation:
    """Every stage of a model's Markdown answer; `gpu` None: static stages only."""
    return _evaluate(task, arch, options, gpu, answer=answer)


def evaluate_solution(
    solution: Solution, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: Gpu | None = None
) -> Evaluation:
    return _evaluate(task, arch, options, gpu, solution=solution)


def _evaluate(task: Task, arch: Arch, options: EvalOptions | None, gpu: Gpu | None, **given) -> Evaluation:
    options = options or EvalOptions()
    static = build(extract(task, arch, **given), task, arch, options)
    return on_gpu(static, task, arch, options, gpu or Unavailable("no GPU service in this process"))
