"""Feedback that locates what went wrong, on a real Hopper GPU: an out-of-bounds store in a hand-written PTX kernel
is reported with its PTX line, its thread and block and the tensor it missed; the same bug in a CUDA answer gets
its CUDA line; a mismatch is re-run on the same inputs and called a race only when the runs disagree; racecheck
names the two racing lines. After each fault the same service evaluates a correct answer correctly.
Skipped without an sm_90 GPU. tools/dev/bench_feedback_gpu.py measures the same on the H200."""

from __future__ import annotations

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import OOB_CUDA, OOB_PTX, RACY_PTX, answer, elementwise_answer, line_of
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu.sanitizer import Finding
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper

TASK = get_task("gemm")
QUICK = EvalOptions(trials=1, seed=11, time=False, profile=False, timeout_s=120)


def run(gpu: GpuService, text: str, options: EvalOptions = QUICK) -> Evaluation:
    return evaluate_answer(text, TASK, Arch.SM_90A, options, gpu)


def located(ev: Evaluation) -> Finding:
    """The first finding of the attempt's memcheck (skipped where compute-sanitizer is missing)."""
    assert ev.status is Status.RUNTIME_ERROR, ev.message
    stage = ev.stage(Stage.MEMCHECK)
    assert stage is not None, "no memcheck ran after the fault"
    if stage.state is StageState.SKIPPED:
        pytest.skip(stage.message)
    assert stage.state is StageState.FAILED, stage.message
    return Finding.model_validate(stage.detail["findings"][0])


def test_an_out_of_bounds_store_in_ptx_is_located_to_its_line_thread_and_tensor(gpu) -> None:
    ev = run(gpu, elementwise_answer("ptx", OOB_PTX, "oob_store"))
    first = located(ev)
    store = line_of(OOB_PTX, "st.global")
    assert (first.file, first.line, first.kernel) == ("kernel.ptx", store, "oob_store")
    assert first.kind.startswith("Invalid __global__ write of size 2 bytes") and first.block == [3, 0, 0]
    assert first.quoted == "st.global.b16 [%rd5], %h;"
    assert "past the end of C (bfloat16 [8192, 7168]" in first.placed  # 2^40 bytes on: placed by its pointer
    assert first.placed.endswith("the pointer this access is computed from")
    assert f"Located: Invalid __global__ write of size 2 bytes at line {store}: `st.global.b16" in ev.message
    assert run(gpu, answer("correct")).status is Status.PASSED  # the worker came back


def test_the_same_store_in_a_cuda_answer_is_located_to_its_cuda_line(gpu) -> None:
    first = located(run(gpu, elementwise_answer("cuda", OOB_CUDA, "oob_store")))
    assert (first.file, first.line) == ("answer.cu", line_of(OOB_CUDA, "c[i + past]"))
    assert first.quoted == "c[i + past] = 0;" and first.block == [3, 0, 0]
    assert "past the end of C" in first.placed


def test_a_race_is_told_from_a_deterministic_mismatch_by_a_rerun(gpu) -> None:
    race = run(gpu, answer("race"))
    assert race.status is Status.MISMATCH
    assert race.stage(Stage.CHECK).detail["rerun"]["likely_race"] is True
    assert "Re-run on the same inputs: the outputs differ beyond the tolerance" in race.message
    layout = run(gpu, answer("wrong_layout"))
    assert layout.status is Status.MISMATCH and layout.stage(Stage.CHECK).detail["rerun"]["likely_race"] is False
    assert "identical outputs, so the mismatch is deterministic" in layout.message


def test_racecheck_names_the_racing_lines_when_asked(gpu) -> None:
    ev = run(gpu, elementwise_answer("ptx", RACY_PTX, "racy"), QUICK.model_copy(update={"racecheck": True}))
    assert ev.status is Status.MISMATCH
    stage = ev.stage(Stage.RACECHECK)
    if stage.state is StageState.SKIPPED:
        pytest.skip(stage.message)
    assert stage.state is StageState.FAILED, stage.message
    race = Finding.model_validate(stage.detail["findings"][0])
    lines = {race.line, race.other["line"]}
    assert lines == {line_of(RACY_PTX, "st.shared"), line_of(RACY_PTX, "ld.shared")}
