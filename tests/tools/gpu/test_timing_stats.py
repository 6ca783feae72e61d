"""The timing statistics on recorded run times (no GPU): the paper's figure is the mean of the trials' medians;
the paired figure is the median of per-block ratios, with the order-statistic interval for a median; the run
plan fits the budget. The verdicts a reader draws from these numbers are only as good as these functions."""

from __future__ import annotations

import statistics

import pytest
from pydantic import ValidationError

from tools.gpu.timing import (
    FLOOR,
    RunPlan,
    TimingOptions,
    median_interval,
    plan_runs,
    summarize_pairs,
    summarize_runs,
    warmup_runs,
)
from tools.options import EvalOptions

# cuBLAS's three trial medians within one evaluation of a GEMM answer through our harness on the H200 (2026-12-01),
# while the candidate's stayed within 0.5%: a 9.3% drift of clocks.
CUBLAS_TRIALS_MS = [0.790, 0.867, 0.850]


def test_mean_of_trial_medians_spread_and_deciles() -> None:
    per_trial = [[1.0, 1.1, 0.9, 5.0], [1.2, 1.2, 1.3, 1.1], [1.0, 1.0, 1.0, 1.0]]  # an outlier run in trial 1
    t = summarize_runs(per_trial, warmup_runs=12)
    assert t.trial_medians == [1.05, 1.2, 1.0]
    assert t.ms == pytest.approx((1.05 + 1.2 + 1.0) / 3)  # the outlier does not move the median
    assert t.spread == pytest.approx((1.2 - 1.0) / t.ms)
    assert (t.runs, t.warmup_runs, t.reduced) == (12, 12, False)
    assert t.p10 <= t.ms <= t.p90


def test_one_run_is_its_own_figure() -> None:
    t = summarize_runs([[0.75]], warmup_runs=3, reduced=True)
    assert (t.ms, t.spread, t.p10, t.p90, t.reduced) == (0.75, 0.0, 0.75, 0.75, True)
    assert "reduced to fit the time budget" in t.line()


def test_paired_figure_is_the_median_of_block_ratios() -> None:
    blocks = [
        ([1.0, 1.0, 9.0], [0.9, 0.9, 0.8]),  # ratio 0.9 / 1.0 (the 9 ms outlier does not move a median)
        ([2.0, 2.0, 2.0], [2.2, 2.2, 2.2]),  # 1.1 (the GPU ran slower in this block, both alike)
        ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),  # 1.0
        ([1.0, 1.0, 1.0], [0.8, 0.8, 0.8]),  # 0.8
    ]
    p = summarize_pairs(blocks, warmup_runs=70, reduced=False)
    assert p.block_speedups == pytest.approx([0.9, 1.1, 1.0, 0.8])
    assert p.speedup == pytest.approx(0.95)  # the median of four: the mean of the middle two
    assert (p.low, p.high) == (pytest.approx(0.8), pytest.approx(1.1))
    assert p.spread == pytest.approx(0.3 / 0.95)
    assert p.confidence == pytest.approx(1 - 2**-3)
    assert p.kernel_ms == 1.0 and p.baseline_ms == pytest.approx(0.95)  # medians of all 12 runs of each
    assert (p.block_runs, p.warmup_runs) == (3, 70)
    assert "the block ratios; 88% interval 0.800–1.100×" in p.line("cuBLAS")


def test_pairing_cancels_a_drift_that_separate_medians_carry() -> None:
    """cuBLAS drifting as it did on the H200 and a candidate at 0.88× of it, drifting alike (the same clocks):
    the paired ratio holds 0.88 within its interval; the ratio of medians taken in different windows (the
    paper's method, the baseline timed later) moves as far as the drift."""
    drift = [*CUBLAS_TRIALS_MS, 0.80, 0.86, 0.83]  # the baseline's level in six consecutive windows
    wobble = [1.002, 0.998, 1.001, 0.999, 1.003, 0.997]  # the candidate's own run-to-run noise
    blocks = [([b / 0.88 * w] * 15, [b] * 15) for b, w in zip(drift, wobble, strict=True)]
    p = summarize_pairs(blocks, warmup_runs=70, reduced=False)
    assert p.speedup == pytest.approx(0.88, rel=0.003)
    assert p.low <= 0.88 <= p.high and p.spread < 0.01
    assert p.confidence == pytest.approx(0.96875)
    separate = [drift[j] / (drift[i] / 0.88) for i in range(6) for j in range(6)]
    assert (max(separate) - min(separate)) / statistics.median(separate) > 0.09


