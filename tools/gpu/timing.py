"""Timing with CUDA events and a cold L2 (flushed, untimed, before every run); the whole launch sequence is
one run.

The reported figure is paired: the candidate and the baseline run in alternating blocks in one window —
block i times `block_runs` runs of one and then of the other, the order swapping from block to block so
that a drift of clocks or temperature hits both alike. Per block, the ratio of the two medians (baseline /
candidate); the speedup is the median of those ratios. Its interval is the distribution-free one for a
median: the k-th lowest and k-th highest block ratio, k the largest for which, n ratios being independent
draws, the interval holds the true median ratio with probability ≥ 95% (1 − 2·P(Binomial(n, ½) < k)); with
6 blocks or fewer that is the lowest and highest (97% for 6). `kernel_ms` and `baseline_ms` are the medians
of all the runs of each.

Blocks are short (30 of 3 runs each by default) because an H200 runs these kernels at its power cap and
changes its clock faster than a long block lasts: in blocks of 15 runs (about 50 ms of attention) the median
SM clock during the candidate's runs was 45–225 MHz below that during cuDNN's, and the same attention answer
read 0.730–0.744× over five evaluations; in blocks of 3 both ran at one clock and it read 0.719× five times
(docs/performance.md). Single-run blocks did worse (0.720–0.742×).

The paper's method is kept as a second figure, measured in the same window right after: each of the two
timed alone, trials of runs, the mean of the trials' medians. On the H200 it read one GEMM answer 0.857×
and 0.895× minutes apart, because a power-capped cuBLAS wobbles between trials. Under eval.speedup=paper it is the
headline (the paired figure beside it) and is timed as the paper times it, by CUPTI's kernel durations
(tools/gpu/cupti_durations.py), with the CUDA-event figure kept beside it as a cross-check; CUDA events are the figure
where CUPTI cannot time (the record says which, and why). The baseline is timed afresh in every attempt, either way,
where the paper's harness times it once per worker and caches it: the paired figure needs it in every attempt anyway,
and a cached figure would carry one moment's clocks (cuBLAS's trial medians spread 9% within one evaluation on the
H200) into every later attempt alike.

The method — what is timed in which order, which figure is reported, the re-checks on fresh inputs after timing
(a kernel that keeps state between launches is wrong the second time), a speedup above eval.speedup_ceiling
re-measured on fresh inputs and re-checked before it stands — is `time_attempt`, the time stage of the worker
(tools/gpu/worker.py), which keeps the checks themselves (its order: tests/tools/gpu/test_timing_method.py). The
statistics and the run plan are pure functions of run times (tests/tools/gpu/test_timing_stats.py)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from pydantic import BaseModel

from tasks.expr import evaluate
from tasks.schema import Task
from tools.gpu.cupti_durations import SOURCE, DurationsUnavailable, KernelTimer, Traced
from tools.gpu.gpu_state import GpuSampler, GpuState, noisy_flag
from tools.gpu.metrics import TimingMetrics
from tools.gpu.protocol import Part
from tools.options import EvalOptions, SpeedupFigure

Phase = Callable[[str | None], None]  # told which of the two is about to run ("candidate", "baseline", None)
WARMUP_SHARE = 0.1  # of the budget, at most, per function: a slow kernel is warmed up once, not ten times
FLOOR = {"blocks": 3, "block_runs": 1, "trials": 1, "reps": 1}  # the fewest a plan reduced to fit makes
RECHECK_SEED_OFFSET = 1_000_003  # of the attempt's seed: the re-check after timing
REMEASURE_SEED_OFFSET = 2_000_003  # the re-check after re-measuring a speedup above the ceiling
RESET_RUNS = 10  # timed runs of the scratch reset alone, for the perf pass's time split


class TimingOptions(BaseModel):
    warmup: int = 10  # runs of each before timing, and at least `warmup_ms` of them, so that clocks settle
    warmup_ms: float = 50.0
    blocks: int = 30  # paired blocks; the speedup is the median of their ratios
    block_runs: int = 3  # runs of each function per block
    trials: int = 3  # the paper's method: trials of `reps` runs each, the mean of their medians
    reps: int = 50
    budget_s: float = 10.0  # all timed runs (paired and the paper's, both ways under paper); slow kernels get fewer

    @classmethod
    def of(cls, options: EvalOptions) -> TimingOptions:
        """The defaults here, with the block shape an attempt's options ask for (eval.timing_*)."""
        asked = {"blocks": options.timing_blocks, "block_runs": options.timing_block_runs}
        return cls(**{k: v for k, v in asked.items() if v is not None})


