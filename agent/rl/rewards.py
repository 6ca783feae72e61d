"""Reward adapters, each the callable its trainer's current release calls, all scoring through one Scorer
(agent/rl/scoring.py) and tools/reward.py's mapping. Read from the releases' source:

- TRL 1.16 (GRPOTrainer's `reward_funcs`): `trl_reward(scorer)` returns `f(prompts, completions, **columns)`
  (`trl_reward_async` the coroutine form TRL runs beside its other async rewards); the dataset's `task` and
  `arch` columns arrive as lists; completions are strings, or lists of chat messages.
- verl 0.9 (`reward.custom_reward_function.path` = this file, `.name` = compute_score): its reward manager calls
  `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **kwargs)`, the kwargs being
  `reward.custom_reward_function.reward_kwargs` (ours: `serve_url`, `invalid_reward`) and verl's own; the
  ground truth is the dataset's label (JSON: task and arch).
- OpenRLHF 0.11 (`--reward.remote_url` = this file, `--data.label_key label`): `reward_func(queries, prompts,
  labels)`, one sample a call; its HTTP form is the service's POST /v1/openrlhf.

An answer that names no known task or arch (a misspelled label) is logged, one line naming it, and earns
`invalid_reward` (0 unless the user chose otherwise) — never a silent 0. Every path returns the same
components (`components()`)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from agent.rl.dataset import parse_label
from agent.rl.scoring import Attempt, Scored, Scorer, default_scorer, use
from tools.query import response_after

__all__ = ["components", "compute_score", "reward_func", "trl_reward", "trl_reward_async", "use"]

log = logging.getLogger("ptxbench.rl")
INVALID_REWARD_ENV = "PTXBENCH_INVALID_REWARD"  # OpenRLHF's file form takes no settings but the environment
NUMERIC = ("compiled", "correct", "targets", "speed")


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """A completion as TRL passes it: the text, or (conversational data) the last assistant message's."""
    if isinstance(completion, str):
        return completion
    said = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return said[-1] if said else ""


def settled(scored: Scored, where: str, invalid_reward: float) -> float:
    """The score, or for an answer that could not be evaluated at all, `invalid_reward` and a log line."""
    if scored.reward is not None:
        return scored.reward.score
    log.warning("ptxbench reward: %s: %s; it earns invalid_reward=%g", where, scored.error, invalid_reward)
    return invalid_reward


def components(scored: Scored, invalid_reward: float, where: str = "answer") -> dict[str, Any]:
    """The score and its parts, with the same keys and types on every path (trainers stack them per key)."""
    r = scored.reward
    parts = {"score": settled(scored, where, invalid_reward)}
    parts |= {key: float(getattr(r, key)) if r else 0.0 for key in NUMERIC}
    parts |= {"status": str(r.status) if r else "not_evaluated", "reward_version": r.reward_version if r else 0,
              "error": scored.error or ""}  # fmt: skip
    return parts


def _score_labelled(scorer: Scorer, labelled: Sequence[tuple[tuple[str, str] | str, str]]) -> list[Scored]:
    """Scored per (task and arch, or why the label could not be read; answer), in order."""
    attempts = [Attempt(*names, answer) for names, answer in labelled if not isinstance(names, str)]
    scored = iter(scorer.score(attempts) if attempts else [])
    return [Scored(None, None, names) if isinstance(names, str) else next(scored) for names, _ in labelled]


def _names(value: str | dict) -> tuple[str, str] | str:
    try:
        return parse_label(value)
    except ValueError as e:
        return str(e)


def trl_reward(scorer: Scorer, task_column: str = "task", arch_column: str = "arch",
               invalid_reward: float = 0.0) -> Callable[..., list[float]]:  # fmt: skip
    """A GRPO reward function over the dataset's task and arch columns."""

    def ptxbench_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        return _trl_scores(scorer, completions, columns, task_column, arch_column, invalid_reward)

    return ptxbench_reward


def trl_reward_async(scorer: Scorer, task_column: str = "task", arch_column: str = "arch",
                     invalid_reward: float = 0.0) -> Callable[..., Any]:  # fmt: skip
    """The same reward as a coroutine function: TRL awaits it beside its other async rewards, off its loop."""

    async def ptxbench_reward(prompts: list, completions: list, **columns: Any) -> list[float]:
        return await asyncio.to_thread(_trl_scores, scorer, completions, columns, task_column, arch_column,
                                       invalid_reward)  # fmt: skip

    return ptxbench_reward


def _trl_scores(scorer: Scorer, completions: list, columns: dict[str, Any], task_column: str, arch_column: str,
                invalid_reward: float) -> list[float]:  # fmt: skip
    missing = [c for c in (task_column, arch_column) if c not in columns]
    if missing:
        raise ValueError(f"the dataset has no {' or '.join(map(repr, missing))} column, which the ptxbench reward "
                         "reads (agent.rl_prompts format=trl writes task and arch)")  # fmt: skip
    tasks, archs = columns[task_column], columns[arch_column]
    labelled = [((str(t), str(a)), completion_text(c)) for t, a, c in zip(tasks, archs, completions, strict=True)]
    scored = _score_labelled(scorer, labelled)
    return [settled(s, f"completions[{n}]", invalid_reward) for n, s in enumerate(scored)]


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict, extra_info: dict | None = None,
                  *, serve_url: str | None = None, invalid_reward: float = 0.0,
                  **verl_kwargs: Any) -> dict[str, Any]:  # fmt: skip
    """verl's custom reward: the score and its components (verl logs every key of the dict it gets). verl's own
    keyword arguments (the reward router's address, …) are accepted and not needed."""
    (scored,) = _score_labelled(default_scorer(serve_url), [(_names(ground_truth), solution_str)])
    index = (extra_info or {}).get("index") if isinstance(extra_info, dict) else None
    return components(scored, invalid_reward, f"sample {index}" if index is not None else "sample")


def reward_func(queries: list[str], prompts: list[str], labels: list[str]) -> dict[str, Any]:
    """OpenRLHF's remote reward function: rewards (and scores, in [0, 1]) as tensors, components as logs. The
    problem comes from the label, so a prompt OpenRLHF trimmed still scores."""
    import torch  # OpenRLHF expects tensors; it has torch, the rest of this module does not need it

    invalid_reward = float(os.environ.get(INVALID_REWARD_ENV, "0") or 0)
    labelled = []
    for number, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        response = response_after(query, prompt)
        names = _names(label)
        if response is None and not isinstance(names, str):
            names = f"no part of the end of prompts[{number}] is in it, so its response was not found"
        labelled.append((names, response or ""))
    scored = _score_labelled(default_scorer(), labelled)
    parts = [components(s, invalid_reward, f"queries[{n}]") for n, s in enumerate(scored)]
    rewards = torch.tensor([p["score"] for p in parts], dtype=torch.float32)
    logs = {key: torch.tensor([p[key] for p in parts], dtype=torch.float32) for key in NUMERIC}
    return {"rewards": rewards, "scores": rewards, "extra_logs": logs}
