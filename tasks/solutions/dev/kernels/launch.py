"""One description of a Triton launch, used both to generate a LaunchSpec and to run the kernel.

A kernel's non-constexpr parameters are described in order as `Desc` (a host tensor descriptor over a
contiguous view of a task tensor), `Ptr` (a plain pointer) or `Scalar` (an expression over the task's
dims). From that, `generate.py` builds Triton's compile signature and the LaunchSpec args (Triton's PTX ABI:
a descriptor is a 128-byte tensor map followed by its shape as u32 and strides as u64; two u64 scratch
pointers close the list), and `prepare_program` builds `TensorDescriptor`s and calls `kernel[grid](...)`.
Keeping one description is what makes the generated answer and the tuned kernel the same thing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.expr import evaluate

TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8e4nv"}


@dataclass(frozen=True)
class Desc:
    """A host TensorDescriptor over `tensor` seen as the contiguous view `shape`, loading `block`."""

    tensor: str
    shape: tuple[str, ...]  # dim expressions, outermost first, e.g. ("B*S", "H*D")
    block: tuple[int, ...]

    @property
    def strides(self) -> list[str | int]:
        """Row-major element strides of the view, as expressions (outermost first; the last is 1)."""
        return ["*".join(self.shape[i + 1 :]) for i in range(len(self.shape) - 1)] + [1]


@dataclass(frozen=True)
class Ptr:
    """A plain global pointer to a task tensor (16-byte aligned: cudaMalloc'd)."""

    tensor: str


@dataclass(frozen=True)
class Scalar:
    """A runtime scalar from an expression over dims (f32 expressions may use `rsqrt`, `/`...)."""

    expr: str | int
    type: Literal["i32", "fp32"]


Param = Desc | Ptr | Scalar


@dataclass(frozen=True)
class KernelLaunch:
    """One Triton kernel launch: the function, its runtime params in order, constexprs, grid and options."""

    fn: Any  # triton.JITFunction (or an InterpretedFunction under TRITON_INTERPRET=1)
    params: dict[str, Param]
    grid: tuple[str | int, str | int, str | int]
    num_warps: int
    num_stages: int
    constexprs: dict[str, int | bool | float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.fn.__name__

    @property
    def defaults(self) -> set[str]:
        """The kernel's arguments that have a default value."""
        fn = getattr(self.fn, "fn", self.fn)  # the Python function under a JITFunction or InterpretedFunction
        return {n for n, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty}

    def check_names(self) -> None:
        """Every kernel argument is described exactly once, as a param or a constexpr; a constexpr with a default
        (a flaw left unplanted) may be left out."""
        names = [n for n in self.fn.arg_names if n in self.params or n in self.constexprs or n not in self.defaults]
        described = list(self.params) + list(self.constexprs)
        if sorted(names) != sorted(described):
            raise ValueError(f"{self.name}: kernel args {names}, described {described}")
        order = [n for n in names if n in self.params]
        if order != list(self.params):
            raise ValueError(f"{self.name}: params must follow the kernel's order {order}")


@dataclass(frozen=True)
class Scratch:
    """A device buffer besides the task's tensors (a LaunchSpec scratch buffer), zeroed before every run."""

    name: str
    dtype: str  # task dtype name, e.g. "float32"
    shape: tuple[str, ...]  # dim expressions, outermost first


@dataclass(frozen=True)
class Program:
    """Everything one task needs: launches in order, and the scratch buffers they share."""

    launches: list[KernelLaunch]
    scratch: tuple[Scratch, ...] = ()


def grid_of(launch: KernelLaunch, dims: Mapping[str, int]) -> tuple[int, int, int]:
    g = tuple(int(evaluate(e, dims)) for e in launch.grid)
    return g[0], g[1], g[2]


def kernel_args(launch: KernelLaunch, tensors: Mapping[str, Any], dims: Mapping[str, int]) -> list[Any]:
    """Every argument of the kernel in order (constexprs included), from torch tensors in task layouts."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    launch.check_names()
    args: list[Any] = []
    for name in launch.fn.arg_names:
        if name in launch.constexprs:
            args.append(launch.constexprs[name])
            continue
        if name not in launch.params:  # a defaulted constexpr left out: Python's default (defaults are trailing)
            continue
        p = launch.params[name]
        if isinstance(p, Desc):
            view = [int(evaluate(e, dims)) for e in p.shape]
            args.append(TensorDescriptor.from_tensor(tensors[p.tensor].view(*view), list(p.block)))
        elif isinstance(p, Ptr):
            args.append(tensors[p.tensor])
        else:
            args.append(evaluate(p.expr, dims, floating=p.type == "fp32"))
    return args


def prepare_program(
    program: Program,
    tensors: Mapping[str, Any],
    dims: Mapping[str, int],
    compiled: list[Any] | None = None,
    only: list[int] | None = None,
) -> Callable[[], None]:
    """A callable that zeroes the scratch buffers and runs the launches in order (those at positions
    `only`, if given), writing outputs in place into `tensors` (contiguous torch tensors in the task's
    layouts). Arguments and grids are built once, here, so that timing the callable times the kernels
    (and the scratch initialisation, as the harness does) and not descriptor construction. With `compiled`
    (Triton CompiledKernels from `generate.compile_launch`, one per launch) the very binaries of the answer
    run; without, Triton's JIT does (or its interpreter under TRITON_INTERPRET=1).
    """
    import torch

    device = next(iter(tensors.values())).device
    buffers = dict(tensors)
    scratch = []
    for s in program.scratch:
        shape = [int(evaluate(e, dims)) for e in s.shape]
        buffers[s.name] = torch.zeros(shape, dtype=getattr(torch, s.dtype), device=device)
        scratch.append(buffers[s.name])
    steps = []
    for i, launch in enumerate(program.launches):
        if only is not None and i not in only:
            continue
        args = kernel_args(launch, buffers, dims)
        grid = grid_of(launch, dims)
        if compiled is not None:
            steps.append((compiled[i][grid], args, {}))
        else:
            steps.append((launch.fn[grid], args, {"num_warps": launch.num_warps, "num_stages": launch.num_stages}))

    def run() -> None:
        for buffer in scratch:
            buffer.zero_()
        for call, args, options in steps:
            call(*args, **options)

    return run


def run_program(
    program: Program, tensors: Mapping[str, Any], dims: Mapping[str, int], compiled: list[Any] | None = None
) -> None:
    """Run the program once (see `prepare_program`)."""
    prepare_program(program, tensors, dims, compiled)()
