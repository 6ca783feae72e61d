"""eval.speedup=paired|paper: which figure is an Evaluation's headline speedup (the one that scores, stops the loop and
goes into reports), the other kept beside it; a record timed under the default (paired) written as before. The
record's fields, the time stage's figures mapped onto them and back, a shape-general task's minimum of each figure,
the words the feedback and tools.evaluate's report use, and the setting reaching the harness from the command line,
the HTTP service's request and the repair loop's `eval.speedup=`. How the time stage measures each figure:
tests/tools/gpu/test_timing_method.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import cli
from agent.loop.config import SolveConfig
from agent.loop.feedback import timing_table
from tasks.catalog import get_task
from tasks.schema import Arch
from tools import evaluate
from tools.evaluation import PAPER_FIGURE_FIELDS, Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.metrics import GpuMetrics, TimingMetrics
from tools.options import EvalOptions, SpeedupFigure
from tools.pipeline import combine
from tools.serve.schema import EvaluateRequest

GEMM = get_task("gemm_n7168_k5120")
GENERAL = get_task("gemm_n7168_k5120_all")
ARCH = Arch.SM_90A


def passed(timing: TimingMetrics, source: str = "cupti", task: str = GEMM.name) -> Evaluation:
    """A passed attempt with these figures, as the pipeline makes it from the GPU stages' metrics."""
    stages = [StageResult(name=Stage.CHECK, state=StageState.PASSED),
              StageResult(name=Stage.TIME, state=StageState.PASSED, detail={"paper": {"source": source}})]  # fmt: skip
    return Evaluation(task=task, arch=ARCH, status=Status.PASSED, stages=stages,
                      **GpuMetrics(timing=timing).evaluation_fields())  # fmt: skip


PAPER = TimingMetrics(kernel_ms=1.0, baseline_ms=0.9, speedup=0.9, tflops=376.0, figure=SpeedupFigure.PAPER,
                      other_speedup=0.85)  # fmt: skip
PAIRED = TimingMetrics(kernel_ms=1.0, baseline_ms=0.85, speedup=0.85, interval=[0.84, 0.86], tflops=376.0)


def test_a_paper_record_names_its_figure_and_keeps_the_paired_one_beside_it() -> None:
    ev = passed(PAPER)
    record = json.loads(ev.model_dump_json())
    assert (record["speedup"], record["speedup_figure"], record["other_speedup"]) == (0.9, "paper", 0.85)
    assert record["speedup_interval"] is None and ev.headline_figure is SpeedupFigure.PAPER
    assert Evaluation.model_validate_json(ev.model_dump_json()) == ev
    assert GpuMetrics.of(ev).timing == PAPER  # a replayed record gives back the figures the stage returned


def test_a_paired_record_is_written_as_before_eval_speedup_existed() -> None:
    ev = passed(PAIRED)
    record = json.loads(ev.model_dump_json())
    assert not set(PAPER_FIGURE_FIELDS) & set(record) and not set(PAPER_FIGURE_FIELDS) & set(ev.model_dump())
    assert ev.headline_figure is SpeedupFigure.PAIRED and ev.speedup == 0.85
    assert Evaluation.model_validate_json(ev.model_dump_json()) == ev


def test_the_figure_beside_the_headline_is_a_correct_attempts_only() -> None:
    with pytest.raises(ValueError, match="only reported for a passed attempt"):
        Evaluation(task="x", arch=ARCH, status=Status.MISMATCH, other_speedup=0.9, speedup_figure="paper")
    assert PAPER.without_speedup().model_dump(include={"speedup", "interval", "other_speedup"}) == {
        "speedup": None, "interval": None, "other_speedup": None
    }  # fmt: skip


def test_a_shape_general_task_takes_the_minimum_of_each_figure() -> None:
    figures = [(0.95, 0.93), (0.88, 0.91), (0.99, 0.80), (0.90, 0.90), (0.97, 0.96)]  # (paper, paired) per workload
    results = [
        passed(PAPER.model_copy(update={"speedup": p, "baseline_ms": p, "other_speedup": q}), task=m.name)
        for (p, q), m in zip(figures, GENERAL.workloads, strict=True)
    ]
    ev = combine(GENERAL, results)
    assert ev.speedup == 0.88 and ev.shown_workload == GENERAL.workloads[1].name  # the headline's slowest
    assert ev.other_speedup == 0.80  # the paired figure's own minimum, at another workload
    assert ev.speedup_figure is SpeedupFigure.PAPER and [w.speedup for w in ev.workloads] == [p for p, _ in figures]


@pytest.mark.parametrize(("source", "how"), [("cupti", "CUPTI kernel durations"), ("events", "CUDA events")])
def test_the_feedback_names_the_papers_figure_as_the_one_that_counts(source: str, how: str) -> None:
    table = timing_table(passed(PAPER, source), GEMM)
    assert f"Speedup: 0.900× the baseline (the paper's figure: each timed alone, {how}; paired, interleaved at one " \
           "clock: 0.850×; the one that counts)." in table  # fmt: skip


def test_under_paired_the_feedback_and_the_report_read_as_before() -> None:
    ev = passed(PAIRED)
    assert "\nSpeedup: 0.850× the baseline.\n" in timing_table(ev, GEMM) + "\n"
    assert "speedup 0.850× (interval 0.840–0.860×)" in evaluate.render(ev)
    assert "speedup 0.900× (the paper's figure: each timed alone, CUPTI kernel durations; paired" in evaluate.render(
        passed(PAPER)
    )


# -------------------------------------------------------------------------------------------- the setting's ways in


def test_tools_evaluate_takes_speedup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    seen = {}

    class NoGpu:
        def __init__(self, device: int) -> None: ...
        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None: ...

    def evaluate_answer(text, task, arch, options, gpu):
        seen["options"] = options
        return Evaluation(task=task.name, arch=arch, status=Status.UNVERIFIED)

    monkeypatch.setattr(evaluate, "GpuService", NoGpu)
    monkeypatch.setattr(evaluate, "evaluate_answer", evaluate_answer)
    answer = tmp_path / "a.md"
    answer.write_text("an answer")
    assert evaluate.main([str(answer), "--task", "gemm", "--arch", "sm_90a", "--speedup", "paper"]) == 0
    assert seen["options"].speedup is SpeedupFigure.PAPER
    assert evaluate.main([str(answer), "--task", "gemm", "--arch", "sm_90a"]) == 0
    assert seen["options"].speedup is SpeedupFigure.PAIRED  # the default
    assert evaluate.main([str(answer), "--task", "gemm", "--arch", "sm_90a", "--speedup", "alone"]) == 2
    assert "--speedup: Input should be 'paired' or 'paper' (got 'alone')" in capsys.readouterr().err


def test_the_services_request_and_the_loops_setting_take_speedup() -> None:
    request = EvaluateRequest.model_validate({"task": "gemm", "arch": "h200", "answer": "…",
                                             "options": {"speedup": "paper"}})  # fmt: skip
    assert request.eval_options(EvalOptions().profile).speedup is SpeedupFigure.PAPER
    loop = cli.read(SolveConfig, ["task=gemm", "arch=sm_90a", "eval.speedup=paper"])
    assert loop.eval.options(1.2).speedup is SpeedupFigure.PAPER
    assert cli.read(SolveConfig, ["task=gemm", "arch=sm_90a"]).eval.options(1.2).speedup is SpeedupFigure.PAIRED
    with pytest.raises(cli.ConfigError, match=r"eval\.speedup"):
        cli.read(SolveConfig, ["task=gemm", "arch=sm_90a", "eval.speedup=alone"])
