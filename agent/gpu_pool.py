"""The GPUs of this machine shared by many concurrent runs (agent.bench): one GpuService per visible GPU,
one evaluation at a time on each (a service is not thread-safe, and two kernels timed together would
slow each other), each evaluation sent to the least busy GPU of the attempt's arch.

Runs get a `PooledHarness` each; closing it leaves the pool's services running for the other runs, and
the bench closes the pool once, at the end."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from agent.harness import PipelineHarness
from tools.pipeline import Attempt, EvalOptions
from tools.schema import Arch, Evaluation, Task

if TYPE_CHECKING:
    from tools.gpu.service import GpuService


class Interrupted(RuntimeError):
    """The bench was interrupted while this attempt was on a GPU; its result is not the kernel's verdict
    (the worker was stopped under it), so the turn must not be recorded: the run resumes it later."""


def visible_gpus() -> tuple[int, str | None]:
    """How many GPUs the driver shows this process, and why there are none when there are none."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        return 0, f"cuda-python is not installed here ({e})"
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0, f"no usable NVIDIA GPU here (cuInit: {err.name})"
        err, count = driver.cuDeviceGetCount()
    except Exception as e:  # no driver library, or a broken installation
        return 0, f"no usable NVIDIA GPU here ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return 0, "no NVIDIA GPU visible to this process"
    return count, None


class GpuPool:
    """Services by device index; `lease(arch)` waits for the least busy GPU that can run `arch`."""

    def __init__(self, services: list[GpuService], missing: str | None = None):
        """`missing`: why there are no services (eval.gpu=false, no GPU), for runs to report."""
        self.services = services
        self.missing = missing
        self.interrupted = False
        self._busy = [0] * len(services)  # evaluations running or waiting, per GPU
        self._locks = [threading.Lock() for _ in services]
        self._state = threading.Lock()
        self._reasons: dict[Arch, str | None] = {}

    @classmethod
    def open(cls, use_gpu: bool) -> GpuPool:
        """A service per visible GPU (each starts its worker on first use), or none and why."""
        if not use_gpu:
            return cls([], "turned off (eval.gpu=false)")
        count, missing = visible_gpus()
        if not count:
            return cls([], missing)
        from tools.gpu.service import GpuService

        return cls([GpuService(device=i) for i in range(count)])

    def unavailable_reason(self, arch: Arch) -> str | None:
        """Why no GPU here can run `arch` (the first GPU's reason), or None when one can."""
        with self._state:
            if arch not in self._reasons:
                reasons = [s.unavailable_reason(arch) for s in self.services]
                if not reasons:
                    self._reasons[arch] = self.missing or "no GPU service"
                else:
                    self._reasons[arch] = None if None in reasons else reasons[0]
            return self._reasons[arch]

    @contextmanager
    def lease(self, arch: Arch) -> Iterator[GpuService]:
        """The least busy GPU of `arch`, held alone for the duration (callers check availability first)."""
        with self._state:
            able = [i for i, s in enumerate(self.services) if s.unavailable_reason(arch) is None]
            index = min(able, key=lambda i: (self._busy[i], i))
            self._busy[index] += 1
        try:
            with self._locks[index]:
                yield self.services[index]
        finally:
            with self._state:
                self._busy[index] -= 1

    def harness(self, task: Task, arch: Arch, options: EvalOptions) -> PooledHarness:
        return PooledHarness(self, task, arch, options)

    def interrupt(self) -> None:
        """Stop every worker now; evaluations cut short by it raise Interrupted instead of returning."""
        self.interrupted = True
        self.close()

    def close(self) -> None:
        for service in self.services:
            service.close()


class PooledHarness(PipelineHarness):
    """The pipeline, its GPU stages on the pool; one per run, sharing the pool's services."""

    def __init__(self, pool: GpuPool, task: Task, arch: Arch, options: EvalOptions):
        super().__init__(task, arch, options, device=0, use_gpu=False)
        self.pool = pool

    def gpu_unavailable(self) -> str | None:
        return self.pool.unavailable_reason(self.arch)

    def on_gpu(self, attempt: Attempt) -> Evaluation:
        if self.gpu_unavailable() is not None:
            return attempt.on_gpu(self.pool)  # type: ignore[arg-type]  # records the pool's reason as skipped
        with self.pool.lease(self.arch) as gpu:
            evaluation = attempt.on_gpu(gpu)
        if self.pool.interrupted:
            raise Interrupted("the bench was interrupted during this attempt's GPU stages")
        return evaluation

    def close(self) -> None:
        """The services are the pool's: the bench closes them once all runs are done."""
