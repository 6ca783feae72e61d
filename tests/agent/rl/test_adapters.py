"""Each reward adapter called the way its trainer calls it, on answers whose GPU verdicts are recorded ones
(tests/agent/rl/verdicts.py, behind our real static stages), and the multi-turn environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.rl import rewards
from agent.rl.dataset import label, messages, parse_label
from agent.rl.env import KernelEnv
from agent.rl.scoring import Attempt, LocalScorer
from tasks.catalog import get_task
from tasks.schema import Arch
from tests.agent.rl.verdicts import ANSWERS as VERDICTS
from tests.agent.rl.verdicts import FAST, ProfileOffGpu, VerdictGpu
from tools.evaluation import Status

TASK = get_task("gemm")


@pytest.fixture(scope="module")
def scorer() -> LocalScorer:
    return LocalScorer(VerdictGpu())


@pytest.fixture()
def installed(scorer: LocalScorer):
    rewards.use(scorer)
    yield scorer
    rewards.use(None)


ANSWERS = list(VERDICTS)


def documented(verdict) -> float:
    """tools/reward.py's default weights, written out: 0 without a module; 0.1 for compiling; 0.5 correct,
    0.7 with the targets executed, plus 0.3 × min(speedup, 2) / 2."""
    if verdict is None:
        return 0.0
    if verdict.status is not Status.PASSED:
        return 0.1
    return 0.5 + 0.2 * bool(verdict.targets_met) + 0.3 * min(verdict.speedup, 2.0) / 2.0


SCORES = [documented(v) for v in VERDICTS.values()]
STATUSES = [str(v.status) if v else None for v in VERDICTS.values()]


def test_the_answers_span_the_scores() -> None:
    assert len(set(SCORES)) == 4 and SCORES[0] > SCORES[1] > SCORES[2] > SCORES[3] == SCORES[4] == 0.0


def test_trl_grpo_passes_columns_as_lists_and_completions_as_text(scorer: LocalScorer) -> None:
    fn = rewards.trl_reward(scorer)
    n = len(ANSWERS)
    prompts = [messages(TASK, Arch.SM_90A, trials=3, target_speedup=1.0, max_turns=1)] * n
    got = fn(prompts=prompts, completions=ANSWERS, task=[TASK.name] * n, arch=["sm_90a"] * n,
             completion_ids=[[1, 2]] * n, trainer_state=None)  # fmt: skip
    assert got == pytest.approx(SCORES)
    assert fn.__name__ == "ptxbench_reward"  # TRL logs each reward function by its name


def test_trl_conversational_completions_are_read_from_the_last_assistant_message(scorer: LocalScorer) -> None:
    fn = rewards.trl_reward(scorer)
    completions = [[{"role": "assistant", "content": "thinking out loud"}, {"role": "assistant", "content": a}]
                   for a in ANSWERS]  # fmt: skip
    n = len(ANSWERS)
    assert fn([None] * n, completions, task=["gemm"] * n, arch=["h100"] * n) == pytest.approx(SCORES)


@pytest.mark.parametrize(
    "think",
    [
        lambda draft, final: (
            f"<think>\nFirst a draft:\n{draft}\nNo, the layout is wrong.\n</think>\n\n{final}"
        ),  # Qwen3
        lambda draft, final: f"First a draft:\n{draft}\nNo, the layout is wrong.\n</think>\n\n{final}",
    ],
    ids=["qwen3", "r1"],
)
def test_raw_completions_of_reasoning_models_are_scored_on_their_answer(scorer: LocalScorer, think) -> None:
    """TRL's GRPOTrainer hands over raw completions: the drafts inside the reasoning (whole answers, here a correct
    one) never count, so each completion scores what its answer alone scores: a reply without code scores 0."""
    draft = next(a for a in ANSWERS if VERDICTS[a] is FAST)
    completions = [think(draft, a) for a in ANSWERS]
    n = len(ANSWERS)
    fn = rewards.trl_reward(scorer)
    assert fn(prompts=[None] * n, completions=completions, task=["gemm"] * n, arch=["sm_90a"] * n) == pytest.approx(
        SCORES
    )


def test_verl_compute_score_reads_the_label_as_ground_truth(installed: LocalScorer) -> None:
    truth = label(TASK, Arch.SM_90A)
    for answer, score, verdict in zip(ANSWERS, SCORES, VERDICTS.values(), strict=True):
        got = rewards.compute_score("ptxbench", answer, truth, {"index": 0})
        assert got["score"] == pytest.approx(score)
        assert set(got) >= {"compiled", "correct", "targets", "speed", "reward_version", "status"}
        if verdict is not None:
            assert got["status"] == str(verdict.status)
    parsed = rewards.compute_score("ptxbench", ANSWERS[1], {"task": "gemm", "arch": "sm_90a"})  # a parsed label
    assert parsed["score"] == pytest.approx(SCORES[1])


def test_openrlhf_reward_func_splits_each_query_after_its_prompt(installed: LocalScorer) -> None:
    prompt = "<|user|>Write the GEMM.<|assistant|>"
    out = rewards.reward_func([prompt + a for a in ANSWERS], [prompt] * len(ANSWERS),
                              [label(TASK, Arch.SM_90A)] * len(ANSWERS))  # fmt: skip
    assert out["rewards"].tolist() == pytest.approx(SCORES) and out["scores"].tolist() == pytest.approx(SCORES)
    assert out["extra_logs"]["correct"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    lost = rewards.reward_func(["something else"], [prompt], [label(TASK, Arch.SM_90A)])  # logged, not raised:
    assert lost["rewards"].tolist() == [0.0]  # OpenRLHF would swallow an exception and drop the reward


def test_a_bad_label_or_problem_says_what_it_should_be(scorer: LocalScorer) -> None:
    with pytest.raises(ValueError, match=re.escape('a label must be JSON {"task": …, "arch": …}')):
        parse_label("gemm on hopper")
    (scored,) = scorer.score([Attempt("../../etc/passwd", "sm_90a", ANSWERS[1])])
    assert scored.reward is None and scored.score == 0.0 and "unknown task '../../etc/passwd'" in scored.error


def test_the_environment_feeds_back_as_the_loop_does_and_ends_on_the_target(scorer: LocalScorer) -> None:
    env = KernelEnv("gemm", "sm_90a", scorer, max_turns=4, target_speedup=1.0)
    prompt, info = env.reset()
    assert [m["role"] for m in prompt] == ["system", "user"] and info == {"task": TASK.name, "arch": "sm_90a"}
    first = env.step(ANSWERS[3])  # a compile error
    assert not first["done"] and first["reward"] == 0.0
    (observation,) = first["observations"]
    assert observation["role"] == "user" and "compile_error" in observation["content"]
    assert "threadIdz" in observation["content"] and observation["content"] == first["metadata"]["feedback"]
    slow = env.step(ANSWERS[1])  # correct, below the target: the episode goes on
    assert not slow["done"] and slow["reward"] == pytest.approx(SCORES[1]) and slow["metadata"]["status"] == "passed"
    assert FAST.speedup >= 1.0
    last = env.step(ANSWERS[0])
    assert last["done"] and last["observations"] == [] and last["reward"] == pytest.approx(SCORES[0])


def test_the_environment_stops_after_max_turns_and_starts_from_skyrls_extras(scorer: LocalScorer) -> None:
    extras = {"reward_spec": {"method": "rule", "ground_truth": label(TASK, Arch.SM_90A)}}
    env = KernelEnv.from_extras(extras, scorer, max_turns=2)
    prompt = [{"role": "user", "content": "from the dataset"}]
    assert env.init(prompt) == (prompt, {"task": TASK.name, "arch": "sm_90a"})
    assert not env.step(ANSWERS[2])["done"]
    assert env.step(ANSWERS[2])["done"]  # the second of two turns


def test_the_environment_does_not_end_on_targets_only_present_in_the_sass() -> None:
    """The loop's rule (Evaluation.solved): targets must be executed. hopper_gemm's SASS holds wgmma and TMA, so
    the reward credits them from the SASS when the profile did not run; the episode still goes on."""
    text = (Path(__file__).parents[2] / "fixtures" / "answers" / "hopper_gemm.md").read_text()
    env = KernelEnv("gemm", "sm_90a", LocalScorer(ProfileOffGpu()), max_turns=4, target_speedup=1.0)
    env.reset()
    step = env.step(text)
    reward = step["metadata"]["reward"]
    assert reward["correct"] and reward["targets"] and reward["targets_source"] == "sass"
    assert reward["speedup"] >= 1.0 and not step["done"] and len(step["observations"]) == 1
