"""The GPUs of this machine shared by many concurrent runs: one GpuService per visible GPU, one evaluation
at a time on each (a service is not thread-safe, and two kernels timed together would slow each other),
each evaluation sent to the least busy GPU that can run the attempt's arch.

The pool is a `Gpu` (tools/gpu/base.py) like a single service, so a run neither knows nor cares which it
has; whoever opened the pool closes it once, after all its runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tasks.schema import Arch, Task
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.devices import DeviceInfo, NoDevice, visible_count
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pool.base import OFF, Interrupted, Load


class LocalPool:
    """Services by device index; each evaluation waits for the least busy GPU that can run its arch."""

    def __init__(self, services: list[GpuService], missing: str | None = None):
        """`missing`: why there are no services (eval.gpu=false, no GPU), for runs to report."""
        self.services = services
        self.missing = missing
        self.interrupted = False
        self._busy = [0] * len(services)  # evaluations running or waiting, per GPU
        self._locks = [threading.Lock() for _ in services]
        self._state = threading.Lock()

    @classmethod
    def open(cls, use_gpu: bool = True) -> LocalPool:
        """A service per visible GPU (each starts its worker on first use), or none and why."""
        if not use_gpu:
            return cls([], OFF)
        try:
            count = visible_count()
        except NoDevice as e:
            return cls([], str(e))
        return cls([GpuService(device=i) for i in range(count)])

    def unavailable_reason(self, arch: Arch) -> str | None:
        """Why no GPU here can run `arch` (the first GPU's reason), or None when one can."""
        if not self.services:
            return self.missing or "no GPU service"
        reasons = [s.unavailable_reason(arch) for s in self.services]
        return None if None in reasons else reasons[0]

    def device_info(self) -> DeviceInfo | None:
        """The first GPU (a pool of one is that GPU); per evaluation, the Evaluation names its device."""
        return self.services[0].device_info() if self.services else None

    def describe(self) -> str:
        return f"{len(self.services)} GPU(s) here" if self.services else f"GPU stages skipped: {self.missing}"

    def load(self) -> list[Load]:
        """Per GPU: one running while any is held (the one holding its lock), the others queued behind it."""
        with self._state:
            busy = list(self._busy)
        loads = []
        for service, count in zip(self.services, busy, strict=True):
            info = service.device_info()
            arch = info.arch if info else None
            loads.append(Load(str(arch) if arch else "?", "local", min(count, 1), max(count - 1, 0)))
        return loads

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        with self._lease(arch) as gpu:
            outcome = gpu.evaluate(task, arch, module, options)
        if self.interrupted:
            raise Interrupted("the pool was interrupted during this attempt's GPU stages")
        return outcome

    @contextmanager
    def _lease(self, arch: Arch) -> Iterator[GpuService]:
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

    def interrupt(self) -> None:
        """Stop every worker now; evaluations cut short by it raise Interrupted instead of returning."""
        self.interrupted = True
        self.close()

    def close(self) -> None:
        for service in self.services:
            service.close()
