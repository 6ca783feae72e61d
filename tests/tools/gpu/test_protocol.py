"""The messages between the GPU service and its worker, and of the Dask pool (tools/gpu/protocol.py): each reads back
as it was sent; a line that is not a message, or of an unknown kind, is a ProtocolError that names the line and what
is wrong; the real service turns such a line from its worker into a runtime error and a fresh worker; the real worker,
on a machine without a GPU, says why it cannot start. And the typed metrics map onto an Evaluation's fields and back."""

from __future__ import annotations

import json
import math

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.tools.gpu.stub_worker import STAND_IN
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.metrics import GpuMetrics, TargetMetrics, TimingMetrics
from tools.gpu.protocol import (
    PROTOCOL,
    EvalReply,
    EvalRequest,
    Exit,
    Fatal,
    Progress,
    ProtocolError,
    Ready,
    Result,
    StageDone,
    WorkerRequest,
    from_worker,
    line,
    to_worker,
)
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.perf_report import KernelPerf, PerfReport
from tools.plan import LaunchPlan

GEMM = get_task("gemm")
PLAN = LaunchPlan(launches=[], buffers=[])
CUBIN = bytes(range(256)) * 3  # every byte value: the base64 must carry them all
METRICS = GpuMetrics(
    timing=TimingMetrics(kernel_ms=0.8, baseline_ms=0.7, speedup=0.875, interval=[0.86, 0.89], tflops=612.0,
                         flags=["noisy — the speedup's interval spans 5.0%"]),
    targets=TargetMetrics(met=True, counts={"wgmma": 4096, "tma": 128}, paper_tag=True),
    perf=PerfReport(launches=[KernelPerf(kernel="gemm", duration_ms=0.8)], library="cuBLAS", seconds=5.1),
)  # fmt: skip


FAULTED = StageResult(name=Stage.RUN, state=StageState.FAILED, message="faulted",
                      detail={"fault": "CUDA_ERROR_ILLEGAL_ADDRESS"}, seconds=0.25)  # fmt: skip


class SettingsWithMore(EvalOptions):
    """As the repair loop's eval settings are: EvalOptions and settings of its own."""

    pool: str = "local"


def test_a_request_crosses_the_pipe_with_its_cubin_and_only_the_evaluation_options() -> None:
    options = SettingsWithMore(trials=2, seed=11, pool="dask://gpu-host:8786")
    sent = line(WorkerRequest(task="gemm", plan=PLAN, cubin=CUBIN, options=options))
    assert sent.endswith("\n") and sent.count("\n") == 1
    assert "pool" not in json.loads(sent)["options"]  # the loop's own settings stay with the loop
    received = to_worker(sent)
    assert isinstance(received, WorkerRequest)
    assert (received.cubin, received.options, received.plan) == (CUBIN, EvalOptions(trials=2, seed=11), PLAN)
    assert isinstance(to_worker(line(Exit())), Exit)


@pytest.mark.parametrize(
    "message",
    [
        Ready(device=STAND_IN),
        Fatal(message="the GPU worker could not start: no CUDA"),
        Progress(stage=Stage.TIME, part="recheck"),
        Progress(stage=Stage.CHECK),
        StageDone(result=FAULTED),
        Result(status=Status.PASSED, message="correct", metrics=METRICS),
        Result(status=Status.RUNTIME_ERROR, message="faulted", sticky=True, fault="CUDA_ERROR_ILLEGAL_ADDRESS"),
    ],
    ids=lambda m: m.kind,
)
def test_each_worker_message_reads_back_as_sent(message) -> None:
    assert from_worker(line(message)) == message


def test_an_output_never_written_keeps_its_nan_error_across_the_pipe() -> None:
    unwritten = StageResult(name=Stage.CHECK, state=StageState.FAILED, detail={"trials": [{"rel_l2": math.nan}]})
    received = from_worker(line(StageDone(result=unwritten)))
    assert math.isnan(received.result.detail["trials"][0]["rel_l2"])


def test_a_progress_message_names_the_limit_that_applies() -> None:
    assert Progress(stage=Stage.TIME, part="baseline").limited == "baseline"
    assert Progress(stage=Stage.CHECK).limited == "check"


def test_a_line_that_is_not_json_names_the_line() -> None:
    with pytest.raises(ProtocolError) as e:
        from_worker("Warning: something printed to stdout\n")
    assert str(e.value).startswith("the GPU worker sent a line that is not a message ('Warning: something printed")
    assert str(e.value).endswith("- (top level): Invalid JSON: expected value at line 1 column 1")


def test_an_unknown_kind_is_named_with_the_kinds_there_are() -> None:
    with pytest.raises(ProtocolError) as e:
        from_worker('{"kind": "pong"}')
    message = str(e.value)
    assert "'pong'" in message and all(f"'{kind}'" in message for kind in ("ready", "progress", "result"))
    with pytest.raises(ProtocolError, match="the service sent a line that is not a message"):
        to_worker('{"op": "evaluate"}')  # the pipe's shape before it was typed


