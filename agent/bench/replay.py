"""Replaying recorded attempts: every turn that has a solution, evaluated again on this machine, next to
what was recorded: does a kernel that passed on one GPU (or with one toolchain) still pass here, and is it
as fast? (`python -m agent.replay` is the command.)

Per turn: the recorded and the new speedup and their ratio (now / recorded). Flags: DIVERGED (both verdicts
verified, one correct and one not), 'speedup moved ×r (beyond ±s)' (both correct, the ratio further from 1
than the two measurements' combined spread s), 'not verified here' (no GPU of the arch here), 'verified
here' (recorded without a GPU), 'status changed' (e.g. another failing stage).

A measurement's spread is the half-width of its speedup interval relative to its speedup (the paired
blocks' range, tools/gpu/timing.py); the combined spread is the sum of the two. A record from before paired
timing has no interval: it counts UNPAIRED_SPREAD, what the unpaired method wobbled by on the H200.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.bench import score
from agent.bench.tables import markdown_table, times
from agent.loop.records import Trajectory
from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tools.evaluation import Evaluation, Status
from tools.gpu.base import Gpu
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_solution

# Unpaired, one GEMM answer read 0.857× and 0.895× minutes apart and cuBLAS's trial medians spread 9.3% within
# one evaluation (seen on the H200, 2026-12-01); two such records together allow the 10% this flag allowed before
# pairing.
UNPAIRED_SPREAD = 0.05


@dataclass(frozen=True)
class Verdict:
    status: str
    speedup: float | None
    device: str | None
    spread: float | None  # the speedup's relative half-width; None for an unpaired record

    @classmethod
    def of(cls, evaluation: Evaluation) -> Verdict:
        return cls(evaluation.status.value, evaluation.speedup, evaluation.device, spread(evaluation))


@dataclass(frozen=True)
class Replayed:
    run_id: str
    turn: int
    recorded: Verdict
    now: Verdict
    ratio: float | None  # now / recorded speedup, when both have one
    combined_spread: float | None
    flag: str


def spread(evaluation: Evaluation) -> float | None:
    """How far the true speedup may lie from the reported one, relative to it (its interval's half-width)."""
    if evaluation.speedup is None or evaluation.speedup_interval is None:
        return None
    low, high = evaluation.speedup_interval
    return max(high - evaluation.speedup, evaluation.speedup - low) / evaluation.speedup


def combined_spread(recorded: Evaluation, now: Evaluation) -> float:
    return sum(UNPAIRED_SPREAD if s is None else s for s in (spread(recorded), spread(now)))


def speedup_ratio(recorded: Evaluation, now: Evaluation) -> float | None:
    if recorded.correct and now.correct and recorded.speedup and now.speedup:
        return now.speedup / recorded.speedup
    return None


def flag(recorded: Evaluation, now: Evaluation) -> str:
    """What a reader should notice about one attempt's two verdicts ('' when nothing)."""
    if recorded.correct and now.correct:
        ratio, allowed = speedup_ratio(recorded, now), combined_spread(recorded, now)
        if ratio is not None and abs(ratio - 1) > allowed:
            return f"speedup moved ×{ratio:.2f} (beyond ±{allowed:.1%})"
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
    """Each turn with a solution, through tools.pipeline with the run's recorded eval settings (profile=auto
    read as counts), on `gpu`;
    nothing for a run of an older task definition (score.legacy): its verdicts were on other work."""
    if score.legacy(traj):
        return []
    task, arch = problem(traj)
    options = EvalOptions.model_validate({k: v for k, v in traj.config.eval.items() if k in EvalOptions.model_fields})
    if options.profile is Profile.AUTO:  # the perf pass explains a time to the next turn; a replay has none
        options = options.model_copy(update={"profile": Profile.COUNTS})
    out = []
    for turn in traj.turns:
        if turn.solution is None:
            continue
        was, now = turn.evaluation, evaluate_solution(turn.solution, task, arch, options, gpu)
        ratio = speedup_ratio(was, now)
        out.append(Replayed(traj.run_id, turn.index, Verdict.of(was), Verdict.of(now), ratio,
                            combined_spread(was, now) if ratio else None, flag(was, now)))  # fmt: skip
    return out


def problem(traj: Trajectory) -> tuple[Task, Arch]:
    """The run's task and arch (UnknownName or KeyError for a config that does not name them)."""
    return get_task(traj.config.task), Arch.resolve(traj.config.arch)


def render(traj: Trajectory, rows: list[Replayed]) -> str:
    changed = score.legacy(traj)
    if changed:
        return (f"replay {traj.run_id}: not replayed: the task's definition changed since this run ({changed}), so "
                "today's verdict would judge other work; this is not a regression")  # fmt: skip
    skipped = sum(t.solution is None for t in traj.turns)
    lines = [
        f"replay {traj.run_id} ({traj.config.task} on {traj.config.arch}): {len(rows)} attempts "
        f"with a solution" + (f", {skipped} without (not replayed)" if skipped else ""),
        "",
    ]
    headers = ("turn", "recorded", "speedup", "device", "now", "speedup", "device", "ratio", "flag")
    table = [
        (
            r.turn,
            r.recorded.status,
            times(r.recorded.speedup),
            r.recorded.device,
            r.now.status,
            times(r.now.speedup),
            r.now.device,
            f"{r.ratio:.3f} (±{r.combined_spread:.1%})" if r.ratio else None,
            r.flag,
        )
        for r in rows
    ]
    lines.append(markdown_table(headers, table) if rows else "(nothing to replay)")
    flags = [r.flag.split(" ×")[0] for r in rows if r.flag]
    if flags:
        lines += ["", "; ".join(f"{flags.count(f)} {f}" for f in dict.fromkeys(flags))]
    return "\n".join(lines)
