"""Reward adapters, each the callable its trainer calls, all scoring through one Scorer (agent/rl/scoring.py)
and tools/reward.py's mapping:

- TRL (GRPOTrainer's `reward_funcs`): `trl_reward(scorer)` returns `f(prompts, completions, **columns)`; the
  dataset's `task` and `arch` columns arrive as lists; completions are strings, or lists of chat messages.
- verl (`custom_reward_function.path` = this file, `.name` = compute_score): `compute_score(data_source,
  solution_str, ground_truth, extra_info)`; the ground truth is the dataset's label (JSON: task and arch).
- OpenRLHF (`--remote_rm_url` = this file, `--label_key label`): `reward_func(queries, prompts, labels)`; its
  HTTP form is the service's POST /v1/openrlhf.

verl and OpenRLHF load these by path, so they score through `default_scorer()`: the one `use()` set, or the
service that PTXBENCH_SERVE_URL names (PTXBENCH_SERVE_TOKEN its token)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.rl.dataset import parse_label
from agent.rl.scoring import Attempt, Scorer, ServiceScorer

_scorer: Scorer | None = None


def use(scorer: Scorer | None) -> None:
    """The scorer verl's and OpenRLHF's entry points use (None: back to the environment's service)."""
    global _scorer
    _scorer = scorer


def default_scorer() -> Scorer:
    global _scorer
    if _scorer is None:
        _scorer = ServiceScorer.from_environment()
    return _scorer


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """A completion as TRL passes it: the text, or (conversational data) the last assistant message's."""
    if isinstance(completion, str):
        return completion
    said = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return said[-1] if said else ""


def trl_reward(scorer: Scorer, task_column: str = "task", arch_column: str = "arch") -> Callable[..., list[float]]:
    """A GRPO reward function over the dataset's task and arch columns."""

    def ptxbench_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        tasks, archs = columns[task_column], columns[arch_column]
        attempts = [Attempt(t, a, completion_text(c)) for t, a, c in zip(tasks, archs, completions, strict=True)]
        return [s.score for s in scorer.score(attempts)]

    return ptxbench_reward


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict, extra_info: dict | None = None):
    """verl's custom reward: the score and its components (verl logs every key of the dict it gets)."""
    task, arch = parse_label(ground_truth)
    (scored,) = default_scorer().score([Attempt(task, arch, solution_str)])
    if scored.reward is None:
        return {"score": 0.0, "error": scored.error or "not evaluated"}
    r = scored.reward
    return {"score": r.score, "compiled": float(r.compiled), "correct": float(r.correct),
            "targets": float(r.targets), "speed": r.speed, "status": str(r.status),
            "reward_version": r.reward_version}  # fmt: skip


def reward_func(queries: list[str], prompts: list[str], labels: list[str]) -> dict[str, Any]:
    """OpenRLHF's remote reward function: rewards (and scores, in [0, 1]) as tensors, components as logs."""
    import torch  # OpenRLHF expects tensors; it has torch, the rest of this module does not need it

    attempts = []
    for number, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not query.startswith(prompt):
            raise ValueError(f"queries[{number}] does not start with prompts[{number}]")
        attempts.append(Attempt(*parse_label(label), query[len(prompt) :]))
    scored = default_scorer().score(attempts)
    rewards = torch.tensor([s.score for s in scored], dtype=torch.float32)
    logs = {key: torch.tensor([float(getattr(s.reward, key)) if s.reward else 0.0 for s in scored])
            for key in ("compiled", "correct", "targets", "speed")}  # fmt: skip
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs}
