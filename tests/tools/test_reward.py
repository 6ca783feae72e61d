"""tools/reward.py's mapping on the replay fixture's evaluations (tests/fixtures/runs/replay: every status, GPU
stages included) and on static evaluations of the reference answers: each component from its evidence, the
documented weights."""

from __future__ import annotations

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.agent.rl.verdicts import recorded
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer
from tools.reward import REWARD_VERSION, RewardConfig, reward

RECORDED = {ev.status: ev for ev in reversed(recorded())}  # the first of each status


def expected(compiled: bool, correct: bool, targets: bool, speedup: float | None, c: RewardConfig) -> float:
    """The docstring's formula, written out again."""
    speed = min(speedup, c.speedup_cap) / c.speedup_cap if speedup is not None else 0.0
    return c.compiled * compiled + (c.correct + c.targets * targets + c.speed * speed if correct else 0.0)


@pytest.mark.parametrize("config", [RewardConfig(), RewardConfig(compiled=0.0, speed=1.0, speedup_cap=1.0)])
def test_recorded_attempts_score_by_the_documented_formula(config: RewardConfig) -> None:
    for ev in recorded():
        r = reward(ev, config)
        compiled = ev.stage(Stage.ABI) is not None and ev.stage(Stage.ABI).state is StageState.PASSED
        correct = ev.status is Status.PASSED
        assert (r.compiled, r.correct, r.targets) == (compiled, correct, bool(ev.targets_met))
        assert r.score == pytest.approx(expected(compiled, correct, bool(ev.targets_met), ev.speedup, config))
        assert r.reward_version == REWARD_VERSION and r.config == config


def test_the_default_weights_give_the_documented_steps() -> None:
    assert reward(RECORDED[Status.COMPILE_ERROR]).score == 0.0
    assert reward(RECORDED[Status.EXTRACT_ERROR]).score == 0.0
    assert reward(RECORDED[Status.MISMATCH]).score == pytest.approx(0.1)  # compiled, wrong
    passed = RECORDED[Status.PASSED]
    r = reward(passed)
    assert r.targets_source == "executed" and r.speedup == passed.speedup
    assert r.score == pytest.approx(0.7 + 0.3 * min(passed.speedup, 2.0) / 2.0)


def test_without_a_gpu_only_the_compile_credit_is_earned_and_the_sass_speaks_for_the_targets() -> None:
    task = get_task("gemm")
    ev = evaluate_answer(reference_answer(task.name, Arch.SM_90A), task, Arch.SM_90A, EvalOptions())
    r = reward(ev)
    assert ev.status is Status.UNVERIFIED and r.unverified and r.score == pytest.approx(0.1)
    assert (r.correct, r.targets, r.targets_source) == (False, True, "sass")  # wgmma and TMA are in its SASS


def test_a_correct_attempt_profiled_off_takes_its_targets_from_the_sass() -> None:
    task = get_task("gemm")
    static = evaluate_answer(reference_answer(task.name, Arch.SM_90A), task, Arch.SM_90A, EvalOptions())
    ran = [StageResult(name=s, state=StageState.PASSED) for s in (Stage.RUN, Stage.CHECK, Stage.TIME)]
    stages = [s for s in static.stages if s.state is StageState.PASSED] + ran
    ev = static.model_copy(update={"status": Status.PASSED, "stages": stages, "speedup": 1.0, "kernel_ms": 0.8})
    r = reward(ev)
    assert (r.targets, r.targets_source) == (True, "sass") and r.score == pytest.approx(0.85)
