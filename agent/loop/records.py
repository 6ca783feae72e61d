"""The run folder's records, one pydantic model each: a Turn (one model call and its evaluation) and the Trajectory of
turns, the run's config.json (RunConfig, PolicyRecord) and summary.json (RunSummary, TurnRecord, Outcome), and why a
run stopped (StopReason). A tools-mode run (mode=tools) also writes a step per model reply (ReplyStep) and per
tool call (ToolStep) to trajectory.jsonl, and one Turn at its end: the submitted (or best evaluated) answer.
agent/loop/store.py reads and writes them; everything downstream reads only these."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from agent.loop.config import setting_default
from tasks.catalog import get_task
from tasks.schema import UnknownName
from tools.evaluation import Evaluation, Status
from tools.solution import Solution

TRAJECTORY_FORMAT = 2  # 2: tools-mode steps (ReplyStep, ToolStep) and Turn.tools; a format-1 file reads as it did


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ReplyCut(BaseModel):
    """A reply field (the answer or its reasoning) too large to keep whole in the trajectory, the checkpoints
    and the next prompt: they hold its head and a marker; the whole text is in a compressed side file."""

    field: Literal["response", "reasoning"]
    bytes: int = Field(description="The original's size in UTF-8 (lone surrogates as 3 bytes each).")
    sha256: str = Field(description="Of those bytes.")
    archive: str = Field(description="The side file, relative to the run folder: the original bytes, gzipped.")
    archived_bytes: int = Field(description="How many of the original bytes the side file holds (it has a cap).")


class ToolCall(BaseModel):
    """One function call in a model's reply, as the chat-completions API carries it."""

    id: str = Field(description="The call's id, which its result names (tool_call_id).")
    name: str
    arguments: str = Field(description="The arguments as the model wrote them: a JSON object, or not.")


class ReplyStep(BaseModel):
    """A tools-mode model reply: its text and the tool calls it made (each then a ToolStep)."""

    kind: Literal["reply"] = "reply"
    format_version: int = TRAJECTORY_FORMAT
    step: int = Field(description="1-based number of the model call in the run.")
    notice: str | None = Field(None, description="The user message the loop added just before this call, if any "
                               "(a reply without tool calls answered, a budget's request to submit).")  # fmt: skip
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    started_at: str


class ToolStep(BaseModel):
    """One tool call of a ReplyStep and what it returned to the model."""

    kind: Literal["tool"] = "tool"
    format_version: int = TRAJECTORY_FORMAT
    step: int = Field(description="The ReplyStep whose call this is.")
    call: int = Field(description="0-based position of the call in that reply.")
    id: str
    name: str
    arguments: str
    result: str = Field(description="The text the model was given back (cut with a marker when long).")
    refused: str | None = Field(None, description="Why the call was answered with one line and not run: "
                                "bad_arguments, unknown_tool, budget.")  # fmt: skip
    evaluation: Evaluation | None = Field(None, description="What compile/evaluate/profile/sanitize/submit found.")
    gpu_evaluation: bool = Field(False, description="It ran the GPU stages (counted against max_evaluations).")
    cached: bool = Field(False, description="Answered from an earlier identical call; nothing ran again.")
    seconds: float = 0.0


Step = ReplyStep | ToolStep


class ToolsOutcome(BaseModel):
    """What a tools-mode run ended with and what it spent, on its one Turn."""

    submitted: bool = Field(description="The model called submit; false: the run's answer is its best evaluated one.")
    step: int | None = Field(None, description="The ReplyStep whose call gave the answer (None: no answer at all).")
    replies: int = 0
    tool_calls: int = Field(0, description="Every call counted, refused ones too.")
    refused: int = Field(0, description="Calls answered with one line (bad arguments, unknown tool, budget).")
    evaluations: int = Field(0, description="GPU evaluations (evaluate, profile, sanitize, submit reaching the GPU).")
    budget: str | None = Field(None, description="The budget that asked the model to submit, if one did.")


