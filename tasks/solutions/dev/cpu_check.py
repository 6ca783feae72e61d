"""Run the solutions' Triton kernels on the CPU (Triton's interpreter) at small shapes against the fp32
references: `python -m tasks.solutions.dev.cpu_check [--tasks ...] [--json]`.

The interpreter is chosen when the kernels are decorated, so this must run in a fresh process with
TRITON_INTERPRET=1 set before `triton` is imported; `main` sets it itself (tests call it in a subprocess).
The same kernel source and the same launch descriptions as the generated answers run here, through host
`TensorDescriptor`s, which Triton 3.6's interpreter supports. Three interpreter bugs of Triton 3.6 are
patched around (the kernels are unchanged):
- `tl.dot` on bf16 multiplies the raw uint16 bit patterns (bf16 is stored as uint16 in the interpreter);
  we widen bf16 operands to fp32 first, as the tensor cores do.
- a scalar is a 1-element array, and `int()` of it (loop bounds) fails under numpy ≥ 2.4.
- a cast to float8_e4m3fn rounds wrongly: a carry out of the 3 mantissa bits is not carried into the exponent
  and subnormals are truncated (rel. error 8.9e-2 on N(0, 0.3) where rounding to nearest gives 2.7e-2). We cast
  with torch instead, saturating at ±448 as the GPU's `cvt.rn.satfinite.e4m3x2.f32` does.
It also lacks TMA reduce (`desc.atomic_add`), which we add as a load-add-store.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

# Small shapes: multiples of the largest blocks, and at least two blocks along S so that causal programs
# have off-diagonal and diagonal blocks.
GEMM_DIMS = {"M": 256, "N": 512, "K": 192}
# M not a multiple of the tile: the masked scale loads and TMA's clipping; K over three scale blocks.
FP8_GEMM_DIMS = {"M": 200, "N": 256, "K": 384}
# Workloads whose own dims are smaller than those: M and N below one tile, so TMA's zero fill and clipped stores
# carry the result (checked at M 93, N 128).
EDGES = ["gemm_n128_k2048_m93"]
# B > 1: batch offsets are exercised. GQA keeps its group (the kernels take it as a constant): 6 heads on 1.
ATTENTION_DIMS = {"B": 2, "S": 256}
# fp8 attention has no K/V head count (HKV) to scale H down by; 2 heads, as the others run.
FP8_ATTENTION_DIMS = {**ATTENTION_DIMS, "H": 2}
SMALL_DIMS = {"gemm": GEMM_DIMS, "fp8_gemm": FP8_GEMM_DIMS, "attention_fwd": ATTENTION_DIMS,
              "attention_bwd": ATTENTION_DIMS, "fp8_attention_fwd": FP8_ATTENTION_DIMS}  # fmt: skip


def patch_interpreter() -> None:
    import numpy as np
    import triton.language as tl
    import triton.runtime.interpreter as interp

    def widen(handle):
        if handle.dtype == tl.bfloat16:
            return (handle.data.astype(np.uint32) << 16).view(np.float32)
        return handle.data

    original_dot = interp.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if tl.bfloat16 in (a.dtype, b.dtype):
            data = np.matmul(widen(a), widen(b), dtype=d.data.dtype) + d.data
            return interp.TensorHandle(data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    interp.InterpreterBuilder.create_dot = create_dot

    original_patch = interp._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interp._patch_lang_tensor = patch_lang_tensor

    def create_descriptor_reduce(self, kind, desc, value, indices):
        # TMA reduce (desc.atomic_add): the interpreter runs programs one at a time, so load-add-store is exact.
        if kind != interp._ir.DESCRIPTOR_REDUCE_KIND.ADD:
            raise NotImplementedError(f"descriptor reduce {kind}")
        ptrs, mask = desc.materialize_pointers(indices)
        old = self.create_masked_load(ptrs, mask, None, None, None, False)
        new = interp.TensorHandle(old.data + value.data, value.dtype)
        return self.create_masked_store(ptrs, new, mask, None, None)

    original_fp_to_fp = interp.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar != tl.float8e4nv or src.dtype.scalar.primitive_bitwidth == 8:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        import torch

        wide = torch.from_numpy(np.ascontiguousarray(widen(src)).astype(np.float32))
        e4m3 = wide.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return interp.TensorHandle(e4m3.view(torch.uint8).numpy(), tl.float8e4nv)

    interp.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp

    if not hasattr(interp.InterpreterBuilder, "create_descriptor_reduce"):
        interp.InterpreterBuilder.create_descriptor_reduce = create_descriptor_reduce


def variants(task_name: str, arch: str = "sm_90a") -> list[Any]:
    """The table's config, then variants that exercise the kernels' other code paths: the tiled GEMM and
    the persistent one without the split epilogue; BLOCK_N < BLOCK_M in the forward (several diagonal key
    blocks); in the backward, key steps smaller than query steps (several diagonal blocks in both kernels)."""
    from dataclasses import replace

    from tasks.catalog import get_task
    from tasks.solutions.dev.generate import config_for

    task = get_task(task_name)
    cfg = config_for(task)
    if task.family == "gemm":
        return [cfg, replace(cfg, persistent=False), replace(cfg, persistent=True, epilogue_split=False, flatten=False)]
    if task.family == "attention_fwd":
        return [cfg, replace(cfg, block_n=cfg.block_m // 2)]
    return [cfg, replace(cfg, kv_block_m=min(cfg.kv_block_m, 32), q_block_n=min(cfg.q_block_n, 32))]


def check_task(task_name: str, arch: str = "sm_90a", seed: int = 0, config: Any = None) -> dict:
    """Rel. L2 error of each output of `task_name`'s kernels at small dims, under `config` (default: the
    generator's table entry for `arch`)."""
    import torch

    from tasks.catalog import get_task
    from tasks.inputs import TORCH_DTYPES, draw_inputs, shape_of
    from tasks.references import run_reference
    from tasks.schema import Arch
    from tasks.solutions.dev.generate import program_for
    from tasks.solutions.dev.kernels.launch import run_program

    task = get_task(task_name)
    small = SMALL_DIMS[task.family]
    dims = {**task.dims, **{k: min(v, task.dims[k]) for k, v in small.items()}}  # a workload below them keeps its own
    if "HKV" in task.dims:
        group = task.dims["H"] // task.dims["HKV"]
        dims["H"] = max(2, group)
        dims["HKV"] = dims["H"] // group
    tensors = draw_inputs(task, dims, seed, "cpu")
    outputs = {
        o.name: torch.full(shape_of(o.shape, dims), float("nan"), dtype=TORCH_DTYPES[o.dtype]) for o in task.outputs
    }
    start = time.perf_counter()
    run_program(program_for(task, Arch.resolve(arch), config), {**tensors, **outputs}, dims)
    seconds = time.perf_counter() - start
    ref = run_reference(task.reference, tensors, task.params)
    errors = {}
    for name, out in outputs.items():
        diff = (out.float() - ref[name]).norm() / ref[name].norm()
        errors[name] = float(diff) if torch.isfinite(diff) else float("inf")
    label = config.label() if config is not None else "table"
    return {"task": task.name, "config": label, "dims": {k: dims[k] for k in small}, "rel_l2": errors,
            "seconds": round(seconds, 2), "ok": all(e <= task.tolerance for e in errors.values())}  # fmt: skip


