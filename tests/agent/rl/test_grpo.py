"""TRL's GRPOTrainer, as its users run it, for two steps on the CPU: a tiny random model and tokenizer built here
(no download), our reward through a LocalScorer (recorded GPU verdicts behind our real static stages) and
through a real `python -m tools.serve` process (no GPU: compile credit only), side by side. The model can only
say whole answers: each answer is one added token and generation is held to those tokens and the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.rl.rewards import trl_reward
from agent.rl.scoring import Attempt, LocalScorer, ServiceScorer
from tests.agent.rl.verdicts import ANSWERS, TASK, VerdictGpu
from tests.tools.serve.process import Service

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

SAID = list(ANSWERS)[:3]  # a fast passed GEMM, a slow one, a mismatch


def recording(fn, name: str, calls: list):
    def reward(prompts, completions, **columns):
        got = fn(prompts=prompts, completions=completions, **columns)
        calls.append(([c[-1]["content"] for c in completions], list(columns["task"]), got))
        return got

    reward.__name__ = name  # TRL logs each reward function under its name
    return reward


def test_grpo_trains_two_steps_on_our_rewards(tmp_path: Path, tiny_tokenizer) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = tiny_tokenizer.__class__.from_pretrained(_saved(tiny_tokenizer, tmp_path / "tok"))
    tok.add_tokens(SAID)
    allowed = set(tok.convert_tokens_to_ids(SAID)) | {tok.eos_token_id}
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    rows = [{"prompt": [{"role": "user", "content": "Write the GEMM kernel."}], "task": TASK.name, "arch": "sm_90a"}]
    dataset = datasets.Dataset.from_list(rows * 4)

    local = LocalScorer(VerdictGpu())
    service = Service(tmp_path, "--no-gpu")
    try:
        remote = ServiceScorer(service.url)
        local_calls, service_calls = [], []
        args = trl.GRPOConfig(
            output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=4,
            max_completion_length=2, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False,
            seed=0, generation_kwargs={"suppress_tokens": [i for i in range(len(tok)) if i not in allowed]},
        )  # fmt: skip
        trainer = trl.GRPOTrainer(
            model=model, processing_class=tok, args=args, train_dataset=dataset,
            reward_funcs=[recording(trl_reward(local), "ptxbench_local", local_calls),
                          recording(trl_reward(remote), "ptxbench_service", service_calls)],
        )  # fmt: skip
        trainer.train()
        # the same completions, scored again outside the trainer, give the rewards the trainer got
        for calls, scorer in ((local_calls, local), (service_calls, remote)):
            assert len(calls) == 2  # one reward call per step (4 prompts × 4 generations = one batch)
            for completions, tasks, got in calls:
                again = scorer.score([Attempt(t, "sm_90a", c) for t, c in zip(tasks, completions, strict=True)])
                assert got == pytest.approx([s.score for s in again])
        said = {c for completions, _, _ in local_calls for c in completions}
        assert said & set(SAID), said  # whole answers were generated, not only ends
        assert any(r > 0.5 for _, _, got in local_calls for r in got)  # a passed answer earned its credit
        assert {r for _, _, got in service_calls for r in got} <= {0.0, 0.1}  # no GPU there: compile credit at most
        logged = [h for h in trainer.state.log_history if "rewards/ptxbench_local/mean" in h]
        assert len(logged) == 2
        for entry, (_, _, got) in zip(logged, local_calls, strict=True):
            assert entry["rewards/ptxbench_local/mean"] == pytest.approx(sum(got) / len(got), abs=1e-6)
        remote.close()
    finally:
        service.stop()


def _saved(tok, path: Path) -> str:
    tok.save_pretrained(path)
    return str(path)
