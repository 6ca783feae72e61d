"""A progress bar for many runs at once, on stderr and without dependencies: runs done of all, how they
ended, how many are running, time elapsed, and the GPU pool's evaluations running and queued per arch and per
host. Redrawn in place on a terminal; one line per finished run otherwise (a log file, CI)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from tools.pool.base import Load

ORDER = ("solved", "correct", "unverified", "failed", "error")
WIDTH = 24


class Progress:
    def __init__(
        self, label: str, total: int, earlier: Counter[str], load: Callable[[], list[Load]] = list,
        stream: TextIO | None = None,
    ):  # fmt: skip
        """`earlier`: outcomes of the runs that had finished before this invocation (they count as done); `load`:
        the GPU pool's evaluations now, per GPU."""
        self.label, self.total, self.load = label, total, load
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
        gpus = load_text(self.load())
        return (
            f"{self.label} [{'#' * filled}{'-' * (WIDTH - filled)}] {self.done}/{self.total}"
            f"{'  ' + counts if counts else ''}  | {self.running} running | {seconds // 60}:{seconds % 60:02d}"
            f"{' | ' + gpus if gpus else ''}"
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


def load_text(loads: list[Load]) -> str:
    """Per arch, the evaluations running and queued, then per host as running+queued:
    'sm_90a 2 running 3 queued (10.0.0.5 1+2, 10.0.0.6 1+1)'."""
    parts = []
    for arch in sorted({load.arch for load in loads}):
        mine = [load for load in loads if load.arch == arch]
        hosts = ", ".join(
            "{} {}+{}".format(host, *_totals([load for load in mine if load.host == host]))
            for host in sorted({load.host for load in mine})
        )
        parts.append("{} {} running {} queued".format(arch, *_totals(mine)) + f" ({hosts})")
    return "; ".join(parts)


def _totals(loads: list[Load]) -> tuple[int, int]:
    return sum(load.running for load in loads), sum(load.queued for load in loads)
