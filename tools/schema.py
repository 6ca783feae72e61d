"""The harness's nouns and the run records, one pydantic model each (see DESIGN.md): Solution, LaunchSpec,
Evaluation, Turn and Trajectory. The workload's nouns (Task, Arch) are tasks/schema.py's."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, WithJsonSchema, model_validator

from tasks.schema import Arch, DType

# ------------------------------------------------------------------------------------- launch spec


def _expr(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f'expected an integer or an expression string such as "cdiv(M,128)", got {value!r}')
    return value


def _scalar(value: Any) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f'expected a number or an expression string such as "rsqrt(D)", got {value!r}')
    return value


# One validator each, so that a bad value gets one clear message instead of one per union branch.
Expr = Annotated[int | str, PlainValidator(_expr), WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}]})]
"""An integer expression over task dims: `+ - * // %`, `cdiv`, `min`, `max`, integer literals."""
ScalarValue = Annotated[
    int | float | str,
    PlainValidator(_scalar),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string"}]}),
]
"""A scalar's value: an integer expression, or for f32 also a decimal number or a float expression."""


class TensorArg(BaseModel):
    """A 64-bit pointer to a task tensor or a scratch buffer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tensor: str


class ScalarArg(BaseModel):
    """A scalar computed from an expression over dims (f32 also takes `/`, `sqrt`, `rsqrt`, decimals)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    scalar: ScalarValue
    type: Literal["u32", "s32", "u64", "s64", "f32"]


class TensorMapArg(BaseModel):
    """A TMA descriptor (CUtensorMap, 128 bytes, passed by value) over a task tensor or scratch buffer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tensor_map: str
    box: list[int] = Field(description="Box extents in elements, outermost first.")
    swizzle: Literal["none", "32B", "64B", "128B"] = "none"
    shape: list[Expr] | None = Field(
        None, description="A contiguous view of the tensor, outermost first, e.g. ['B*H*S', 'D']."
    )
    element_strides: list[int] | None = None
    interleave: Literal["none", "16B", "32B"] = "none"
    l2_promotion: Literal["none", "64B", "128B", "256B"] = "none"
    oob_fill: Literal["zero", "nan"] = "zero"


def _arg_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, dict):
        return None
    kinds = [k for k in ("tensor", "scalar", "tensor_map") if k in value]
    return kinds[0] if len(kinds) == 1 else None


LaunchArg = Annotated[
    Annotated[TensorArg, Tag("tensor")]
    | Annotated[ScalarArg, Tag("scalar")]
    | Annotated[TensorMapArg, Tag("tensor_map")],
    Discriminator(
        _arg_kind,
        custom_error_type="arg_kind",
        custom_error_message="an argument is an object with exactly one of the keys 'tensor', 'scalar' or 'tensor_map'",
    ),
]
ARG_KINDS = ("tensor", "scalar", "tensor_map")


class Launch(BaseModel):
    """One kernel launch."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kernel: str = Field(description="The .entry name.")
    grid: list[Expr] = Field(min_length=3, max_length=3, description="Blocks, x y z (not clusters).")
    block: list[Expr] = Field(min_length=3, max_length=3)
    cluster: list[int] = Field([1, 1, 1], min_length=3, max_length=3)
    shared_bytes: int = Field(0, ge=0, description="Dynamic shared memory per block.")
    args: list[LaunchArg] = Field(default_factory=list, description="In .entry parameter order.")


class ScratchBuffer(BaseModel):
    """A device buffer the solution needs besides the task's tensors; re-initialised before every run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    dtype: DType
    shape: list[Expr]
    init: Literal["zero", "poison"] = "zero"


class LaunchSpec(BaseModel):
    """The launches to make, in order, and the scratch buffers they share."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    launches: list[Launch] = Field(min_length=1)
    scratch: list[ScratchBuffer] = Field(default_factory=list)


