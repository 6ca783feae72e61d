"""The check's verdict logic on the CPU (torch's CPU build): the poison pattern, the unwritten mask, the
comparison with the fp32 reference (rel L2, NaN written, never written, where the bad elements lie), and the
comparison of two runs on the same inputs that tells a race from a deterministic mismatch."""

from __future__ import annotations

import math

import pytest
import torch

from tools.gpu.check import compare, poison, rerun_difference, unwritten_mask


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int32])
def test_poison_is_recognised_and_arithmetic_never_makes_it(dtype: torch.dtype) -> None:
    t = torch.empty(64, 32, dtype=dtype)
    poison(t)
    assert bool(unwritten_mask(t).all())
    if dtype.is_floating_point:
        assert bool(torch.isnan(t).all())
        computed = t.float() * 2 + float("nan")  # NaN from arithmetic carries the canonical payload
        assert not bool(unwritten_mask(computed.to(dtype)).any())
    t[3, 5] = 1
    assert int(unwritten_mask(t).sum()) == 64 * 32 - 1


def test_a_close_output_passes() -> None:
    ref = torch.randn(128, 64)
    out = (ref + 1e-4 * torch.randn(128, 64)).to(torch.bfloat16)
    check = compare("C", out, ref, 1e-2)
    assert check.passed and check.unwritten == 0 and check.nonfinite == 0
    assert 0 < check.rel_l2 < 1e-2 and check.bad_region is None


def test_an_unwritten_band_is_located() -> None:
    ref = torch.randn(128, 64)
    out = ref.to(torch.bfloat16)
    poison(out[96:, :])  # the last 32 rows never written: a tile bound off by one tile
    check = compare("C", out, ref, 1e-2)
    assert not check.passed and math.isnan(check.rel_l2)
    assert check.unwritten == 32 * 64 and check.bad_region == [[96, 127], [0, 63]]
    assert "2,048 of 8,192 elements never written" in check.summary(["M", "N"])
    assert "M=96..127, N=0..63" in check.summary(["M", "N"])


def test_nan_written_and_a_wrong_value_are_told_apart() -> None:
    ref = torch.ones(16, 16)
    out = ref.clone()
    out[2, 3] = float("nan")
    out[7, 9] = 50.0
    check = compare("O", out, ref, 1e-2)
    assert not check.passed and check.nonfinite == 1 and check.unwritten == 0
    assert check.max_abs_at == [7, 9] and check.max_abs_err == pytest.approx(49.0)
    assert check.out_of_tolerance == 2


def test_an_output_over_tolerance_fails_on_rel_l2() -> None:
    ref = torch.randn(256, 128)
    check = compare("C", ref * 1.05, ref, 1e-2)
    assert not check.passed and check.rel_l2 == pytest.approx(0.05, rel=1e-4)


def test_identical_runs_are_no_race() -> None:
    first = torch.randn(64, 32).to(torch.bfloat16)
    diff = rerun_difference("O", first, first.clone(), 1e-2)
    assert (diff.changed, diff.written_once, diff.rel_l2, diff.beyond_tolerance) == (0, 0, 0.0, False)
    assert diff.summary() == "O: identical"


def test_a_different_summation_order_stays_within_the_tolerance() -> None:
    first = torch.randn(256, 128)
    second = first + 1e-6 * torch.randn(256, 128)  # fp32 reduce-adds landing in another order
    diff = rerun_difference("dQ", first, second, 1e-2)
    assert diff.changed > 0 and 0 < diff.rel_l2 < 1e-5 and not diff.beyond_tolerance


def test_outputs_that_differ_beyond_the_tolerance_or_in_what_was_written_point_to_a_race() -> None:
    first = torch.randn(64, 64).to(torch.bfloat16)
    second = first.clone()
    second[:8] = torch.randn(8, 64).to(torch.bfloat16)  # rows another warp overwrote in one run only
    diff = rerun_difference("O", first, second, 1e-2)
    assert diff.beyond_tolerance and diff.rel_l2 > 0.1 and diff.written_once == 0
    unwritten = first.clone()
    poison(unwritten[5:6])  # a row the kernel wrote in one run and not in the other
    once = rerun_difference("O", first, unwritten, 1e-2)
    assert once.written_once == 64 and once.beyond_tolerance
    assert once.summary() == "O: 64 of 4,096 elements changed, rel L2 0.00e+00, 64 written or finite in one run only"
