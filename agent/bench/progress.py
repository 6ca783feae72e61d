"""A bench's progress on stderr: runs done of all and how they ended, runs running and queued, the tokens the
finished runs spent, time elapsed and the estimated time left, and the GPU pool's evaluations running and queued
per arch and per host. On a terminal, a tqdm bar redrawn in place; elsewhere (a log file, CI) one plain line per
finished run."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from tools.pool.base import Load

ORDER = ("solved", "correct", "unverified", "failed", "error")
WIDTH = 24  # the plain line's bar
BAR = "{desc} {bar} {n_fmt}/{total_fmt}{postfix}"  # tqdm's own rate and ETA left out: status() says them


class Progress:
    def __init__(
        self, label: str, total: int, earlier: Counter[str], load: Callable[[], list[Load]] = list,
        stream: TextIO | None = None, tokens: int = 0,
    ):  # fmt: skip
        """`earlier`: outcomes of the runs that had finished before this invocation (they count as done), and
        `tokens` what they spent; `load`: the GPU pool's evaluations now, per GPU."""
        self.label, self.total, self.load, self.tokens = label, total, load, tokens
        self.counts: Counter[str] = Counter(earlier)
        self.running = 0
        self.finished_here = 0  # the ETA's rate: runs finished by this invocation
        self.started = time.monotonic()
        self.stream = stream or sys.stderr
        self.bar = (
            tqdm(total=total, initial=self.done, desc=label, file=self.stream, bar_format=BAR, dynamic_ncols=True)
            if self.stream.isatty()
            else None
        )

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def start(self) -> None:
        self.running += 1
        self.draw()

    def finish(self, outcome: str, tokens: int = 0) -> None:
        self.running -= 1
        self.finished_here += 1
        self.counts[outcome] += 1
        self.tokens += tokens
        if self.bar is not None:
            self.bar.update(1)
        self.draw(changed=True)

    def status(self) -> str:
        """Everything but the bar: 'solved 1 · error 1 | 1 running, 2 queued | 12,345 tokens | 0:41, ETA 1:22'."""
        seconds = time.monotonic() - self.started
        counts = " · ".join(
            f"{k} {self.counts[k]}" for k in (*ORDER, *sorted(set(self.counts) - set(ORDER))) if self.counts[k]
        )
        left = self.total - self.done
        eta = clock(seconds / self.finished_here * left) if self.finished_here else "-"
        gpus = load_text(self.load())
        return (
            f"{counts + ' | ' if counts else ''}{self.running} running, {left - self.running} queued"
            f" | {self.tokens:,} tokens | {clock(seconds)}, ETA {eta if left else '0:00'}"
            f"{' | ' + gpus if gpus else ''}"
        )

    def line(self) -> str:
        filled = WIDTH * self.done // self.total if self.total else WIDTH
        return f"{self.label} [{'#' * filled}{'-' * (WIDTH - filled)}] {self.done}/{self.total}  {self.status()}"

    def draw(self, changed: bool = False) -> None:
        """On a terminal, redraw (the clock moves); elsewhere, a line when a run has finished."""
        if self.bar is not None:
            self.bar.set_postfix_str(self.status())
        elif changed:
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def clock(seconds: float) -> str:
    """'4:05', or '1:02:03' past an hour."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


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
