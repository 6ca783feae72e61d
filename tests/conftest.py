"""GPU tests are marked `gpu` (any NVIDIA GPU) or `hopper` (an sm_90 GPU) and skipped without one. The Dask pool's
tests share two real clusters on 127.0.0.1 (tests/dask_cluster.py), each started once."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tasks.schema import Arch

if TYPE_CHECKING:  # Dask is imported only by the tests that use a cluster (the GPU image may lack it)
    from tests.dask_cluster import Cluster


@functools.cache
def gpu_capability() -> tuple[int, int] | None:
    """The first GPU's compute capability, asked of the driver without creating a context."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return None
        attr = driver.CUdevice_attribute
        _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
        _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0)
        return major, minor
    except Exception:
        return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cap = gpu_capability()
    for item in items:
        if item.get_closest_marker("gpu") and cap is None:
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU; none found"))
        elif item.get_closest_marker("hopper") and cap != (9, 0):
            item.add_marker(pytest.mark.skip(reason=f"needs an sm_90 GPU; found {cap or 'none'}"))


@pytest.fixture(scope="session")
def dask_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Our scheduler and two workers without a GPU whose resources claim sm_90a and sm_100a."""
    from tests.dask_cluster import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("dask-gpus"))
    try:
        cluster.start("cpu-hopper", Arch.SM_90A)
        cluster.start("cpu-blackwell", Arch.SM_100A)
        cluster.wait_for("cpu-hopper", "cpu-blackwell")
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def dask_standins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Our scheduler and two sm_90a workers whose stand-in service takes 1.5 s per request, then passes."""
    from tests.dask_cluster import standins

    with standins(tmp_path_factory.mktemp("dask-standins"), hold_s=1.5) as cluster:
        yield cluster