class RunPlan(BaseModel):
    """How many runs a measurement makes, fitted to the budget from the warm run-time estimates."""

    blocks: int
    block_runs: int
    trials: int
    reps: int
    reduced: bool  # fewer than the options ask, to fit the budget


class Timing(BaseModel):
    """One function timed alone (the paper's method)."""

    ms: float  # mean of the trials' medians
    trial_medians: list[float]
    spread: float  # (max − min) / mean of the trials' medians
    p10: float
    p90: float
    runs: int
    warmup_runs: int
    reduced: bool  # fewer trials or reps than asked, to fit the time budget
    kernels: list[str] | None = None  # by CUPTI: one run's GPU work, by name, in start order (None: CUDA events)
    kernels_vary: bool | None = None  # by CUPTI: some run's work differed from the first's
    span_ms: float | None = None  # by CUPTI: the mean of the trials' median first-start-to-last-end spans

    def line(self) -> str:
        note = " (reduced to fit the time budget)" if self.reduced else ""
        return (
            f"{self.ms:.4f} ms (median per trial {', '.join(f'{m:.4f}' for m in self.trial_medians)}; "
            f"spread {100 * self.spread:.1f}%; p10–p90 {self.p10:.4f}–{self.p90:.4f}; {self.runs} runs){note}"
        )


class PaperTiming(BaseModel):
    """The paper's figure: each timed alone, one after the other; the ratio of their means of medians."""

    kernel: Timing
    baseline: Timing
    speedup: float
    source: str = "events"  # what timed the runs: "cupti" (kernel durations) or "events" (CUDA events)
    cupti_unavailable: str | None = None  # under eval.speedup=paper, timed by events: why not by CUPTI

    @classmethod
    def of(cls, kernel: Timing, baseline: Timing, source: str = "events") -> PaperTiming:
        return cls(kernel=kernel, baseline=baseline, speedup=baseline.ms / kernel.ms, source=source)

    @property
    def spread(self) -> float:
        """The wider of the two's trial-median spreads: how far this figure's trials disagree."""
        return max(self.kernel.spread, self.baseline.spread)

    def line(self, library: str, label: str = "paper's method") -> str:
        trials = len(self.kernel.trial_medians)
        how = ", CUPTI kernel durations" if self.source == SOURCE else ""
        text = (
            f"{label} (each alone, {trials} × {self.kernel.runs // trials} runs{how}): candidate "
            f"{self.kernel.ms:.4f} ms, {library} {self.baseline.ms:.4f} ms, {self.speedup:.3f}×"
        )
        return text + (f" (CUDA events: {self.cupti_unavailable})" if self.cupti_unavailable else "")


class PairedTiming(BaseModel):
    """The candidate and the baseline interleaved in one window (the reported figure)."""

    kernel_ms: float  # median of all the candidate's runs
    baseline_ms: float  # median of all the baseline's runs
    speedup: float  # median of the per-block ratios
    block_speedups: list[float]  # baseline median / candidate median, per block, in the order run
    low: float  # the k-th lowest and k-th highest per-block ratio: the speedup's interval (median_interval)
    high: float
    spread: float  # (high − low) / speedup
    confidence: float  # how often [low, high] holds the true median ratio
    block_runs: int
    warmup_runs: int  # the candidate's, its run-time estimates included
    reduced: bool

    def line(self, library: str) -> str:
        note = ", reduced to fit the time budget" if self.reduced else ""
        return (
            f"paired ({len(self.block_speedups)} blocks × {self.block_runs} runs each, alternating{note}): candidate "
            f"{self.kernel_ms:.4f} ms, {library} {self.baseline_ms:.4f} ms; speedup {self.speedup:.3f}× (median of "
            f"the block ratios; {100 * self.confidence:.0f}% interval {self.low:.3f}–{self.high:.3f}×)"
        )


# ------------------------------------------------------------------------------------------ statistics


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


