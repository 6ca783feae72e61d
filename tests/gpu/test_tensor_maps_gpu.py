"""Tensor maps the driver encodes, on a real Hopper GPU: a rank-1 map (a row of LSE or Delta, as a CUDA backward
loads it), which the driver refused while the harness passed it no stride; and a map it still refuses, named in the
launch error with what it was given. Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest
import torch

from tools.gpu import driver
from tools.plan import TensorMapPlan

pytestmark = pytest.mark.hopper


def row_map(n: int) -> TensorMapPlan:
    return TensorMapPlan(tensor="LSE", dtype="float32", global_dims=[n], global_strides=[], box=[64],
                         element_strides=[1], interleave="none", swizzle="none", l2_promotion="none",
                         oob_fill="zero")  # fmt: skip


def test_a_rank_one_tensor_map_is_encoded():
    lse = torch.empty(4 * 48 * 4096, dtype=torch.float32, device="cuda")
    encoded = driver._tensor_map(row_map(lse.numel()), lse.data_ptr(), "launches[1] (attn_bwd_main).args[4]")
    assert isinstance(encoded, driver.cu.CUtensorMap)


def test_a_map_the_driver_refuses_is_named_with_what_it_was_given():
    lse = torch.empty(1024, dtype=torch.float32, device="cuda")
    misaligned = lse.data_ptr() + 4  # the driver wants a 16-byte-aligned global address
    with pytest.raises(driver.LaunchError) as refused:
        driver._tensor_map(row_map(1000), misaligned, "launches[1] (attn_bwd_main).args[4]")
    message = str(refused.value)
    assert message.startswith("launches[1] (attn_bwd_main).args[4] (tensor map over 'LSE'): the driver refused it")
    assert "CUDA_ERROR_INVALID_VALUE" in message and f"address {misaligned:#x}" in message and "box [64]" in message
