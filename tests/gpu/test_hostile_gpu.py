"""Hostile answers on a real Hopper GPU: scratch that does not fit in memory is a clear launch_error, a kernel
that writes its input is caught, and after each the same worker passes a correct answer. Skipped without an
sm_90 GPU (the lead runs these on the H200; tools/dev/bench_hostile_gpu.py measures the same cases)."""

from __future__ import annotations

import pytest

from tasks.schema import Arch
from tests.gpu.kernels import answer
from tests.gpu.test_harness_gpu import QUICK, TASK, assert_healthy, module_of, run
from tools.evaluation import Stage, Status
from tools.plan import BufferPlan

pytestmark = pytest.mark.hopper


def test_scratch_that_does_not_fit_is_a_launch_error_and_the_worker_stays_healthy(gpu):
    module = module_of(answer("correct"))
    # 200 GiB of scratch: over any GPU's memory (the planner caps scratch at 16 GiB; a plan is data, so test
    # the worker's own defence too).
    module.plan.buffers.append(BufferPlan(name="huge", dtype="float32", shape=[50, 1 << 30], role="scratch",
                                          init="zero"))  # fmt: skip
    restarts = gpu.restarts
    outcome = gpu.evaluate(TASK, Arch.SM_90A, module, QUICK)
    assert outcome.status is Status.LAUNCH_ERROR, outcome.message
    assert "out of GPU memory in the run stage" in outcome.message and "use less scratch" in outcome.message
    assert outcome.stages[-1].name is Stage.RUN
    assert gpu.restarts == restarts  # not a crash: the same worker goes on
    assert_healthy(gpu)


def test_a_kernel_that_writes_its_input_is_a_mismatch(gpu):
    ev = run(gpu, answer("writes_input"))
    assert ev.status is Status.MISMATCH, ev.message
    assert "wrote into its input(s) A" in ev.message
    assert_healthy(gpu)
