"""Replaying recorded attempts: every turn that has a solution, evaluated again on this machine, next to
what was recorded: does a kernel that passed on one GPU (or with one toolchain) still pass here, and is it
as fast? (`python -m agent.replay` is the command.)

Flags: DIVERGED (both verdicts verified, one correct and one not), 'speedup moved ×r' (both correct,
speedups more than 10% apart), 'not verified here' (no GPU of the arch here), 'verified here' (recorded
without a GPU), 'status changed' (e.g. another failing stage).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.bench import score
from agent.bench.tables import markdown_table, times
from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tools.gpu.base import Gpu
from tools.options import EvalOptions
from tools.pipeline import evaluate_solution
from tools.schema import Evaluation, Status, Trajectory

SPEEDUP_TOLERANCE = 0.10


@dataclass(frozen=True)
class Verdict:
    status: str
    speedup: float | None
    device: str | None

    @classmethod
    def of(cls, evaluation: Evaluation) -> Verdict:
        return cls(evaluation.status.value, evaluation.speedup, evaluation.device)


@dataclass(frozen=True)
class Replayed:
    run_id: str
    turn: int
    recorded: Verdict
    now: Verdict
    flag: str


def flag(recorded: Evaluation, now: Evaluation) -> str:
    """What a reader should notice about one attempt's two verdicts ('' when nothing)."""
    if recorded.correct and now.correct:
        if recorded.speedup and now.speedup and abs(now.speedup / recorded.speedup - 1) > SPEEDUP_TOLERANCE:
            return f"speedup moved ×{now.speedup / recorded.speedup:.2f}"
        return ""
    if recorded.status is now.status:
        return ""
    if Status.UNVERIFIED not in (recorded.status, now.status) and recorded.correct != now.correct:
        return "DIVERGED"
    if now.status is Status.UNVERIFIED and recorded.device is not None:
        return "not verified here"
    if recorded.status is Status.UNVERIFIED and now.device is not None:
        return "verified here"
    return "status changed"


def replay(traj: Trajectory, gpu: Gpu) -> list[Replayed]:
    """Each turn with a solution, through tools.pipeline with the run's recorded eval settings, on `gpu`;
    nothing for a run of an older task definition (score.legacy): its verdicts were on other work."""
    if score.legacy(traj):
        return []
    task, arch = problem(traj)
    options = EvalOptions.model_validate({k: v for k, v in traj.config.eval.items() if k in EvalOptions.model_fields})
    out = []
    for turn in traj.turns:
        if turn.solution is None:
            continue
        now = evaluate_solution(turn.solution, task, arch, options, gpu)
        out.append(Replayed(traj.run_id, turn.index, Verdict.of(turn.evaluation), Verdict.of(now),
                            flag(turn.evaluation, now)))  # fmt: skip
    return out


def problem(traj: Trajectory) -> tuple[Task, Arch]:
    """The run's task and arch (UnknownName or KeyError for a config that does not name them)."""
    return get_task(traj.config.task), Arch.resolve(traj.config.arch)


def render(traj: Trajectory, rows: list[Replayed], gpu_note: str) -> str:
    changed = score.legacy(traj)
    if changed:
        return (f"replay {traj.run_id}: not replayed: the task's definition changed since this run ({changed}), so "
                "today's verdict would judge other work; this is not a regression")  # fmt: skip
    skipped = sum(t.solution is None for t in traj.turns)
    lines = [
        f"replay {traj.run_id} ({traj.config.task} on {traj.config.arch}): {len(rows)} attempts "
        f"with a solution" + (f", {skipped} without (not replayed)" if skipped else "") + f"; {gpu_note}",
        "",
    ]
    headers = ("turn", "recorded", "speedup", "device", "now", "speedup", "device", "flag")
    table = [
        (
            r.turn,
            r.recorded.status,
            times(r.recorded.speedup),
            r.recorded.device,
            r.now.status,
            times(r.now.speedup),
            r.now.device,
            r.flag,
        )
        for r in rows
    ]
    lines.append(markdown_table(headers, table) if rows else "(nothing to replay)")
    flags = [r.flag.split(" ×")[0] for r in rows if r.flag]
    if flags:
        lines += ["", "; ".join(f"{flags.count(f)} {f}" for f in dict.fromkeys(flags))]
    return "\n".join(lines)
