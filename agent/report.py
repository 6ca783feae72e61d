"""`python -m agent.report DIR… [out=DIR] [by=task|definition] [definition=D,…] [workload=W,…]`: a Markdown report,
with CSV tables and PNG plots, of the runs at or below each DIR (bench folders, runs dirs, run folders); a run folder
that cannot be read is skipped with a warning naming its file. definition= and workload= keep only the runs of those
definitions and workloads (m70, s4096, all for the shape-general tasks); by=definition adds the scores per
definition. Prints the report's path. Exit status 0 written; 2 usage error, an output folder that cannot be written,
or no readable run under DIR (or none the filter keeps)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.report"):
    from agent.bench import plots
    from agent.bench.report import write_report
    from agent.loop.records import RunFilter
    from agent.loop.store import find_runs, read_trajectories


class ReportSettings(BaseModel):
    dirs: list[Path] = Field(min_length=1, description="Bench folders, runs dirs or run folders.")
    out: Path | None = Field(None, description="Where to write the report (default: the first DIR's report/).")
    by: Literal["task", "definition"] = Field("task", description="definition: also score per definition.")
    definition: str | None = Field(None, description="Only runs of these definitions (comma-separated).")
    workload: str | None = Field(None, description="Only runs at these workloads (m70, s4096, all; comma-separated).")


def usage() -> str:
    return cli.usage(ReportSettings, "python -m agent.report DIR… [out=DIR] [by=…] [definition=…] [workload=…]",
                     __doc__, "dirs", "DIR …")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _report, argv)


def _report(argv: list[str]) -> int:
    settings = cli.read(ReportSettings, argv, "dirs")
    dirs = settings.dirs
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise cli.ConfigError(f"not a folder: {', '.join(missing)}")
    trajs, skipped = read_trajectories(find_runs(dirs))
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    if not trajs:
        raise cli.ConfigError(
            f"no run folders under {', '.join(map(str, dirs))}" + (" that can be read" if skipped else "")
        )
    selection = RunFilter(definition=settings.definition, workload=settings.workload)
    if selection:
        trajs = [t for t in trajs if selection.matches(t.config)]
        if not trajs:
            raise cli.ConfigError(f"no run under {', '.join(map(str, dirs))} has {selection.describe()}")
    out = settings.out or dirs[0] / "report"
    why = plots.unavailable()
    if why:
        print(f"warning: plots skipped: {why}; the tables are all there", file=sys.stderr)
    with cli.writing("out", out):
        print(write_report(trajs, out, dirs, by=settings.by, selected=selection.describe()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
