"""Write the hand-written CUDA attention forward (`tasks/solutions/dev/cuda/attention_fwd.cu`) as sm_90a answers:

    python -m tasks.solutions.dev.cuda_answers [--out DIR] [--check]

One answer per bf16 forward definition below, on sm_90a only (sm_100a keeps the Triton answers; the D=256 and fp8
forwards too): a provenance note, one ```cuda block (the source with the definition's macros in front) and one
```json LaunchSpec. They are the reference answers (tasks/solutions/sm_90a/, the default `--out`); `python -m
tasks.solutions.dev.generate` writes them through this module with every other answer. `--out DIR` writes a variant
elsewhere to be timed beside them. `--check` runs each through the static stages (NVRTC, ptxas, nvdisasm, ABI) and
fails on a missing target group, a spill or a ptxas performance warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tasks.solutions import ROOT, answer_key, answered_by
from tasks.solutions.dev.kernels.heads import kv_group, row_view

SOURCE = ROOT / "dev" / "cuda" / "attention_fwd.cu"
ARCH = Arch.SM_90A
OUT = ROOT / str(ARCH)
DEFINITIONS = [f"mha_with_lse_d{d}{c}" for d in (64, 96, 128) for c in ("", "_causal")] + [
    "gqa_with_lse_d128",
    "gqa_with_lse_d128_causal",
]
KERNEL = "attention_fwd"
BLOCK_M = 128  # query rows per work item, as in the source
BOX = [128, 64]  # one TMA box: 128 rows of 64 bf16 (the 128-byte swizzle's width)


def task_of(definition: str) -> Task:
    """The definition's first workload (the answer serves all of them: S is a run-time argument)."""
    return get_task(answered_by(definition)[0])


def shared_bytes(d: int) -> int:
    """The kernel's dynamic shared memory at head dim `d`: Q, the K and V rings, the mbarriers, and 1 KiB to align the
    base. The source recomputes it and refuses to compile (static_assert on SHARED_BYTES) if the two differ."""
    tile = (64 if d <= 64 else 128) * 128 * 2  # 128 rows, the head dim padded to 64 or 128, bf16
    stages = 4 if d <= 64 else 2
    return 1024 + tile * (1 + 2 * stages) + 8 * (2 + 4 * stages)


def specialised_source(task: Task) -> str:
    d = task.dims["D"]
    macros = {"HEAD_DIM": d, "CAUSAL": int(bool(task.params["causal"])), "KV_GROUP": kv_group(task),
              "SHARED_BYTES": shared_bytes(d)}  # fmt: skip
    return "".join(f"#define {k} {v}\n" for k, v in macros.items()) + SOURCE.read_text()


def launch_spec(task: Task) -> dict:
    def tensor_map(name: str) -> dict:
        return {"tensor_map": name, "shape": list(row_view(task, name)), "box": BOX, "swizzle": "128B",
                "l2_promotion": "256B"}  # fmt: skip

    return {
        "launches": [
            {
                "kernel": KERNEL,
                "grid": [f"min(SMS, (S//{BLOCK_M})*B*H)", 1, 1],  # persistent: one CTA per SM at most
                "block": [384, 1, 1],
                "shared_bytes": shared_bytes(task.dims["D"]),
                "args": [
                    tensor_map("Q"),
                    tensor_map("K"),
                    tensor_map("V"),
                    {"tensor": "O"},
                    {"tensor": "LSE"},
                    {"scalar": "S", "type": "u32"},
                    {"scalar": "B*H", "type": "u32"},
                    {"scalar": repr(float(task.params["scale"])), "type": "f32"},
                ],
            }
        ]
    }


def build_answer(definition: str) -> str:
    task = task_of(definition)
    source = SOURCE.relative_to(ROOT.parent.parent)
    note = f"""# Reference answer: {definition} on {ARCH}

Hand-written CUDA C++ with inline PTX (FlashAttention-3's shape: a persistent grid, a TMA producer warpgroup and two
wgmma consumer warpgroups taking turns), from `{source}`, written by
`python -m tasks.solutions.dev.cuda_answers` with the definition's macros in front. Do not edit by hand: change the
source or the generator and regenerate. Measured on the H200: tasks/solutions/README.md.
"""
    spec = json.dumps(launch_spec(task), indent=1)
    return f"{note}\n```cuda\n{specialised_source(task).rstrip()}\n```\n\n```json\n{spec}\n```\n"


def static_report(definition: str, answer: str) -> dict:
    """The static stages' verdict on an answer, with what a fast kernel must also show: the target groups in the
    SASS, no spills, no ptxas performance warning (C75xx: wgmma serialized) and the register count ptxas gave."""
    from tasks.solutions.dev.generate import check_answer
    from tools.answer import extract_solution
    from tools.assemble import compile_cuda
    from tools.ptxas_advice import code_of

    task = task_of(definition)
    report = check_answer(task, ARCH, answer)
    compiled = compile_cuda(extract_solution(answer).source, ARCH, timeout_s=300)
    warnings = [d.message for d in compiled.diagnostics if (code_of(d.message) or "").startswith("C75")]
    report["performance_warnings"] = warnings
    report["stack_bytes"] = {k.name: k.stack_bytes for k in compiled.kernels if k.stack_bytes}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the answers (default {OUT})")
    parser.add_argument("--check", action="store_true", help="run the static stages on each answer")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for definition in DEFINITIONS:
        answer = build_answer(definition)
        path = args.out / f"{answer_key(task_of(definition))}.md"
        path.write_text(answer)
        line = f"{definition:<26} {path}"
        if args.check:
            r = static_report(definition, answer)
            bad = r["status"] != "unverified" or r["missing"] or r["spills"] or r["performance_warnings"]
            failed += bool(bad)
            line += f"  {r['status']}  registers {r['registers']}  targets {sorted(r['targets'])}"
            for key in ("missing", "spills", "performance_warnings", "stack_bytes", "message"):
                if r[key]:
                    line += f"\n    {key}: {r[key]}"
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