class Solution(BaseModel):
    """What a model hands in: a PTX module or CUDA C++ with inline PTX, plus how to launch it."""

    model_config = ConfigDict(frozen=True)
    language: Literal["ptx", "cuda"]
    source: str
    launch: LaunchSpec

    @property
    def content_hash(self) -> str:
        blob = json.dumps([self.language, self.source, self.launch.model_dump(mode="json")], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------- evaluation


class Stage(StrEnum):
    EXTRACT = "extract"
    COMPILE = "compile"
    SASS = "sass"
    ABI = "abi"
    RUN = "run"
    CHECK = "check"
    TIME = "time"
    PROFILE = "profile"
    PERF = "perf"
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"


class StageState(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Status(StrEnum):
    """One outcome per attempt. `unverified`: everything that runs without a GPU passed and the GPU
    stages were skipped (no GPU, or one of another arch): such an attempt is never `passed`."""

    EXTRACT_ERROR = "extract_error"
    COMPILE_ERROR = "compile_error"
    ABI_ERROR = "abi_error"
    LAUNCH_ERROR = "launch_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MISMATCH = "mismatch"
    UNVERIFIED = "unverified"
    PASSED = "passed"


class StageResult(BaseModel):
    """One stage of an evaluation."""

    name: Stage
    state: StageState
    message: str = Field("", description="Model-readable: what went wrong and where, or why skipped.")
    detail: dict[str, Any] = Field(default_factory=dict, description="Structured data of the stage.")
    seconds: float = 0.0


class KernelPerf(BaseModel):
    """One profiled launch: where its time goes, as Nsight Compute measured it (tools/gpu/perf.py reads them).
    A figure ncu did not report is None, never a guess."""

    kernel: str
    duration_ms: float | None = None
    sm_throughput_pct: float | None = Field(None, description="SM throughput, % of peak sustained.")
    tensor_pipe_pct: float | None = Field(None, description="Tensor pipe active, % of peak sustained active cycles.")
    l2_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    l2_hit_pct: float | None = None
    smem_bank_conflicts: float | None = Field(None, description="Shared-memory data bank conflicts, in all.")
    warps_per_scheduler: float | None = Field(None, description="Achieved occupancy: active warps per scheduler.")
    registers: int | None = None
    shared_bytes: int | None = Field(None, description="Static plus dynamic shared memory per block.")
    grid: list[int] = Field(default_factory=list)
    block: list[int] = Field(default_factory=list)
    cluster: list[int] | None = Field(None, description="None: launched without a cluster.")
    waves_per_sm: float | None = None
    stalls: dict[str, float] = Field(
        default_factory=dict, description="Warps stalled per issued instruction, by reason."
    )

    def top_stalls(self, n: int = 3) -> list[tuple[str, float]]:
        """The largest stall reasons ('selected', a warp that did issue, is not a stall)."""
        ranked = sorted(((k, v) for k, v in self.stalls.items() if k != "selected"), key=lambda kv: -kv[1])
        return ranked[:n]


def longest(launches: list[KernelPerf]) -> KernelPerf:
    """The launch that takes the most time: the one a table and the limiter rules look at."""
    return max(launches, key=lambda k: k.duration_ms or 0.0)


class PerfReport(BaseModel):
    """The perf pass: the candidate's launches beside the baseline library's (profiled once per task and GPU
    worker), and the likely limiter named by the first of tools/gpu/limiters.py's rules that holds."""

    launches: list[KernelPerf] = Field(min_length=1)
    library: str = Field(description="The baseline library (cuBLAS, cuDNN).")
    baseline: list[KernelPerf] | None = Field(None, description="The library's launches; None: not profiled.")
    baseline_note: str | None = Field(None, description="Why the library's launches are missing.")
    limiter: str | None = Field(None, description="The rule that holds (tools/gpu/limiters.py), or None.")
    limiter_says: str | None = Field(None, description="That rule's line for the model.")
    seconds: float = Field(0.0, description="The pass's wall time, the library's profile included when it ran.")


class Evaluation(BaseModel):
    """The staged result of one attempt; evaluators stop at the first failing stage."""

    task: str
    arch: Arch
    status: Status
    message: str = Field("", description="One-paragraph summary, for people and models.")
    stages: list[StageResult] = Field(default_factory=list)
    solution_hash: str | None = None
    device: str | None = Field(None, description="GPU name the GPU stages ran on.")
    worker: str | None = Field(
        None, description="The evaluation pool's Dask worker that ran the GPU stages (host-gpuN); None: a GPU here."
    )
    kernel_ms: float | None = Field(None, description="Median of the candidate's timed runs (cold L2).")
    baseline_ms: float | None = Field(
        None, description="Median of the baseline's runs, interleaved with the candidate's in the same window."
    )
    speedup: float | None = Field(
        None,
        description="Paired: the median over alternating blocks of (baseline median / candidate median) in the "
        "block (tools/gpu/timing.py); only for correct attempts. The paper's separate-medians figure is in the "
        "time stage's detail (`paper`).",
    )
    speedup_interval: list[float] | None = Field(
        None,
        description="The order-statistic interval of the per-block ratios' median: the k-th lowest and k-th "
        "highest ratio, k the largest holding the true median ratio with probability ≥ 95% "
        "(tools/gpu/timing.py median_interval); with 6 blocks or fewer the lowest and highest.",
    )
    timing_flags: list[str] = Field(
        default_factory=list,
        description="What makes the timing doubtful: 'noisy — …' (blocks that disagree, or a thermal or hardware "
        "slowdown, with the throttling seen), 'above the ceiling — …' (re-measured and re-checked, it stands).",
    )
    tflops: float | None = Field(None, description="The task's FLOPs / kernel_ms.")
    targets_met: bool | None = Field(None, description="All required target groups executed (profile).")
    target_counts: dict[str, int] | None = Field(None, description="Executed warp-level count per group.")
    paper_tag: bool | None = Field(None, description="The paper's run-time arch-specific tag.")
    perf: PerfReport | None = Field(None, description="Where the time goes (the perf pass, eval.profile).")

    @model_validator(mode="after")
    def _metrics_match_stages(self) -> Evaluation:
        """Each figure comes from the stage that measures it, so none can be reported without its evidence."""
        if (self.speedup, self.speedup_interval) != (None, None) and self.status is not Status.PASSED:
            raise ValueError(f"a speedup is only reported for a passed attempt, not {self.status}")
        needs = [
            (self.status is Status.PASSED, Stage.CHECK, "status 'passed'"),
            (self.kernel_ms is not None, Stage.TIME, "kernel_ms"),
            (bool(self.timing_flags), Stage.TIME, "timing_flags"),
            (self.targets_met is not None, Stage.PROFILE, "targets_met"),
            (self.perf is not None, Stage.PERF, "perf"),
        ]
        for present, stage, what in needs:
            result = self.stage(stage)
            if present and (result is None or result.state is not StageState.PASSED):
                raise ValueError(f"{what} needs a passed {stage} stage")
        return self

    def stage(self, name: Stage) -> StageResult | None:
        return next((s for s in self.stages if s.name is name), None)

    @property
    def correct(self) -> bool:
        return self.status is Status.PASSED


# ------------------------------------------------------------------------------------ trajectories

TRAJECTORY_FORMAT = 1


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


class StopReason(StrEnum):
    """Why a run ended. The first six are stopping rules (the run finished); the others stopped it early,
    and it can be resumed. `unverified`: the attempts cannot be run here (no GPU of the arch), and the run had
    as many of them as it allows."""

    SOLVED = "solved"
    MAX_TURNS = "max_turns"
    TOKEN_BUDGET = "token_budget"
    WALL_BUDGET = "wall_budget"
    POLICY_EXHAUSTED = "policy_exhausted"
    UNVERIFIED = "unverified"
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
    outcome: Outcome = Outcome.FAILED
    turns: int = 0
    best_turn: int | None = None
    best_speedup: float | None = None
    first_correct_turn: int | None = None
    first_solved_turn: int | None = None
    statuses: list[Status] = Field(default_factory=list)
    stop_reason: StopReason | None = Field(None, description="None: the run has not ended (or was killed).")
    stop_detail: str | None = None
    target_speedup: float = 1.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_seconds: float = 0.0
    eval_seconds: float = 0.0
    per_turn: list[TurnRecord] = Field(default_factory=list)

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
    arch: str
    llm: PolicyRecord = Field(default_factory=PolicyRecord)
    policy: str | None = None
    max_turns: int = 8
    history: str = "full"
    target_speedup: float = 1.0
    eval: dict[str, Any] = Field(default_factory=dict, description="The eval.* settings (tools/options.py).")
    seed: dict[str, Any] | None = Field(None, description="seed.run / seed.turn, for a seeded run.")
    seed_attempt: dict[str, Any] | None = Field(None, description="The seed's run, turn, status and policy.")


class Trajectory(BaseModel):
    """The turns of one task × arch × policy run, as read back from its run folder."""

    run_id: str
    config: RunConfig
    turns: list[Turn]
    summary: RunSummary | None = None
