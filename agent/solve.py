"""`python -m agent.solve task=T arch=A [llm=…] [key=value …]`: one repair-loop run, or `resume=RUN_ID` to
continue a killed one (or extend a finished one with a larger max_turns or budget).

Prints progress as it goes (stderr), then a table of the turns and the run folder's path (stdout).
Exit status: 0 the run finished, whatever the model achieved; 1 it stopped early on an error (the
endpoint failed after its retries, or the harness crashed) and can be resumed; 2 usage or configuration
error; 130 interrupted.
"""

from __future__ import annotations

import sys

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.solve"):
    from agent.loop.command_line import from_command_line, usage
    from agent.loop.run import execute


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _solve, argv)


def _solve(argv: list[str]) -> int:
    if not argv:
        raise cli.ConfigError("task= and arch= required, e.g. task=gemm arch=sm_90a llm=reference")
    return execute(from_command_line(argv))


if __name__ == "__main__":
    sys.exit(main())
