"""The compile benchmark's generated kernels: deterministic, about the length asked for, and real kernels:
they assemble, and their SASS holds the arch's target instructions."""

from __future__ import annotations

import pytest

from tasks.catalog import TARGETS
from tasks.schema import Arch
from tools.dev.bench_compile import long_kernel, measure


@pytest.mark.parametrize("arch", list(Arch))
def test_kernel_length_and_determinism(arch):
    ptx = long_kernel(arch)
    assert 2800 <= ptx.count("\n") <= 3200
    assert ptx == long_kernel(arch)
    assert f".target {arch}" in ptx


@pytest.mark.parametrize("arch", list(Arch))
def test_short_kernel_compiles_with_its_targets(arch):
    result = measure(long_kernel(arch, lines=300), arch)
    assert result["targets"] == [g.name for g in TARGETS[arch]]
    assert result["registers"] > 0 and result["instructions"] > 0
    assert result["total"] >= result["ptxas"] > 0
