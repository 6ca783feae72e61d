"""`python -m agent.replay RUN_DIR… [device=N | pool=dask://HOST:PORT] [json=true]`: every recorded attempt that
has a solution, evaluated again on this machine (or on the Dask pool's GPU hosts), next to what was recorded: both
speedups, their ratio and the two measurements' combined spread (agent/bench/replay.py says what each flag means).
RUN_DIR may be a run folder or a folder of runs; a run that cannot be read is skipped with a warning naming its
file. Exit status 0, whatever diverged; 1 when the Dask pool lost an attempt (replay again); 2 when RUN_DIR holds
no readable run."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, Field

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.replay"):
    from agent.bench.replay import problem, render, replay
    from agent.loop.config import PoolSetting
    from agent.loop.store import find_runs, read_trajectories
    from tasks.schema import UnknownName
    from tools.pool import open_gpu
    from tools.pool.base import LOCAL, Interrupted


class ReplaySettings(BaseModel):
    dirs: list[Path] = Field(min_length=1, description="Run folders, or folders of runs (a bench).")
    device: int = Field(0, ge=0, description="CUDA device index.")
    pool: PoolSetting = LOCAL
    json_: bool = Field(False, alias="json", description="Print JSON (one object per attempt) instead of tables.")


def usage() -> str:
    return cli.usage(ReplaySettings, "python -m agent.replay RUN_DIR… [device=N | pool=ADDRESS] [json=true]", __doc__,
                     "dirs", "RUN_DIR …")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _replay, argv)


def _replay(argv: list[str]) -> int:
    settings = cli.read(ReplaySettings, argv, "dirs")
    readable, skipped = read_trajectories(find_runs(settings.dirs))
    trajs, archs = [], []
    for traj in readable:
        try:
            archs.append(problem(traj)[1])
            trajs.append(traj)
        except UnknownName as e:
            skipped.append(f"{traj.run_id}: {e}")
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if not trajs:
        where = ", ".join(map(str, settings.dirs))
        raise cli.ConfigError(f"no run folders under {where}" + (" that can be read" if skipped else ""))
    results = []
    gpu = open_gpu(settings.pool, settings.device)
    try:
        if not settings.json_:  # said once per arch, not once per run
            for arch in dict.fromkeys(archs):
                reason = gpu.unavailable_reason(arch)
                print(f"GPU stages for {arch}: " + (f"skipped ({reason})\n" if reason else "on\n"))
        for traj in trajs:
            rows = replay(traj, gpu)
            results += rows
            if not settings.json_:
                print(render(traj, rows) + "\n")
    except Interrupted as e:  # the Dask pool lost an attempt: a replay records nothing, so it is simply run again
        print(f"error: {e}; replay again once the pool is back", file=sys.stderr)
        return 1
    finally:
        gpu.close()
    if settings.json_:
        print(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
