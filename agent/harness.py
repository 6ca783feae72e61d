"""The evaluation the loop calls, in the two steps its graph shows: the static stages (extract → compile →
sass → abi, on this machine) and the full evaluation through the GPU service (run → check → time →
profile). The harness is part of the run context, so tests can substitute recorded evaluations."""

from __future__ import annotations

from typing import Protocol

from tools.pipeline import Attempt, EvalOptions
from tools.schema import Arch, Evaluation, Task

PENDING = "the GPU stages run in the next step"


class Harness(Protocol):
    def gpu_unavailable(self) -> str | None:
        """Why the GPU stages cannot run here, or None when they can."""
        ...

    def static(self, answer: str) -> Evaluation:
        """Extract, compile, disassemble and check the ABI; GPU stages skipped, with the reason."""
        ...

    def full(self, answer: str) -> Evaluation:
        """Every stage, the GPU ones included."""
        ...

    def close(self) -> None: ...


class _NoGpuYet:
    """Stands in for the GPU service during the static step: the pipeline asks it why the GPU stages
    cannot run, records that reason on the skipped stages, and stops."""

    def __init__(self, reason: str):
        self.reason = reason

    def unavailable_reason(self, arch: Arch) -> str:
        return self.reason


class PipelineHarness:
    """tools.pipeline with the GPU service when there is one. The static step's compiled attempt is kept
    for the GPU step of the same answer, so each answer is compiled once (a resumed run recompiles)."""

    def __init__(self, task: Task, arch: Arch, options: EvalOptions, device: int, use_gpu: bool = True):
        self.task, self.arch, self.options = task, arch, options
        self.gpu, self._missing = _open_gpu(device) if use_gpu else (None, "turned off (eval.gpu=false)")
        self._last: tuple[str, Attempt] | None = None

    def gpu_unavailable(self) -> str | None:
        return self._missing if self.gpu is None else self.gpu.unavailable_reason(self.arch)

    def static(self, answer: str) -> Evaluation:
        attempt = Attempt(self.task, self.arch, self.options)
        failed = attempt.static(answer=answer)
        self._last = None if failed else (answer, attempt)
        return failed or attempt.on_gpu(_NoGpuYet(self.gpu_unavailable() or PENDING))  # type: ignore[arg-type]

    def full(self, answer: str) -> Evaluation:
        if self._last is not None and self._last[0] == answer:
            return self.on_gpu(self._last[1])
        attempt = Attempt(self.task, self.arch, self.options)
        return attempt.static(answer=answer) or self.on_gpu(attempt)

    def on_gpu(self, attempt: Attempt) -> Evaluation:
        """The GPU stages of a statically checked attempt (agent.gpu_pool sends them to a shared GPU)."""
        return attempt.on_gpu(self.gpu)

    def close(self) -> None:
        if self.gpu is not None:
            self.gpu.close()


def _open_gpu(device: int):
    """The GPU service (started lazily by the service itself), or None and why. Imported here so that
    a machine without the GPU harness still runs the static stages."""
    try:
        from tools.gpu.service import GpuService
    except ImportError as e:
        return None, f"the GPU harness is not installed here ({e})"
    return GpuService(device=device), None
