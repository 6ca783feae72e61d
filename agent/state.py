"""The loop's typed state (what changes turn by turn, checkpointed) and its run context (what is fixed for
the run and never checkpointed: settings, policy, harness, run folder)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from agent.config import SolveConfig
from agent.conversation import Exchange
from agent.harness import Harness
from agent.journal import Journal
from agent.policies.base import Policy
from agent.store import RunFolder
from tools.schema import Arch, Task


class TurnResult(TypedDict):
    """What the stopping rules need to know about a finished turn."""

    turn: int
    status: str
    solved: bool
    tokens: int
    seconds: float


class LoopState(TypedDict, total=False):
    """Values are plain JSON (dicts, not pydantic objects) so checkpoints stay readable and portable."""

    turn: int  # the turn in flight, 1-based (0 before the first)
    messages: list[dict[str, str]]  # sent to the model this turn
    reply: dict[str, Any]  # the policy's Reply, with tokens counted
    started_at: str
    model_seconds: float
    solution: dict[str, Any] | None  # the extracted Solution
    evaluation: dict[str, Any] | None  # the Evaluation so far
    eval_seconds: float
    gpu_pending: bool  # the static stages passed and a GPU can run the rest
    history: Annotated[list[Exchange], operator.add]
    results: Annotated[list[TurnResult], operator.add]
    stop_reason: str | None


@dataclass
class RunContext:
    task: Task
    arch: Arch
    settings: SolveConfig
    policy: Policy
    harness: Harness
    folder: RunFolder
    journal: Journal
    system_prompt: str
    task_prompt: str
