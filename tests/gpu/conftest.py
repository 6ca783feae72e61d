"""The GPU tests' worker: one long-lived GpuService per test module, as a pool keeps one per GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.gpu.service import GpuService


@pytest.fixture(scope="module")
def gpu() -> Iterator[GpuService]:
    with GpuService() as service:
        yield service
