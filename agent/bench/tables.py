"""Tables for people: Markdown (the report, and the terminal, where it reads as aligned text) and CSV."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.loop.writes import open_inside


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def times(value: float | None) -> str:
    """A speedup, e.g. 1.234×."""
    return "-" if value is None else f"{value:.3f}×"


_MARKDOWN = re.compile(r"[\\`*\[\]|<>]")  # what a cell's text could use to end the cell, link, or inject HTML
_HTML = {"<": "&lt;", ">": "&gt;"}


def markdown_text(value: Any) -> str:
    """Text from outside (a model's name: `a|b`, a newline and `# heading`, `<script>`) as one line of Markdown
    that reads as that text: line breaks become spaces, Markdown's punctuation is escaped, HTML is not HTML."""
    text = " ".join(str(value).split())
    return _MARKDOWN.sub(lambda m: _HTML.get(m.group(), "\\" + m.group()), text)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, its columns padded so that it also reads as plain text; every cell's text escaped."""
    cells = [[str(h) for h in headers], *[["-" if c is None else markdown_text(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows of one shape; None is written as an empty cell."""
    with open_inside(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
