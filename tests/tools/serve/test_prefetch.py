"""The GPU never waits on a compile when attempts queue: the service's runner builds the next attempts on its static
threads while one attempt holds the GPU (a real GpuService and local pool, whose worker is the stand-in of
tests/tools/gpu/stub_worker.py holding the GPU for seconds; the static stages are the real ptxas and nvdisasm)."""

from __future__ import annotations

import json
import time

from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.gpu.stub_worker import STAND_IN
from tools.evaluation import Status
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pool.local import LocalPool
from tools.serve.runner import Runner
from tools.serve.schema import EvaluateRequest

GEMM = "gemm_n7168_k5120"
HOLD_S = 6.0  # each attempt's GPU stages, in the stand-in: longer than building the others takes
ATTEMPTS = 3


class _Service(GpuService):
    worker_module = "tests.tools.gpu.stub_worker"

    def device_info(self):
        return STAND_IN

    def unavailable_reason(self, arch: Arch) -> str | None:
        return STAND_IN.cannot_run(arch)


def test_the_next_attempts_are_built_while_one_holds_the_gpu(monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, HOLD_S]]))
    # the stand-in's verdict, one an Evaluation can carry without the worker's stage records
    monkeypatch.setenv("PTXBENCH_STUB_FAILURE", json.dumps({"status": "mismatch", "stage": "check", "message": "x"}))
    pool = LocalPool([_Service()])
    runner = Runner(pool, static_workers=ATTEMPTS, gpu_workers=ATTEMPTS)
    options = EvalOptions(time=False, profile=Profile.OFF, timeout_s=60)  # the run limit above the hold
    answer = reference_answer(GEMM, Arch.SM_90A)
    requests = [EvaluateRequest(task=GEMM, arch="sm_90a", answer=answer, options=options) for _ in range(ATTEMPTS)]
    try:
        futures = runner.evaluate_all(requests, Profile.OFF)
        deadline = time.monotonic() + 120
        while runner.queue_depth() != (0, ATTEMPTS):  # every one built, the first on the GPU, the others queued
            assert time.monotonic() < deadline, runner.queue_depth()
            time.sleep(0.05)
        assert not any(f.done() for f in futures)  # all built before the first attempt's GPU stages ended
        evaluations = [f.result(timeout=120) for f in futures]
    finally:
        runner.close()
        pool.close()
    assert [e.status for e in evaluations] == [Status.MISMATCH] * ATTEMPTS
