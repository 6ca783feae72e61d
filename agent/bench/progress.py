"""A progress bar for many runs at once, on stderr and without dependencies: runs done of all, how they
ended, how many are running, time elapsed. Redrawn in place on a terminal; one line per finished run
otherwise (a log file, CI)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

ORDER = ("solved", "correct", "unverified", "failed", "error")
WIDTH = 24


class Progress:
    def __init__(self, label: str, total: int, earlier: Counter[str], stream: TextIO | None = None):
        """`earlier`: outcomes of the runs that had finished before this invocation (they count as done)."""
        self.label, self.total = label, total
        self.counts: Counter[str] = Counter(earlier)
        self.running = 0
        self.started = time.monotonic()
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def start(self) -> None:
        self.running += 1
        self.draw()

    def finish(self, outcome: str) -> None:
        self.running -= 1
        self.counts[outcome] += 1
        self.draw(changed=True)

    def line(self) -> str:
        filled = WIDTH * self.done // self.total if self.total else WIDTH
        seconds = int(time.monotonic() - self.started)
        counts = " · ".join(
            f"{k} {self.counts[k]}" for k in (*ORDER, *sorted(set(self.counts) - set(ORDER))) if self.counts[k]
        )
        return (
            f"{self.label} [{'#' * filled}{'-' * (WIDTH - filled)}] {self.done}/{self.total}"
            f"{'  ' + counts if counts else ''}  | {self.running} running | {seconds // 60}:{seconds % 60:02d}"
        )

    def draw(self, changed: bool = False) -> None:
        """On a terminal, redraw (the clock moves); elsewhere, a line when a run has finished."""
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
        elif changed:
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