class Turn(BaseModel):
    """One model call and the evaluation of its answer."""

    format_version: int = TRAJECTORY_FORMAT
    index: int = Field(description="1-based turn number.")
    messages: list[Message] = Field(description="What was sent to the model this turn.")
    response: str = Field("", description="The model's raw answer.")
    reasoning: str | None = Field(None, description="Reasoning text, where the server returns it.")
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    solution: Solution | None = None
    evaluation: Evaluation
    feedback: str | None = Field(None, description="What the model was told about this attempt (next turn's input).")
    cuts: list[ReplyCut] = Field(default_factory=list, description="Reply fields kept only in part (too large).")
    lone_surrogates: dict[str, list[tuple[int, int]]] = Field(
        default_factory=dict,
        description="Code points U+D800–U+DFFF the reply held alone (no UTF-8 file can): per field, the "
        "(index, code point) pairs; the field's text has U+FFFD at each index (agent/loop/reply.py restores them).",
    )
    model_seconds: float = 0.0
    eval_seconds: float = 0.0
    started_at: str = Field(description="ISO-8601 UTC time the turn began.")
    notes_shown: list[str] | None = Field(
        None, description="The repair notes (their ids) the feedback showed; None: the run had no feedback.notes."
    )
    tools: ToolsOutcome | None = Field(None, description="A tools-mode run's end: submitted or not, and its spend.")

    @model_serializer(mode="wrap")
    def _without_unset_notes(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A turn of a run without notes (or of a turns-mode run) is written as before the field existed."""
        data = handler(self)
        for key in ("notes_shown", "tools"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class StopReason(StrEnum):
    """Why a run ended. The first nine are stopping rules (the run finished); the others stopped it early,
    and it can be resumed. `unverified`: the attempts cannot be run here (no GPU of the arch), and the run had
    as many of them as it allows. `submitted`, `tool_budget`, `evaluation_budget`: tools mode's ends (a budget's
    end: the model was asked to submit and did not)."""

    SOLVED = "solved"
    MAX_TURNS = "max_turns"
    TOKEN_BUDGET = "token_budget"
    WALL_BUDGET = "wall_budget"
    POLICY_EXHAUSTED = "policy_exhausted"
    UNVERIFIED = "unverified"
    SUBMITTED = "submitted"
    TOOL_BUDGET = "tool_budget"
    EVALUATION_BUDGET = "evaluation_budget"
    MODEL_ERROR = "model_error"
    CONFIG_ERROR = "config_error"
    INTERRUPTED = "interrupted"
    ERROR = "error"

    @property
    def finished(self) -> bool:
        return self in FINISHED


FINISHED = frozenset(
    {
        StopReason.SOLVED,
        StopReason.MAX_TURNS,
        StopReason.TOKEN_BUDGET,
        StopReason.WALL_BUDGET,
        StopReason.POLICY_EXHAUSTED,
        StopReason.UNVERIFIED,
        StopReason.SUBMITTED,
        StopReason.TOOL_BUDGET,
        StopReason.EVALUATION_BUDGET,
    }
)


class Outcome(StrEnum):
    """A turn's (and a run's best turn's) outcome, worst first: failed < unverified (compiled and checked
    statically, never run) < correct (passed the check) < solved (correct, required targets executed,
    speedup ≥ the target)."""

    FAILED = "failed"
    UNVERIFIED = "unverified"
    CORRECT = "correct"
    SOLVED = "solved"

    @property
    def rank(self) -> int:
        return list(Outcome).index(self)


class TurnRecord(BaseModel):
    """One turn as summary.json lists it."""

    turn: int
    status: Status
    outcome: Outcome
    correct: bool
    targets_met: bool | None = None
    paper_tag: bool | None = None
    speedup: float | None = None
    kernel_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    eval_seconds: float = 0.0


class RunSummary(BaseModel):
    """summary.json: derived from the run's turns alone (it can be rebuilt from trajectory.jsonl), rewritten
    after each turn and when the run stops."""

    run_id: str | None = None
    task: str | None = None
    arch: str | None = None
    policy: str | None = Field(None, description="Who answered, in words (the policy's describe()).")
    mode: str = setting_default("mode")
    outcome: Outcome = Outcome.FAILED
    turns: int = 0
    best_turn: int | None = None
    best_speedup: float | None = None
    first_correct_turn: int | None = None
    first_solved_turn: int | None = None
    statuses: list[Status] = Field(default_factory=list)
    stop_reason: StopReason | None = Field(None, description="None: the run has not ended (or was killed).")
    stop_detail: str | None = None
    target_speedup: float = setting_default("target_speedup")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    eval_seconds: float = 0.0
    per_turn: list[TurnRecord] = Field(default_factory=list)
    tools: ToolsOutcome | None = Field(None, description="A tools-mode run: submitted or not, and what it spent.")

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None and self.stop_reason.finished


class PolicyRecord(BaseModel):
    """The `llm` settings a run recorded: which policy and, for an endpoint, which model."""

    model_config = ConfigDict(extra="allow")
    name: str = "openai"
    model: str | None = None
    base_url: str | None = None
    label: str | None = Field(None, description="The model a scripted or replayed policy's answers came from.")

    @property
    def model_name(self) -> str:
        """The model behind the answers: the endpoint's model name, the label a scripted or replayed policy was
        given, or else the offline policy's name."""
        if self.name == "openai":
            return self.model or "openai (model not recorded)"
        return self.label or self.name


