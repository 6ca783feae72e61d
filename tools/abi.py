"""The LaunchSpec against the module's .entry parameter lists, before anything launches: entry names,
argument count, kind and size, tensor-map parameters, thread-count directives, total shared memory."""

from __future__ import annotations

import math

from tasks.expr import ExprError, evaluate
from tasks.schema import Arch
from tools.assemble import KernelResources
from tools.ptx import Entry, Param
from tools.solution import Launch, LaunchSpec, ScalarArg, TensorArg, TensorMapArg

SCALAR_BYTES = {"u32": 4, "s32": 4, "f32": 4, "u64": 8, "s64": 8}
TENSOR_MAP_BYTES = 128


def check_abi(
    spec: LaunchSpec,
    entries: dict[str, Entry],
    arch: Arch,
    dims: dict[str, int],
    resources: list[KernelResources] | None = None,
) -> list[str]:
    """Problems as `path: message` lines; empty when every launch matches its entry."""
    problems = []
    static_shared = {k.name: k.shared_bytes for k in resources or []}
    for i, launch in enumerate(spec.launches):
        path = f"launches[{i}]"
        entry = entries.get(launch.kernel)
        if entry is None:
            known = ", ".join(entries) or "none"
            hint = (
                ' (declare CUDA kernels extern "C" to keep their names)'
                if any(n.startswith("_Z") for n in entries)
                else ""
            )
            problems.append(f"{path}.kernel: no .entry named {launch.kernel!r}; the module has: {known}{hint}")
            continue
        problems += _check_args(path, launch, entry)
        problems += _check_threads(path, launch, entry, dims)
        total = launch.shared_bytes + static_shared.get(entry.name, 0)
        if total > arch.max_shared_bytes:
            problems.append(
                f"{path}: {static_shared.get(entry.name, 0)} B of static .shared plus shared_bytes "
                f"{launch.shared_bytes} is {total} B, over {arch}'s {arch.max_shared_bytes} B per block"
            )
    return problems


def _check_args(path: str, launch: Launch, entry: Entry) -> list[str]:
    params = entry.params
    if len(launch.args) != len(params):
        listing = "; ".join(p.describe() for p in params) or "no parameters"
        return [
            f"{path}.args: {len(launch.args)} arguments for entry {entry.name!r}, which takes {len(params)}: {listing}"
        ]
    problems = []
    for j, (arg, param) in enumerate(zip(launch.args, params, strict=True)):
        problem = _arg_problem(arg, param)
        if problem:
            problems.append(f"{path}.args[{j}] → {param.describe()}: {problem}")
    return problems


def _arg_problem(arg: TensorArg | ScalarArg | TensorMapArg, param: Param) -> str | None:
    if isinstance(arg, TensorMapArg):
        if param.size != TENSOR_MAP_BYTES or param.align < 64:
            return "a tensor_map needs a 128-byte parameter aligned to 64: `.param .align 64 .b8 name[128]`"
        return None
    if param.array:
        return f"a {param.size}-byte array parameter takes a tensor_map (128 B), not a {_kind(arg)}"
    if isinstance(arg, TensorArg):
        if param.size != 8:
            return f"a tensor is passed as a 64-bit pointer; the parameter is {param.size * 8}-bit ({param.type})"
        return None
    if SCALAR_BYTES[arg.type] != param.size:
        return f"a {arg.type} scalar is {SCALAR_BYTES[arg.type]} bytes; the parameter is {param.size} ({param.type})"
    is_float = param.type.startswith(".f")
    if is_float != (arg.type == "f32"):
        return f"the scalar's type {arg.type} does not match the parameter's {param.type}"
    return None


def _kind(arg: TensorArg | ScalarArg | TensorMapArg) -> str:
    return "tensor" if isinstance(arg, TensorArg) else "scalar"


def _check_threads(path: str, launch: Launch, entry: Entry, dims: dict[str, int]) -> list[str]:
    try:
        block = [int(evaluate(b, dims)) for b in launch.block]
    except ExprError:
        return []  # reported by the plan
    problems = []
    if entry.reqntid is not None:
        want = entry.reqntid + [1] * (3 - len(entry.reqntid))
        if block != want:
            problems.append(f"{path}.block: {block}, but entry {entry.name!r} declares .reqntid {entry.reqntid}")
    if entry.maxntid is not None and math.prod(block) > math.prod(entry.maxntid):
        problems.append(
            f"{path}.block: {math.prod(block)} threads, over entry {entry.name!r}'s .maxntid {entry.maxntid}"
        )
    return problems
