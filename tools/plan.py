"""LaunchSpec + task + arch → LaunchPlan: every expression evaluated, every limit checked.

The plan holds only concrete numbers, so the GPU worker needs neither the parser nor the rules. All
problems are collected (not just the first) as `path: message` lines a model can act on. Expressions see the
task's dims and SMS, the GPU's multiprocessor count: the arch's nominal count in the static stages, the device's
own when a GPU with another count re-plans (tools/gpu/service.py), so a persistent grid need not hard-code it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from tasks.expr import ExprError, evaluate
from tasks.schema import DTYPE_BYTES, Arch, Task
from tools.solution import LaunchSpec, ScalarArg, TensorArg, TensorMapArg

MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_SCRATCH_BYTES = 16 << 30  # all scratch buffers of one answer together
SCALAR_RANGES = {
    "u32": (0, 2**32 - 1),
    "s32": (-(2**31), 2**31 - 1),
    "u64": (0, 2**64 - 1),
    "s64": (-(2**63), 2**63 - 1),
}
SWIZZLE_BYTES = {"none": None, "32B": 32, "64B": 64, "128B": 128}
SMS = "SMS"  # the name expressions use for the GPU's multiprocessor count


def launch_dims(task: Task, sm_count: int, dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """What a launch spec's expressions may name: the task's dims (or `dims`) and SMS."""
    return {**(dims or task.dims), SMS: sm_count}


class SpecError(ValueError):
    """A LaunchSpec that cannot run on this task and arch; `problems` are `path: message` lines."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("the launch spec cannot run:\n" + "\n".join(f"- {p}" for p in problems))


class BufferPlan(BaseModel):
    name: str
    dtype: str
    shape: list[int]
    role: Literal["input", "output", "scratch"]
    init: str


class TensorMapPlan(BaseModel):
    """cuTensorMapEncodeTiled's arguments, innermost dimension first as the driver wants them."""

    tensor: str
    dtype: str
    global_dims: list[int]
    global_strides: list[int]  # bytes, rank - 1 of them
    box: list[int]
    element_strides: list[int]
    interleave: str
    swizzle: str
    l2_promotion: str
    oob_fill: str


class ArgPlan(BaseModel):
    kind: Literal["tensor", "scalar", "tensor_map"]
    tensor: str | None = None
    type: str | None = None  # scalar type
    value: int | float | None = None
    tensor_map: TensorMapPlan | None = None


class LaunchPlanItem(BaseModel):
    kernel: str
    grid: list[int]
    block: list[int]
    cluster: list[int]
    shared_bytes: int
    args: list[ArgPlan]


class LaunchPlan(BaseModel):
    """Concrete launches, and every buffer they touch (task tensors, then scratch)."""

    launches: list[LaunchPlanItem]
    buffers: list[BufferPlan]

    def buffer(self, name: str) -> BufferPlan:
        return next(b for b in self.buffers if b.name == name)


def plan_launches(
    spec: LaunchSpec, task: Task, arch: Arch, dims: Mapping[str, int] | None = None, sm_count: int | None = None
) -> LaunchPlan:
    """Resolve `spec` at `dims` (the task's by default) on a GPU of `sm_count` multiprocessors (the arch's nominal
    count by default); SpecError lists every problem found."""
    return _Planner(task, arch, launch_dims(task, sm_count or arch.sm_count, dims)).plan(spec)


