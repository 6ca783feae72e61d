"""`python -m agent.graph`: the repair loop's graph (agent/loop/graph.py) as plain Mermaid, for a Markdown page
(agent/loop/GRAPH.md holds it) or mermaid.live."""

from __future__ import annotations

import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.graph"):
    from agent.loop.graph import mermaid


def usage() -> str:
    return f"usage: python -m agent.graph\n\n{__doc__.split(': ', 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _draw, argv)


def _draw(argv: list[str]) -> int:
    if argv:
        raise cli.ConfigError(f"agent.graph takes no settings (got {argv[0]!r})")
    print(mermaid(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