@pytest.mark.parametrize(
    ("n", "k", "coverage"),
    [
        (3, 1, 0.75),  # too few for 95%: the whole range, and its coverage said
        (6, 1, 0.96875),
        (10, 2, 1 - 2 * 11 / 1024),
        (30, 10, 0.9572),  # the default 30 blocks: the 10th lowest and 10th highest
    ],
)
def test_median_interval_is_the_widest_order_statistics_needed_for_95_percent(n: int, k: int, coverage: float) -> None:
    values = [float(v) for v in reversed(range(n))]  # n−1 … 0: the function sorts
    low, high, confidence = median_interval(values)
    assert (low, high) == (k - 1, n - k)
    assert confidence == pytest.approx(coverage, abs=1e-4)


def test_many_blocks_outliers_do_not_widen_the_interval() -> None:
    """30 blocks at 0.88 ± 0.2% and two blocks a clock change hit: the interval stays within the clean ones."""
    ratios = [0.88 * (1 + 0.002 * ((i % 5) - 2) / 2) for i in range(28)] + [0.80, 0.97]
    blocks = [([1.0], [r]) for r in ratios]
    p = summarize_pairs(blocks, warmup_runs=10, reduced=False)
    assert p.speedup == pytest.approx(0.88, rel=0.002)
    assert 0.878 <= p.low <= p.high <= 0.882 and p.spread < 0.005
    assert p.confidence > 0.95


def test_an_attempt_may_ask_for_another_block_shape() -> None:
    assert TimingOptions.of(EvalOptions()) == TimingOptions()
    asked = TimingOptions.of(EvalOptions(timing_blocks=6, timing_block_runs=15))
    assert (asked.blocks, asked.block_runs, asked.reps) == (6, 15, TimingOptions().reps)
    with pytest.raises(ValidationError, match="timing_blocks"):
        EvalOptions(timing_blocks=2)  # fewer than three blocks have no median worth the name


def test_plan_keeps_the_asked_runs_when_they_fit() -> None:
    plan = plan_runs(0.75, 0.75, TimingOptions())  # the GEMM task: (30·3 + 3·50) runs × 1.5 ms = 0.36 s
    assert plan == RunPlan(blocks=30, block_runs=3, trials=3, reps=50, reduced=False)


def test_plan_scales_down_to_fit_the_budget() -> None:
    options = TimingOptions()
    plan = plan_runs(100.0, 8.0, options)  # 240 runs × 108 ms = 26 s > 10 s: every count × 0.386
    assert plan == RunPlan(blocks=11, block_runs=1, trials=1, reps=19, reduced=True)
    runs = plan.blocks * plan.block_runs + plan.trials * plan.reps
    assert runs * 108.0 <= options.budget_s * 1e3
    slowest = plan_runs(4000.0, 8.0, options)  # a single run near half the budget: the floor, no fewer
    assert slowest.model_dump(exclude={"reduced"}) == FLOOR and slowest.reduced


def test_plan_under_paper_leaves_budget_for_the_papers_trials_twice() -> None:
    # eval.speedup=paper times the paper's trials by CUPTI and by CUDA events: (30·3 + 2·3·50) runs of each.
    assert plan_runs(8.0, 8.0, TimingOptions(), paper_sets=2) == plan_runs(8.0, 8.0, TimingOptions())  # both fit
    once, twice = plan_runs(20.0, 8.0, TimingOptions()), plan_runs(20.0, 8.0, TimingOptions(), paper_sets=2)
    assert not once.reduced and twice.reduced  # 240 × 28 ms = 6.7 s fits; 390 × 28 ms = 10.9 s does not
    assert (twice.blocks * twice.block_runs + 2 * twice.trials * twice.reps) * 28.0 <= 10e3


@pytest.mark.parametrize(
    ("estimate_ms", "runs"),
    [
        (0.75, 67),  # at least 50 ms of runs
        (20.0, 10),  # at least 10 runs
        (500.0, 2),  # never more than a tenth of the 10 s budget
        (5000.0, 1),  # but at least one
    ],
)
def test_warmup_runs(estimate_ms: float, runs: int) -> None:
    assert warmup_runs(estimate_ms, TimingOptions()) == runs
