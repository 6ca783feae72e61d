"""Policies by their short names (`llm=openai|reference|scripted|replay`)."""

from __future__ import annotations

from pathlib import Path

from agent.loop.config import OpenAIConfig, ReferenceConfig, ReplayConfig, ScriptedConfig, SolveConfig
from agent.loop.journal import Journal
from agent.loop.policies.base import ContextOverflow, ModelError, Policy, Reply
from tasks.schema import Arch, Task

__all__ = ["ContextOverflow", "ModelError", "Policy", "Reply", "make_policy"]


def make_policy(settings: SolveConfig, task: Task, arch: Arch, journal: Journal) -> Policy:
    """The configured policy, reporting to `journal`; ConfigError when it cannot work (no key, no reference,
    bad fixture)."""
    llm = settings.llm
    if isinstance(llm, OpenAIConfig):
        from agent.loop.policies.openai_policy import OpenAIPolicy  # the openai client only when it is used

        return OpenAIPolicy(llm, journal)
    from agent.loop.policies import offline

    if isinstance(llm, ReferenceConfig):
        return offline.ReferencePolicy(task, arch)
    if isinstance(llm, ScriptedConfig):
        return offline.ScriptedPolicy(Path(llm.path), llm.label)
    if isinstance(llm, ReplayConfig):
        return offline.ReplayPolicy(llm.run, settings.runs_dir, task, arch, llm.label)
    raise AssertionError(f"no policy for {llm!r}")
