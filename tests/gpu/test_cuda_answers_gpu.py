"""The hand-written CUDA attention forward's answers (tasks/solutions/sm_90a) on a real Hopper GPU:
each passes the check on 2 fresh draws with wgmma and TMA executed, untimed (`python -m tasks.solutions.check_all` times
them against cuDNN). Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import answered_by
from tasks.solutions.dev import cuda_answers
from tools.evaluation import Stage, Status
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper


@pytest.mark.parametrize("definition", cuda_answers.DEFINITIONS)
def test_an_answer_passes_with_its_targets_executed(gpu, definition):
    answer = (cuda_answers.OUT / f"{definition}.md").read_text()
    task = get_task(answered_by(definition)[-1])  # the largest S the answer serves
    options = EvalOptions(trials=2, seed=0, time=False, profile=Profile.COUNTS, timeout_s=20)
    ev = evaluate_answer(answer, task, Arch.SM_90A, options, gpu)
    assert ev.status is Status.PASSED, ev.message
    assert ev.target_counts["wgmma"] > 0 and ev.target_counts["tma"] > 0
    print(definition, ev.stage(Stage.CHECK).message)
