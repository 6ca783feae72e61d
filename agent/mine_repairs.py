"""`python -m agent.mine_repairs DIR… llm=… [key=value …]`: a teacher repairs every failed attempt of the
student runs under DIR…, one seeded repair-loop run per attempt (agent/sft/mine.py says how), then a
table of what it repaired. Exit status: 0 every teacher run finished (whatever it achieved); 1 some
stopped early on an error (run the same command again to resume them); 2 usage or configuration error;
130 interrupted."""

from __future__ import annotations

import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.mine_repairs"):
    from agent.sft import mine


def usage() -> str:
    return "usage: python -m agent.mine_repairs DIR… llm=… [agent.solve key=value …]\n\n" + mine.__doc__.strip()


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, mine.mine, argv)


if __name__ == "__main__":
    sys.exit(main())
