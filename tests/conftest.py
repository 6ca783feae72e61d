"""GPU tests are marked `gpu` (any NVIDIA GPU) or `hopper` (an sm_90 GPU) and skipped without one."""

from __future__ import annotations

import functools

import pytest


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
