"""What every GPU backend is: something that says whether it can run an arch, evaluates a compiled module's
GPU stages (tools/gpu/stages.py), and says what device it is. The local GPU service, the
evaluation pools and `Unavailable` (no GPU here) implement it; the pipeline only ever sees this protocol."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from tasks.schema import Arch, Task
from tools.assemble import KernelResources
from tools.evaluation import StageResult, Status
from tools.gpu.devices import DeviceInfo
from tools.gpu.metrics import GpuMetrics
from tools.options import EvalOptions
from tools.plan import LaunchPlan
from tools.solution import LaunchSpec


class CompiledModule(BaseModel):
    """What the GPU stages need of an attempt whose static stages passed. Plain data (the cubin travels as
    base64 in JSON), so it can sit in a checkpoint or cross to a GPU host."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
    language: str = Field(description="'ptx' or 'cuda': what the answer was written in.")
    ptx: str = Field(description="The PTX ptxas assembled (NVRTC's output for CUDA), for diagnostics.", repr=False)
    cubin: bytes = Field(repr=False)
    plan: LaunchPlan = Field(description="The launches at the task's dims and the arch's nominal SMS.")
    launch: LaunchSpec | None = Field(
        None, description="The spec the plan came from, so that a GPU with another multiprocessor count can re-plan "
        "SMS (None in modules recorded before SMS existed).",
    )  # fmt: skip
    kernels: list[KernelResources] = Field(default_factory=list)
    opcodes: dict[str, dict[str, int]] | None = Field(
        None, description="Kernel → base SASS opcode → static count, from the sass stage (None: not disassembled): "
        "what the worker's CUPTI count needs to know which opcodes its counters can have counted.",
    )  # fmt: skip
    cuda_source: str | None = Field(
        None, description="A CUDA answer's own source, to quote the lines a diagnosis names.", repr=False
    )

    def launched_opcodes(self) -> dict[str, int] | None:
        """The static opcode counts of the kernels the plan launches, summed; None when the module has none."""
        if self.opcodes is None:
            return None
        total: dict[str, int] = {}
        for kernel in {launch.kernel for launch in self.plan.launches}:
            for op, n in self.opcodes.get(kernel, {}).items():
                total[op] = total.get(op, 0) + n
        return total


class GpuOutcome(BaseModel):
    """What the GPU stages add to an Evaluation."""

    status: Status
    message: str
    stages: list[StageResult]
    metrics: GpuMetrics = Field(default_factory=GpuMetrics)
    device: str | None = Field(None, description="The GPU's name, when the stages ran on one.")
    worker: str | None = Field(None, description="The Dask worker that ran them (host-gpuN); None: a GPU here.")


class Gpu(Protocol):
    def unavailable_reason(self, arch: Arch) -> str | None:
        """Why the GPU stages of an `arch` solution cannot run here, or None when they can."""
        ...

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        """The GPU stages; call only when unavailable_reason(arch) is None."""
        ...

    def device_info(self) -> DeviceInfo | None:
        """The device this backend runs on (None when it has none, or several)."""
        ...

    def close(self) -> None:
        """Stop the workers this backend started."""
        ...


class Unavailable:
    """No GPU: every attempt's GPU stages are skipped with `reason`."""

    def __init__(self, reason: str):
        self.reason = reason

    def unavailable_reason(self, arch: Arch) -> str:
        return self.reason

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        raise RuntimeError(f"no GPU: {self.reason}")

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass
