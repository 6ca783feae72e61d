"""Run folders as FlashInfer-Bench traces: each recorded attempt becomes one Trace (tasks/flashinfer_bench.py's model
of their schema) of the task's definition and workload, our status mapped onto theirs, written per definition as
their trace sets lay them out: traces/<author>/<op_type>/<definition>.jsonl. A task loaded from a FlashInfer-Bench
file keeps its definition and workload (uuid included) and the definition and workload files are written beside the
traces; a catalog task is written as its definition's name, its var axis and random inputs, under a uuid made from
its name, so that the same task always has the same one.

What has no place in their schema is said, not invented: an `unverified` attempt (compiled, never run: no GPU of its
arch) has no status of theirs and is left out and counted; a passed attempt without a baseline has a reference
latency and speedup of 0 (their default), and its log says so."""

from __future__ import annotations

import json
import math
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agent.loop.records import Trajectory, Turn
from tasks import flashinfer_bench as fib
from tasks.schema import Task
from tools.evaluation import Evaluation, Stage, Status
from tools.options import Criterion

LOG_CHARS = 4000  # of the evaluation's message, in a trace's log

STATUS = {
    Status.PASSED: fib.TraceStatus.PASSED,
    Status.MISMATCH: fib.TraceStatus.INCORRECT_NUMERICAL,
    Status.EXTRACT_ERROR: fib.TraceStatus.COMPILE_ERROR,  # no kernel to build: the answer held none
    Status.COMPILE_ERROR: fib.TraceStatus.COMPILE_ERROR,
    Status.ABI_ERROR: fib.TraceStatus.COMPILE_ERROR,  # built, but its launch spec does not fit its parameters
    Status.LAUNCH_ERROR: fib.TraceStatus.RUNTIME_ERROR,
    Status.RUNTIME_ERROR: fib.TraceStatus.RUNTIME_ERROR,
    Status.TIMEOUT: fib.TraceStatus.TIMEOUT,
}  # Status.UNVERIFIED has none: such attempts are not written


def op_type(task: Task) -> str:
    if task.source is not None:
        return fib.definition_of(task)[0].op_type
    return task.family


def workload(task: Task) -> fib.Workload:
    """The task's workload: a file task's own, or a catalog task's var axis with random inputs."""
    if task.source is not None:
        found = fib.definition_of(task)[1]
        if found is not None:
            return found
    axes = {task.axis: task.dims[task.axis]} if task.axis else {}
    uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"ptxbench:{task.name}:v{task.version}"))
    return fib.Workload(axes=axes, inputs={t.name: fib.RandomInput() for t in task.inputs}, uuid=uid)


def correctness(evaluation: Evaluation, task: Task) -> fib.Correctness:
    """The check stage's worst errors over its trials and outputs (NaN where an output was unwritten or non-finite),
    with the judging rule's figures in `extra`: ours (rel. L2 per output against its tolerance), or the paper's
    (eval.criterion=paper: the failing elements per output, of atol and rtol)."""
    check = evaluation.stage(Stage.CHECK)
    detail = check.detail if check else {}
    trials = detail.get("trials")
    if not isinstance(trials, list):  # older records: one trial's outputs at the top, `trials` a count
        trials = [detail]
    outputs = [o for trial in trials for o in trial.get("outputs", []) if isinstance(o, dict) and "name" in o]
    if not outputs:
        nan = float("nan")
        note = (check.message if check else evaluation.message)[:LOG_CHARS]
        return fib.Correctness(max_relative_error=nan, max_absolute_error=nan, extra={"note": note})

    def number(value) -> float:
        return float("nan") if value is None else float(value)  # None: unwritten or non-finite elements

    def worst(values: list[float]) -> float:
        return float("nan") if not values or any(math.isnan(v) for v in values) else max(values)

    names = list(dict.fromkeys(o["name"] for o in outputs))
    if evaluation.criterion is Criterion.PAPER:  # the element rule's figures: how many failed, of how many
        extra = {
            "criterion": "paper: every element within atol and rtol of the library's output",
            "atol": outputs[0]["atol"],
            "rtol": outputs[0]["rtol"],
            "failed_elements": {n: max(o["failed"] for o in outputs if o["name"] == n) for n in names},
            "required_share": {o["name"]: o["required"] for o in outputs},
        }
    else:
        rel_l2 = {n: worst([number(o.get("rel_l2")) for o in outputs if o["name"] == n]) for n in names}
        extra = {"criterion": "ptxbench: rel. L2 error against the reference", "tolerance": task.tolerance,
                 "rel_l2": rel_l2}  # fmt: skip
    return fib.Correctness(
        max_relative_error=worst([number(o.get("max_rel_err")) for o in outputs]),
        max_absolute_error=worst([number(o.get("max_abs_err")) for o in outputs]),
        extra=extra,
    )


