"""The workload's nouns, the bottom floor every other package builds on: Arch (a target architecture)
and Task (a workload definition: dims, tensors, reference, metric, FLOPs, baseline, target instruction
groups), with the pieces a Task is made of. Data only; nothing here knows how a kernel is compiled or run."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.expr import evaluate


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

    @property
    def gpu(self) -> str:
        """The GPUs of this arch that the project targets."""
        return "H100/H200" if self is Arch.SM_90A else "B200"

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors of those GPUs: 132 (H100 SXM, H200), 148 (B200)."""
        return 132 if self is Arch.SM_90A else 148


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
    h200_ms_seen: float | None = Field(None, description="Median seen on our H200, for sm_90a prompts.")
    b200_reported: str | None = Field(
        None, description="What published work reports about the baseline on a B200 (not measured here), for sm_100a "
        "prompts: a figure and its source.",
    )  # fmt: skip


class Task(BaseModel):
    """A workload definition: data, not code paths. Functions are named, and live in tasks/."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(
        description="The canonical name: `<definition>_<axis><value>` (e.g. 'mha_bwd_d96_s16384'), or the definition's "
        "own name where the catalog holds it at one workload (the paper's core five, GQA, fp8)."
    )
    definition: str = Field(
        "", description="The paper's definition this task is one workload of, e.g. 'gemm_n2048_k4096' (default: name)."
    )
    axis: str | None = Field(None, description="The definition's variable dim (M for a GEMM, S for attention).")
    aliases: list[str] = Field(default_factory=list, description="Short names, e.g. 'attn_fwd'.")
    former_names: list[str] = Field(
        default_factory=list, description="Names earlier versions of this project used; they resolve with a note."
    )
    version: int = Field(
        1,
        description="The definition's version: a change to shapes, layouts, inputs or outputs bumps it, and "
        "every run records it, so runs of different definitions are never pooled.",
    )
    family: Literal["gemm", "attention_fwd", "attention_bwd", "fp8_gemm", "fp8_attention_fwd"]
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
    baseline: Baseline | None = Field(
        None,
        description="The library call it is timed against; None (a FlashInfer-Bench definition naming none): "
        "the candidate is timed alone and no speedup is reported.",
    )
    targets: dict[Arch, list[TargetGroup]]
    workloads: list[Task] = Field(
        default_factory=list,
        description="A shape-general task's (`<definition>_all`) member tasks, one per workload of its definition in "
        "the catalog's order: one answer must pass each. Empty for a task at one workload. The general task's own "
        "dims are its largest workload's.",
    )
    source: str | None = Field(None, description="The FlashInfer-Bench definition file a task was loaded from.")
    workload_uuid: str | None = Field(None, description="That file's workload this task is (FlashInfer-Bench uuid).")

    @model_validator(mode="before")
    @classmethod
    def _definition_defaults_to_name(cls, data):
        """Tasks recorded before the catalog had definitions (checkpoints) name only themselves."""
        if isinstance(data, dict) and not data.get("definition"):
            data = {**data, "definition": data.get("name", "")}
        return data

    @property
    def workload_name(self) -> str:
        """`<definition>_<axis><value>`: the spelling every task answers to, plain-named ones included."""
        if self.axis is None or self.workloads:
            return self.name
        return f"{self.definition}_{self.axis.lower()}{self.dims[self.axis]}"

    @property
    def workload(self) -> str:
        """The workload in a word, for reports and filters: 'all' for a shape-general task, else its axis and value
        ('m70', 's4096')."""
        if self.workloads:
            return "all"
        return f"{self.axis.lower()}{self.dims[self.axis]}" if self.axis else "-"

    @property
    def general(self) -> bool:
        """A shape-general task: judged at every workload of its definition."""
        return bool(self.workloads)

    @property
    def largest(self) -> Task:
        """The member whose dims a shape-general task reads as (tasks/catalog.py copies it); a plain task itself."""
        return next((m for m in self.workloads if m.dims == self.dims), self)

    @property
    def members(self) -> list[Task]:
        """The tasks an answer is judged at: a general task's workloads, or the task itself."""
        return self.workloads or [self]

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def tensor_lines(self) -> list[str]:
        """One line per tensor as the reference reads and writes it, shapes evaluated: what a model needs to see
        when its kernel read or wrote another layout than the task's."""
        return [
            f"{t.name} ({t.role}, {t.dtype}): [{', '.join(t.shape)}] = "
            f"[{', '.join(str(evaluate(d, self.dims)) for d in t.shape)}], {t.layout}"
            for t in self.tensors
        ]

    @property
    def inputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "input"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "output"]
