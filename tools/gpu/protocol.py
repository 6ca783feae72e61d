"""The messages that carry an attempt's GPU stages, typed at both ends: the local pipe between the GPU service and
its worker process (JSON lines, one message a line, each naming its `kind`), and the Dask pool's request and reply.

The pipe, service → worker: `request` (one attempt's worker stages), `exit`. Worker → service: `ready` once its CUDA
context is up (or `fatal`, why it is not), then per request `progress` as each stage or part of one begins (the
service restarts that part's time limit), `stage_done` as each stage ends, and `result`. A line that does not read
as one of these is a ProtocolError that names the line and what is wrong with it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tasks.schema import Arch
from tools.answer import format_validation_error
from tools.evaluation import Stage, StageResult, Status
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.devices import DeviceInfo
from tools.gpu.metrics import GpuMetrics
from tools.options import EvalOptions
from tools.plan import LaunchPlan

PROTOCOL = 2  # the Dask request's version: 2 since metrics travel as typed groups
# The parts of a stage the worker announces; each has its own time limit (tools/gpu/limits.py StageLimits).
Part = Literal["run", "check", "time", "recheck", "rerun", "baseline"]


class ProtocolError(ValueError):
    """A line of the pipe that is not a message of this protocol."""


class _Message(BaseModel):
    # NaN stays NaN across the pipe: an output never written has a rel. L2 error of NaN in the check's detail.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


# ------------------------------------------------------------------------------------ service → worker


class WorkerRequest(_Message):
    """One attempt's worker stages (tools/gpu/stages.py in_worker): the task, the module and the options, the seed set
    (the service draws one when the options leave it unset, so it is recorded)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants", ser_json_bytes="base64",
                              val_json_bytes="base64")  # fmt: skip
    kind: Literal["request"] = "request"
    task: str
    plan: LaunchPlan
    cubin: bytes = Field(repr=False)
    options: EvalOptions
    opcodes: dict[str, int] | None = Field(
        None, description="The launched kernels' static SASS opcode counts (CompiledModule.launched_opcodes)."
    )


class Exit(_Message):
    kind: Literal["exit"] = "exit"


# ------------------------------------------------------------------------------------ worker → service


class Ready(_Message):
    kind: Literal["ready"] = "ready"
    device: DeviceInfo


class Fatal(_Message):
    kind: Literal["fatal"] = "fatal"
    message: str = Field(description="Why the worker could not start.")


class Progress(_Message):
    kind: Literal["progress"] = "progress"
    stage: Stage
    part: Part | None = Field(None, description="A part of the stage with its own time limit; None: the stage itself.")

    @property
    def limited(self) -> str:
        """The name of the limit that applies from now on."""
        return self.part or str(self.stage)


class StageDone(_Message):
    kind: Literal["stage_done"] = "stage_done"
    result: StageResult


class Result(_Message):
    """The end of one request: the attempt's status and figures; the worker exits after a sticky one."""

    kind: Literal["result"] = "result"
    status: Status
    message: str
    metrics: GpuMetrics = Field(default_factory=GpuMetrics)
    sticky: bool = Field(False, description="The CUDA context is unusable: the worker exits, the service restarts it.")
    fault: str | None = Field(None, description="The driver error of the kernel's own fault: memcheck locates it.")
    error: str | None = Field(None, description="The worker's own traceback, when the worker itself failed.")


ToWorker = Annotated[WorkerRequest | Exit, Field(discriminator="kind")]
FromWorker = Annotated[Ready | Fatal | Progress | StageDone | Result, Field(discriminator="kind")]
_TO_WORKER: TypeAdapter[WorkerRequest | Exit] = TypeAdapter(ToWorker)
_FROM_WORKER: TypeAdapter[Ready | Fatal | Progress | StageDone | Result] = TypeAdapter(FromWorker)
LINE_SHOWN = 200  # of a line that does not read, in the error


def line(message: _Message) -> str:
    """A message as one line of the pipe."""
    return message.model_dump_json() + "\n"


def to_worker(text: str) -> WorkerRequest | Exit:
    """A line the service sent; ProtocolError says what is wrong with it."""
    return _read(_TO_WORKER, text, "the service")


def from_worker(text: str) -> Ready | Fatal | Progress | StageDone | Result:
    """A line the worker sent; ProtocolError says what is wrong with it."""
    return _read(_FROM_WORKER, text, "the GPU worker")


def _read(adapter: TypeAdapter, text: str, sender: str):
    try:
        return adapter.validate_json(text)
    except ValidationError as e:
        shown = text.strip()[:LINE_SHOWN]
        raise ProtocolError(
            f"{sender} sent a line that is not a message ({shown!r}):\n{format_validation_error(e)}"
        ) from None


# ------------------------------------------------------------------------------------------ the Dask pool


class EvalRequest(BaseModel):
    """One attempt's GPU stages, as the pool sends them (the module carries the cubin, base64, and the launch plan)."""

    model_config = ConfigDict(extra="forbid")
    protocol: int = Field(PROTOCOL, description="The messages' version; a host with another one refuses.")
    task: str
    task_version: int = Field(description="The caller's definition of the task; a host with another one refuses.")
    arch: Arch
    module: CompiledModule
    options: EvalOptions


class EvalReply(BaseModel):
    worker: str = Field(description="The Dask worker's name (host-gpuN).")
    outcome: GpuOutcome | None = None
    refused: str | None = Field(None, description="Why the worker could not take the request: it runs other code.")
