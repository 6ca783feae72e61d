"""The worker's own count of executed target instructions (CUPTI's range profiler, tools/gpu/cupti_counts.py) on a real
Hopper GPU: the reference answers counted in the worker, every launch of a multi-kernel plan, the same counts in the
same worker attempt after attempt, and the same counts and decisions as Nsight Compute's (where ncu is installed).
Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.gpu.kernels import answer
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu import cupti_counts, ncu, profile
from tools.options import EvalOptions, Profile
from tools.pipeline import build, evaluate_answer, extract

pytestmark = pytest.mark.hopper

COUNTS = EvalOptions(trials=1, seed=5, time=False, profile=Profile.COUNTS)


def counted(gpu, task_name: str, text: str) -> Evaluation:
    ev = evaluate_answer(text, get_task(task_name), Arch.SM_90A, COUNTS, gpu)
    assert ev.status is Status.PASSED, ev.message
    return ev


@pytest.mark.parametrize("task_name", ["gemm_n7168_k5120", "mha_bwd_d128"])
def test_the_reference_answers_are_counted_in_the_worker_every_launch(gpu, task_name):
    task = get_task(task_name)
    first, second = (counted(gpu, task_name, reference_answer(task_name, Arch.SM_90A)) for _ in range(2))
    for ev in (first, second):
        stage = ev.stage(Stage.PROFILE)
        assert stage.state is StageState.PASSED and stage.detail["counter"] == "cupti", stage.message
        assert ev.target_counter == "cupti" and ev.targets_met is True and ev.paper_tag is True
        plan = build(extract(task, Arch.SM_90A, answer=reference_answer(task_name, Arch.SM_90A)), task, Arch.SM_90A,
                     COUNTS).module.plan  # fmt: skip
        assert stage.detail["launches_profiled"] == len(plan.launches)  # mha_bwd: 3 kernels, each counted
    assert first.target_counts == second.target_counts  # the profiler was left off, and on again, cleanly


def test_a_kernel_without_targets_counts_none_and_still_passes(gpu):
    ev = counted(gpu, "gemm", answer("correct"))
    assert ev.target_counter == "cupti" and ev.target_counts == {"wgmma": 0, "tma": 0} and ev.targets_met is False


@pytest.mark.skipif(ncu.find_ncu() is None, reason="Nsight Compute is not installed")
@pytest.mark.parametrize("task_name", ["gemm_n7168_k5120", "mha_with_lse_d128_causal", "mha_bwd_d128"])
def test_cupti_counts_and_decides_as_nsight_compute(gpu, task_name):
    task = get_task(task_name)
    text = reference_answer(task_name, Arch.SM_90A)
    ev = counted(gpu, task_name, text)
    module = build(extract(task, Arch.SM_90A, answer=text), task, Arch.SM_90A, COUNTS).module
    stage, targets = profile.profile_stage(module.cubin, module.plan, task.targets[Arch.SM_90A], 0, 300)
    assert targets is not None, stage.message
    assert (targets.met, targets.paper_tag) == (ev.targets_met, ev.paper_tag)
    for name, counter in cupti_counts.COUNTERS[Arch.SM_90A].items():
        expected = stage.detail["target_counts"][name] if counter.ncu == "warp" else (
            stage.detail["target_thread_counts"][name] // 32)  # fmt: skip
        assert ev.target_counts[name] == expected, name
