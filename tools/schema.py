"""The project's nouns, one pydantic model each (see DESIGN.md): Task, Arch, Solution, LaunchSpec,
Evaluation, Turn and Trajectory. Everything that crosses a process or a file is one of these."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, WithJsonSchema, model_validator


class UnknownName(ValueError):
    """A task, arch or other name that is not in its catalog; the message lists the known ones."""


# --------------------------------------------------------------------------------------------- arch

ARCH_ALIASES = {
    "sm_90a": "sm_90a", "sm_90": "sm_90a", "sm90": "sm_90a", "sm90a": "sm_90a",
    "hopper": "sm_90a", "h100": "sm_90a", "h200": "sm_90a",
    "sm_100a": "sm_100a", "sm_100": "sm_100a", "sm100": "sm_100a", "sm100a": "sm_100a",
    "blackwell": "sm_100a", "b200": "sm_100a",
}  # fmt: skip


class Arch(StrEnum):
    """A target architecture: the `a` variants, whose arch-specific instructions we benchmark."""

    SM_90A = "sm_90a"
    SM_100A = "sm_100a"

    @classmethod
    def resolve(cls, name: str | Arch) -> Arch:
        key = str(name).strip().lower()
        if key not in ARCH_ALIASES:
            known = ", ".join(sorted(ARCH_ALIASES))
            raise UnknownName(f"unknown arch {str(name)!r}; known: {known}")
        return cls(ARCH_ALIASES[key])

    @property
    def compute_capability(self) -> tuple[int, int]:
        return (9, 0) if self is Arch.SM_90A else (10, 0)

    @property
    def max_shared_bytes(self) -> int:
        """Dynamic shared memory one block may opt into (227 KiB on both H100/H200 and B200)."""
        return 232448

    @property
    def max_cluster_blocks(self) -> int:
        """Blocks per cluster with the non-portable opt-in (8 is portable)."""
        return 16


# -------------------------------------------------------------------------------------------- tasks

DType = Literal["bfloat16", "float16", "float32", "int32", "uint32", "int64", "uint8", "float8_e4m3fn"]

DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "uint32": 4, "int64": 8, "uint8": 1,
    "float8_e4m3fn": 1,
}  # fmt: skip


class TensorSpec(BaseModel):
    """One tensor of a task, row-major and contiguous, shape written outermost first."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Name used in LaunchSpec args, e.g. 'A' or 'dO'.")
    dtype: DType
    shape: list[str] = Field(description="Dim names (or dim expressions), outermost first.")
    role: Literal["input", "output"]
    init: Literal["normal", "spiky", "derived", "none"] = Field(
        "none",
        description="How an input is drawn: N(0,1); the paper's spiky N(0,1)+N(0,100)·Bernoulli(0.001); "
        "'derived' = computed from the other inputs by the task's `derive` function. Outputs: 'none'.",
    )
    layout: str = Field("row-major, contiguous", description="Memory layout, in words.")


class TargetGroup(BaseModel):
    """A group of architecture-specific instructions a solution is expected to use."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short key, e.g. 'wgmma', 'tma', 'tcgen05', 'tmem'.")
    description: str
    ptx_patterns: list[str] = Field(description="Regexes matched against PTX instruction mnemonics.")
    sass_patterns: list[str] = Field(description="Regexes matched against SASS opcodes (with modifiers).")
    required: bool = Field(True, description="Whether `targets_met` needs this group executed.")
    paper_tag: bool = Field(False, description="Whether executing this group earns the paper's 'arch-specific' tag.")


class Baseline(BaseModel):
    """The frontier library call a task is timed against."""

    model_config = ConfigDict(frozen=True)

    library: str = Field(description="'cuBLAS' or 'cuDNN'.")
    call: str = Field(description="Function name in tasks.baselines that runs it.")
    description: str
    h200_ms_seen: float | None = Field(None, description="Median seen on our H200 (FACTS.md), for prompts.")


class Task(BaseModel):
    """A workload definition: data, not code paths. Functions are named, and live in tasks/."""

    model_config = ConfigDict(frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    family: Literal["gemm", "attention_fwd", "attention_bwd"]
    description: str
    dims: dict[str, int] = Field(description="Named dims with their values, e.g. {'M': 8192}.")
    tensors: list[TensorSpec]
    params: dict[str, float | bool] = Field(
        default_factory=dict, description="Constants of the workload, e.g. {'causal': True, 'scale': ...}."
    )
    reference: str = Field(description="fp32 PyTorch reference: function name in tasks.references.")
    derive: str | None = Field(None, description="Function in tasks.references computing 'derived' inputs.")
    metric: Literal["rel_l2"] = Field(
        "rel_l2", description="‖out − ref‖₂ / ‖ref‖₂ per output, against the fp32 reference."
    )
    tolerance: float = Field(1e-2, description="Largest metric value that passes.")
    flops: str = Field(description="FLOP count as an expression over dims.")
    baseline: Baseline
    targets: dict[Arch, list[TargetGroup]]
    check_dims: dict[str, int] = Field(
        default_factory=dict, description="Smaller dims for quick checks (memcheck, CPU tests)."
    )

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def inputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "input"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "output"]


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
        None, description="A contiguous view of the tensor, outermost first, e.g. ['B*S*H', 'D']."
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
    MEMCHECK = "memcheck"


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


class Evaluation(BaseModel):
    """The staged result of one attempt; evaluators stop at the first failing stage."""

    task: str
    arch: Arch
    status: Status
    message: str = Field("", description="One-paragraph summary, for people and models.")
    stages: list[StageResult] = Field(default_factory=list)
    solution_hash: str | None = None
    device: str | None = Field(None, description="GPU name the GPU stages ran on.")
    kernel_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = Field(None, description="baseline_ms / kernel_ms; only for correct attempts.")
    tflops: float | None = None
    targets_met: bool | None = Field(None, description="All required target groups executed (profile).")
    target_counts: dict[str, int] | None = Field(None, description="Executed warp-level count per group.")
    paper_tag: bool | None = Field(None, description="The paper's run-time arch-specific tag.")

    @model_validator(mode="after")
    def _metrics_match_status(self) -> Evaluation:
        if self.speedup is not None and self.status is not Status.PASSED:
            raise ValueError(f"a speedup is only reported for a passed attempt, not {self.status}")
        if self.status is Status.PASSED:
            check = self.stage(Stage.CHECK)
            if check is None or check.state is not StageState.PASSED:
                raise ValueError("status 'passed' needs a passed check stage")
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
    model_seconds: float = 0.0
    eval_seconds: float = 0.0
    started_at: str = Field(description="ISO-8601 UTC time the turn began.")


class Trajectory(BaseModel):
    """The turns of one task × arch × policy run, as read back from its run folder."""

    run_id: str
    config: dict[str, Any]
    turns: list[Turn]
    summary: dict[str, Any] | None = None
