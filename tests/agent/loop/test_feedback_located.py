"""Where in the kernel reaches the model (issue 28): a time-out's hang location is in its feedback once, as text,
with no JSON of it beside; the perf pass's hottest lines and the scratch reset are in a slow attempt's feedback."""

from __future__ import annotations

from agent.loop.feedback import feedback_message
from tasks.catalog import get_task
from tasks.schema import Arch
from tests.fixtures.runs import make_runs
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu import perf
from tools.gpu.hang import HangReport, WarpGroup
from tools.perf_report import HotLine

TASK = get_task("gemm")


def test_a_located_hang_is_told_once_as_text() -> None:
    group = WarpGroup(kernel="k", file="kernel.ptx", line=212, quoted="mbarrier.try_wait.parity.shared::cta.b64 %p2, "
                      "[%r2], %r5;", wait="mbarrier wait on `full_bar` (through %r2), for the phase parity in %r5",
                      threads=256, pieces=["block (0,0,0): warps 4–11"])  # fmt: skip
    report = HangReport(groups=[group], seconds=0.9, listing="Kernel 0\n*  (0,0,0) …")
    message = "no result within 5 s during the run stage (running the launch sequence once)\n\n" + report.text()
    run = StageResult(name=Stage.RUN, state=StageState.FAILED, message=message,
                      detail={"hang": report.model_dump()})  # fmt: skip
    ev = Evaluation(task=TASK.name, arch=Arch.SM_90A, status=Status.TIMEOUT, message=message.split("\n")[0],
                    stages=[run])  # fmt: skip
    text = feedback_message(ev, TASK, Arch.SM_90A, turn=1, max_turns=3, target_speedup=1.0)
    said = "- block (0,0,0): warps 4–11 wait at line 212 `mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], %r5;`"
    assert text.count(said) == 1
    assert "Detail: " not in text and "listing" not in text  # the record keeps cuda-gdb's output, not the feedback


def test_a_slow_attempts_feedback_names_its_hottest_lines_and_the_scratch_reset() -> None:
    slow = make_runs.profiled(make_runs.GEMM, 0.04)  # the plain-pointer GEMM beside cuBLAS, recorded on the H200
    hot = [HotLine(kernel=slow.perf.launches[0].kernel, file="kernel.ptx", line=88, quoted="st.shared.b32 [%r7], %f1;",
                   bank_conflicts=54e6, stall_samples=900, executed=4e6)]  # fmt: skip
    report = slow.perf.model_copy(update={"hot_lines": hot, "scratch_init_ms": 0.56})
    stages = [s if s.name is not Stage.PERF else s.model_copy(update={"message": perf.comparison(report)})
              for s in slow.stages]  # fmt: skip
    text = feedback_message(slow.model_copy(update={"perf": report, "stages": stages}), TASK, Arch.SM_90A, turn=1,
                            max_turns=4, target_speedup=1.0)  # fmt: skip
    assert "- shared-memory bank conflicts (excess wavefronts): line 88 `st.shared.b32 [%r7], %f1;` 54,000,000" in text
    assert "your launches: scratch initialisation (before each run) 0.560 ms" in text
