"""The paper-rule calibration (tools/dev/paper_rule_calibration.py) on a CPU machine: what it cannot calibrate is
refused in one line before any GPU is asked for, and without a GPU it says so. Its measurement needs cuDNN and
FlashAttention-2; on the H200 the lead runs `python -m tools.dev.paper_rule_calibration --out $OUT/calibration.md`
(docs/performance.md holds the result)."""

from __future__ import annotations

import pytest
import torch

from tools.dev import paper_rule_calibration as calibration


@pytest.mark.parametrize(
    ("task", "why"),
    [
        ("gemm_n7168_k5120", "gemm_n7168_k5120 is of family gemm; only bf16 attention"),
        ("gqa_bwd_d128", "gqa_bwd_d128 has 8 K/V heads for 48 query heads; only MHA"),
        ("fp8_mha_with_lse_d64", "fp8_mha_with_lse_d64 is of family fp8_attention_fwd"),
    ],
)
def test_what_flash_attention_2_cannot_answer_is_refused(task: str, why: str, capsys: pytest.CaptureFixture) -> None:
    assert calibration.unsupported("mha_bwd_d128") is None
    assert calibration.main(["--tasks", f"mha_with_lse_d128,{task}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {why}") and err.count("\n") == 1


def test_an_unknown_task_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert calibration.main(["--tasks", "mha_bwd_d12"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown task or group 'mha_bwd_d12'")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the calibration would run")
def test_without_a_gpu_it_says_so(capsys: pytest.CaptureFixture) -> None:
    assert calibration.main([]) == 2
    assert capsys.readouterr().err == "error: this needs a GPU (cuDNN's and FlashAttention-2's kernels)\n"
