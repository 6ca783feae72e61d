"""What a command says when an optional extra it needs is not installed (pyproject.toml's
[project.optional-dependencies]): one line naming the extra and the pip command, not a traceback. Here, in tools/,
because the harness's commands need it too and import nothing from agent/."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

OURS = frozenset({"agent", "tasks", "tools", "ptxbench", "tests"})  # a module of ours missing is a bug, not an extra


def pip_command(extra: str) -> str:
    return f"pip install 'ptxbench[{extra}]'"


def missing(error: ModuleNotFoundError, extra: str, what: str) -> str | None:
    """The line for `error` when `what` (a command, or a setting) lacks a module of `extra`; None when the module
    that is missing is one of ours."""
    name = (error.name or "").partition(".")[0]
    if not name or name in OURS:
        return None
    return f"{what} needs the {extra} extra ({name} is not installed): {pip_command(extra)}"


@contextmanager
def needs(extra: str, command: str) -> Iterator[None]:
    """Around a command's imports: a third-party module missing ends the command with `missing`'s line on stderr
    and exit status 2 (an import error of our own stays a traceback)."""
    try:
        yield
    except ModuleNotFoundError as e:
        line = missing(e, extra, command)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2) from None
