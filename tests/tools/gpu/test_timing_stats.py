"""The timing statistics on recorded run times (no GPU): the paper's figure is the mean of the trials' medians;
the paired figure is the median of per-block ratios, whose range is its interval; the run plan fits the
budget. The verdicts a reader draws from these numbers are only as good as these functions."""

from __future__ import annotations

import statistics

import pytest

from tools.gpu.timing import FLOOR, RunPlan, TimingOptions, plan_runs, summarize_pairs, summarize_runs, warmup_runs

# cuBLAS's three trial medians within one evaluation on the H200 (FACTS.md): a 9.3% drift of clocks.
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
    assert "the block ratios, which span 0.800–1.100×; 88% interval" in p.line("cuBLAS")


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


def test_plan_keeps_the_asked_runs_when_they_fit() -> None:
    plan = plan_runs(0.75, 0.75, TimingOptions())  # the GEMM task: (6·15 + 3·50) runs × 1.5 ms = 0.36 s
    assert plan == RunPlan(blocks=6, block_runs=15, trials=3, reps=50, reduced=False)


def test_plan_scales_down_to_fit_the_budget() -> None:
    options = TimingOptions()
    plan = plan_runs(100.0, 8.0, options)  # 240 runs × 108 ms = 26 s > 10 s
    assert plan == RunPlan(blocks=3, block_runs=5, trials=1, reps=19, reduced=True)
    runs = plan.blocks * plan.block_runs + plan.trials * plan.reps
    assert runs * 108.0 <= options.budget_s * 1e3
    slowest = plan_runs(4000.0, 8.0, options)  # a single run near half the budget: the floor, no fewer
    assert slowest.model_dump(exclude={"reduced"}) == FLOOR and slowest.reduced


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
