"""The perf pass on a real Hopper GPU (issue 16's bar): the plain-pointer GEMM (wgmma, no TMA) is told it is
memory-stalled with a low tensor-pipe share; the TMA GEMM shows a high one; cuBLAS's kernel name and launch
facts stand beside them. Skipped without an sm_90 GPU (and the perf stage is skipped without ncu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.perf_report import longest
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
TASK = get_task("gemm")
PERF = EvalOptions(trials=1, seed=4, profile="perf")


def perf_of(gpu: GpuService, fixture: str) -> Evaluation:
    ev = evaluate_answer((FIXTURES / fixture).read_text(), TASK, Arch.SM_90A, PERF, gpu)
    assert ev.status is Status.PASSED, ev.message
    stage = ev.stage(Stage.PERF)
    assert stage is not None and stage.state is StageState.PASSED, stage and stage.message
    return ev


def test_the_pointer_gemm_is_memory_stalled_with_the_tensor_pipe_nearly_idle(gpu):
    ev = perf_of(gpu, "triton_gemm_pointers.md")
    ours = longest(ev.perf.launches)
    assert ours.tensor_pipe_pct < 30 and ours.top_stalls(1)[0][0] == "long_scoreboard"
    assert ev.perf.limiter == "memory_stalled"
    assert "likely limiter (memory_stalled)" in ev.stage(Stage.PERF).message


def test_the_tma_gemm_keeps_the_tensor_pipe_busy_and_cublas_stands_beside_it(gpu):
    ev = perf_of(gpu, "triton_gemm_tma.md")
    assert longest(ev.perf.launches).tensor_pipe_pct > 70
    assert ev.perf.baseline, ev.perf.baseline_note
    lib = longest(ev.perf.baseline)
    assert ev.perf.library == "cuBLAS" and "sm90" in lib.kernel and lib.grid and lib.block
    message = ev.stage(Stage.PERF).message
    assert lib.kernel[:40] in message and "| cluster |" in message and "| waves per SM |" in message
