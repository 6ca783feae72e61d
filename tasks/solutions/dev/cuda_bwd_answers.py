"""The sm_90a reference answers for the attention backward from the hand-written CUDA C++ kernel (inline PTX) in
tasks/solutions/dev/cuda/attention_bwd.cu: one ```cuda block and one ```json LaunchSpec per task.

    python -m tasks.solutions.dev.cuda_bwd_answers [--out DIR] [--tasks T ...] [--check]

The kernel is specialised by three macros this module prepends (HEAD_DIM, CAUSAL, KV_GROUP); everything else
(the shape dims, the scale) reaches it at run time through the launch spec, so one answer serves every workload
of its definition. The answers go to tasks/solutions/sm_90a/ (the default `--out`; `python -m
tasks.solutions.dev.generate` writes them through this module with every other answer; `--out DIR` writes a variant
elsewhere to be timed beside them); sm_100a keeps the Triton answers. `--check` runs each through
tools.pipeline.evaluate_answer (NVRTC, ptxas, nvdisasm, ABI; the GPU stages are skipped here).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tasks.solutions import ROOT
from tasks.solutions.dev.kernels.heads import kv_group, padded_head_dim, row_view

KERNEL = Path(__file__).parent / "cuda" / "attention_bwd.cu"
OUT = ROOT / "sm_90a"
TASKS = [f"mha_bwd_d{d}{c}" for d in (64, 96, 128) for c in ("", "_causal")] + [
    "gqa_bwd_d128",
    "gqa_bwd_d128_causal",
]
BLOCK_N, BLOCK_M, STAGES = 128, 64, 3  # as the kernel's macros of the same names
DELTA_ROWS = 8  # rows of attn_bwd_delta per block: one warp each


def shared_bytes(head_dim: int) -> int:
    """The main kernel's dynamic shared memory: its layout macros (OFF_K … SMEM_BYTES) evaluated in Python. The
    kernel traps when it is given less, so a drift between the two fails loudly on the first run."""
    chunks = padded_head_dim(head_dim) // 64
    k_tile, q_tile = BLOCK_N * 128, BLOCK_M * 128
    kv = 2 * chunks * k_tile
    stages = 2 * STAGES * chunks * q_tile  # Q and dO
    ds = 2 * BLOCK_N * 128  # two dSᵀ buffers
    dq = 2 * 2 * BLOCK_M * 128  # two warpgroups × two [64, 32] fp32 boxes
    rowvecs = STAGES * 2 * BLOCK_M * 4  # LSE and Delta per stage
    barriers = 8 + 16 * STAGES
    return kv + stages + ds + dq + rowvecs + barriers + 1024


def source_for(task: Task) -> str:
    causal = int(bool(task.params["causal"]))
    head = (
        f"#define HEAD_DIM {task.dims['D']}\n#define CAUSAL {causal}\n#define KV_GROUP {kv_group(task)}\n"
        "// (set by tasks/solutions/dev/cuda_bwd_answers.py for this task)\n"
    )
    return head + KERNEL.read_text()


def _tmap(tensor: str, shape: tuple[str, str], rows: int, cols: int) -> dict:
    return {"tensor_map": tensor, "shape": list(shape), "box": [rows, cols], "swizzle": "128B", "l2_promotion": "128B"}


def launch_spec(task: Task) -> dict:
    q_view, kv_view = row_view(task, "Q"), row_view(task, "K")
    kv_heads = task.tensor("K").shape[1]
    scale = {"scalar": "rsqrt(D)", "type": "f32"}
    return {
        "launches": [
            {
                "kernel": "attn_bwd_delta",
                "grid": [f"cdiv(B*H*S,{DELTA_ROWS})", 1, 1],
                "block": [32 * DELTA_ROWS, 1, 1],
                "args": [{"tensor": "O"}, {"tensor": "dO"}, {"tensor": "delta"}, {"scalar": "B*H*S", "type": "u32"}],
            },
            {
                "kernel": "attn_bwd_main",
                "grid": [f"cdiv(S,{BLOCK_N})", f"B*{kv_heads}", 1],
                "block": [384, 1, 1],
                "shared_bytes": shared_bytes(task.dims["D"]),
                "args": [
                    _tmap("Q", q_view, BLOCK_M, 64),
                    _tmap("K", kv_view, BLOCK_N, 64),
                    _tmap("V", kv_view, BLOCK_N, 64),
                    _tmap("dO", q_view, BLOCK_M, 64),
                    {"tensor_map": "LSE", "shape": ["B*H*S"], "box": [BLOCK_M]},
                    {"tensor_map": "delta", "shape": ["B*H*S"], "box": [BLOCK_M]},
                    _tmap("dq_accum", q_view, BLOCK_M, 32),
                    {"tensor": "dK"},
                    {"tensor": "dV"},
                    scale,
                    {"scalar": "S", "type": "u32"},
                ],
            },
            {
                "kernel": "attn_bwd_dq_convert",
                "grid": ["cdiv(B*H*S*D,1024)", 1, 1],
                "block": [256, 1, 1],
                "args": [{"tensor": "dq_accum"}, {"tensor": "dQ"}, scale, {"scalar": "B*H*S*D//4", "type": "u32"}],
            },
        ],
        "scratch": [
            {"name": "delta", "dtype": "float32", "shape": ["B", "H", "S"], "init": "zero"},
            {"name": "dq_accum", "dtype": "float32", "shape": ["B", "H", "S", "D"], "init": "zero"},
        ],
    }


def build_answer(task: Task) -> str:
    d = task.dims["D"]
    layout = (
        f"D={d} is read as two 64-column boxes, the second zero-filled by TMA past column {d}"
        if d == 96
        else f"D={d} is read as {padded_head_dim(d) // 64} 64-column box(es)"
    )
    note = f"""# Reference answer: {task.name} on sm_90a (CUDA C++ with inline PTX)

