"""The GPU harness on a real Hopper GPU: correct kernels from two compilers pass, broken ones are classified,
and after every fault the same service evaluates a correct kernel correctly. Skipped without an sm_90 GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import answer
from tools.answer import extract_solution
from tools.assemble import compile_source
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu.base import CompiledModule
from tools.gpu.hang import LOCATE_S
from tools.gpu.sanitizer import sanitizer_stage
from tools.gpu.service import GpuService
from tools.gpu.timing import TimingOptions
from tools.options import EvalOptions
from tools.pipeline import build, evaluate_answer, extract
from tools.plan import plan_launches

pytestmark = pytest.mark.hopper

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
TASK = get_task("gemm")
QUICK = EvalOptions(trials=2, seed=7, time=False, profile=False, timeout_s=120)


def run(gpu: GpuService, text: str, options: EvalOptions = QUICK) -> Evaluation:
    return evaluate_answer(text, TASK, Arch.SM_90A, options, gpu)


def assert_healthy(gpu: GpuService) -> None:
    ev = run(gpu, answer("correct"))
    assert ev.status is Status.PASSED, ev.message


def test_triton_tma_gemm_passes_and_its_targets_execute(gpu):
    ev = run(gpu, (FIXTURES / "triton_gemm_tma.md").read_text(), EvalOptions(seed=3))
    assert ev.status is Status.PASSED, ev.message
    assert ev.speedup and ev.speedup > 0.3
    assert ev.targets_met is True and ev.paper_tag is True
    assert ev.target_counts["wgmma"] > 0 and ev.target_counts["tma"] > 0
    detail = ev.stage(Stage.TIME).detail
    assert detail["baseline_rel_l2"]["C"] < TASK.tolerance
    # Paired timing: the speedup inside its interval, the paper's figure beside it, the GPU's state sampled
    # during both halves of the pairs (NVML is on the GPU image).
    low, high = ev.speedup_interval
    assert low <= ev.speedup <= high and len(detail["paired"]["block_speedups"]) == TimingOptions().blocks
    assert detail["paper"]["speedup"] > 0.3 and detail["first"] is None
    state = detail["gpu_state"]
    assert state["recorded"], state["note"]
    assert set(state["phases"]) == {"candidate", "baseline"} and state["phases"]["baseline"]["sm_mhz"] > 0


def test_a_speedup_above_the_ceiling_is_remeasured_and_flagged_when_it_stands(gpu):
    options = EvalOptions(seed=6, profile=False, speedup_ceiling=0.1)  # any real speedup is "too good" here
    ev = run(gpu, (FIXTURES / "triton_gemm_tma.md").read_text(), options)
    assert ev.status is Status.PASSED, ev.message
    detail = ev.stage(Stage.TIME).detail
    assert detail["first"]["speedup"] > 0.1  # the first measurement, kept for the record
    assert any(f.startswith("above the ceiling — ") and f.endswith("it stands") for f in ev.timing_flags)
    assert "re-measured on fresh inputs and re-checked" in ev.stage(Stage.TIME).message


def test_triton_pointer_gemm_passes_without_tma(gpu):
    ev = run(gpu, (FIXTURES / "triton_gemm_pointers.md").read_text(), EvalOptions(seed=4, time=False, timeout_s=300))
    assert ev.status is Status.PASSED, ev.message
    assert ev.target_counts["wgmma"] > 0 and ev.target_counts["tma"] == 0
    assert ev.targets_met is False


def test_cuda_gemm_passes(gpu):
    ev = run(gpu, answer("correct"))
    assert ev.status is Status.PASSED, ev.message
    check = ev.stage(Stage.CHECK)
    assert check.detail["seeds"] == [7, 8]
    assert all(o["rel_l2"] < 1e-2 for t in check.detail["trials"] for o in t["outputs"])


def test_out_of_bounds_write_is_a_runtime_error(gpu):
    ev = run(gpu, answer("oob_write"))
    assert ev.status is Status.RUNTIME_ERROR
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in ev.message
    assert_healthy(gpu)


def test_unwritten_tail_is_a_mismatch_that_says_where(gpu):
    ev = run(gpu, answer("correct", grid_y="cdiv(M,64)-1"))
    assert ev.status is Status.MISMATCH
    out = ev.stage(Stage.CHECK).detail["trials"][0]["outputs"][0]
    assert out["unwritten"] == 64 * TASK.dims["N"]
    assert out["bad_region"][0] == [TASK.dims["M"] - 64, TASK.dims["M"] - 1]
    assert "never written" in ev.message
    assert_healthy(gpu)


@pytest.mark.parametrize("variant", ["wrong_layout", "race"])
def test_wrong_results_are_a_mismatch(gpu, variant):
    ev = run(gpu, answer(variant))
    assert ev.status is Status.MISMATCH, ev.message
    assert "elements out of tolerance" in ev.message
    assert_healthy(gpu)


def test_hang_is_a_timeout_within_seconds_and_the_worker_comes_back(gpu):
    restarts = gpu.restarts
    start = time.perf_counter()
    ev = run(gpu, answer("hang"), EvalOptions(seed=1))  # the default limits: from the GEMM's FLOPs, 5 s
    assert ev.status is Status.TIMEOUT
    assert time.perf_counter() - start < 15 + LOCATE_S  # and the hang's location, at most LOCATE_S
    assert "no result within 5 s during the run stage" in ev.message and "mbarrier waits" in ev.message
    assert gpu.restarts == restarts + 1
    assert_healthy(gpu)


def test_state_kept_between_launches_fails_the_recheck(gpu):
    ev = run(gpu, answer("stateful"), EvalOptions(trials=3, seed=5, profile=False, timeout_s=300))
    assert ev.status is Status.MISMATCH
    assert ev.stage(Stage.CHECK).state is StageState.PASSED
    assert ev.stage(Stage.TIME).state is StageState.FAILED
    assert "keep state between launches" in ev.message
    assert ev.speedup is None


def _compiled(text: str):
    solution = extract_solution(text)
    return solution, compile_source(solution.language, solution.source, Arch.SM_90A)


def module_of(text: str) -> CompiledModule:
    """The built module of an answer, its plan open to changes the planner would refuse."""
    static = build(extract(TASK, Arch.SM_90A, answer=text), TASK, Arch.SM_90A, QUICK)
    assert static.module is not None, static.failed
    return static.module


def test_shared_memory_the_driver_refuses_is_a_launch_error(gpu):
    module = module_of(answer("correct"))
    module.plan.launches[0].shared_bytes = Arch.SM_90A.max_shared_bytes  # plus the kernel's static tiles: too much
    outcome = gpu.evaluate(TASK, Arch.SM_90A, module, QUICK)
    assert outcome.status is Status.LAUNCH_ERROR
    assert "MAX_DYNAMIC_SHARED_SIZE_BYTES" in outcome.message
    assert_healthy(gpu)


def test_too_many_threads_for_the_registers_is_a_launch_error(gpu):
    module = module_of(answer("correct"))
    module.plan.launches[0].block = [1024, 1, 1]  # the kernel is built for at most 256 (__launch_bounds__)
    outcome = gpu.evaluate(TASK, Arch.SM_90A, module, QUICK)
    assert outcome.status is Status.LAUNCH_ERROR
    assert "threads fit in a block" in outcome.message


def test_shared_memory_over_the_arch_limit_is_refused_before_anything_launches(gpu):
    ev = run(gpu, answer("correct", shared_bytes=240000))
    assert ev.status is Status.EXTRACT_ERROR
    assert "232448" in ev.message


def test_a_blackwell_solution_is_skipped_on_hopper(gpu):
    ev = evaluate_answer(answer("correct"), TASK, Arch.SM_100A, QUICK, gpu)
    assert ev.status is Status.UNVERIFIED
    run_stage = ev.stage(Stage.RUN)
    assert run_stage.state is StageState.SKIPPED and "sm_90" in run_stage.message


def test_memcheck_reports_the_out_of_bounds_write(gpu):
    solution, compiled = _compiled(answer("oob_write"))
    plan = plan_launches(solution.launch, TASK, Arch.SM_90A)
    stage = sanitizer_stage(Stage.MEMCHECK, compiled.cubin, plan, gpu.device, timeout_s=150)
    if stage.state is StageState.SKIPPED:
        pytest.skip(stage.message)
    assert stage.state is StageState.FAILED, stage.message
    first = stage.detail["findings"][0]
    assert first["kind"].startswith("Invalid __global__ write")
    assert first["kernel"] in ("gemm_bt", "store_bf16")  # the faulting frame: the kernel or its inlined helper
    assert first["block"] == [0, 0, 0]
