"""`python -m tasks.solutions.check_all [--arch sm_90a] [--tasks T ...] [--out FILE.jsonl]`: every reference
answer through the whole harness with one warm worker, then the table docs/performance.md shows (task × arch → status,
targets executed, speedup, TFLOP/s). Without a GPU of the arch, the GPU stages are reported skipped."""

from __future__ import annotations

import argparse
from pathlib import Path

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import available, reference_answer
from tools.evaluation import Evaluation
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer


def row(ev: Evaluation) -> str:
    executed = ", ".join(f"{g} {n:,}" for g, n in (ev.target_counts or {}).items()) or "not profiled"
    speedup = f"{ev.speedup:.2f}×" if ev.speedup else "-"
    tflops = f"{ev.tflops:.0f}" if ev.tflops else "-"
    command = f"`python -m tools.evaluate --task {ev.task} --arch {ev.arch} tasks/solutions/{ev.arch}/{ev.task}.md`"
    return f"| {ev.task} | {ev.arch} | {ev.status} | {executed} | {speedup} | {tflops} | {command} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--tasks", nargs="*", help="default: every task with a reference answer for the arch")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, help="append one JSON Evaluation per line")
    args = parser.parse_args()
    arch = Arch.resolve(args.arch)
    names = args.tasks or [t for t, a in available() if a == arch]
    # The instruction counts prove the targets ran; the perf pass explains a time to a model: not needed here.
    options = EvalOptions(seed=0, profile=Profile.OFF if args.no_profile else Profile.COUNTS, timeout_s=args.timeout)
    print("| task | arch | status | target instructions executed (warp-level) | speedup | TFLOP/s | command |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with GpuService() as gpu:
        for name in names:
            ev = evaluate_answer(reference_answer(name, arch), get_task(name), arch, options, gpu)
            print(row(ev), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(ev.model_dump_json() + "\n")
            if ev.status != "passed":
                print(f"    {ev.message[:800]}", flush=True)


if __name__ == "__main__":
    main()
