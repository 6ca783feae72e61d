"""A line diff between two turns' sources (difflib's unified format, three lines of context), as escaped
HTML with one class per kind of line, and how many lines each side changed."""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass

from markupsafe import Markup

from agent.bench.inspect.views import Text

LINE_CLASS = {"+": "add", "-": "del", "@": "hunk", " ": "same"}


@dataclass(frozen=True)
class Diff:
    """The diff of a turn's source against an earlier turn's (`against`)."""

    against: int
    text: Text
    added: int
    removed: int

    @property
    def same(self) -> bool:
        return not (self.added or self.removed)


def line_diff(before: str, after: str, against: int, turn: int) -> Diff:
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"turn {against}", f"turn {turn}", lineterm="", n=3
        )
    )
    body = lines[2:]  # after the ---/+++ header
    added = sum(line.startswith("+") for line in body)
    removed = sum(line.startswith("-") for line in body)
    # One block per line (the stylesheet makes d-* blocks), so no newlines between them.
    rows = "".join(f'<span class="d-{LINE_CLASS.get(line[:1], "same")}">{html.escape(line)}</span>' for line in body)
    shown = Text(html=Markup(rows), lines=len(body), chars=sum(len(line) for line in body))
    return Diff(against=against, text=shown, added=added, removed=removed)