def summarize_pairs(blocks: list[tuple[list[float], list[float]]], warmup_runs: int, reduced: bool) -> PairedTiming:
    """The PairedTiming of each block's (candidate run times, baseline run times), in ms."""
    ratios = [statistics.median(base) / statistics.median(cand) for cand, base in blocks]
    speedup = statistics.median(ratios)
    low, high, confidence = median_interval(ratios)
    return PairedTiming(
        kernel_ms=statistics.median(ms for cand, _ in blocks for ms in cand),
        baseline_ms=statistics.median(ms for _, base in blocks for ms in base),
        speedup=speedup,
        block_speedups=ratios,
        low=low,
        high=high,
        spread=(high - low) / speedup,
        confidence=confidence,
        block_runs=len(blocks[0][0]),
        warmup_runs=warmup_runs,
        reduced=reduced,
    )


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The distribution-free interval for the median of `values`: (k-th lowest, k-th highest, its coverage),
    k the largest whose coverage 1 − 2·P(Binomial(n, ½) < k) is at least `level`; k = 1 (the whole range)
    when even that falls short, as with 5 values or fewer."""
    n, ordered = len(values), sorted(values)
    coverage = [1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n for k in range(1, (n + 1) // 2 + 1)]
    k = max([k for k, c in enumerate(coverage, start=1) if c >= level], default=1)
    return ordered[k - 1], ordered[n - k], coverage[k - 1]


def plan_runs(candidate_ms: float, baseline_ms: float, options: TimingOptions, paper_sets: int = 1) -> RunPlan:
    """The options' runs when they fit the budget at these per-run estimates; else every count scaled down
    alike, to no fewer than FLOOR (so a very slow kernel still gets three paired blocks). `paper_sets`: how many
    times the paper's trials are run (2 under eval.speedup=paper: by CUPTI and by CUDA events)."""
    asked = options.model_dump(include=set(FLOOR))
    runs = options.blocks * options.block_runs + paper_sets * options.trials * options.reps  # of each of the two
    cost_ms = runs * (candidate_ms + baseline_ms)
    if cost_ms <= options.budget_s * 1e3:
        return RunPlan(**asked, reduced=False)
    scale = options.budget_s * 1e3 / cost_ms
    return RunPlan(**{k: max(FLOOR[k], int(v * scale)) for k, v in asked.items()}, reduced=True)


def warmup_runs(estimate_ms: float, options: TimingOptions) -> int:
    """At least `warmup` runs and `warmup_ms` of them, but never more than WARMUP_SHARE of the budget."""
    wanted = max(options.warmup, math.ceil(options.warmup_ms / max(estimate_ms, 1e-3)))
    affordable = int(WARMUP_SHARE * options.budget_s * 1e3 / max(estimate_ms, 1e-3))
    return max(1, min(wanted, affordable))


# ------------------------------------------------------------------------------------------- on the GPU


