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
from agent.notes.retrieve import NoteIndex
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


class KeptModule(TypedDict):
    """A compiled module in the run folder (RunFolder.keep_module): bulk data stays out of the checkpoints."""

    path: str  # relative to the run folder
    sha256: str  # of the file, checked when the GPU step reads it


class LoopState(TypedDict, total=False):
    """Values are plain JSON (dicts, not pydantic objects) so checkpoints stay readable and portable. Each
    node reads what the previous one left here and nothing else: no node re-parses the answer. A checkpoint of
    the runs before KeptModule holds the module inside `static` instead; the GPU step still reads it there."""

    turn: int  # the turn in flight, 1-based (0 before the first)
    messages: list[dict[str, str]]  # sent to the model this turn
    reply: dict[str, Any]  # the policy's Reply, with tokens counted
    started_at: str
    model_seconds: float
    static: dict[str, Any] | None  # tools.pipeline.Static without its module: the solution, its plan, its stages
    module: KeptModule | None  # the built module, for the GPU step
    evaluation: dict[str, Any] | None  # the turn's Evaluation, once known (none while the GPU step is pending)
    eval_seconds: float
    gpu_pending: bool  # the static stages passed and the run's GPU can run the rest
    history: Annotated[list[Exchange], operator.add]
    results: Annotated[list[TurnResult], operator.add]
    stop_reason: str | None
    # Tools mode (mode=tools; agent/loop/tool_nodes.py). The conversation is the chat-completions one, tool
    # calls and results in it; calls run one per step, so a run killed between two resumes at the second.
    mode: str  # the run's mode, set by the first input: where START goes
    chat: Annotated[list[dict[str, Any]], operator.add]
    step: int  # the model reply in flight, 1-based
    calls: list[dict[str, Any]]  # its tool calls (ToolCall), and the next one to run
    next_call: int
    tool_calls: int  # counted, refused ones too
    refused: int
    evaluations: int  # GPU evaluations
    tokens: int
    spent_seconds: float  # model and evaluation time
    cache: dict[str, dict[str, Any]]  # a call's key (toolcalls.Parsed.key) → its result and evaluation
    best: dict[str, Any] | None  # the best evaluated answer: answer, evaluation, step
    submitted: dict[str, Any] | None  # the submitted one, likewise
    budget: str | None  # the budget that asked the model to submit
    notice: str | None  # a user message to add before the next reply


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
    gpu_unavailable: str | None = None  # why the GPU stages cannot run (None: they can), asked once per run
    notes: NoteIndex | None = None  # feedback.notes, read once per run
