"""Cold-L2 timing with CUDA events: the L2 flushed (untimed) before every timed run, warm-up first, the
median of each trial's runs, several trials. The candidate and the baseline are timed by the same code."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from pydantic import BaseModel


class TimingOptions(BaseModel):
    warmup: int = 10  # runs, and at least `warmup_ms` of them, so that clocks settle before timing
    warmup_ms: float = 50.0
    reps: int = 50  # timed runs per trial (at least 50 unless a single run is slower than `budget_s` allows)
    trials: int = 3
    budget_s: float = 30.0  # wall budget for the timed runs; slow kernels get fewer trials, then fewer reps


class Timing(BaseModel):
    ms: float  # mean of the trials' medians
    trial_medians: list[float]
    spread: float  # (max − min) / mean of the trials' medians
    p10: float
    p90: float
    runs: int
    warmup_runs: int
    reduced: bool  # fewer trials or reps than asked, to fit the budget

    def line(self) -> str:
        note = " (reduced to fit the time budget)" if self.reduced else ""
        return (
            f"{self.ms:.4f} ms (median per trial {', '.join(f'{m:.4f}' for m in self.trial_medians)}; "
            f"spread {100 * self.spread:.1f}%; p10–p90 {self.p10:.4f}–{self.p90:.4f}; {self.runs} runs){note}"
        )


class L2Flush:
    """A buffer at least twice the L2 size; zeroing it evicts everything the timed code left in L2."""

    def __init__(self, l2_bytes: int, device: torch.device):
        self.buffer = torch.empty(max(2 * l2_bytes, 256 << 20), dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def time_cold(fn: Callable[[], object], flush: L2Flush, options: TimingOptions | None = None) -> Timing:
    """Time `fn` (one whole launch sequence) on the current stream."""
    opts = options or TimingOptions()
    estimate_ms = _one_run_ms(fn, flush)
    warmup_runs = max(opts.warmup, int(opts.warmup_ms / max(estimate_ms, 1e-3)))
    for _ in range(warmup_runs):
        flush()
        fn()
    torch.cuda.synchronize()
    estimate_ms = _one_run_ms(fn, flush)
    trials, reps = opts.trials, opts.reps
    if estimate_ms * trials * reps > opts.budget_s * 1e3:
        trials = 1
        reps = max(5, min(reps, int(opts.budget_s * 1e3 / max(estimate_ms, 1e-3))))
    per_trial = []
    for _ in range(trials):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends, strict=True):
            flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        per_trial.append([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])
    return summarize_runs(per_trial, warmup_runs + 2, reduced=(trials, reps) != (opts.trials, opts.reps))


def summarize_runs(per_trial: list[list[float]], warmup_runs: int, reduced: bool = False) -> Timing:
    """The Timing of each trial's run times (ms): the mean of the trials' medians, their spread, deciles."""
    medians = [statistics.median(runs) for runs in per_trial]
    samples = [ms for runs in per_trial for ms in runs]
    mean = statistics.fmean(medians)
    deciles = statistics.quantiles(samples, n=10) if len(samples) > 1 else [samples[0]] * 9
    return Timing(
        ms=mean,
        trial_medians=medians,
        spread=(max(medians) - min(medians)) / mean,
        p10=deciles[0],
        p90=deciles[-1],
        runs=len(samples),
        warmup_runs=warmup_runs,
        reduced=reduced,
    )


def _one_run_ms(fn: Callable[[], object], flush: L2Flush) -> float:
    flush()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3
