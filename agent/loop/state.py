"""The loop's typed state (what changes turn by turn, checkpointed) and its run context (what is fixed for
the run and never checkpointed: settings, policy, GPU, run folder)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from agent.loop.config import SolveConfig
from agent.loop.conversation import Exchange
from agent.loop.journal import Journal
from agent.loop.policies.base import Policy
from agent.loop.store import RunFolder
from tasks.schema import Arch, Task
from tools.gpu.base import Gpu
from tools.options import EvalOptions


class TurnResult(TypedDict):
    """What the stopping rules need to know about a finished turn."""

    turn: int
    status: str
    solved: bool
    tokens: int
    seconds: float


class LoopState(TypedDict, total=False):
    """Values are plain JSON (dicts, not pydantic objects) so checkpoints stay readable and portable. Each
    node reads what the previous one left here and nothing else: no node re-parses the answer."""

    turn: int  # the turn in flight, 1-based (0 before the first)
    messages: list[dict[str, str]]  # sent to the model this turn
    reply: dict[str, Any]  # the policy's Reply, with tokens counted
    started_at: str
    model_seconds: float
    static: dict[str, Any] | None  # tools.pipeline.Static: the solution, its plan and, once built, its module
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
    options: EvalOptions
    policy: Policy
    gpu: Gpu
    folder: RunFolder
    journal: Journal
    system_prompt: str
    task_prompt: str