def _check_one(name: str, arch: str, config: Any) -> dict:
    try:
        return check_task(name, arch, config=config)
    except Exception as e:  # report and go on: one broken kernel must not hide the others
        label = config.label() if config is not None else "table"
        return {"task": name, "config": label, "ok": False, "error": f"{type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", help="task names (default: every task with a solution config)")
    parser.add_argument("--arch", default="sm_90a", help="whose config to run (the kernels are the same)")
    parser.add_argument("--json", action="store_true", help="print one JSON list instead of a table")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="processes (default ≤ 4)")
    parser.add_argument(
        "--variants", action="store_true", help="for the core tasks, also run configs that take the other code paths"
    )
    args = parser.parse_args(argv)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("triton was imported before TRITON_INTERPRET=1 could be set: run this in a fresh process")
    os.environ["TRITON_INTERPRET"] = "1"
    patch_interpreter()
    from tasks.catalog import CORE
    from tasks.solutions.dev.generate import configured_tasks

    names = args.tasks or [*configured_tasks(), *EDGES]
    work = [(name, config) for name in names
            for config in (variants(name, args.arch) if args.variants and name in CORE else [None])]  # fmt: skip
    jobs = max(1, min(args.jobs, len(work)))
    if jobs == 1:
        results = [_check_one(name, args.arch, config) for name, config in work]
    else:  # the interpreter is single-threaded Python: spread the checks over processes
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=patch_interpreter) as pool:
            results = list(pool.map(_check_one, *zip(*[(n, args.arch, c) for n, c in work], strict=True)))
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            detail = r.get("error") or " ".join(f"{k}={v:.2e}" for k, v in r["rel_l2"].items())
            print(
                f"{'ok  ' if r['ok'] else 'FAIL'} {r['task']:<22} {r['config']:<44} {detail}  ({r.get('seconds', 0)} s)"
            )
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
