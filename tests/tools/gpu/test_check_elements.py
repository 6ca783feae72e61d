"""The paper's element rule (eval.criterion=paper, tools/gpu/check.py compare_elements) on CPU tensors: which elements
fail (both tolerances exceeded), how many, the worst ones by index, the 99.5% share of fp8 attention, and the poison
logic that still fails unwritten and NaN outputs the paper's own comparison would let through."""

from __future__ import annotations

import pytest
import torch

from tasks.paper_protocol import ATOL, RTOL
from tools.gpu.check import WORST_SHOWN, compare, compare_elements, poison


def test_an_element_fails_only_when_both_tolerances_are_exceeded() -> None:
    expected = torch.tensor([0.0, 0.0, 10.0, 10.0, 0.5, 0.5])
    # abs 0.009 (under atol); abs 0.02 at 0 (both over); rel 0.9% of 10 (under rtol); 2% of 10 (both over);
    # abs 0.02 = 4% of 0.5 (both over); abs 0.004 = 0.8% (under both)
    out = torch.tensor([0.009, 0.02, 10.09, 10.2, 0.52, 0.504])
    check = compare_elements("C", out, expected)
    assert (check.failed, check.elements) == (3, 6)
    assert not check.passed and check.matched == pytest.approx(0.5)
    assert [e.index for e in check.worst] == [[3], [1], [4]]  # largest absolute error first
    assert check.worst[0].value == pytest.approx(10.2) and check.worst[0].expected == 10.0
    assert check.atol == ATOL and check.rtol == RTOL


def test_a_bf16_rounding_of_the_expected_output_passes() -> None:
    expected = torch.randn(256, 128) * 70  # a GEMM's scale: the relative tolerance decides
    check = compare_elements("C", expected.to(torch.bfloat16), expected)
    assert check.passed and check.failed == 0 and check.worst == []
    assert check.max_abs_err > 0 and check.max_rel_err <= 2**-8


def test_the_absolute_tolerance_lets_small_outputs_be_far_off_where_rel_l2_does_not() -> None:
    """What the paper's rule misses, in one line: outputs of attention's O size (~0.03) off by 0.009 everywhere pass
    it, though their relative L2 error is ~0.3."""
    expected = torch.randn(4096, 128) * 0.03
    out = expected + 0.009
    assert compare_elements("O", out, expected).passed
    assert not compare("O", out, expected, 1e-2).passed


def test_the_required_share_lets_a_few_elements_fail() -> None:
    expected = torch.ones(1000)
    out = expected.clone()
    out[:5] = 2.0  # 0.5% of the elements
    assert compare_elements("O", out, expected, required=0.995).passed
    out[5] = 2.0  # 0.6%
    check = compare_elements("O", out, expected, required=0.995)
    assert not check.passed and check.failed == 6 and len(check.worst) == WORST_SHOWN
    assert "99.5% of elements must pass" in check.summary(["S"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn])
def test_unwritten_elements_fail_whatever_share_is_required(dtype) -> None:
    expected = torch.ones(64, 32)
    out = expected.to(dtype)
    poison(out[7:8, 3:4])
    check = compare_elements("O", out, expected, required=0.995)
    assert not check.passed and check.unwritten == 1 and check.failed == 1 and check.nonfinite == 0
    assert check.worst[0].index == [7, 3] and check.worst[0].value is None
    assert "1 never written" in check.summary(["S", "D"]) and "O[S=7, D=3] = unwritten" in check.summary(["S", "D"])


def test_a_written_nan_fails_though_the_papers_comparison_would_pass_it() -> None:
    expected = torch.ones(16)
    out = expected.clone()
    out[4] = float("nan")
    err = (out - expected).abs()
    assert not bool(((err > ATOL) & (err / expected.abs() > RTOL)).any())  # NaN > atol is false: theirs passes it
    check = compare_elements("LSE", out, expected, required=0.5)
    assert not check.passed and check.nonfinite == 1 and check.worst[0].index == [4]


def test_the_worst_elements_are_named_by_dim_in_the_summary() -> None:
    expected = torch.zeros(2, 3, 8)
    out = expected.clone()
    out[1, 2, 5] = 3.0
    out[0, 1, 1] = -0.5
    text = compare_elements("LSE", out, expected).summary(["B", "H", "S"])
    assert text.startswith("LSE: MISMATCH — 2 of 48 elements fail")
    assert "LSE[B=1, H=2, S=5] = 3 (expected 0); LSE[B=0, H=1, S=1] = -0.5 (expected 0)" in text
    assert compare_elements("LSE", expected, expected).summary(["B", "H", "S"]).startswith("LSE: ok (48 of 48")


def test_the_expected_output_may_come_in_the_librarys_shape() -> None:
    """cuDNN returns LSE as [B, H, S, 1]; the rule compares it with the task's [B, H, S] element for element."""
    out = torch.randn(2, 3, 8)
    assert compare_elements("LSE", out, out.unsqueeze(-1).clone()).passed


def test_a_strided_expected_output_is_compared_element_for_element() -> None:
    """cuDNN may hand back O as a permuted view; the worst elements are still found by the task's index."""
    expected = torch.randn(2, 8, 3, 4).permute(0, 2, 1, 3)  # [B, H, S, D] over [B, S, H, D] memory
    out = expected.contiguous().to(torch.bfloat16)
    out[1, 2, 7, 3] += 1.0
    check = compare_elements("O", out, expected)
    assert check.failed == 1 and check.worst[0].index == [1, 2, 7, 3]
