"""`python -m tools.dev.bench_perf [--out DIR] [--repeats N]`: what the perf pass (eval.profile=perf) costs per
attempt on an H200, and what it reports (a script, not a test; its figures go into docs/performance.md).
For the Triton TMA GEMM and plain-pointer GEMM fixtures on the GEMM task, and the forward-attention
reference answer: the perf stage's wall time on the first attempt of a task (the library's kernels profiled
too) and on later ones (median of N), beside the counts profile's; the limiter named and the tensor-pipe
shares. Each part runs on its own; JSON goes to DIR/bench_perf.json after every part, a table is printed
last."""

from __future__ import annotations

import argparse
import json
import statistics
import traceback
from pathlib import Path
from typing import Any

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.evaluation import Stage
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.perf_report import longest
from tools.pipeline import evaluate_answer

FIXTURES = Path(__file__).parents[2] / "tests" / "fixtures" / "gpu"
CASES = {  # name → (task alias, answer text)
    "tma_gemm": ("gemm", lambda: (FIXTURES / "triton_gemm_tma.md").read_text()),
    "pointer_gemm": ("gemm", lambda: (FIXTURES / "triton_gemm_pointers.md").read_text()),
    "attn_fwd_reference": ("attn_fwd", lambda: reference_answer(get_task("attn_fwd").name, Arch.SM_90A)),
}


def seconds(ev, name: Stage) -> float | None:
    stage = ev.stage(name)
    return round(stage.seconds, 2) if stage else None


def measure(name: str, repeats: int) -> dict[str, Any]:
    alias, text = CASES[name]
    task = get_task(alias)
    options = EvalOptions(trials=1, seed=5, profile="perf")
    runs = []
    with GpuService() as gpu:  # a fresh worker: the first attempt profiles the library too
        for _ in range(repeats + 1):
            ev = evaluate_answer(text(), task, Arch.SM_90A, options, gpu)
            runs.append(ev)
    first, later = runs[0], runs[1:]
    report = first.perf
    return {
        "status": str(first.status),
        "perf_stage": first.stage(Stage.PERF).message if first.stage(Stage.PERF) else None,
        "first_perf_s": seconds(first, Stage.PERF),
        "later_perf_s": statistics.median(seconds(ev, Stage.PERF) or 0 for ev in later) if later else None,
        "counts_profile_s": statistics.median(seconds(ev, Stage.PROFILE) or 0 for ev in runs),
        "limiter": report.limiter if report else None,
        "tensor_pipe_pct": longest(report.launches).tensor_pipe_pct if report else None,
        "library_tensor_pipe_pct": longest(report.baseline).tensor_pipe_pct if report and report.baseline else None,
        "library_kernel": longest(report.baseline).kernel if report and report.baseline else None,
        "speedup": first.speedup,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.bench_perf", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for name in CASES:
        try:
            results[name] = measure(name, args.repeats)
        except Exception:  # one part failing leaves the others' figures
            results[name] = {"error": traceback.format_exc()[-2000:]}
        (args.out / "bench_perf.json").write_text(json.dumps(results, indent=2))
    print("| case | first perf s | later perf s | counts s | limiter | tensor pipe % (yours / library) |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | error: {r['error'].splitlines()[-1][:80]} | | | | |")
            continue
        print(f"| {name} | {r['first_perf_s']} | {r['later_perf_s']} | {r['counts_profile_s']} | {r['limiter']} | "
              f"{r['tensor_pipe_pct']} / {r['library_tensor_pipe_pct']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
