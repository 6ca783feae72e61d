"""Stage time limits: derived from the task's work (no GPU), and enforced by the real GpuService on a real
worker process — a stand-in that speaks the worker's protocol (tests/tools/gpu/stub_worker.py) and takes as
long as it is told in each part, so that a hang costs the limit of the part it hangs in and no more."""

from __future__ import annotations

import json
import time

import pytest

from tasks import get_task
from tasks.schema import Arch
from tools.evaluation import Stage, StageState, Status
from tools.gpu.base import CompiledModule
from tools.gpu.limits import BASELINE_S, MIN_STAGE_S, stage_limits
from tools.gpu.service import TIMEOUT_HINT, GpuService, _timeout_text
from tools.gpu.timing import TimingOptions
from tools.options import EvalOptions
from tools.plan import LaunchPlan

GEMM = get_task("gemm")
MODULE = CompiledModule(language="ptx", ptx="", cubin=b"\0", plan=LaunchPlan(launches=[], buffers=[]))


def test_gemm_limits_come_from_its_flops_at_the_floor_rate() -> None:
    limits = stage_limits(GEMM, EvalOptions())
    # 2·8192·7168·5120 = 0.60 TFLOP: 12 ms at 50 TFLOP/s, ×10 = 0.12 s, so the 5 s floor holds.
    assert (limits.run, limits.check, limits.recheck) == (MIN_STAGE_S, MIN_STAGE_S, MIN_STAGE_S)
    assert limits.time == 2 * TimingOptions().budget_s + 8 * MIN_STAGE_S
    assert limits.baseline == BASELINE_S and limits.profile < limits.memcheck
    assert limits.basis.startswith("from the task (0.60 TFLOP per execution at a floor of 50 TFLOP/s, ×10")


def test_a_lower_floor_rate_scales_run_and_check_with_the_trials() -> None:
    limits = stage_limits(GEMM, EvalOptions(floor_tflops=0.5, trials=4))
    one = 2 * 8192 * 7168 * 5120 / 0.5e12  # 1.2 s per execution
    assert limits.run == pytest.approx(10 * one) and limits.check == pytest.approx(40 * one)
    assert limits.time == pytest.approx(20 + 8 * 10 * one)


def test_an_explicit_timeout_sets_run_and_check() -> None:
    limits = stage_limits(get_task("attn_bwd"), EvalOptions(timeout_s=42))
    assert (limits.run, limits.check, limits.basis) == (42, 42, "set by eval.timeout_s")


def test_timeout_messages_name_the_part_the_limit_and_what_to_look_at() -> None:
    limits = stage_limits(GEMM, EvalOptions())
    run = _timeout_text("run", "run", limits)
    assert run.startswith("no result within 5 s during the run stage (running the launch sequence once), a limit")
    assert "0.60 TFLOP per execution" in run and run.endswith(TIMEOUT_HINT)
    assert "fits the timing budget" in _timeout_text("time", "time", limits)
    baseline = _timeout_text("time", "baseline", limits)  # the library's part: no hint about the kernel
    assert baseline == (
        "no result within 60 s during the time stage (preparing the baseline library's call: "
        "the library's part, not the kernel's)"
    )


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch):
    """A GpuService over the stand-in worker; `script(...)` sets what the next worker it starts does."""

    class StubService(GpuService):
        worker_module = "tests.tools.gpu.stub_worker"

    def script(*parts: tuple[str, str | None, float]) -> None:
        monkeypatch.setenv("PTXBENCH_STUB_SCRIPT", json.dumps(parts))

    script(("run", None, 0.0))
    with StubService() as service:
        yield service, script


def evaluate(service: GpuService, **options):
    start = time.perf_counter()
    outcome = service.evaluate(GEMM, Arch.SM_90A, MODULE, EvalOptions(profile=False, **options))
    return outcome, time.perf_counter() - start


def test_each_stage_has_its_own_limit(stub) -> None:
    service, script = stub
    script(("run", None, 0.6), ("check", None, 0.6), ("time", None, 0.0), ("time", "recheck", 0.6))
    outcome, seconds = evaluate(service, timeout_s=1.0)
    assert outcome.status is Status.PASSED, outcome.message  # 1.8 s in all, under 1 s in each part
    assert seconds > 1.8 and service.restarts == 0


def test_a_hang_costs_its_stage_limit_and_the_worker_comes_back(stub) -> None:
    service, script = stub
    script(("run", None, 0.0), ("check", None, 60.0))
    outcome, seconds = evaluate(service, timeout_s=1.0)
    assert outcome.status is Status.TIMEOUT and seconds < 4
    assert outcome.message.startswith("no result within 1 s during the check stage (running the check trials)")
    assert "a limit set by eval.timeout_s. Most likely a hang" in outcome.message
    assert outcome.stages[-1].name is Stage.CHECK and outcome.stages[-1].state is StageState.FAILED
    assert service.restarts == 1
    script(("run", None, 0.0))  # the next worker is healthy
    outcome, _ = evaluate(service, timeout_s=1.0)
    assert outcome.status is Status.PASSED


def test_the_derived_limit_applies_without_a_timeout(stub) -> None:
    service, script = stub
    script(("run", None, MIN_STAGE_S + 30))
    outcome, seconds = evaluate(service)
    assert outcome.status is Status.TIMEOUT
    assert MIN_STAGE_S <= seconds < MIN_STAGE_S + 3
    assert "from the task (0.60 TFLOP per execution" in outcome.message
