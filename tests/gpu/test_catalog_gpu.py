"""The new catalog's baselines and references on a real Hopper GPU: the fp8 baselines (torch._scaled_mm's
block-scaled GEMM, cuDNN's fp8 SDPA through cudnn-frontend) run on the tasks' own inputs and land within the tasks'
tolerance of the fp32 references; the fp8 attention reference answers pass there with their QGMMA executed; the
largest workloads' inputs and references fit. Skipped without an sm_90 GPU; the fp8 attention baseline test needs
the `fp8` extra (nvidia-cudnn-frontend)."""

from __future__ import annotations

import pytest
import torch

from tasks import get_task
from tasks.baselines import prepare_baseline
from tasks.inputs import draw_inputs
from tasks.references import run_reference
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.evaluation import Stage, Status
from tools.gpu.check import compare
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper


def _baseline_against_reference(name: str) -> dict[str, float]:
    task = get_task(name)
    inputs = draw_inputs(task, task.dims, seed=0, device="cuda")
    outputs = prepare_baseline(task.baseline.call, inputs, task.params)()
    torch.cuda.synchronize()
    reference = run_reference(task.reference, inputs, task.params)
    checks = [compare(o.name, outputs[o.name].contiguous(), reference[o.name], task.tolerance) for o in task.outputs]
    shapes = {t.name: t.shape for t in task.tensors}
    assert all(c.passed for c in checks), [c.summary(shapes[c.name]) for c in checks]
    return {c.name: c.rel_l2 for c in checks}


def test_the_fp8_gemm_baseline_is_within_tolerance():
    errors = _baseline_against_reference("fp8_gemm_nt_1d2d_n4096_k7168")
    assert errors["D"] < 5e-3  # 1.7e-3 seen with the probe's inputs


@pytest.mark.parametrize("name", ["fp8_mha_with_lse_d64", "fp8_mha_with_lse_d256_causal"])
def test_the_fp8_attention_baseline_is_within_tolerance(name):
    pytest.importorskip("cudnn", reason="pip install 'ptxbench[fp8]'")
    errors = _baseline_against_reference(name)
    assert errors["LSE"] < 1e-3
    print(name, errors)  # the baseline's own rel. L2 errors: what the tolerance must stay above


@pytest.mark.parametrize("name", ["fp8_mha_with_lse_d96", "fp8_mha_with_lse_d256_causal"])
def test_the_fp8_attention_reference_answer_passes_with_its_qgmma_executed(gpu, name):
    """D 96 (the head dim padded to 128 by TMA's zero fill) and D 256 causal (64-key steps, the masked diagonal):
    checked on 2 fresh draws, not timed (no cuDNN needed), then Nsight Compute counts the executed targets."""
    task = get_task(name)
    options = EvalOptions(trials=2, seed=0, time=False, profile=Profile.COUNTS)
    ev = evaluate_answer(reference_answer(name, Arch.SM_90A), task, Arch.SM_90A, options, gpu)
    assert ev.status is Status.PASSED, ev.message
    assert ev.target_counts["wgmma"] > 0 and ev.target_counts["tma"] > 0  # wgmma's SASS pattern is QGMMA only
    print(name, ev.stage(Stage.CHECK).message)  # the worst rel. L2 errors (interpreter: O 3e-2, LSE 1e-7)


@pytest.mark.parametrize("name", ["mha_bwd_d96_s16384", "mha_bwd_d96_causal_s16384", "gemm_n34816_k5120_m8192"])
def test_the_largest_workloads_draw_and_reference_on_the_gpu(name):
    task = get_task(name)
    inputs = draw_inputs(task, task.dims, seed=0, device="cuda")
    reference = run_reference(task.reference, inputs, task.params)
    assert all(torch.isfinite(reference[o.name]).all() for o in task.outputs)
    assert torch.cuda.max_memory_allocated() < 64 << 30  # the fp32 reference stays chunked
