"""The paired-vs-paper table (tools/dev/paired_vs_paper.py) from time stages the real timing method wrote (its GPU
measurements stood in, as tests/tools/gpu/test_timing_method.py does): each figure read from where the stage keeps
it, a CUPTI fallback said with its reason, an untimed or answerless task a row of dashes. On the H200 the lead runs
`python -m tools.dev.paired_vs_paper --tasks core --out $OUT/paired_vs_paper.md`."""

from __future__ import annotations

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.tools.gpu.test_timing_method import LoggedAttempt, LoggedTimer, measured, with_timer
from tools.dev import paired_vs_paper
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu import timing
from tools.options import Criterion, EvalOptions, SpeedupFigure

GEMM = get_task("gemm")
__all__ = ["measured"]  # the stood-in measurements, a fixture


def timed(timer: LoggedTimer | None) -> Evaluation:
    result = timing.time_attempt(LoggedAttempt(), with_timer(timer), GEMM, EvalOptions(speedup=SpeedupFigure.PAPER))
    stages = [StageResult(name=Stage.CHECK, state=StageState.PASSED),
              StageResult(name=Stage.TIME, state=StageState.PASSED, detail=result.detail)]  # fmt: skip
    return Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.PASSED, stages=stages)


def test_a_row_holds_both_figures_each_way(measured) -> None:
    line = paired_vs_paper.row("gemm_n7168_k5120", timed(LoggedTimer([1.0, 0.9])))
    assert line == (
        "| gemm_n7168_k5120 | passed | 0.800× [0.800–0.800] | 0.900× | 1.000× "
        "| 1.0000 / 1.0000 / 1.0000 | 0.8000 / 0.9000 / 1.0000 |"
    )


def test_a_row_without_cupti_says_why(measured) -> None:
    line = paired_vs_paper.row("gemm_n7168_k5120", timed(LoggedTimer([1.0, 0.9], fails="no CUDA 13 driver")))
    assert "| – (no CUDA 13 driver) | 1.000× |" in line and line.endswith("| 0.8000 / – / 1.0000 |")


def test_untimed_and_answerless_tasks_are_dashes() -> None:
    failed = Evaluation(task="gemm", arch=Arch.SM_90A, status=Status.MISMATCH)
    assert paired_vs_paper.row("gemm", failed) == "| gemm | mismatch | – | – | – | – | – |"
    assert paired_vs_paper.row("x", None).startswith("| x | no reference answer on sm_90a |")


def test_the_table_names_the_criterion_and_the_gpu() -> None:
    text = paired_vs_paper.table(["| a |"], Criterion.PAPER, "NVIDIA H200")
    assert text.splitlines()[0] == "Paired vs the paper's speedup, reference answers, criterion paper, on NVIDIA H200."
    assert text.splitlines()[2] == paired_vs_paper.HEADER and text.endswith("| a |")


def test_an_unknown_task_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert paired_vs_paper.main(["--tasks", "gemmm"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown task or group 'gemmm'")
