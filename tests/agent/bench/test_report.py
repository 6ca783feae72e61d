"""`python -m agent.report` on the fixture bench: the Markdown, its CSVs (numbers as test_score.py computes
them by hand), and the plots, drawn with matplotlib or skipped, and said so, without it."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from agent.report import main
from tests.fixtures.runs import make_runs

BENCH = Path(make_runs.__file__).parent / "bench"
PLOTS = ("success_vs_budget.png", "speedup_by_task.png", "status_per_turn.png")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert main([str(BENCH), "--out", str(out)]) == 0
    return out


def test_report_files(report: Path) -> None:
    names = {p.name for p in report.iterdir()}
    assert {"report.md", "scores.csv", "budget.csv", "status_per_turn.csv", "trajectories.csv"} <= names


def test_scores_csv(report: Path) -> None:
    by_key = {(r["task"], r["arch"], r["mode"], r["turn_limit"]): r for r in rows(report / "scores.csv")}
    g8 = by_key[(make_runs.GEMM, "sm_90a", "multi", "8")]
    # gemm repair runs within 8 turns: both correct; fast_1 only m00 (1.5); per attempt 1 of 12 turns > 1
    assert (g8["correct"], g8["fast_1_traj"], g8["trajectories"]) == ("1.0", "0.5", "2")
    assert float(g8["fast_1_turn"]) == pytest.approx(1 / 12)
    assert float(g8["geomean_speedup"]) == pytest.approx((0.5 * 1.5 * 0.9 * 0.8) ** 0.25)
    a1 = by_key[(make_runs.ATTN, "sm_90a", "single", "1")]
    assert (a1["correct"], a1["geomean_speedup"], a1["best_speedup"]) == ("0.0", "", "")  # None: empty cell
    assert by_key[("all", "sm_90a", "multi", "4")]["unfinished"] == "1"


def test_budget_and_trajectory_csvs(report: Path) -> None:
    budget = {(r["task"], r["arch"], r["k"]): r for r in rows(report / "budget.csv")}
    # gemm: pass@2 = 1 − C(2,2)/C(4,2) = 5/6; repair@3 = 1/2
    assert float(budget[(make_runs.GEMM, "sm_90a", "2")]["pass_at_k"]) == pytest.approx(5 / 6)
    assert float(budget[(make_runs.GEMM, "sm_90a", "3")]["repair_at_k"]) == 0.5
    assert budget[(make_runs.GEMM, "sm_90a", "5")]["pass_at_k"] == ""  # beyond 4 samples
    trajectories = {r["run_id"]: r for r in rows(report / "trajectories.csv")}
    assert len(trajectories) == 12
    assert trajectories[f"{make_runs.GEMM}-sm_90a-multi-s00"]["statuses"] == "compile_error;runtime_error;passed;passed"
    status = [
        r for r in rows(report / "status_per_turn.csv") if (r["task"], r["arch"], r["mode"]) == ("all", "all", "multi")
    ]
    assert [r["not_reached"] for r in status] == ["0", "0", "1", "2", "3", "3", "3", "3"]


def test_markdown(report: Path) -> None:
    text = (report / "report.md").read_text()
    assert text.startswith("# PTXBench report\n\n12 runs, 25 attempts")
    assert "GPU stages skipped: 3 of 25 here) count as not correct" in text
    assert "**1 unfinished run**" in text and f"{make_runs.ATTN}-sm_90a-multi-s01" in text
    headline = "| full   | sm_90a | multi  | 8       | 4    | 75%     | 25%        | 50%      | 75%      | 50%    |"
    assert headline in text  # correct 3/4, unverified 1/4 (attn m00), +targets 2/4, fast_0.8 3/4, fast_1 2/4
    assert (
        "| fixture-model | gemm_n7168_k5120  | sm_90a | 2 | 83%    | 0%       | 50%           | 0%              |"
        in text
    )
    assert "| fixture-model | multi  | 3    | 1      | 0          | 2        |" in text  # status at turn 3
    assert "No attempt was profiled by the perf pass" in text


def test_attempts_the_perf_pass_profiled_are_counted_by_limiter(tmp_path: Path) -> None:
    turns = [make_runs.turn(i, make_runs.profiled(make_runs.GEMM, 0.04), "answer") for i in (1, 2)]
    make_runs.write_run(tmp_path / "runs", "slow", make_runs.GEMM, 2, turns, "max_turns")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    ours, library = turns[0].evaluation.perf.launches[0], turns[0].evaluation.perf.baseline[0]
    share = f"{ours.tensor_pipe_pct:.0f} / {library.tensor_pipe_pct:.0f}"
    section = text.split("## Where the time goes", 1)[1]
    (line,) = [line for line in section.splitlines() if "memory_stalled" in line]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["fixture-model", make_runs.GEMM, "sm_90a", "2", "memory_stalled 2", share]
    profiled = rows(tmp_path / "report" / "perf.csv")
    assert [(r["turn"], r["limiter"], r["kernel"]) for r in profiled] == [
        ("1", "memory_stalled", "gemm_pointers"),
        ("2", "memory_stalled", "gemm_pointers"),
    ]


def test_plots(report: Path) -> None:
    pytest.importorskip("matplotlib")
    text = (report / "report.md").read_text()
    for name in PLOTS:
        assert (report / name).read_bytes().startswith(b"\x89PNG")
        assert f"]({name})" in text
    assert "Plots skipped" not in text


def test_without_matplotlib_the_report_says_plots_were_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert main([str(BENCH), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "- Plots skipped: matplotlib is not installed (pip install 'ptxbench[report]')." in text
    assert not list(tmp_path.glob("*.png")) and "![" not in text
    assert (tmp_path / "scores.csv").is_file()


def test_no_runs_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no run folders under" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_default_output_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    make_runs.write_replay(out)
    assert main([str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "report" / "report.md")
    text = (out / "report" / "report.md").read_text()
    assert "(needs runs of two modes of a problem: single, multi, tools)" in text
