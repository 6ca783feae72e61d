"""`python -m agent.replay RUN_DIR… [device=N] [json=true]`: every recorded attempt that has a solution,
evaluated again on this machine, next to what was recorded (agent/bench/replay.py says what each flag
means). RUN_DIR may be a run folder or a folder of runs; a run that cannot be read is skipped with a warning
naming its file. Exit status 0, whatever diverged; 2 when RUN_DIR holds no readable run."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, Field

from agent import cli
from agent.bench.replay import problem, render, replay
from agent.loop.store import find_runs, read_trajectories
from tasks.schema import UnknownName
from tools.gpu.service import GpuService


class ReplaySettings(BaseModel):
    device: int = Field(0, ge=0, description="CUDA device index.")
    json_: bool = Field(False, alias="json", description="Print JSON (one object per attempt) instead of tables.")


def usage() -> str:
    return "\n".join(["usage: python -m agent.replay RUN_DIR… [device=N] [json=true]", "", __doc__.split("\n\n")[0],
                      "", "settings:", *cli.described(ReplaySettings)])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _replay, argv)


def _replay(argv: list[str]) -> int:
    dirs, pairs = cli.split_argv(argv, flags={"json"})
    settings = cli.settings(ReplaySettings, pairs)
    if not dirs:
        raise cli.ConfigError("name the runs to replay: python -m agent.replay RUN_DIR…")
    readable, skipped = read_trajectories(find_runs([Path(d) for d in dirs]))
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
        raise cli.ConfigError(f"no run folders under {', '.join(dirs)}" + (" that can be read" if skipped else ""))
    results = []
    with GpuService(device=settings.device) as gpu:
        for traj, arch in zip(trajs, archs, strict=True):
            rows = replay(traj, gpu)
            results += rows
            if not settings.json_:
                reason = gpu.unavailable_reason(arch)
                print(render(traj, rows, f"GPU stages: skipped ({reason})" if reason else "GPU stages: on") + "\n")
    if settings.json_:
        print(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