class RunConfig(BaseModel):
    """config.json, as read back: the settings the run was started (or last resumed) with, and what the
    loop added (run id, policy, toolchain, seed attempt). Keys this model does not name are kept."""

    model_config = ConfigDict(extra="allow")
    format_version: int = TRAJECTORY_FORMAT
    run_id: str | None = None
    task: str
    task_version: int = Field(1, description="The task definition's version the run solved (wave 1: absent, 1).")
    catalog_version: int | None = Field(
        None, description="tasks.catalog.CATALOG_VERSION when the run started; None: a run from before runs recorded "
        "it (its task keeps its name and definition version, and scores as it did).",
    )  # fmt: skip
    arch: str
    llm: PolicyRecord = Field(default_factory=PolicyRecord)
    policy: str | None = None
    # A record without them (an older run folder) reads as the settings' defaults.
    mode: str = setting_default("mode")
    max_turns: int = setting_default("max_turns")
    history: str = setting_default("history")
    target_speedup: float = setting_default("target_speedup")
    eval: dict[str, Any] = Field(default_factory=dict, description="The eval.* settings (tools/options.py).")
    seed: dict[str, Any] | None = Field(None, description="seed.run / seed.turn, for a seeded run.")
    seed_attempt: dict[str, Any] | None = Field(None, description="The seed's run, turn, status and policy.")
    preset: str | None = Field(None, description="The bench preset (agent/bench/presets.py) the run was planned by.")
    variant: str | None = Field(None, description="The preset's prompt variant the run is a trajectory of.")

    @property
    def definition(self) -> str:
        """The definition the run's task is a workload (or, `_all`, every workload) of."""
        return task_labels(self.task)[0]

    @property
    def workload(self) -> str:
        """The run's workload in a word ('m70', 's4096', 'all')."""
        return task_labels(self.task)[1]


def task_labels(name: str) -> tuple[str, str]:
    """A recorded task name's definition and workload ('m70', 's4096', 'all' for a shape-general task); a task no
    longer in the catalog is its own definition, at workload '-'."""
    try:
        task = get_task(name)
    except UnknownName:
        return name, "-"
    return task.definition, task.workload


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated setting (or a list of them) as its lower-cased names."""
    items = value.split(",") if isinstance(value, str) else (value or [])
    return tuple(n.strip().lower() for item in items for n in str(item).split(",") if n.strip())


class RunFilter(BaseModel):
    """Which runs a report, the inspector or an SFT export reads: by their task's definition and workload (each a
    comma-separated list; empty: any)."""

    model_config = ConfigDict(frozen=True)
    definition: tuple[str, ...] = Field((), description="Definitions, e.g. gemm_n7168_k5120,mha_bwd_d96.")
    workload: tuple[str, ...] = Field((), description="Workloads, e.g. m70,s4096, or 'all' (the _all tasks).")

    @field_validator("definition", "workload", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> tuple[str, ...]:
        return _names(value)

    def __bool__(self) -> bool:
        return bool(self.definition or self.workload)

    def matches(self, config: RunConfig) -> bool:
        return self.matches_task(config.task)

    def matches_task(self, name: str) -> bool:
        definition, workload = task_labels(name)
        return (not self.definition or definition in self.definition) and (
            not self.workload or workload in self.workload
        )

    def describe(self) -> str:
        parts = [f"{key}={','.join(v)}" for key, v in (("definition", self.definition), ("workload", self.workload))]
        return " ".join(p for p in parts if not p.endswith("="))


class Trajectory(BaseModel):
    """The turns of one task × arch × policy run, as read back from its run folder."""

    run_id: str
    config: RunConfig
    turns: list[Turn]
    summary: RunSummary | None = None
    steps: list[Step] = Field(default_factory=list, description="A tools-mode run's replies and tool calls.")
