"""Which GPUs this process sees, and what each one is: asked of the driver (cuda.bindings) without creating
a context, so probing never costs a GPU's memory or disturbs a kernel running on it. The one place that
probes devices: the GPU service, the evaluation pool and the tests' GPU markers all call it."""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel

from tasks.schema import Arch


class DeviceInfo(BaseModel):
    ordinal: int
    name: str
    capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    driver: int  # the driver's CUDA version, e.g. 13000
    pci_bus_id: str  # e.g. "0000:00:06.0": NVML opens devices by it (it ignores CUDA_VISIBLE_DEVICES)

    @property
    def arch(self) -> Arch | None:
        """The arch whose solutions run on this device, or None when it is neither Hopper nor Blackwell."""
        return next((a for a in Arch if a.compute_capability == self.capability), None)

    def cannot_run(self, arch: Arch) -> str | None:
        """Why a solution for `arch` cannot run on this device, or None when it can."""
        if self.arch is arch:
            return None
        major, minor = self.capability
        return (
            f"the GPU here is {self.name} (sm_{major}{minor}); a {arch} solution cannot run on it, "
            "so its GPU stages are skipped"
        )


class NoDevice(RuntimeError):
    """No usable GPU (no driver, no device, a broken installation); the message is one line saying why."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise NoDevice(f"cuda-python is not installed here ({e})") from None
    try:
        (err,) = driver.cuInit(0)
    except Exception:  # the driver library is missing; cuda-bindings' own sentence about it is a paragraph
        raise NoDevice("no usable NVIDIA GPU here (no NVIDIA driver)") from None
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NoDevice(f"no usable NVIDIA GPU here (cuInit: {getattr(err, 'name', err)})")
    return driver


def _get(driver, fn, *args):
    err, *values = fn(*args)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise NoDevice(f"{fn.__name__} failed: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else values


def visible_count() -> int:
    """How many GPUs the driver shows this process (NoDevice when it shows none)."""
    driver = _driver()
    count = _get(driver, driver.cuDeviceGetCount)
    if count == 0:
        raise NoDevice("no NVIDIA GPU visible to this process")
    return count


@cache
def device_info(ordinal: int = 0) -> DeviceInfo:
    """GPU `ordinal` among those visible to this process (NoDevice when there is none)."""
    driver = _driver()
    dev = _get(driver, driver.cuDeviceGet, ordinal)
    attr = driver.CUdevice_attribute

    def attribute(a) -> int:
        return int(_get(driver, driver.cuDeviceGetAttribute, a, dev))

    name = _get(driver, driver.cuDeviceGetName, 256, dev)
    bus = _get(driver, driver.cuDeviceGetPCIBusId, 32, dev)
    return DeviceInfo(
        ordinal=ordinal,
        name=name.split(b"\0", 1)[0].decode(),
        capability=(
            attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ),
        sm_count=attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        l2_bytes=attribute(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        driver=int(_get(driver, driver.cuDriverGetVersion)),
        pci_bus_id=bus.split(b"\0", 1)[0].decode(),
    )
