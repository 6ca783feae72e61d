"""The evaluation pool: where attempts' GPU stages go — this machine's GPUs (local.py: a worker per GPU, least busy
first) or Dask workers on GPU hosts (dask.py) — and the one opener every command uses (eval.pool picks)."""

from __future__ import annotations

from tools.gpu.base import Gpu, Unavailable
from tools.pool.base import LOCAL, OFF, Pool, scheduler_address


def open_gpu(pool: str = LOCAL, device: int = 0, use_gpu: bool = True) -> Gpu:
    """One run's GPU stages: this machine's GPU `device` (its worker starts on first use), or the Dask pool that
    `pool` names; none when `use_gpu` is off."""
    if not use_gpu:
        return Unavailable(OFF)
    address = scheduler_address(pool)
    if address is not None:
        return _dask(address)
    from tools.gpu.service import GpuService  # the driver bindings, only when a GPU here is wanted

    return GpuService(device=device)


def open_pool(pool: str = LOCAL, use_gpu: bool = True) -> Pool:
    """Many runs' GPU stages: every GPU of this machine, or the Dask pool that `pool` names."""
    address = scheduler_address(pool) if use_gpu else None
    if address is not None:
        return _dask(address)
    from tools.pool.local import LocalPool

    return LocalPool.open(use_gpu)


def _dask(address: str) -> Pool:
    from tools.pool.dask import DaskPool  # the optional `dask` extra; scheduler_address checked that it is there

    return DaskPool(address)