def performance(evaluation: Evaluation) -> fib.Performance:
    return fib.Performance(
        latency_ms=evaluation.kernel_ms or 0.0,
        reference_latency_ms=evaluation.baseline_ms or 0.0,
        speedup_factor=evaluation.speedup or 0.0,
    )


def trace(turn: Turn, task: Task, run: Trajectory) -> fib.Trace | None:
    """One attempt as a Trace; None for an unverified one."""
    evaluation = turn.evaluation
    status = STATUS.get(evaluation.status)
    if status is None:
        return None
    log = evaluation.message[:LOG_CHARS]
    if status is fib.TraceStatus.PASSED and evaluation.speedup is None:
        why = "not timed" if evaluation.kernel_ms is None else "no baseline: timed alone"
        log = f"{log}\n(ptxbench: {why}; reference_latency_ms and speedup_factor 0 mean not measured)"
    toolchain = run.config.model_extra.get("toolchain") or {}
    libs = {"ptxas": str(toolchain.get("ptxas_version", "unknown")), "arch": str(evaluation.arch)}
    env = fib.Environment(hardware=evaluation.device or "unknown", libs=libs)
    keeps_errors = status in (fib.TraceStatus.PASSED, fib.TraceStatus.INCORRECT_NUMERICAL)
    return fib.Trace(
        definition=task.definition,
        workload=workload(task),
        solution=f"{run.run_id}_turn{turn.index}",
        evaluation=fib.TraceEvaluation(
            status=status,
            environment=env,
            timestamp=turn.started_at,
            log=log,
            correctness=correctness(evaluation, task) if keeps_errors else None,
            performance=performance(evaluation) if status is fib.TraceStatus.PASSED else None,
        ),
    )


@dataclass
class Exported:
    traces: dict[Path, int] = field(default_factory=dict)  # file → traces written
    unverified: int = 0
    definitions: list[Path] = field(default_factory=list)


def export(runs: Iterable[tuple[Trajectory, Task]], out: Path, author: str) -> Exported:
    """Write every attempt of `runs` under `out` (a trace set's root); returns what was written."""
    done = Exported()
    lines: dict[Path, list[str]] = {}
    files: dict[str, Task] = {}
    for run, task in runs:
        folder = out / "traces" / author / op_type(task)
        for turn in run.turns:
            record = trace(turn, task, run)
            if record is None:
                done.unverified += 1
                continue
            lines.setdefault(folder / f"{task.definition}.jsonl", []).append(record.model_dump_json())
        if task.source is not None:
            files.setdefault(task.source, task)
    for path, rows in lines.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{row}\n" for row in rows))
        done.traces[path] = len(rows)
    for source, task in files.items():  # the definitions the traces are of, as a trace set holds them
        definition = fib.definition_of(task)[0]
        kind = definition.op_type
        target = out / "definitions" / kind / f"{definition.name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(json.loads(Path(source).read_text()), indent=2) + "\n")
        rows = [fib.Trace(definition=definition.name, workload=w).model_dump_json() for w in fib.workloads_of(task)]
        wl = out / "workloads" / kind / f"{definition.name}.jsonl"
        wl.parent.mkdir(parents=True, exist_ok=True)
        wl.write_text("".join(f"{row}\n" for row in rows))
        done.definitions.append(target)
    return done
