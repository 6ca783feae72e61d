"""`python -m tools.gpu.launcher BUNDLE`: run a candidate's launch sequence once and nothing else, for
Nsight Compute and compute-sanitizer. Torch-free, so that start-up is quick and no other library's
kernels show up in a profile or a memcheck report.

Inputs get random normal values (derived inputs too: instruction counts do not depend on them being
consistent); outputs and poison-initialised scratch get the poison pattern; zero scratch is zeroed."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
from cuda.bindings import driver as cu

from tasks.schema import DTYPE_BYTES
from tools import procs
from tools.gpu.driver import CudaError, LaunchError, call, load_module, prepare_launches, synchronize
from tools.plan import BufferPlan, LaunchPlan

REPO_ROOT = Path(__file__).resolve().parents[2]
ADDRESSES = "addresses.json"  # written into the bundle: each buffer's device address, to place a sanitizer's finding
FILL_BLOCK = 1 << 20  # elements of random data, tiled over each input
OUTPUT_POISON = {
    "bfloat16": (cu.cuMemsetD16, 0x7FA5, 2),
    "float16": (cu.cuMemsetD16, 0x7E5A, 2),
    "float32": (cu.cuMemsetD32, 0x7FA5A5A5, 4),
}


def write_bundle(folder: Path, cubin: bytes, plan: LaunchPlan) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.cubin").write_bytes(cubin)
    (folder / "plan.json").write_text(plan.model_dump_json())
    return folder


def command(bundle: Path) -> list[str]:
    return [sys.executable, "-m", "tools.gpu.launcher", str(bundle)]


def environment(device: int) -> dict[str, str]:
    """The environment of a child process that sees only GPU `device` (an ordinal among this process's GPUs,
    so a caller limited by CUDA_VISIBLE_DEVICES keeps its children on the GPUs it was given)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible.split(",")[device] if visible else str(device))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _random_block(dtype: str, n: int) -> bytes:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    if dtype == "bfloat16":
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if dtype == "float16":
        return x.astype(np.float16).tobytes()
    if dtype == "float32":
        return x.tobytes()
    return rng.integers(0, 8, n * DTYPE_BYTES[dtype], dtype=np.uint8).tobytes()


def _fill(address: int, buffer: BufferPlan) -> None:
    size = DTYPE_BYTES[buffer.dtype]
    nbytes = math.prod(buffer.shape) * size
    if buffer.role == "input":
        block = _random_block(buffer.dtype, min(FILL_BLOCK, nbytes // size))
        for offset in range(0, nbytes, len(block)):
            call(cu.cuMemcpyHtoD, address + offset, block, min(len(block), nbytes - offset))
    elif buffer.role == "output":  # the worker's poison patterns (tools/gpu/check.py)
        fn, value, width = OUTPUT_POISON.get(buffer.dtype, (cu.cuMemsetD8, 0xA5, 1))
        call(fn, address, value, nbytes // width)
    else:
        call(cu.cuMemsetD8, address, 0xFF if buffer.init == "poison" else 0, nbytes)


def main(bundle: Path) -> int:
    plan = LaunchPlan.model_validate_json((bundle / "plan.json").read_text())
    call(cu.cuInit, 0)
    context = call(cu.cuDevicePrimaryCtxRetain, call(cu.cuDeviceGet, 0))
    call(cu.cuCtxSetCurrent, context)
    addresses = {}
    for buffer in plan.buffers:
        address = int(call(cu.cuMemAlloc, math.prod(buffer.shape) * DTYPE_BYTES[buffer.dtype]))
        _fill(address, buffer)
        addresses[buffer.name] = address
    (bundle / ADDRESSES).write_text(json.dumps(addresses))
    try:
        launches = prepare_launches(load_module((bundle / "kernel.cubin").read_bytes()), plan, addresses)
        for launch in launches:
            launch.launch(0)
        synchronize()
    except (CudaError, LaunchError) as e:
        print(f"launcher: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    procs.die_with_parent(os.getppid())  # ncu or compute-sanitizer starts it: it must not outlive them
    sys.exit(main(Path(sys.argv[1])))
