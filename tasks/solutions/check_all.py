"""`python -m tasks.solutions.check_all [--arch sm_90a] [--tasks GROUP|NAME ...] [--sample] [--trials N]
[--out FILE.jsonl]`: the reference answers through the whole harness with one warm worker, then the table
docs/performance.md shows (task × arch → status, targets executed, speedup, TFLOP/s). `--sample` takes the smallest
and the largest workload of every definition and every fp8 problem; a task without a reference answer gets a row
saying so. Without a GPU of the arch, the GPU stages are reported skipped."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.catalog import GROUPS, TASKS, get_task, resolve_names
from tasks.schema import Arch, UnknownName
from tasks.solutions import ROOT, answer_path, available, reference_answer
from tools.evaluation import Evaluation
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer


def row(ev: Evaluation) -> str:
    executed = ", ".join(f"{g} {n:,}" for g, n in (ev.target_counts or {}).items()) or "not profiled"
    speedup = f"{ev.speedup:.2f}×" if ev.speedup else "-"
    tflops = f"{ev.tflops:.0f}" if ev.tflops else "-"
    answer = answer_path(ev.task, ev.arch).relative_to(ROOT.parents[1])  # the definition's file, whatever the workload
    command = f"`python -m tools.evaluate --task {ev.task} --arch {ev.arch} {answer}`"
    return f"| {ev.task} | {ev.arch} | {ev.status} | {executed} | {speedup} | {tflops} | {command} |"


def sample() -> list[str]:
    """The smallest and the largest workload of every definition (one, where it has one), then every fp8 problem."""
    by_definition: dict[str, list[str]] = {}
    for name, task in TASKS.items():
        by_definition.setdefault(task.definition, []).append(name)
    picked = []
    for names in by_definition.values():
        sizes = sorted(names, key=lambda n: TASKS[n].dims[TASKS[n].axis] if TASKS[n].axis else 0)
        picked += [sizes[0], sizes[-1]] if len(sizes) > 1 else sizes
    return list(dict.fromkeys([*picked, *GROUPS["fp8"]]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--tasks", nargs="*", help="groups and names (default: every task with a reference answer)")
    parser.add_argument("--sample", action="store_true", help="smallest and largest workload per definition, all fp8")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--trials", type=int, help=f"checked trials per task (default {EvalOptions().trials})")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, help="append one JSON Evaluation per line")
    args = parser.parse_args(argv)
    arch = Arch.resolve(args.arch)
    try:
        names = resolve_names(args.tasks) if args.tasks else []
    except UnknownName as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.sample:
        names = [n for n in sample() if not args.tasks or n in names]
    names = names or [t for t, a in available() if a == arch]
    # The instruction counts prove the targets ran; the perf pass explains a time to a model: not needed here.
    # Fewer trials fit a device call: each backward trial computes an fp32 reference.
    trials = {} if args.trials is None else {"trials": args.trials}
    profile = Profile.OFF if args.no_profile else Profile.COUNTS
    options = EvalOptions(seed=0, profile=profile, timeout_s=args.timeout, **trials)
    print("| task | arch | status | target instructions executed (warp-level) | speedup | TFLOP/s | command |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failed = 0
    with GpuService() as gpu:
        for name in names:
            answer = reference_answer(name, arch)
            if answer is None:
                print(f"| {name} | {arch} | no reference answer | - | - | - | - |", flush=True)
                continue
            ev = evaluate_answer(answer, get_task(name), arch, options, gpu)
            print(row(ev), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(ev.model_dump_json() + "\n")
            if ev.status != "passed":
                failed += 1
                print(f"    {ev.message[:800]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
