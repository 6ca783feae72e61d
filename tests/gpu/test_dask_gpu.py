"""The Dask pool on a real Hopper GPU host: our scheduler and `python -m tools.gpu.dask_worker` (a worker per GPU,
its arch from the GPU) on this machine; a reference answer passes through the pool with its targets executed, a
faulting kernel is contained on the worker, and the worker's next attempt passes. Skipped without an sm_90 GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.gpu.kernels import answer
from tools.evaluation import Status
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

pytest.importorskip("distributed", reason="the dask extra's wheels: ../shared/device/wheels.sh dask")
from tests.dask_cluster import Cluster
from tools.pool.dask import DaskPool

pytestmark = pytest.mark.hopper

TASK = get_task("gemm")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaskPool, list[str]]]:
    cluster = Cluster(tmp_path_factory.mktemp("dask-gpu-host"))
    try:
        names = cluster.start_host()
        cluster.wait_for(*names)
        gpus = DaskPool(cluster.address)
        yield gpus, names
        gpus.close()
    finally:
        cluster.close()


def test_a_reference_answer_passes_through_the_pool_with_its_targets_executed(pool) -> None:
    gpus, names = pool
    assert gpus.unavailable_reason(Arch.SM_90A) is None
    assert gpus.unavailable_reason(Arch.SM_100A).startswith("no worker of the Dask pool")
    ev = evaluate_answer(reference_answer(TASK.name, Arch.SM_90A), TASK, Arch.SM_90A, EvalOptions(seed=5), gpus)
    assert ev.status is Status.PASSED, ev.message
    assert ev.targets_met is True and ev.speedup and ev.speedup > 0.5
    assert ev.worker in names and ev.device and ev.device.startswith("NVIDIA")


def test_a_faulting_kernel_is_contained_on_its_worker(pool) -> None:
    gpus, names = pool
    quick = EvalOptions(trials=2, seed=7, time=False, profile=False, timeout_s=120)
    bad = evaluate_answer(answer("oob_write"), TASK, Arch.SM_90A, quick, gpus)
    assert bad.status is Status.RUNTIME_ERROR and "CUDA_ERROR_ILLEGAL_ADDRESS" in bad.message
    good = evaluate_answer(answer("correct"), TASK, Arch.SM_90A, quick, gpus)
    assert good.status is Status.PASSED, good.message
    assert {bad.worker, good.worker} <= set(names)