class L2Flush:
    """A buffer at least twice the L2 size; zeroing it evicts everything the timed code left in L2."""

    def __init__(self, l2_bytes: int, device: torch.device):
        self.buffer = torch.empty(max(2 * l2_bytes, 256 << 20), dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def warm(fn: Callable[[], object], flush: L2Flush, options: TimingOptions) -> tuple[float, int]:
    """Warm `fn` up; returns its warm per-run estimate (ms) and the warm-up runs made."""
    runs = warmup_runs(_one_run_ms(fn, flush), options)
    for _ in range(runs):
        flush()
        fn()
    torch.cuda.synchronize()
    return _one_run_ms(fn, flush), runs + 2


def time_paired(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    flush: L2Flush,
    options: TimingOptions | None = None,
    phase: Phase = lambda name: None,
    paper_sets: int = 1,
) -> tuple[PairedTiming, RunPlan]:
    """Both warmed up, then the paired blocks; `phase` hears which one the GPU runs (each half-block ends
    with a synchronize, so what the host marks is what the GPU does). The plan leaves budget for `paper_sets`
    runs of the paper's trials after."""
    opts = options or TimingOptions()
    (candidate_ms, warm_c), (baseline_ms, _) = warm(candidate, flush, opts), warm(baseline, flush, opts)
    plan = plan_runs(candidate_ms, baseline_ms, opts, paper_sets)
    blocks = []
    for i in range(plan.blocks):
        order = [("candidate", candidate), ("baseline", baseline)][:: 1 if i % 2 == 0 else -1]
        runs = {}
        for name, fn in order:
            phase(name)
            runs[name] = timed_runs(fn, flush, plan.block_runs)
        blocks.append((runs["candidate"], runs["baseline"]))
    phase(None)
    return summarize_pairs(blocks, warm_c, plan.reduced), plan


def time_trials(fn: Callable[[], object], flush: L2Flush, plan: RunPlan, warmup: int) -> Timing:
    """The paper's method on a warm function: `plan.trials` trials of `plan.reps` runs."""
    per_trial = [timed_runs(fn, flush, plan.reps) for _ in range(plan.trials)]
    return summarize_runs(per_trial, warmup, plan.reduced)


def time_traced(timer: KernelTimer, functions: list[Callable[[], object]], flush: L2Flush, plan: RunPlan,
                warmup: int) -> list[Timing]:  # fmt: skip
    """The paper's method by CUPTI on warm functions: `plan.trials` trials of `plan.reps` runs each, one function
    after the other; DurationsUnavailable where CUPTI cannot."""
    return [_of_traced(t, warmup, plan.reduced) for t in timer.time(functions, flush, plan.trials, plan.reps)]


def _of_traced(traced: Traced, warmup: int, reduced: bool) -> Timing:
    timing = summarize_runs(traced.per_trial, warmup, reduced)
    span = statistics.fmean(statistics.median(runs) for runs in traced.span_per_trial)
    return timing.model_copy(update={"kernels": traced.kernels, "kernels_vary": traced.kernels_vary, "span_ms": span})


def time_cold(fn: Callable[[], object], flush: L2Flush, options: TimingOptions | None = None) -> Timing:
    """`fn` alone, the paper's way: warm-up, then trials of runs (a candidate whose baseline is unavailable)."""
    opts = options or TimingOptions()
    estimate_ms, warmup = warm(fn, flush, opts)
    return time_trials(fn, flush, plan_runs(estimate_ms, 0.0, opts), warmup)


def timed_runs(fn: Callable[[], object], flush: L2Flush, n: int) -> list[float]:
    """`n` runs of `fn`, each after an untimed L2 flush, timed by CUDA events on the current stream (ms)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for start, end in zip(starts, ends, strict=True):
        flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def reset_ms(reset: Callable[[], object], flush: L2Flush) -> float:
    """The scratch reset alone, as the candidate's runs do it before their launches: the median of RESET_RUNS runs,
    each after an L2 flush (ms)."""
    return statistics.median(timed_runs(reset, flush, RESET_RUNS))


def _one_run_ms(fn: Callable[[], object], flush: L2Flush) -> float:
    flush()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


# ------------------------------------------------------------------------------------------- the method


class Subject(Protocol):
    """What the method asks of the attempt it times (tools/gpu/worker.py, where the checks are)."""

    def launch_sequence(self) -> None:
        """One run of the candidate: its launch sequence, scratch reset first."""

    def timing_inputs(self) -> dict[str, torch.Tensor]:
        """Inputs no check has used, put in the buffers; returns a pristine copy."""

    def baseline(self, inputs: dict[str, torch.Tensor]) -> tuple[Callable[[], object], dict[str, float]]:
        """The library's call on these inputs, prepared afresh, and its rel. L2 error per output."""

    def recheck(self, offset: int) -> tuple[int, dict[str, torch.Tensor]]:
        """The check on fresh inputs (the attempt's seed + `offset`), same loaded module; the seed and a pristine
        copy of the inputs, which the buffers still hold. A mismatch ends the attempt."""

    def faults(self, what: str) -> AbstractContextManager[None]:
        """Runs the block, waits for the GPU, and ends the attempt on a driver error."""

    def part(self, part: Part) -> None:
        """Tells the service which part of the stage starts: each has its own time limit."""

    def executed(self, runs: int) -> None:
        """Counts runs of the launch sequence (a re-check's failure says how many came before it)."""


@dataclass
class Bench:
    """A worker's timing equipment, kept across attempts: the L2 flush, the GPU state sampler and the CUPTI kernel
    timer (None: CUDA events only)."""

    flush: L2Flush
    sampler: GpuSampler
    kernel_timer: KernelTimer | None = None


class Measured(NamedTuple):
    """The time stage's message, its detail and the figures the Evaluation reports."""

    message: str
    detail: dict[str, Any]
    metrics: TimingMetrics


class Figures(NamedTuple):
    """One measurement: the paired figure, the GPU state during it, the paper's figure (by CUPTI under
    eval.speedup=paper where it can, else CUDA events) and, when that came from CUPTI, the CUDA-event one beside it."""

    paired: PairedTiming
    state: GpuState
    paper: PaperTiming
    paper_events: PaperTiming | None

    def headline(self, figure: SpeedupFigure) -> PairedTiming | PaperTiming:
        return self.paper if figure is SpeedupFigure.PAPER else self.paired


def time_attempt(subject: Subject, bench: Bench, task: Task, options: EvalOptions) -> Measured:
    """The candidate paired with the baseline, the paper's figure in the same window, then a re-check; a headline
    speedup (eval.speedup) above the ceiling is re-measured beside a baseline on the re-check's inputs and re-checked
    once more. Without a baseline (the library failed: not the candidate's fault) the candidate is timed alone."""
    timing = TimingOptions.of(options)
    try:
        baseline, errors = subject.baseline(subject.timing_inputs())
    except Exception as e:  # the library's failure, not the candidate's: report the kernel's time alone
        return _time_alone(subject, bench, task, timing, f"baseline unavailable: {e}")
    figures = _measure(subject, bench, baseline, timing, options.speedup)
    seed, fresh = subject.recheck(RECHECK_SEED_OFFSET)
    first = None
    if figures.headline(options.speedup).speedup > options.speedup_ceiling:  # too good until measured on other data
        first = figures.headline(options.speedup)
        figures = _measure(subject, bench, subject.baseline(fresh)[0], timing, options.speedup, figures)
        subject.recheck(REMEASURE_SEED_OFFSET)
    return _report(task, options, figures, first, seed, errors)


def _measure(
    subject: Subject, bench: Bench, baseline: Callable[[], object], timing: TimingOptions, figure: SpeedupFigure,
    again: Figures | None = None,
) -> Figures:  # fmt: skip
    """The figures of one window: paired, then the paper's. `again`: a re-measure of the headline figure only, the
    other kept from the first measurement."""
    if again is not None and figure is SpeedupFigure.PAPER:
        subject.part("time")
        with subject.faults("warming up the candidate and the baseline"):
            warmed = warm(subject.launch_sequence, bench.flush, timing)[1]
            warm(baseline, bench.flush, timing)
        subject.executed(warmed)
        paper, events = _paper(subject, bench, baseline, _plan_again(again), warmed, figure)
        return again._replace(paper=paper, paper_events=events)
    paper_sets = 2 if figure is SpeedupFigure.PAPER else 1
    paired, state, plan = _paired(subject, bench, baseline, timing, paper_sets)
    if again is not None:
        return again._replace(paired=paired, state=state)
    paper, events = _paper(subject, bench, baseline, plan, paired.warmup_runs, figure)
    return Figures(paired, state, paper, events)


def _plan_again(figures: Figures) -> RunPlan:
    """The paper's trials as the first measurement ran them."""
    kernel = figures.paper.kernel
    trials = len(kernel.trial_medians)
    return RunPlan(blocks=len(figures.paired.block_speedups), block_runs=figures.paired.block_runs, trials=trials,
                   reps=kernel.runs // trials, reduced=kernel.reduced)  # fmt: skip


def _paper(
    subject: Subject, bench: Bench, baseline: Callable[[], object], plan: RunPlan, warmup: int, figure: SpeedupFigure
) -> tuple[PaperTiming, PaperTiming | None]:
    """The paper's figure, each timed alone: by CUDA events (the figure under paired); under paper also by CUPTI
    where the worker can, which then is the figure, the events' one returned beside it."""
    with subject.faults("timing the candidate alone (the paper's method)"):
        events = PaperTiming.of(time_trials(subject.launch_sequence, bench.flush, plan, warmup),
                                time_trials(baseline, bench.flush, plan, warmup))  # fmt: skip
    subject.executed(plan.trials * plan.reps)
    if figure is not SpeedupFigure.PAPER:
        return events, None
    if bench.kernel_timer is None:
        return events.model_copy(update={"cupti_unavailable": "this worker has no CUPTI timer"}), None
    try:
        with subject.faults("timing the candidate alone by CUPTI (the paper's method)"):
            kernel, library = time_traced(bench.kernel_timer, [subject.launch_sequence, baseline], bench.flush, plan,
                                          warmup)  # fmt: skip
    except DurationsUnavailable as e:
        return events.model_copy(update={"cupti_unavailable": str(e)}), None
    subject.executed(plan.trials * plan.reps)
    return PaperTiming.of(kernel, library, SOURCE), events


def _report(task: Task, options: EvalOptions, figures: Figures, first: PairedTiming | PaperTiming | None, seed: int,
            baseline_errors: dict[str, float]) -> Measured:  # fmt: skip
    """The figures, the flags, the stage's message and its detail, from the measurements made. The headline
    (eval.speedup) sets the Evaluation's speedup, kernel_ms, baseline_ms and TFLOP/s; the interval is the paired
    figure's only (the paper's has none); the noisy flag reads the headline's own spread (the paired interval, or
    the paper's trial medians) beside the GPU state sampled during the paired blocks."""
    lib, ceiling, figure = task.baseline.library, options.speedup_ceiling, options.speedup
    paired, paper = figures.paired, figures.paper
    if figure is SpeedupFigure.PAPER:
        noisy = noisy_flag(paper.spread, figures.state, lib, spread_of="the trials' medians spread")
        kernel_ms, baseline_ms, speedup, interval = paper.kernel.ms, paper.baseline.ms, paper.speedup, None
    else:
        noisy = noisy_flag(paired.spread, figures.state, lib)
        kernel_ms, baseline_ms, speedup = paired.kernel_ms, paired.baseline_ms, paired.speedup
        interval = [paired.low, paired.high]
    flags = [noisy] if noisy else []
    if first is not None and speedup > ceiling:
        flags.append(
            f"above the ceiling — {speedup:.2f}× {lib} exceeds {ceiling:g}×: "
            "re-measured on fresh inputs and re-checked, it stands"
        )
    tflops = _tflops(task, kernel_ms)
    metrics = TimingMetrics(kernel_ms=kernel_ms, baseline_ms=baseline_ms, speedup=speedup, interval=interval,
                            tflops=tflops, flags=flags)  # fmt: skip
    lines = [paired.line(lib), paper.line(lib)]
    if figure is SpeedupFigure.PAPER:
        metrics = metrics.model_copy(update={"figure": figure, "other_speedup": paired.speedup})
        lines = [paper.line(lib) + " — the headline figure", paired.line(lib)]
        if figures.paper_events is not None:
            lines.append(figures.paper_events.line(lib, "cross-check, the same by CUDA events"))
    lines.append(figures.state.line(lib))
    if first is not None:
        again = "re-measured on fresh inputs and re-checked"
        lines.append(f"{first.speedup:.3f}× at first, above the {ceiling:g}× ceiling: {again}")
    detail = {
        "paired": paired.model_dump(),
        "paper": paper.model_dump(),
        "gpu_state": figures.state.model_dump(),
        "first": first.model_dump() if first else None,
        "flags": flags,
        "baseline_library": lib,
        "baseline_rel_l2": baseline_errors,
        "tflops": tflops,
        "recheck_seed": seed,
    }
    if figure is SpeedupFigure.PAPER:
        detail |= {"speedup_figure": figure.value, "paper_events": _dump(figures.paper_events)}
    return Measured("\n".join(lines), detail, metrics)


def _dump(model: BaseModel | None) -> dict | None:
    return model.model_dump() if model is not None else None


def _time_alone(subject: Subject, bench: Bench, task: Task, timing: TimingOptions, why: str) -> Measured:
    subject.part("time")
    with subject.faults("timing the candidate"):
        kernel = time_cold(subject.launch_sequence, bench.flush, timing)
    subject.executed(kernel.runs + kernel.warmup_runs)
    subject.recheck(RECHECK_SEED_OFFSET)
    metrics = TimingMetrics(kernel_ms=kernel.ms, tflops=_tflops(task, kernel.ms))
    return Measured(f"candidate {kernel.line()}\n{why}", {"kernel": kernel.model_dump()}, metrics)


def _paired(
    subject: Subject, bench: Bench, baseline: Callable[[], object], timing: TimingOptions, paper_sets: int
) -> tuple[PairedTiming, GpuState, RunPlan]:
    """The candidate and the baseline interleaved, the GPU's state sampled meanwhile."""
    subject.part("time")
    with bench.sampler.recording() as rec, subject.faults("timing the candidate beside the baseline"):
        paired, plan = time_paired(subject.launch_sequence, baseline, bench.flush, timing, rec.mark, paper_sets)
    subject.executed(paired.warmup_runs + len(paired.block_speedups) * paired.block_runs)
    return paired, rec.state, plan


def _tflops(task: Task, ms: float) -> float:
    return evaluate(task.flops, task.dims) / (ms * 1e-3) / 1e12
