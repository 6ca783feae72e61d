"""`python -m agent.report DIR… [out=DIR]`: a Markdown report, with CSV tables and PNG plots, of the runs at
or below each DIR (bench folders, runs dirs, run folders); a run folder that cannot be read is skipped with a
warning naming its file. Prints the report's path. Exit status 0 written; 2 usage error, an output folder
that cannot be written, or no readable run under DIR."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, Field

from agent import cli
from agent.bench.report import write_report
from agent.loop.store import find_runs, read_trajectories


class ReportSettings(BaseModel):
    out: Path | None = Field(None, description="Where to write the report (default: the first DIR's report/).")


def usage() -> str:
    return "\n".join(["usage: python -m agent.report DIR… [out=DIR]", "", __doc__.split("\n\n")[0], "",
                      "settings:", *cli.described(ReportSettings)])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _report, argv)


def _report(argv: list[str]) -> int:
    words, pairs = cli.split_argv(argv)
    settings = cli.settings(ReportSettings, pairs)
    dirs = [Path(w) for w in words]
    if not dirs:
        raise cli.ConfigError("name the runs to report on: python -m agent.report DIR…")
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
    out = settings.out or dirs[0] / "report"
    with cli.writing("out", out):
        print(write_report(trajs, out, dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
