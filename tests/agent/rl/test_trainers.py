"""Each adapter called exactly as its trainer's current release calls it: verl 0.9.1 and OpenRLHF 0.11.2 load
agent/rl/rewards.py by path and call it as written below (from their source: verl/trainer/ppo/reward.py,
verl/utils/import_utils.py, verl/experimental/reward_loop/reward_manager/naive.py; openrlhf/utils/agent.py
SingleTurnAgentExecutor); SkyRL through skyrl-gym 0.4.0's own register and make; a dead service."""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import time
from functools import partial
from pathlib import Path

import pytest

import agent.rl.rewards as installed_rewards
from agent.rl.dataset import build_rows, label
from agent.rl.scoring import LocalScorer, ServiceScorer, ServiceUnreachable, use
from tasks.schema import Arch
from tests.agent.rl.verdicts import ANSWERS as VERDICTS
from tests.agent.rl.verdicts import TASK, VerdictGpu

REWARDS_FILE = Path(installed_rewards.__file__)
ANSWERS = list(VERDICTS)
TRUTH = label(TASK, Arch.SM_90A)


@pytest.fixture(scope="module")
def scorer() -> LocalScorer:
    return LocalScorer(VerdictGpu())


@pytest.fixture()
def in_use(scorer: LocalScorer):
    use(scorer)
    yield scorer
    use(None)


def expected(scorer: LocalScorer, answer: str) -> float:
    from agent.rl.scoring import Attempt

    (scored,) = scorer.score([Attempt(TASK.name, "sm_90a", answer)])
    return scored.score


def verl_load(path: Path):
    """verl 0.9.1: load_module(path) under a name of its own, then get_custom_reward_fn's partial."""
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw_fn = module.compute_score

    def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **extra_kwargs})

    return partial(_call_with_kwargs, raw_fn, {"invalid_reward": -1.0})  # reward_kwargs from the config


