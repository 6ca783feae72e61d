"""`python -m agent.export_sft DIR… format=fixit|kernelgen out=FILE.jsonl [filters]`: supervised fine-tuning
data from run folders, with a data card beside it (agent/sft/export.py says what each file holds).
Exit status: 0 written (also when no example survived: the card says where they went); 2 usage error, or an
output that cannot be written."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from agent import cli
from agent.loop.store import find_runs
from agent.sft.export import ExportSettings, export

FLAGS = {name for name, f in ExportSettings.model_fields.items() if f.annotation is bool}


def usage() -> str:
    return "\n".join(["usage: python -m agent.export_sft DIR… format=fixit|kernelgen out=FILE.jsonl [key=value …]",
                      "", __doc__.split("\n\n")[0], "", "settings (--key value and --flag / --no-flag work too):",
                      *cli.described(ExportSettings)])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _export, argv)


def _export(argv: list[str]) -> int:
    words, pairs = cli.split_argv(argv, flags=FLAGS)
    settings = cli.settings(ExportSettings, pairs)
    dirs = [Path(w) for w in words]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if not dirs or missing:
        raise cli.ConfigError(f"no such folder: {', '.join(missing)}" if missing else "name the run folders: DIR…")
    folders = find_runs(dirs)
    if not folders:
        raise cli.ConfigError(f"no run folders under {', '.join(map(str, dirs))}")
    with cli.writing("out", settings.out):
        done = export(folders, settings, shlex.join(["python", "-m", "agent.export_sft", *argv]))
    for s in done.skipped:
        print(f"warning: skipped {s}", file=sys.stderr)
    written = ", ".join(f"{count} in {path}" for path, count in done.files.values())
    print(f"{settings.format}: {done.candidates} candidates from {done.runs} runs → {written}")
    print(f"data card: {done.card_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
