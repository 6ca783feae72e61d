"""Policies by their short names (`llm=openai|reference|scripted|replay`): agent/loop/config.py's POLICIES lists
them, each settings model naming the policy it makes."""

from __future__ import annotations

from agent.loop.config import SolveConfig
from agent.loop.journal import Journal
from agent.loop.policies.base import ContextOverflow, ModelError, Policy, Reply
from tasks.schema import Arch, Task

__all__ = ["ContextOverflow", "ModelError", "Policy", "Reply", "make_policy"]


def make_policy(settings: SolveConfig, task: Task, arch: Arch, journal: Journal) -> Policy:
    """The configured policy, reporting to `journal`; ConfigError when it cannot work (no key, no reference,
    bad fixture)."""
    return settings.llm.policy(task, arch, settings.runs_dir, journal)