def test_a_message_with_a_wrong_field_says_which() -> None:
    with pytest.raises(ProtocolError) as e:
        from_worker('{"kind": "progress", "stage": "warp"}')
    assert "\n- progress.stage: Input should be 'extract', " in str(e.value)
    with pytest.raises(ProtocolError, match=r"- progress\.part: Input should be 'run', .*, got 'lunch'"):
        from_worker('{"kind": "progress", "stage": "time", "part": "lunch"}')
    with pytest.raises(ProtocolError, match=r"- result\.message: required field is missing"):
        from_worker('{"kind": "result", "status": "passed"}')


def test_the_dask_reply_carries_the_typed_metrics() -> None:
    module = CompiledModule(language="ptx", ptx="", cubin=CUBIN, plan=PLAN)
    request = EvalRequest(task="gemm", task_version=GEMM.version, arch=Arch.SM_90A, module=module,
                          options=EvalOptions())  # fmt: skip
    assert request.protocol == PROTOCOL
    assert EvalRequest.model_validate_json(request.model_dump_json()) == request
    outcome = GpuOutcome(status=Status.PASSED, message="correct", stages=[], metrics=METRICS, device="NVIDIA H200")
    reply = EvalReply(worker="host-gpu0", outcome=outcome)
    assert EvalReply.model_validate_json(reply.model_dump_json()).outcome.metrics == METRICS


def test_the_metrics_map_onto_an_evaluations_fields_and_back() -> None:
    stages = [StageResult(name=s, state=StageState.PASSED) for s in (Stage.RUN, Stage.CHECK, Stage.TIME,
                                                                    Stage.PROFILE, Stage.PERF)]  # fmt: skip
    ev = Evaluation(task="gemm", arch=Arch.SM_90A, status=Status.PASSED, stages=stages, **METRICS.evaluation_fields())
    assert (ev.kernel_ms, ev.baseline_ms, ev.speedup, ev.speedup_interval) == (0.8, 0.7, 0.875, [0.86, 0.89])
    assert (ev.tflops, ev.timing_flags) == (612.0, ["noisy — the speedup's interval spans 5.0%"])
    assert (ev.targets_met, ev.target_counts, ev.paper_tag) == (True, {"wgmma": 4096, "tma": 128}, True)
    assert ev.perf == METRICS.perf
    assert GpuMetrics.of(ev) == METRICS
    assert GpuMetrics().evaluation_fields() == {}


def test_a_timing_found_wrong_afterwards_keeps_its_times_but_not_its_speedup() -> None:
    wrong = METRICS.timing.without_speedup()
    assert (wrong.speedup, wrong.interval, wrong.kernel_ms, wrong.baseline_ms) == (None, None, 0.8, 0.7)


# ---------------------------------------------------------------------------------- the real ends of the pipe


class StubService(GpuService):
    worker_module = "tests.tools.gpu.stub_worker"


def test_a_worker_line_that_is_not_a_message_is_a_runtime_error_and_a_fresh_worker(monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0.0], ["check", None, 0.0]]))
    monkeypatch.setenv("PTXBENCH_STUB_LINE", '{"kind": "pong"}')
    module = CompiledModule(language="ptx", ptx="", cubin=b"\0", plan=PLAN)
    with StubService() as service:
        outcome = service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False))
        assert outcome.status is Status.RUNTIME_ERROR
        assert outcome.message.startswith("during the check stage, the GPU worker sent a line that is not a message")
        assert outcome.stages[-1].name is Stage.CHECK and outcome.stages[-1].state is StageState.FAILED
        assert service.restarts == 1
        monkeypatch.delenv("PTXBENCH_STUB_LINE")  # the next worker speaks properly
        assert service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False)).status is Status.PASSED


def test_a_line_torn_by_the_workers_death_reads_as_its_death(monkeypatch) -> None:
    monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps([["run", None, 0.0]]))
    monkeypatch.setenv("PTXBENCH_STUB_TORN", '{"kind": "result", "stat')
    module = CompiledModule(language="ptx", ptx="", cubin=b"\0", plan=PLAN)
    with StubService() as service:
        outcome = service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False))
    assert (outcome.status, outcome.message) == (
        Status.RUNTIME_ERROR,
        "the GPU worker died (exit code 3) during the run stage",
    )


def test_the_real_worker_without_a_gpu_says_why_it_cannot_start() -> None:
    module = CompiledModule(language="ptx", ptx="", cubin=b"\0", plan=PLAN)
    with GpuService() as service:  # tools.gpu.worker itself: torch here has no CUDA
        outcome = service.evaluate(GEMM, Arch.SM_90A, module, EvalOptions(profile=False))
    assert outcome.status is Status.RUNTIME_ERROR
    assert outcome.message.startswith("the GPU worker did not start: the GPU worker could not start: ")
