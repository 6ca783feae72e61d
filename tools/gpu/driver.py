"""The CUDA driver calls a LaunchPlan needs, through cuda.bindings (no torch, so the minimal launcher that
Nsight Compute and compute-sanitizer run can use it too): load a cubin, prepare each launch (shared
memory opt-in, cluster attribute, kernel parameters, tensor maps), launch, and classify errors."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cuda.bindings import driver as cu

from tasks.schema import DTYPE_BYTES
from tools.plan import LaunchPlan, LaunchPlanItem, TensorMapPlan

# Errors after which the context is unusable: the worker must be restarted.
STICKY_ERRORS = {
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTAINED",
}

# What to look at, for a model that just hit each fault.
HINTS = {
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a thread read or wrote memory outside every allocation: check index arithmetic, "
    "bounds guards on the last (partial) tiles, tensor-map coordinates, and that the args follow the .entry order",
    "CUDA_ERROR_MISALIGNED_ADDRESS": "an access at an address not aligned to its size: vector loads/stores, "
    "ldmatrix/stmatrix, 8-byte mbarriers, and swizzled TMA tiles (1024-byte aligned for 128B swizzle) in shared memory",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION": "an instruction this GPU refused at run time: wgmma issued by fewer than 4 "
    "whole warps of one warpgroup, setmaxnreg outside a uniform warpgroup branch, or an arch-specific instruction "
    "used wrongly",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE": "a generic address used in the wrong state space (e.g. a shared::cta "
    "address passed where a global one is expected)",
    "CUDA_ERROR_INVALID_PC": "the program counter left the code: a bad indirect branch or corrupted return address",
    "CUDA_ERROR_HARDWARE_STACK_ERROR": "call stack overflow or corruption (deep recursion, large local arrays)",
    "CUDA_ERROR_LAUNCH_FAILED": "the kernel faulted while running (an unspecified device exception)",
    "CUDA_ERROR_ASSERT": "a device-side trap or assert fired",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK": "a CTA exited without tcgen05.dealloc of the tensor memory it allocated",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "registers × threads per block exceed what one SM holds (65536 "
    "registers): lower the registers per thread or the threads per block",
    "CUDA_ERROR_INVALID_VALUE": "the launch configuration was refused: block size vs .reqntid/.maxntid, "
    "shared_bytes vs the limit, grid or cluster extents",
    "CUDA_ERROR_INVALID_CLUSTER_SIZE": "the cluster is too large for this kernel's resources or the hardware",
    "CUDA_ERROR_NOT_FOUND": "no kernel of that name in the module",
}


class CudaError(RuntimeError):
    """A driver call that failed; `name` is the CUresult's name, e.g. CUDA_ERROR_ILLEGAL_ADDRESS."""

    def __init__(self, result: cu.CUresult, call: str):
        self.code = int(result)
        self.name = getattr(result, "name", str(result))
        _, text = cu.cuGetErrorString(result)
        self.description = text.decode() if isinstance(text, bytes) else str(text)
        self.call = call
        super().__init__(f"{call}: {self.name} ({self.description})")

    @property
    def sticky(self) -> bool:
        return self.name in STICKY_ERRORS

    @property
    def hint(self) -> str:
        return HINTS.get(self.name, "")


def call(fn: Callable, *args: Any) -> Any:
    """Call a cuda.bindings function; raise CudaError on failure, return its outputs (None, one, or a tuple)."""
    out = fn(*args)
    result, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
    if result != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(result, fn.__name__)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


_TMA_DTYPES = {
    "bfloat16": "BFLOAT16",
    "float16": "FLOAT16",
    "float32": "FLOAT32",
    "int32": "INT32",
    "uint32": "UINT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "float8_e4m3fn": "UINT8",
}
_SCALAR_CTYPES = {
    "u32": ctypes.c_uint32,
    "s32": ctypes.c_int32,
    "u64": ctypes.c_uint64,
    "s64": ctypes.c_int64,
    "f32": ctypes.c_float,
}


def encode_tensor_map(plan: TensorMapPlan, address: int) -> cu.CUtensorMap:
    """cuTensorMapEncodeTiled over `address` as the plan describes (dims innermost first)."""
    suffix = {"none": "NONE", "16B": "16B", "32B": "32B", "64B": "64B", "128B": "128B", "256B": "256B"}
    return call(
        cu.cuTensorMapEncodeTiled,
        getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_DTYPES[plan.dtype]}"),
        len(plan.global_dims),
        address,
        [cu.cuuint64_t(d) for d in plan.global_dims],
        [cu.cuuint64_t(s) for s in _strides(plan)],
        [cu.cuuint32_t(b) for b in plan.box],
        [cu.cuuint32_t(e) for e in plan.element_strides],
        getattr(cu.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{suffix[plan.interleave]}"),
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{suffix[plan.swizzle]}"),
        getattr(
            cu.CUtensorMapL2promotion,
            "CU_TENSOR_MAP_L2_PROMOTION_NONE"
            if plan.l2_promotion == "none"
            else f"CU_TENSOR_MAP_L2_PROMOTION_L2_{plan.l2_promotion}",
        ),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
        if plan.oob_fill == "zero"
        else cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
    )


