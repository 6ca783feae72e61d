"""`python -m agent.mine_notes DIR… out=NOTES.jsonl`: repair notes from run folders (agent/notes/mine.py says what
a repair is), for `agent.solve feedback.notes=NOTES.jsonl` to show a model that meets the same failure.
Exit status: 0 written (also with no notes); 2 usage error, or an output that cannot be written."""

from __future__ import annotations

import sys
from collections import Counter

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.mine_notes"):
    from agent.loop.store import find_runs, read_trajectories
    from agent.notes.mine import MineSettings, mine
    from agent.notes.record import write_notes

SYNOPSIS = "python -m agent.mine_notes DIR… out=NOTES.jsonl"


def usage() -> str:
    return cli.usage(MineSettings, SYNOPSIS, __doc__, "runs", "DIR …")


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _mine, argv)


def _mine(argv: list[str]) -> int:
    settings = cli.read(MineSettings, argv, "runs")
    missing = [str(d) for d in settings.runs if not d.is_dir()]
    if missing:
        raise cli.ConfigError(f"no such folder: {', '.join(missing)}")
    folders = find_runs(settings.runs)
    if not folders:
        raise cli.ConfigError(f"no run folders under {', '.join(map(str, settings.runs))}")
    trajectories, skipped = read_trajectories(folders)
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    notes = mine(trajectories)
    with cli.writing("out", settings.out):
        write_notes(settings.out, notes)
    kinds = Counter(f"{n.family} {n.signature.status}" for n in notes)
    print(f"{len(notes)} notes from {len(trajectories)} runs → {settings.out}")
    for kind, count in sorted(kinds.items()):
        print(f"  {kind}: {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