Generated by `python -m tasks.solutions.dev.cuda_bwd_answers` from the hand-written kernel
`tasks/solutions/dev/cuda/attention_bwd.cu` (our own code) with HEAD_DIM={d}, CAUSAL={int(bool(task.params["causal"]))},
KV_GROUP={kv_group(task)}. Do not edit by hand: change the kernel or the generator and regenerate.

Three launches: Delta = rowsum(dO∘O) into the scratch `delta`; the main kernel, one CTA per (128 keys,
batch · K/V head), K and V loaded once by TMA, a producer warpgroup streaming Q, dO, LSE, Delta of 64 queries
through a 3-stage mbarrier ring and two consumer warpgroups (setmaxnreg 240) computing S, P, dP, dS, dV, dK
with m64n64k16 wgmma and adding dS·K into the fp32 scratch `dq_accum` by TMA reduce-add; then
dQ = bf16(dq_accum · scale). {layout}. Both scratch buffers are zeroed before each run. Measured on the H200:
tasks/solutions/README.md.
"""
    spec = json.dumps(launch_spec(task), indent=1)
    return f"{note}\n```cuda\n{source_for(task)}```\n\n```json\n{spec}\n```\n"


def check(task: Task, answer: str) -> dict:
    """The static evaluation's status, the target groups in the SASS, registers and spills."""
    from tasks.solutions.dev.generate import check_answer

    return check_answer(task, Arch.resolve("sm_90a"), answer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the answers (default {OUT})")
    parser.add_argument("--tasks", nargs="*", default=TASKS, help="task names (default: all eight)")
    parser.add_argument("--check", action="store_true", help="evaluate each answer statically")
    args = parser.parse_args(argv)
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        print(f"--tasks: {', '.join(unknown)} not among {', '.join(TASKS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.tasks:
        task = get_task(name)
        answer = build_answer(task)
        path = args.out / f"{name}.md"
        path.write_text(answer)
        line = f"{path}"
        if args.check:
            result = check(task, answer)
            failed += result["status"] != "unverified" or bool(result["spills"]) or bool(result["missing"])
            line += f": {json.dumps(result)}"
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
