"""Try candidate configs of the solutions' Triton kernels on the GPU, through the harness itself:

    python -m tasks.solutions.dev.tune_on_gpu [--tasks T ...] [--quick] [--only I ...] [--out F]
    python -m tasks.solutions.dev.tune_on_gpu --dry-run      # no GPU: build every candidate, list resources

Each candidate becomes an answer exactly as generate.py writes one (`build_answer`), built in parallel
processes first; then every answer goes through the real GpuService, one warm worker, the same stages a
model's answer goes through (check on fresh inputs, cold-L2 timing against the baseline in the same
worker; no profile). So every number this prints is one the harness would report, and the committed
answer (candidate 0, the generator's table entry) is measured beside its rivals in the same window.

Prints a table and writes JSON to --out (default $OUT/tune.json, else ./tune.json). To adopt a result:
make it the table's config in generate.py, regenerate (`python -m tasks.solutions.dev.generate --arch all
--check`) and run the tests.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from typing import Any

from tasks.catalog import CORE, get_task
from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.attention_bwd import AttnBwdConfig
from tasks.solutions.dev.kernels.attention_fwd import AttnFwdConfig
from tasks.solutions.dev.kernels.gemm import GemmConfig

ARCH = Arch.SM_90A
QUICK = 3  # candidates per task with --quick

# Candidates per task family; the generator's table entry is always tried first (see `candidates`).
CANDIDATES: dict[str, list[Any]] = {
    "gemm": [
        GemmConfig(128, 256, 64, 8, 8, 4, persistent=True, epilogue_split=True),
        GemmConfig(128, 256, 64, 8, 8, 3, persistent=True, epilogue_split=False),
        GemmConfig(256, 128, 64, 8, 8, 4, persistent=True, epilogue_split=True),
        GemmConfig(128, 256, 64, 16, 8, 4, persistent=True, epilogue_split=True),
    ],
    "attention_fwd": [
        AttnFwdConfig(128, 128, 8, 3),
        AttnFwdConfig(128, 128, 8, 2),
        AttnFwdConfig(128, 64, 8, 3),
        AttnFwdConfig(64, 64, 4, 3),
    ],
    "fp8_attention_fwd": [
        AttnFwdConfig(128, 128, 8, 3),
        AttnFwdConfig(128, 128, 8, 4),
        AttnFwdConfig(128, 64, 8, 3),
        AttnFwdConfig(128, 64, 8, 2),
    ],
    "attention_bwd": [
        AttnBwdConfig(128, 64, 8, 3, 128, 64, 8, 3),
        AttnBwdConfig(128, 64, 8, 2, 128, 64, 8, 2),
        AttnBwdConfig(128, 32, 8, 3, 128, 32, 8, 3),
        AttnBwdConfig(64, 64, 4, 3, 64, 64, 4, 3),
    ],
}


def candidates(task: Task, quick: bool, only: list[int] | None) -> list[Any]:
    from tasks.solutions.dev.generate import config_for

    chosen = config_for(task)
    found = [chosen] + [c for c in CANDIDATES[task.family] if c != chosen]
    if only:
        found = [c for i, c in enumerate(found) if i in only]
    return found[:QUICK] if quick else found


def _build(task_name: str, config: Any) -> str:
    """The answer for one candidate (in a child process: Triton compiles in parallel)."""
    from tasks.solutions.dev.generate import build_answer

    return build_answer(get_task(task_name), ARCH, config)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=CORE, help="task names (default: the 5 core tasks)")
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK} candidates per task")
    parser.add_argument("--only", type=int, nargs="*", help="candidate indices to run (0 = the table's)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build the candidates, list resources")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="parallel builds")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tune.json"))
    args = parser.parse_args(argv)

    from tools.gpu.service import GpuService
    from tools.options import EvalOptions
    from tools.pipeline import evaluate_answer

    jobs = [(get_task(name), cfg) for name in args.tasks for cfg in candidates(get_task(name), args.quick, args.only)]
    with ProcessPoolExecutor(args.jobs) as pool:
        answers = list(pool.map(_build, [t.name for t, _ in jobs], [c for _, c in jobs]))
    options = EvalOptions(trials=1, seed=0, time=not args.dry_run, profile=False, timeout_s=300)
    results = []
    with GpuService() as gpu:
        for (task, cfg), answer in zip(jobs, answers, strict=True):
            ev = evaluate_answer(answer, task, ARCH, options, None if args.dry_run else gpu)
            kernels = next((s.detail.get("kernels", []) for s in ev.stages if s.name == "compile"), [])
            row = {"task": task.name, "config": f"{type(cfg).__name__}({asdict(cfg)})", "status": ev.status.value,
                   "speedup": ev.speedup, "kernel_ms": ev.kernel_ms, "baseline_ms": ev.baseline_ms,
                   "registers": {k["name"]: k["registers"] for k in kernels},
                   "message": "" if ev.correct or ev.status == "unverified" else ev.message[:300]}  # fmt: skip
            results.append(row)
            speed = f"{ev.speedup:.3f}× ({ev.kernel_ms:.3f} / {ev.baseline_ms:.3f} ms)" if ev.speedup else "-"
            print(f"{task.name:24s} {row['status']:12s} {speed:30s} {row['config']} {row['message']}", flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