def test_verl_loads_the_file_by_path_and_use_reaches_it(in_use: LocalScorer, caplog) -> None:
    fn = verl_load(REWARDS_FILE)
    results = []
    for answer in ANSWERS:  # the naive reward manager's call, with its router keywords
        results.append(fn(data_source="ptxbench", solution_str=answer, ground_truth=TRUTH,
                          extra_info={"index": 3, "num_turns": 1, "rollout_reward_scores": {}},
                          reward_router_address=None, reward_model_tokenizer=None))  # fmt: skip
    assert [r["score"] for r in results] == pytest.approx([expected(in_use, a) for a in ANSWERS])
    with caplog.at_level(logging.WARNING, logger="ptxbench.rl"):
        wrong = fn(data_source="ptxbench", solution_str=ANSWERS[0], ground_truth='{"task": "gem", "arch": "sm_90a"}',
                   extra_info={"index": 7})  # fmt: skip
    assert wrong["score"] == -1.0 and "unknown task 'gem'" in wrong["error"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "sample 7" in line and "'gem'" in line and "invalid_reward=-1" in line
    # one shape on every path: verl stacks each key across the batch
    assert all(set(r) == set(wrong) and all(type(r[k]) is type(wrong[k]) for k in r) for r in results)


def openrlhf_query(tokenizer, prompt: str, response: str, max_prompt_tokens: int) -> str:
    """OpenRLHF 0.11.2's query: the prompt's tokens, cut from the front to fit, then the response's, decoded."""
    prompt_ids = tokenizer(text=prompt, add_special_tokens=False)["input_ids"][-max_prompt_tokens:]
    response_ids = tokenizer(text=response, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)


def test_openrlhf_scores_a_prompt_it_trimmed_from_the_front(in_use: LocalScorer, tiny_tokenizer) -> None:
    spec = importlib.util.spec_from_file_location("reward_func", REWARDS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (row,) = build_rows("openrlhf", [TASK.name], ["sm_90a"], trials=3, target_speedup=1.0, max_turns=1,
                        prompt="none")  # fmt: skip
    prompt = tiny_tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    assert "```" in prompt  # the prompt's own code blocks must not be read as the answer
    total = len(tiny_tokenizer(text=prompt, add_special_tokens=False)["input_ids"])
    for answer in ANSWERS[:3]:
        query = openrlhf_query(tiny_tokenizer, prompt, answer, total // 3)
        assert not query.startswith(prompt)
        out = module.reward_func([query], [prompt], [row["label"]])  # batch of one, as OpenRLHF calls it
        assert out["rewards"].tolist() == pytest.approx([expected(in_use, answer)])


def test_skyrl_makes_the_environment_and_counts_one_number_of_turns(in_use: LocalScorer) -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from omegaconf import OmegaConf

    from agent.rl.skyrl import register

    register()
    register()  # twice is harmless: a trainer's entry point may run in several workers
    (row,) = build_rows("skyrl", [TASK.name], ["sm_90a"], trials=3, target_speedup=1.0, max_turns=2, prompt="none")
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(row["env_class"], env_config=OmegaConf.create({"max_turns": 5}), extras=extras)
    prompt, _ = env.init(row["prompt"])
    assert "You have 2 turns" in prompt[-1]["content"]
    first = env.step(ANSWERS[3])  # a compile error: the feedback counts the prompt's turns
    assert not first["done"] and first["observations"][0]["content"].startswith("Turn 1 of 2")
    assert env.step(ANSWERS[3])["done"] and env.turns == 2
    env = skyrl_gym.make("ptxbench", env_config=OmegaConf.create({}), extras=extras | {"max_turns": 3})
    assert env.max_turns == 3  # SkyRL's generator puts max_turns in the extras: it wins


def test_a_misspelled_task_in_a_grpo_batch_logs_one_line_and_earns_invalid_reward(scorer, caplog) -> None:
    fn = installed_rewards.trl_reward(scorer, invalid_reward=-0.5)
    with caplog.at_level(logging.WARNING, logger="ptxbench.rl"):
        got = fn(prompts=[None, None], completions=ANSWERS[:2], task=[TASK.name, "gemm_n7168_k512"],
                 arch=["sm_90a", "sm_90a"])  # fmt: skip
    assert got == pytest.approx([expected(scorer, ANSWERS[0]), -0.5])
    (line,) = [r.getMessage() for r in caplog.records]
    assert "completions[1]" in line and "gemm_n7168_k512" in line and "gemm_n7168_k5120" in line
    with pytest.raises(ValueError, match="no 'arch' column"):
        fn(prompts=[None], completions=ANSWERS[:1], task=[TASK.name])


def test_the_async_grpo_reward_gives_the_same_scores(scorer) -> None:
    import asyncio
    import inspect

    fn = installed_rewards.trl_reward_async(scorer)
    assert inspect.iscoroutinefunction(fn)  # what TRL checks to await it
    got = asyncio.run(fn(prompts=[None] * 3, completions=ANSWERS[:3], task=[TASK.name] * 3, arch=["sm_90a"] * 3))
    assert got == pytest.approx([expected(scorer, a) for a in ANSWERS[:3]])


def test_a_dead_service_is_retried_with_back_off_then_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    dead = ServiceScorer(f"http://127.0.0.1:{port}", tries=3, backoff_s=0.1)
    from agent.rl.scoring import Attempt

    started = time.monotonic()
    with pytest.raises(ServiceUnreachable) as caught:
        dead.score([Attempt(TASK.name, "sm_90a", ANSWERS[0])])
    assert time.monotonic() - started >= 0.3  # waited 0.1 then 0.2 s between the three tries
    assert f"http://127.0.0.1:{port}" in str(caught.value) and "3 tries" in str(caught.value)
    # a misspelled task is answered here, without the service
    (scored,) = dead.score([Attempt("gem", "sm_90a", ANSWERS[0])])
    assert scored.reward is None and "unknown task 'gem'" in scored.error
