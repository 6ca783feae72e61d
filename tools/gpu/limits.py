"""How long each part of an attempt's GPU stages may take before the service gives up on it: the run and
check stages from the task's work (its FLOPs at a floor rate, times the executions the stage makes, times a
margin, at least a few seconds), so a hanging GEMM costs seconds rather than minutes; the time stage from
its timing budget; worker start, baseline preparation, profile, perf and memcheck each from what they are."""

from __future__ import annotations

from pydantic import BaseModel

from tasks.expr import evaluate
from tasks.schema import Task
from tools.gpu.timing import TimingOptions
from tools.options import EvalOptions

MARGIN = 10  # covers the input draw and the fp32 reference beside each execution, and a slow first launch
MIN_STAGE_S = 5.0  # module load, allocation and first-use library start-up fit in this, whatever the task
TIME_RUNS_OUTSIDE_BUDGET = 8  # the estimates, one warm-up and the fewest runs a reduced plan makes (timing.py)
WORKER_START_S = 120.0  # a fresh interpreter with torch and a CUDA context: 4 s on the H200, more on a cold disk
BASELINE_S = 60.0  # the library's first call: loading it and building plans (cuDNN), then checking it once
PROFILE_S = 120.0  # Nsight Compute: ~9 s of start-up and a replay per metric pass
PERF_S = 180.0  # each of the perf pass's two profiles: the library's draws its inputs (and derived ones) first
MEMCHECK_S = 600.0  # compute-sanitizer slows memory-bound kernels by orders of magnitude


class StageLimits(BaseModel):
    """Seconds each part may take; the service restarts the clock at each part the worker starts."""

    run: float
    check: float
    time: float
    recheck: float
    rerun: float
    baseline: float = BASELINE_S
    profile: float = PROFILE_S
    perf: float = PERF_S
    memcheck: float = MEMCHECK_S
    basis: str  # where the run and check limits come from, for the time-out message

    def of(self, part: str) -> float:
        return getattr(self, part)


def stage_limits(task: Task, options: EvalOptions) -> StageLimits:
    """The limits of one attempt on `task`; `options.timeout_s`, when set, replaces the run and check limits."""
    tflop = evaluate(task.flops, task.dims) / 1e12
    one = tflop / options.floor_tflops  # one execution at the floor rate
    if options.timeout_s is not None:
        run = check = options.timeout_s
        basis = "set by eval.timeout_s"
    else:
        run = max(MIN_STAGE_S, MARGIN * one)
        check = max(MIN_STAGE_S, MARGIN * options.trials * one)
        basis = (
            f"from the task ({tflop:.2f} TFLOP per execution at a floor of {options.floor_tflops:g} TFLOP/s, "
            f"×{MARGIN}, at least {MIN_STAGE_S:g} s; eval.timeout_s sets another)"
        )
    time_s = 2 * TimingOptions().budget_s + TIME_RUNS_OUTSIDE_BUDGET * run
    return StageLimits(run=run, check=check, time=time_s, recheck=run, rerun=run, basis=basis)
