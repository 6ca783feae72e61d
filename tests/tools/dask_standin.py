"""A Dask worker preload for the pool's tests, after tools.gpu.dask_worker's own: it swaps the worker's GPU service
for a stand-in that takes PTXBENCH_STANDIN_HOLD_S seconds per request, as a kernel under test would, then passes. It
appends `took WORKER` to PTXBENCH_STANDIN_LOG as it takes a request and `done WORKER` as it answers, so a test can
tell whether a request ran twice, or two at once on one worker."""

from __future__ import annotations

import os
import time

from tasks.schema import Arch, Task
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu import dask_worker
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.options import EvalOptions


class SleepingService:
    def __init__(self, name: str):
        self.name = name
        self.hold_s = float(os.environ["PTXBENCH_STANDIN_HOLD_S"])

    def unavailable_reason(self, arch: Arch) -> None:
        return None

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        self._log("took")
        time.sleep(self.hold_s)
        self._log("done")
        stages = [StageResult(name=name, state=StageState.PASSED) for name in (Stage.RUN, Stage.CHECK)]
        return GpuOutcome(status=Status.PASSED, message="correct (stand-in)", stages=stages, device="stand-in GPU")

    def _log(self, event: str) -> None:
        with open(os.environ["PTXBENCH_STANDIN_LOG"], "a") as log:  # one short append: whole lines, even from many
            log.write(f"{event} {self.name}\n")

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass


def dask_setup(worker) -> None:
    dask_worker.hold(SleepingService(str(worker.name)), str(worker.name))
