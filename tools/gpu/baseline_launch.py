"""`python -m tools.gpu.baseline_launch TASK`: one call of the task's baseline library on its inputs, between
cudaProfilerStart and cudaProfilerStop, for Nsight Compute run with `--profile-from-start off` (perf.py).

Everything else — the input draw, derived inputs, the library's plan building and warm-up calls — happens
outside that range, so the profile holds exactly the library's kernels for one call, as they are timed."""

from __future__ import annotations

import os
import sys

import torch

from tasks.baselines import prepare_baseline
from tasks.catalog import get_task
from tasks.inputs import draw_inputs
from tools import procs

WARMUP_CALLS = 2  # the first builds the library's plans; the second runs as every timed call does


def main(argv: list[str]) -> int:
    (name,) = argv
    task = get_task(name)
    inputs = draw_inputs(task, task.dims, seed=0, device="cuda")
    call = prepare_baseline(task.baseline.call, inputs, task.params)
    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    procs.die_with_parent(os.getppid())  # ncu starts it: it must not outlive ncu
    sys.exit(main(sys.argv[1:]))
