"""The report's plots, read back from the matplotlib figures themselves: integer attempt budgets on the axis,
and curves with the same values drawn apart and named."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.bench import plots
from agent.loop.records import Trajectory
from agent.loop.store import find_runs
from tests.fixtures.runs import make_runs

BENCH = Path(make_runs.__file__).parent / "bench"


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def without_a_gpu(runs: Path) -> list[Trajectory]:
    """Two one-turn samples and two three-turn repair runs of gemm, every attempt unverified: all four curves 0."""
    for sample in range(2):
        uv = [make_runs.turn(i, make_runs.evaluation(make_runs.GEMM, "UV"), "answer") for i in (1, 2, 3)]
        make_runs.write_run(runs, f"single-{sample}", make_runs.GEMM, 1, uv[:1], "policy_exhausted")
        make_runs.write_run(runs, f"multi-{sample}", make_runs.GEMM, 3, uv, "max_turns")
    return [f.trajectory() for f in find_runs([runs])]


def budget_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_attempt_budgets_are_whole_numbers(plt) -> None:
    fig = plots.success_vs_budget(plt, [f.trajectory() for f in find_runs([BENCH])])
    (ax,) = budget_axes(fig)
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks == [float(k) for k in range(1, 9)]  # k = 1 … 8 (the fixture's repair runs have 8 turns)
    assert [label.get_text() for label in ax.get_xticklabels() if low <= label.get_position()[0] <= high] == [
        str(k) for k in range(1, 9)
    ]


def test_equal_curves_are_drawn_apart_and_named(plt, tmp_path: Path) -> None:
    fig = plots.success_vs_budget(plt, without_a_gpu(tmp_path))
    (ax,) = budget_axes(fig)
    lines = {line.get_label(): line for line in ax.lines}
    assert all(list(line.get_ydata()) == [0.0] * len(line.get_ydata()) for line in lines.values())
    firsts = [line.get_xdata()[0] for line in lines.values()]
    assert len(set(firsts)) == 4 and max(firsts) - min(firsts) < 0.5  # side by side around k = 1
    assert len({line.get_marker() for line in lines.values()}) == 4
    (note,) = [t.get_text() for t in ax.texts]
    assert note == (
        "same values: single-shot pass@k = single-shot fast_1@k; repair: correct ≤ k turns = repair: fast_1 ≤ k turns"
    )
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks == [1.0, 2.0, 3.0]
