"""The timing statistics on recorded run times (no GPU): the figure is the mean of the trials' medians,
and the spread is what a reader compares differences against."""

from __future__ import annotations

import pytest

from tools.gpu.timing import summarize_runs


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
