"""`python -m agent.export_sft DIR… format=fixit|kernelgen|tools out=FILE.jsonl [filters]`: supervised fine-tuning
data from run folders, with a data card beside it (agent/sft/export.py says what each file holds).
Exit status: 0 written (also when no example survived: the card says where they went); 2 usage error, or an
output that cannot be written."""

from __future__ import annotations

import shlex
import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.export_sft"):
    from agent.loop.store import find_runs
    from agent.sft.export import ExportSettings, export

SYNOPSIS = "python -m agent.export_sft DIR… format=fixit|kernelgen|tools out=FILE.jsonl [key=value …]"


def usage() -> str:
    return cli.usage(ExportSettings, SYNOPSIS, __doc__, "dirs", "DIR …")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _export, argv)


def _export(argv: list[str]) -> int:
    settings = cli.read(ExportSettings, argv, "dirs")
    missing = [str(d) for d in settings.dirs if not d.is_dir()]
    if missing:
        raise cli.ConfigError(f"no such folder: {', '.join(missing)}")
    folders = find_runs(settings.dirs)
    if not folders:
        raise cli.ConfigError(f"no run folders under {', '.join(map(str, settings.dirs))}")
    with cli.writing("out", settings.out):
        done = export(folders, settings, shlex.join(["python", "-m", "agent.export_sft", *argv]))
    for s in done.skipped:
        print(f"warning: skipped {s}", file=sys.stderr)
    written = ", ".join(f"{count} in {path}" for path, count in done.files.values())
    print(f"{settings.format}: {done.candidates} candidates from {done.runs} runs → {written}")
    if done.lacking:
        runs = sum(done.lacking.values())
        reasons = "; ".join(f"{count} {reason}" for reason, count in done.lacking.items())
        print(f"  {runs} run{'s' if runs > 1 else ''} gave none: {reasons}")
    print(f"data card: {done.card_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
