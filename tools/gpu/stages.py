"""The GPU stages of an attempt: which there are, in what order, where each runs, and what runs after what — the one
place that decides it. The worker process (tools/gpu/worker.py) runs the stages that need its CUDA context and torch,
the profile stage's counts included (CUPTI, tools/gpu/cupti_counts.py); the service (tools/gpu/service.py) runs the
others as Nsight Compute or compute-sanitizer processes on the torch-free launcher — and the profile stage's counts
where the worker's CUPTI could not count them (its profile stage skipped, the targets unset) — and each side asks this
module which of its stages an attempt gets.

The sequence: run → check → time → profile → perf, each only after the ones before it did not fail, so a failing
check (or re-check after timing) pays for neither timing nor counting (profile and perf never fail on their own:
without a counter they are skipped; a kernel fault while counting fails profile as it fails any stage). Then the
diagnoses, compute-sanitizer passes that look at what the sequence found: memcheck locates a kernel fault (and checks
a correct attempt when eval.memcheck asks), racecheck looks at a mismatch when eval.racecheck asks."""

from __future__ import annotations

from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu.base import GpuOutcome
from tools.options import EvalOptions, Profile

GPU_STAGES = (Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE, Stage.PERF)
IN_WORKER = (Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE)  # the sequence's start: one request answers them
DIAGNOSES = (Stage.MEMCHECK, Stage.RACECHECK)


def planned(options: EvalOptions, speedup: float | None = None) -> list[Stage]:
    """The stages of the sequence an attempt with these options runs, in order; `speedup` is the time stage's once
    it is measured (under profile=auto the perf pass depends on it; None: not timed, or not yet)."""
    profiled = options.profile is not Profile.OFF
    wanted = {Stage.RUN: True, Stage.CHECK: True, Stage.TIME: options.time, Stage.PROFILE: profiled,
              Stage.PERF: profiled and options.wants_perf(speedup)}  # fmt: skip
    return [s for s in GPU_STAGES if wanted[s]]


def in_worker(options: EvalOptions) -> list[Stage]:
    """What the worker runs of an attempt, in order."""
    return [s for s in planned(options) if s in IN_WORKER]


def after_worker(options: EvalOptions, speedup: float | None, counted: bool = True) -> list[Stage]:
    """What the service runs of the sequence once the worker's stages passed, in order; `counted`: whether the
    worker counted the targets (when not, the service's Nsight Compute profile counts them, first)."""
    fallback = [Stage.PROFILE] if not counted and Stage.PROFILE in planned(options, speedup) else []
    return fallback + [s for s in planned(options, speedup) if s not in IN_WORKER]


def diagnoses(status: Status, fault: str | None, options: EvalOptions) -> list[Stage]:
    """The compute-sanitizer passes after the sequence ended with `status`; `fault`: the driver error of a fault of
    the kernel itself (not a launch the driver refused, not the worker dying)."""
    if status is Status.RUNTIME_ERROR and fault:
        return [Stage.MEMCHECK]
    if status is Status.MISMATCH and options.racecheck:
        return [Stage.RACECHECK]
    if status is Status.PASSED and options.memcheck:
        return [Stage.MEMCHECK]
    return []


def skipped(reason: str) -> GpuOutcome:
    """The GPU stages of an attempt that cannot run, skipped for `reason`: it stays unverified. Its stages are those
    an attempt with the default options runs before it is timed."""
    stages = [StageResult(name=s, state=StageState.SKIPPED, message=reason) for s in planned(EvalOptions())]
    message = f"compiled and checked statically; GPU stages skipped: {reason}"
    return GpuOutcome(status=Status.UNVERIFIED, message=message, stages=stages)
