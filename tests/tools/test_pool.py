"""The local evaluation pool's dispatch, with stand-in GPU services: the least busy GPU of the arch, one
evaluation at a time per GPU, the pipeline's GPU stages through it, and an interrupted evaluation that is
never taken for a verdict."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.waiting import wait_for
from tools.evaluation import Stage, StageResult, StageState, Status
from tools.gpu.base import GpuOutcome
from tools.gpu.devices import DeviceInfo, NoDevice, visible_count
from tools.gpu.metrics import GpuMetrics, TimingMetrics
from tools.options import EvalOptions
from tools.pipeline import PENDING, build, evaluation, extract, on_gpu
from tools.pool.base import OFF, Interrupted, Load
from tools.pool.local import LocalPool

FILL = (Path(__file__).parents[1] / "fixtures" / "agent" / "fill_ok.md").read_text()


FAKE_METRICS = GpuMetrics(timing=TimingMetrics(kernel_ms=0.6, baseline_ms=0.75, speedup=1.25))


class FakeService:
    """Stands in for a GpuService: one GPU of compute capability `cc`; counts overlapping evaluations. An
    evaluation takes `hold_s`, or, given a `gate`, lasts until the test opens it."""

    def __init__(
        self, name: str, cc: tuple[int, int] = (9, 0), hold_s: float = 0.0, gate: threading.Event | None = None
    ):
        self.name, self.cc, self.hold_s, self.gate = name, cc, hold_s, gate
        self.active = self.most_active = self.evaluations = self.closed = 0
        self.on_evaluate = lambda: None

    def unavailable_reason(self, arch: Arch) -> str | None:
        return None if arch.compute_capability == self.cc else f"{self.name} cannot run {arch}"

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(ordinal=0, name=self.name, capability=self.cc, sm_count=132, l2_bytes=50 << 20, driver=13000,
                          pci_bus_id="0000:00:06.0")  # fmt: skip

    def evaluate(self, task, arch, module, options) -> GpuOutcome:
        self.on_evaluate()
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        else:
            time.sleep(self.hold_s)
        self.evaluations += 1
        self.active -= 1
        stages = [StageResult(name=n, state=StageState.PASSED) for n in ("run", "check", "time")]
        return GpuOutcome(status=Status.PASSED, message="ok", stages=stages, metrics=FAKE_METRICS, device=self.name)

    def close(self) -> None:
        self.closed += 1


def built(arch: Arch = Arch.SM_90A):
    """The fill kernel's static record, built for the GEMM task on `arch` (real ptxas)."""
    task = get_task("gemm")
    answer = FILL.replace(".target sm_90a", f".target {arch}").replace(".version 8.0", ".version 8.6")
    return task, build(extract(task, arch, answer=answer), task, arch, EvalOptions())


def test_evaluations_go_to_the_least_busy_gpu_of_the_arch() -> None:
    gate = threading.Event()
    a, b, blackwell = FakeService("a", gate=gate), FakeService("b"), FakeService("bw", cc=(10, 0))
    pool = LocalPool([a, b, blackwell])  # type: ignore[list-item]
    task, static = built()
    first = threading.Thread(target=lambda: pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions()))
    first.start()
    assert wait_for(lambda: a.active == 1, 30), "a never started"  # a is busy now
    assert pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions()).device == "b"
    gate.set()
    first.join()
    assert (a.evaluations, b.evaluations, blackwell.evaluations) == (1, 1, 0)
    assert pool.evaluate(task, Arch.SM_100A, static.module, EvalOptions()).device == "bw"
    assert pool.unavailable_reason(Arch.SM_90A) is None
    assert LocalPool([a]).unavailable_reason(Arch.SM_100A) == "a cannot run sm_100a"  # type: ignore[list-item]


def test_the_pool_tells_what_each_gpu_runs_and_holds_queued() -> None:
    gate = threading.Event()
    hopper, blackwell = FakeService("h", gate=gate), FakeService("b", cc=(10, 0))
    pool = LocalPool([hopper, blackwell])  # type: ignore[list-item]
    task, static = built()
    threads = [threading.Thread(target=pool.evaluate, args=(task, Arch.SM_90A, static.module, EvalOptions()))
               for _ in range(3)]  # fmt: skip
    for t in threads:
        t.start()
    assert wait_for(lambda: hopper.active == 1 and pool.load()[0].queued == 2, 30), "three never held"
    assert pool.load() == [Load("sm_90a", "local", 1, 2), Load("sm_100a", "local", 0, 0)]
    gate.set()
    for t in threads:
        t.join()
    assert pool.load() == [Load("sm_90a", "local", 0, 0), Load("sm_100a", "local", 0, 0)]
    assert pool.describe() == "2 GPU(s) here"
    assert LocalPool.open(use_gpu=False).describe() == f"GPU stages skipped: {OFF}"


def test_one_evaluation_at_a_time_per_gpu() -> None:
    gpus = [FakeService("a", hold_s=0.05), FakeService("b", hold_s=0.05)]
    pool = LocalPool(gpus)  # type: ignore[arg-type]
    task, static = built()
    together = threading.Barrier(8)

    def evaluate() -> None:
        together.wait()
        pool.evaluate(task, Arch.SM_90A, static.module, EvalOptions())

    threads = [threading.Thread(target=evaluate) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [g.most_active for g in gpus] == [1, 1]
    assert [g.evaluations for g in gpus] == [4, 4]  # queued to the least busy: evenly


def test_the_pipeline_runs_its_gpu_stages_on_the_pool() -> None:
    gpu = FakeService("NVIDIA H200")
    pool = LocalPool([gpu])  # type: ignore[list-item]
    task, static = built()
    pending = evaluation(static, task, Arch.SM_90A)
    assert pending.status is Status.UNVERIFIED and pending.stage(Stage.RUN).message == PENDING
    full = on_gpu(static, task, Arch.SM_90A, EvalOptions(), pool)
    assert (full.status, full.speedup, full.device) == (Status.PASSED, 1.25, "NVIDIA H200")
    _, sm100 = built(Arch.SM_100A)
    skipped = on_gpu(sm100, task, Arch.SM_100A, EvalOptions(), pool)
    assert skipped.status is Status.UNVERIFIED and skipped.stage(Stage.RUN).message == "NVIDIA H200 cannot run sm_100a"
    assert gpu.closed == 0
    pool.close()
    assert gpu.closed == 1


def test_an_interrupted_evaluation_is_not_a_verdict() -> None:
    gpu = FakeService("NVIDIA H200")
    pool = LocalPool([gpu])  # type: ignore[list-item]
    gpu.on_evaluate = pool.interrupt  # Ctrl-C while the kernel runs: the workers are stopped under it
    task, static = built()
    with pytest.raises(Interrupted):
        on_gpu(static, task, Arch.SM_90A, EvalOptions(), pool)
    assert gpu.closed == 1


def test_pool_without_gpus_says_why() -> None:
    assert LocalPool.open(use_gpu=False).unavailable_reason(Arch.SM_90A) == OFF == "turned off (eval.gpu=false)"
    try:
        visible_count()
    except NoDevice as e:
        pool = LocalPool.open(use_gpu=True)
        assert pool.services == [] and pool.unavailable_reason(Arch.SM_90A) == str(e)
