"""What a model hands in: a Solution (a PTX module or CUDA C++ with inline PTX) and its LaunchSpec (the launches to
make, their arguments and the scratch buffers they share), as the answer's JSON block spells them."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag, WithJsonSchema

from tasks.expr import MAX_MAGNITUDE
from tasks.schema import DType

# Counts a launch spec may hold: many times what any real kernel needs (the references: 3 launches, 36 args,
# 1 scratch buffer), small enough that planning and checking a spec at every cap takes well under a second.
MAX_LAUNCHES = 64
MAX_ARGS = 128
MAX_SCRATCH = 64
MAX_RANK = 8  # extents of a shape, box or stride list (a tensor map has rank 5 at most)


def _expr(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f'expected an integer or an expression string such as "cdiv(M,128)", got {_shown(value)}')
    return _in_range(value)


def _scalar(value: Any) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f'expected a number or an expression string such as "rsqrt(D)", got {_shown(value)}')
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number")
    return _in_range(value)


def _in_range(value: int | float | str) -> int | float | str:
    # Here, where every path in passes (answer text, a service's Solution object, Python): an integer of
    # thousands of digits could not even be printed in a message about it.
    if isinstance(value, int) and not -MAX_MAGNITUDE < value < MAX_MAGNITUDE:
        raise ValueError("an integer outside the 64-bit range")
    return value


def _shown(value: Any) -> str:
    """A wrong value in a message: booleans, None and short floats as written, anything else by its type."""
    return repr(value) if isinstance(value, bool | float) or value is None else f"a {type(value).__name__}"


SpecInt = Annotated[int, Field(gt=-MAX_MAGNITUDE, lt=MAX_MAGNITUDE)]
"""An integer a spec gives literally (cluster, box, strides, shared bytes): 64-bit, like every value it holds."""
# One validator each, so that a bad value gets one clear message instead of one per union branch.
Expr = Annotated[int | str, PlainValidator(_expr), WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}]})]
"""An integer expression over task dims and SMS (the GPU's multiprocessor count): `+ - * // %`, `cdiv`, `min`, `max`,
integer literals."""
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
    box: list[SpecInt] = Field(max_length=MAX_RANK, description="Box extents in elements, outermost first.")
    swizzle: Literal["none", "32B", "64B", "128B"] = "none"
    shape: list[Expr] | None = Field(
        None, max_length=MAX_RANK, description="A contiguous view of the tensor, outermost first, e.g. ['B*H*S', 'D']."
    )
    element_strides: list[SpecInt] | None = Field(None, max_length=MAX_RANK)
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
    cluster: list[SpecInt] = Field([1, 1, 1], min_length=3, max_length=3)
    shared_bytes: SpecInt = Field(0, ge=0, description="Dynamic shared memory per block.")
    args: list[LaunchArg] = Field(default_factory=list, max_length=MAX_ARGS, description="In .entry parameter order.")


class ScratchBuffer(BaseModel):
    """A device buffer the solution needs besides the task's tensors; re-initialised before every run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    dtype: DType
    shape: list[Expr] = Field(max_length=MAX_RANK)
    init: Literal["zero", "poison"] = "zero"


class LaunchSpec(BaseModel):
    """The launches to make, in order, and the scratch buffers they share."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    launches: list[Launch] = Field(min_length=1, max_length=MAX_LAUNCHES)
    scratch: list[ScratchBuffer] = Field(default_factory=list, max_length=MAX_SCRATCH)


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