class _Planner:
    def __init__(self, task: Task, arch: Arch, dims: dict[str, int]):
        self.task, self.arch, self.dims = task, arch, dims
        self.problems: list[str] = []

    def _expr(self, path: str, expr: int | str, *, floating: bool = False) -> int | float | None:
        try:
            return evaluate(expr, self.dims, floating=floating)
        except ExprError as e:
            self.problems.append(f"{path}: {e}")
            return None

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        buffers = [
            BufferPlan(name=t.name, dtype=t.dtype, shape=[int(evaluate(d, self.dims)) for d in t.shape],
                       role=t.role, init=t.init)
            for t in self.task.tensors
        ]  # fmt: skip
        names = {b.name for b in buffers}  # a set: a name is checked against all earlier ones in one step
        scratch_bytes = 0
        for i, s in enumerate(spec.scratch):
            path = f"scratch[{i}] ({s.name!r})"
            if s.name in names:
                self.problems.append(f"{path}: the name is already used by a task tensor or another buffer")
                continue
            shape = [self._expr(f"{path}.shape[{j}]", e) for j, e in enumerate(s.shape)]
            if any(n is None for n in shape):
                continue
            if not shape or any(n <= 0 for n in shape):
                self.problems.append(f"{path}.shape: every extent must be positive, got {shape}")
                continue
            nbytes = math.prod(shape) * DTYPE_BYTES[s.dtype]
            scratch_bytes += nbytes
            if scratch_bytes > MAX_SCRATCH_BYTES:
                self.problems.append(
                    f"{path}: {nbytes / 2**30:.1f} GiB brings the scratch to {scratch_bytes / 2**30:.1f} GiB, over "
                    f"the {MAX_SCRATCH_BYTES >> 30} GiB cap on all scratch buffers together"
                )
                continue
            buffers.append(BufferPlan(name=s.name, dtype=s.dtype, shape=shape, role="scratch", init=s.init))
            names.add(s.name)
        by_name = {b.name: b for b in buffers}
        launches = [self._launch(f"launches[{i}]", launch, by_name) for i, launch in enumerate(spec.launches)]
        if self.problems:
            raise SpecError(self.problems)
        return LaunchPlan(launches=launches, buffers=buffers)

    def _launch(self, path: str, launch, buffers: dict[str, BufferPlan]) -> LaunchPlanItem | None:
        grid = [self._expr(f"{path}.grid[{j}]", e) for j, e in enumerate(launch.grid)]
        block = [self._expr(f"{path}.block[{j}]", e) for j, e in enumerate(launch.block)]
        for axis, (g, limit) in enumerate(zip(grid, MAX_GRID, strict=True)):
            if g is not None and not 0 < g <= limit:
                self.problems.append(f"{path}.grid[{axis}]: evaluates to {g}; it must be in 1..{limit}")
        for axis, (b, limit) in enumerate(zip(block, MAX_BLOCK, strict=True)):
            if b is not None and not 0 < b <= limit:
                self.problems.append(f"{path}.block[{axis}]: evaluates to {b}; it must be in 1..{limit}")
        in_limits = all(isinstance(b, int) and 0 < b <= limit for b, limit in zip(block, MAX_BLOCK, strict=True))
        if in_limits and math.prod(block) > MAX_THREADS:
            self.problems.append(f"{path}.block: {block} is {math.prod(block)} threads; a block holds at most 1024")
        cluster = list(launch.cluster)
        if any(c <= 0 for c in cluster):
            self.problems.append(f"{path}.cluster: {cluster}: every extent must be positive")
        else:
            if math.prod(cluster) > self.arch.max_cluster_blocks:
                self.problems.append(
                    f"{path}.cluster: {cluster} is {math.prod(cluster)} blocks; a cluster holds at most "
                    f"{self.arch.max_cluster_blocks} (8 portably)"
                )
            for axis, (g, c) in enumerate(zip(grid, cluster, strict=True)):
                if isinstance(g, int) and g > 0 and g % c:
                    self.problems.append(
                        f"{path}.grid[{axis}]: {g} blocks is not divisible by cluster[{axis}] = {c} "
                        "(grid counts blocks, not clusters)"
                    )
        if launch.shared_bytes > self.arch.max_shared_bytes:
            self.problems.append(
                f"{path}.shared_bytes: {launch.shared_bytes} is over {self.arch}'s limit of "
                f"{self.arch.max_shared_bytes} bytes of dynamic shared memory per block"
            )
        args = [self._arg(f"{path}.args[{j}]", a, buffers) for j, a in enumerate(launch.args)]
        if self.problems:
            return None
        return LaunchPlanItem(kernel=launch.kernel, grid=grid, block=block, cluster=cluster,
                              shared_bytes=launch.shared_bytes, args=args)  # fmt: skip

    def _buffer(self, path: str, name: str, buffers: dict[str, BufferPlan]) -> BufferPlan | None:
        if name not in buffers:
            self.problems.append(f"{path}: unknown tensor {name!r}; known: {', '.join(buffers)}")
            return None
        return buffers[name]

    def _arg(self, path: str, arg, buffers: dict[str, BufferPlan]) -> ArgPlan | None:
        if isinstance(arg, TensorArg):
            return ArgPlan(kind="tensor", tensor=arg.tensor) if self._buffer(path, arg.tensor, buffers) else None
        if isinstance(arg, ScalarArg):
            value = self._expr(f"{path}.scalar", arg.scalar, floating=arg.type == "f32")
            if value is None:
                return None
            if arg.type != "f32":
                lo, hi = SCALAR_RANGES[arg.type]
                if not lo <= value <= hi:
                    self.problems.append(f"{path}: {value} does not fit in {arg.type}")
                    return None
            return ArgPlan(kind="scalar", type=arg.type, value=float(value) if arg.type == "f32" else value)
        assert isinstance(arg, TensorMapArg)
        buf = self._buffer(f"{path}.tensor_map", arg.tensor_map, buffers)
        tmap = self._tensor_map(path, arg, buf) if buf else None
        return ArgPlan(kind="tensor_map", tensor=arg.tensor_map, tensor_map=tmap) if tmap else None

    def _tensor_map(self, path: str, arg: TensorMapArg, buf: BufferPlan) -> TensorMapPlan | None:
        start = len(self.problems)
        size = DTYPE_BYTES[buf.dtype]
        shape = buf.shape
        if arg.shape is not None:
            view = [self._expr(f"{path}.shape[{j}]", e) for j, e in enumerate(arg.shape)]
            if any(v is None for v in view):
                return None
            if math.prod(view) != math.prod(buf.shape) or any(v <= 0 for v in view):
                self.problems.append(
                    f"{path}.shape: {view} is not a contiguous view of {buf.name} {buf.shape} "
                    f"(the element counts must match)"
                )
                return None
            shape = view
        rank = len(shape)
        if not 1 <= rank <= 5:
            self.problems.append(f"{path}: a tensor map has rank 1..5, {buf.name} has {rank}")
        if len(arg.box) != rank:
            self.problems.append(f"{path}.box: {len(arg.box)} extents for a rank-{rank} tensor {shape}")
        if any(not 0 < b <= 256 for b in arg.box):
            self.problems.append(f"{path}.box: {arg.box}: every extent must be in 1..256")
        strides = arg.element_strides or [1] * rank
        if len(strides) != rank or any(not 1 <= s <= 8 for s in strides):
            self.problems.append(f"{path}.element_strides: {strides}: {rank} values in 1..8")
        inner_bytes = arg.box[-1] * size if arg.box else 0
        if arg.interleave == "none" and inner_bytes % 16:
            self.problems.append(
                f"{path}.box: the innermost box extent {arg.box[-1]} × {size} B = {inner_bytes} B "
                "must be a multiple of 16 bytes"
            )
        span = SWIZZLE_BYTES[arg.swizzle]
        if span and arg.interleave == "none" and inner_bytes > span:
            self.problems.append(
                f"{path}: with swizzle {arg.swizzle} the innermost box row may span at most {span} B, "
                f"but {arg.box[-1]} × {size} B = {inner_bytes} B"
            )
        if arg.interleave != "none" and rank < 3:
            self.problems.append(f"{path}.interleave: an interleaved tensor map needs rank ≥ 3")
        byte_strides = [math.prod(shape[i + 1 :]) * size for i in range(rank - 1)]  # outermost first
        if any(s % 16 for s in byte_strides):
            self.problems.append(
                f"{path}: global strides {byte_strides} B (outermost first) must be multiples of 16 bytes"
            )
        if len(self.problems) > start:
            return None
        return TensorMapPlan(
            tensor=buf.name,
            dtype=buf.dtype,
            global_dims=shape[::-1],
            global_strides=byte_strides[::-1],
            box=arg.box[::-1],
            element_strides=strides[::-1],
            interleave=arg.interleave,
            swizzle=arg.swizzle,
            l2_promotion=arg.l2_promotion,
            oob_fill=arg.oob_fill,
        )
