"""`python -m agent.replay RUN_DIR… [--device N] [--json]`: every recorded attempt that has a solution,
evaluated again on this machine, next to what was recorded: does a kernel that passed on one GPU (or with
one toolchain) still pass here, and is it as fast? RUN_DIR may be a run folder or a folder of runs.

Flags: DIVERGED (both verdicts verified, one correct and one not), 'speedup moved ×r' (both correct,
speedups more than 10% apart), 'not verified here' (no GPU of the arch here), 'verified here' (recorded
without a GPU), 'status changed' (e.g. another failing stage). Exit status 0, whatever diverged; 2 when
RUN_DIR holds no run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.config import EvalConfig
from agent.solve import eval_options
from agent.store import RunFolderError, find_runs
from agent.tables import markdown_table, times
from tasks.catalog import get_task
from tools.pipeline import evaluate_solution
from tools.schema import Arch, Evaluation, Status, Task, Trajectory, UnknownName

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


def replay(traj: Trajectory, gpu: Any) -> list[Replayed]:
    """Each turn with a solution, through tools.pipeline with the run's eval settings and `gpu` (a
    GpuService, or None: static stages only)."""
    task, arch = problem(traj)
    recorded_eval = {k: v for k, v in (traj.config.get("eval") or {}).items() if k in EvalConfig.model_fields}
    options = eval_options(EvalConfig.model_validate(recorded_eval))
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
    return get_task(traj.config["task"]), Arch.resolve(traj.config["arch"])


def render(traj: Trajectory, rows: list[Replayed], gpu_note: str) -> str:
    skipped = sum(t.solution is None for t in traj.turns)
    lines = [
        f"replay {traj.run_id} ({traj.config.get('task')} on {traj.config.get('arch')}): {len(rows)} attempts "
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


def _open_gpu(device: int) -> Any:
    try:
        from tools.gpu.service import GpuService
    except ImportError:
        return None
    return GpuService(device=device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent.replay",
        description="Re-evaluate every recorded attempt on this machine; print recorded vs now.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run folders, or folders of runs (a bench)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index [0]")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per attempt) instead of tables")
    args = parser.parse_args(argv)
    try:
        trajs = [f.trajectory() for f in find_runs(args.run_dirs)]
        archs = [problem(traj)[1] for traj in trajs]
    except (RunFolderError, UnknownName, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not trajs:
        print(f"error: no run folders under {', '.join(map(str, args.run_dirs))}", file=sys.stderr)
        return 2
    gpu = _open_gpu(args.device)
    results = []
    try:
        for traj, arch in zip(trajs, archs, strict=True):
            rows = replay(traj, gpu)
            results += rows
            if not args.json:
                reason = gpu.unavailable_reason(arch) if gpu else "the GPU harness is not installed here"
                print(render(traj, rows, f"GPU stages: skipped ({reason})" if reason else "GPU stages: on") + "\n")
    finally:
        if gpu is not None:
            gpu.close()
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
