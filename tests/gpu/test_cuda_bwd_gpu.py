"""The CUDA C++ attention-backward answers (tasks/solutions/sm_90a/, from
tasks/solutions/dev/cuda/attention_bwd.cu) on a real Hopper GPU: each passes its task on one draw with wgmma and TMA
executed, and the D=96 answers pass at the smallest and largest workloads of their definitions too (S 512 and
16384). Not timed: `python -m tasks.solutions.check_all` times them against cuDNN. Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions.dev.cuda_bwd_answers import OUT, TASKS
from tools.evaluation import Stage, Status
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper

OTHER_WORKLOADS = [("mha_bwd_d96", "mha_bwd_d96_s512"), ("mha_bwd_d96_causal", "mha_bwd_d96_causal_s16384")]


def _passes(answer_name: str, task_name: str, gpu, profile: Profile) -> None:
    answer = (OUT / f"{answer_name}.md").read_text()
    options = EvalOptions(trials=1, seed=0, time=False, profile=profile, timeout_s=20)
    ev = evaluate_answer(answer, get_task(task_name), Arch.SM_90A, options, gpu)
    assert ev.status is Status.PASSED, ev.message
    if profile is Profile.COUNTS:
        assert ev.target_counts["wgmma"] > 0 and ev.target_counts["tma"] > 0
    print(task_name, ev.stage(Stage.CHECK).message)  # the worst rel. L2 errors


@pytest.mark.parametrize("name", TASKS)
def test_an_answer_passes_with_its_targets_executed(name, gpu):
    _passes(name, name, gpu, Profile.COUNTS)


@pytest.mark.parametrize(("answer", "task"), OTHER_WORKLOADS)
def test_a_d96_answer_serves_its_definitions_other_workloads(answer, task, gpu):
    _passes(answer, task, gpu, Profile.OFF)
