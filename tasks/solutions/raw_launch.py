"""Launch an answer's PTX by its LaunchSpec through the CUDA driver API (ctypes on libcuda), the way the
harness is meant to: on a GPU, for checking reference answers before the harness's GPU worker exists.

Only what the reference answers use is supported: clusters of 1×1×1, tensor maps, pointers and scalars.
The LaunchSpec is resolved by tools.plan (the harness's own planner), so this checks the answer file
end to end: PTX → cubin (our ptxas, else the driver's PTX JIT) → tensor maps → launch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

from tools.plan import LaunchPlan, TensorMapPlan

# CUDA driver enums (cuda.h)
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
TMA_DTYPE = {"uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5, "float16": 6,
             "float32": 7, "float64": 8, "bfloat16": 9}  # fmt: skip
TMA_INTERLEAVE = {"none": 0, "16B": 1, "32B": 2}
TMA_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
TMA_L2_PROMOTION = {"none": 0, "64B": 1, "128B": 2, "256B": 3}
TMA_OOB_FILL = {"zero": 0, "nan": 1}
SCALAR_CTYPES = {"u32": ctypes.c_uint32, "s32": ctypes.c_int32, "u64": ctypes.c_uint64, "s64": ctypes.c_int64,
                 "f32": ctypes.c_float}  # fmt: skip


class DriverError(RuntimeError):
    pass


class Driver:
    """The few libcuda calls we need; the context is the one torch made current."""

    def __init__(self, library: str = "libcuda.so.1") -> None:
        self.lib = ctypes.CDLL(library)
        ptr, out = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        signatures = {
            "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
            "cuModuleLoadData": [out, ctypes.c_char_p],
            "cuModuleGetFunction": [out, ptr, ctypes.c_char_p],
            "cuFuncSetAttribute": [ptr, ctypes.c_int, ctypes.c_int],
            "cuTensorMapEncodeTiled": [
                ptr, ctypes.c_int, u32, ptr, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ],
            "cuLaunchKernel": [ptr, u32, u32, u32, u32, u32, u32, u32, ptr, out, out],
        }  # fmt: skip
        for name, argtypes in signatures.items():
            getattr(self.lib, name).argtypes = argtypes
            getattr(self.lib, name).restype = ctypes.c_int

    def check(self, result: int, what: str) -> None:
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(text))
            raise DriverError(f"{what} failed: {result} {text.value.decode() if text.value else ''}")

    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """A cubin, or NUL-terminated PTX text (compiled by the driver for the current device)."""
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        return module

    def function(self, module: ctypes.c_void_p, name: str, shared_bytes: int) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), f"cuModuleGetFunction {name}")
        if shared_bytes > 48 * 1024:
            attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.check(self.lib.cuFuncSetAttribute(fn, attr, shared_bytes), "cuFuncSetAttribute")
        return fn

    def tensor_map(self, plan: TensorMapPlan, address: int) -> ctypes.Array:
        """A CUtensorMap (128 bytes, 64-byte aligned) in a host buffer kept alive by the caller."""
        raw = ctypes.create_string_buffer(128 + 64)
        offset = (-ctypes.addressof(raw)) % 64
        holder = (ctypes.c_uint8 * 128).from_buffer(raw, offset)
        holder._keep = raw  # type: ignore[attr-defined]
        rank = len(plan.global_dims)
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        result = self.lib.cuTensorMapEncodeTiled(
            ctypes.addressof(holder), TMA_DTYPE[plan.dtype], rank, address,
            (u64 * rank)(*plan.global_dims), (u64 * max(1, rank - 1))(*plan.global_strides),
            (u32 * rank)(*plan.box), (u32 * rank)(*plan.element_strides),
            TMA_INTERLEAVE[plan.interleave], TMA_SWIZZLE[plan.swizzle], TMA_L2_PROMOTION[plan.l2_promotion],
            TMA_OOB_FILL[plan.oob_fill],
        )  # fmt: skip
        self.check(result, f"cuTensorMapEncodeTiled ({plan.tensor})")
        return holder


def prepare(
    driver: Driver, image: bytes, plan: LaunchPlan, buffers: Mapping[str, Any], stream: int
) -> Callable[[], None]:
    """A callable that runs the plan's launches in order on `stream`; `buffers` are torch tensors by name.
    Scratch buffers must be among `buffers` (and re-initialised by the caller when the answer needs it)."""
    module = driver.load_module(image)
    calls = []
    for item in plan.launches:
        if item.cluster != [1, 1, 1]:
            raise DriverError(f"{item.kernel}: clusters are not supported by this launcher")
        fn = driver.function(module, item.kernel, item.shared_bytes)
        holders: list[Any] = []
        for arg in item.args:
            if arg.kind == "tensor":
                holders.append(ctypes.c_uint64(buffers[arg.tensor].data_ptr()))
            elif arg.kind == "scalar":
                holders.append(SCALAR_CTYPES[arg.type](arg.value))
            else:
                holders.append(driver.tensor_map(arg.tensor_map, buffers[arg.tensor].data_ptr()))
        params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        calls.append((fn, item, holders, params))

    def run() -> None:
        for fn, item, _holders, params in calls:
            result = driver.lib.cuLaunchKernel(fn, *item.grid, *item.block, item.shared_bytes, stream, params, None)
            driver.check(result, f"cuLaunchKernel {item.kernel}")

    return run
