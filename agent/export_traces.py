"""`python -m agent.export_traces RUNS… out=DIR [author=NAME] [tasks=FILE,…]`: every recorded attempt of the run
folders under RUNS as a FlashInfer-Bench Trace, in DIR laid out as their trace sets are (traces/<author>/<op_type>/
<definition>.jsonl; a FlashInfer-Bench file's definition and workloads beside them), for their tools to read
(agent/bench/traces.py says how our records map onto their schema). Runs of tasks loaded from FlashInfer-Bench files
need those files again: `tasks=` names them (or PTXBENCH_TASK_FILES holds them).
Exit status: 0 written (also when every attempt was unverified: it says so); 2 usage error."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.export_traces"):
    from agent.bench.traces import export
    from agent.loop.store import find_runs
    from tasks.catalog import get_task, resolve_names
    from tasks.schema import UnknownName

SYNOPSIS = "python -m agent.export_traces RUNS… out=DIR [key=value …]"


class TraceSettings(BaseModel):
    """What to export and where."""

    model_config = ConfigDict(extra="forbid")
    runs: list[Path] = Field(
        min_length=1, description="Run folders, or folders holding them (bench folders, runs dirs)."
    )
    out: Path = Field(description="The trace set's root folder to write (required).")
    author: str = Field("ptxbench", min_length=1, pattern=r"^[\w.-]+$", description="The traces/<author>/ folder.")
    tasks: str | None = Field(
        None, description="FlashInfer-Bench definition files or folders the runs' tasks came from, comma-separated."
    )


def usage() -> str:
    return cli.usage(TraceSettings, SYNOPSIS, __doc__, "runs", "RUNS …")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _export, argv)


def _export(argv: list[str]) -> int:
    settings = cli.read(TraceSettings, argv, "runs")
    missing = [str(d) for d in settings.runs if not d.exists()]
    if missing:
        raise cli.ConfigError(f"no such folder: {', '.join(missing)}")
    try:
        if settings.tasks:
            resolve_names([t for t in settings.tasks.split(",") if t.strip()])
        folders = find_runs(settings.runs)
        if not folders:
            raise cli.ConfigError(f"no run folders under {', '.join(map(str, settings.runs))}")
        runs = []
        for folder in folders:
            trajectory = folder.trajectory()
            runs.append((trajectory, _task(trajectory.config.task, folder.path)))
    except UnknownName as e:
        raise cli.ConfigError(str(e)) from None
    with cli.writing("out", settings.out):
        done = export(runs, settings.out, settings.author)
    for path, count in done.traces.items():
        print(f"{count} trace{'s' if count != 1 else ''} → {path}")
    for path in done.definitions:
        print(f"definition → {path}")
    if done.unverified:
        print(f"{done.unverified} unverified attempt(s) not written: FlashInfer-Bench has no status for a kernel that "
              "never ran (no GPU of its arch)")  # fmt: skip
    if not done.traces:
        print("no traces written")
    return 0


def _task(name: str, folder: Path):
    try:
        return get_task(name, files=False)
    except UnknownName:
        raise UnknownName(f"{folder}: task {name!r} is neither ours nor loaded: if it came from a FlashInfer-Bench "
                          "file, give it with tasks=FILE") from None  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
