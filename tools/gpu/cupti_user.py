"""One CUPTI client enabled at a time in a process: the activity API (kernel durations, tools/gpu/cupti_durations.py)
and the range profiler (executed-instruction counts, tools/gpu/cupti_counts.py) can interfere when both are on —
the profiler's replayed passes would land in the activity records, and tracing every launch would sit inside the
profiled ranges — so each holds this while it is enabled, and the other, finding it taken, falls back (CUDA events
time, Nsight Compute counts). The worker runs its stages one after the other, so in practice neither waits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class CuptiBusy(Exception):
    """Another CUPTI client is enabled in this process."""


_holder: str | None = None


@contextmanager
def holding(user: str) -> Iterator[None]:
    """CUPTI for `user` ('activity API', 'range profiler') until the block ends; CuptiBusy when another holds it."""
    global _holder
    if _holder is not None:
        raise CuptiBusy(f"CUPTI's {_holder} is enabled in this process")
    _holder = user
    try:
        yield
    finally:
        _holder = None


def holder() -> str | None:
    """Which CUPTI client is enabled now (None: none)."""
    return _holder