def _strides(plan: TensorMapPlan) -> list[int]:
    """The rank − 1 byte strides; for a rank-1 map one placeholder, the whole extent rounded up to 16 bytes. cuda-python
    passes an empty list as a null pointer, which the driver refuses (CUDA_ERROR_INVALID_VALUE, the H200's 580
    driver) although it reads no stride at rank 1; given one, it encodes the map."""
    if plan.global_strides:
        return plan.global_strides
    return [-(-plan.global_dims[0] * DTYPE_BYTES[plan.dtype] // 16) * 16]


def _tensor_map(plan: TensorMapPlan, address: int, where: str) -> cu.CUtensorMap:
    """The encoded map, or a LaunchError naming the argument and what the driver was given: its one-word refusal
    (CUDA_ERROR_INVALID_VALUE) names neither, and the static checks (tools/plan.py) passed."""
    try:
        return encode_tensor_map(plan, address)
    except CudaError as e:
        raise LaunchError(
            f"{where} (tensor map over {plan.tensor!r}): the driver refused it ({e.name}); it was given, innermost "
            f"first: {plan.dtype}, dims {plan.global_dims}, byte strides {plan.global_strides}, box {plan.box}, "
            f"element strides {plan.element_strides}, swizzle {plan.swizzle}, interleave {plan.interleave}, "
            f"L2 promotion {plan.l2_promotion}, address {address:#x}"
        ) from None


class LaunchError(RuntimeError):
    """A launch the driver refused before it ran (not sticky); the message names the launch and the reason."""


@dataclass
class PreparedLaunch:
    index: int
    item: LaunchPlanItem
    function: cu.CUfunction
    params: tuple[tuple, tuple]
    attrs: list

    def launch(self, stream: int) -> None:
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.item.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.item.block
        config.sharedMemBytes = self.item.shared_bytes
        config.hStream = cu.CUstream(stream)
        config.attrs = self.attrs
        config.numAttrs = len(self.attrs)
        try:
            call(cu.cuLaunchKernelEx, config, self.function, self.params, 0)
        except CudaError as e:
            if e.sticky:
                raise
            raise LaunchError(f"launches[{self.index}] ({self.item.kernel}) was refused: {e}. {e.hint}") from None


def load_module(cubin: bytes) -> cu.CUmodule:
    return call(cu.cuModuleLoadData, cubin)


def prepare_launches(module: cu.CUmodule, plan: LaunchPlan, addresses: Mapping[str, int]) -> list[PreparedLaunch]:
    """Resolve functions, opt into shared memory and cluster sizes, and build each launch's parameters."""
    prepared = []
    for index, item in enumerate(plan.launches):
        where = f"launches[{index}] ({item.kernel})"
        try:
            fn = call(cu.cuModuleGetFunction, module, item.kernel.encode())
        except CudaError as e:
            raise LaunchError(f"{where}: the module has no kernel of that name ({e.name})") from None
        _check_function_limits(fn, item, where)
        attrs = []
        if item.cluster != [1, 1, 1]:
            if math.prod(item.cluster) > 8:
                _set_attribute(
                    fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, where
                )
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = item.cluster
            attrs.append(attr)
        prepared.append(PreparedLaunch(index, item, fn, _params(item, addresses, where), attrs))
    return prepared


def _set_attribute(fn: cu.CUfunction, attribute: cu.CUfunction_attribute, value: int, where: str) -> None:
    try:
        call(cu.cuFuncSetAttribute, fn, attribute, value)
    except CudaError as e:
        raise LaunchError(f"{where}: setting {attribute.name} = {value} was refused ({e.name})") from None


def _check_function_limits(fn: cu.CUfunction, item: LaunchPlanItem, where: str) -> None:
    attr = cu.CUfunction_attribute
    regs = call(cu.cuFuncGetAttribute, attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn)
    max_threads = call(cu.cuFuncGetAttribute, attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn)
    threads = math.prod(item.block)
    if threads > max_threads:
        raise LaunchError(
            f"{where}: the kernel uses {regs} registers per thread, so at most {max_threads} threads fit in a block; "
            f"the block has {threads}"
        )
    if item.shared_bytes > 0:  # the opt-in is needed above 48 KiB; setting it always is harmless
        _set_attribute(fn, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, item.shared_bytes, where)


def _params(item: LaunchPlanItem, addresses: Mapping[str, int], where: str) -> tuple[tuple, tuple]:
    values, types = [], []
    for position, arg in enumerate(item.args):
        if arg.kind == "tensor":
            values.append(addresses[arg.tensor])
            types.append(ctypes.c_void_p)
        elif arg.kind == "scalar":
            values.append(arg.value)
            types.append(_SCALAR_CTYPES[arg.type])
        else:
            values.append(_tensor_map(arg.tensor_map, addresses[arg.tensor], f"{where}.args[{position}]"))
            types.append(None)  # passed by value as the 128-byte CUtensorMap
    return tuple(values), tuple(types)


def synchronize() -> None:
    call(cu.cuCtxSynchronize)
