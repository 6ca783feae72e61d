"""The fp32 references on the CPU at small sizes, each against an independent formulation: the GEMM against
a float64 einsum, attention forward (explicit softmax) against SDPA's math path, backward against autograd
through that path (grouped-query attention through SDPA's own `enable_gqa`); and the input draws the tasks
describe."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tasks import references
from tasks.catalog import get_task
from tasks.inputs import TORCH_DTYPES, draw_inputs, shape_of
from tasks.references import attention_backward_inputs, attention_forward, run_reference

SMALL = {"B": 2, "S": 40, "H": 6}
sdpa_math = torch.ops.aten._scaled_dot_product_attention_math


def small_dims(task) -> dict[str, int]:
    """Keep D (the softmax scale 1/√D stays right); GQA keeps 3 query heads per K/V head."""
    return {**task.dims, **SMALL, "HKV": 2 if task.dims["HKV"] < task.dims["H"] else SMALL["H"]}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def expanded(kv: torch.Tensor, heads: int) -> torch.Tensor:
    """K/V heads repeated for the query heads that share them, in float64, as SDPA's math path takes them."""
    return kv.double().repeat_interleave(heads // kv.shape[1], dim=1)


def test_gemm_against_float64():
    task = get_task("gemm")
    t = draw_inputs(task, {"M": 96, "N": 80, "K": 64}, seed=0, device="cpu")
    c = run_reference(task.reference, t, task.params)["C"]
    assert c.dtype == torch.float32 and c.shape == (96, 80)
    assert rel_err(c, torch.einsum("mk,nk->mn", t["A"].double(), t["B"].double())) < 1e-6


@pytest.mark.parametrize(
    "name", ["mha_with_lse_d128", "mha_with_lse_d128_causal", "mha_with_lse_d64_causal", "mha_with_lse_d96",
             "gqa_with_lse_d128", "gqa_with_lse_d128_causal"],
)  # fmt: skip
def test_attention_forward_against_sdpa_math(name):
    task = get_task(name)
    t = draw_inputs(task, small_dims(task), seed=1, device="cpu")
    out = run_reference(task.reference, t, task.params)
    q = t["Q"].double()
    k, v = expanded(t["K"], 6), expanded(t["V"], 6)
    o_ref, p_ref = sdpa_math(q, k, v, is_causal=task.params["causal"], scale=task.params["scale"])
    assert out["O"].dtype == out["LSE"].dtype == torch.float32
    assert out["O"].shape == t["Q"].shape == (2, 6, 40, task.dims["D"]) and out["LSE"].shape == (2, 6, 40)
    assert rel_err(out["O"], o_ref) < 1e-5
    # LSE from SDPA's probabilities: P_ii = exp(s_ii − LSE_i); the diagonal is never masked.
    s_diag = (q * k).sum(-1) * task.params["scale"]
    lse_ref = s_diag - torch.log(torch.diagonal(p_ref, dim1=-2, dim2=-1))
    assert rel_err(out["LSE"], lse_ref) < 1e-5


def test_causal_mask_hides_future_keys():
    task = get_task("attn_fwd_causal")
    t = draw_inputs(task, small_dims(task), seed=2, device="cpu")
    changed = {**t, "K": t["K"].clone(), "V": t["V"].clone()}
    changed["K"][:, :, -1] += 1.0  # only the last query may see the last key
    changed["V"][:, :, -1] -= 1.0
    before, after = (attention_forward(x, **task.params) for x in (t, changed))
    assert torch.equal(before["O"][:, :, :-1], after["O"][:, :, :-1])
    assert torch.equal(before["LSE"][..., :-1], after["LSE"][..., :-1])
    assert not torch.equal(before["O"][:, :, -1], after["O"][:, :, -1])


@pytest.mark.parametrize(
    "name", ["mha_bwd_d128", "mha_bwd_d128_causal", "mha_bwd_d64", "mha_bwd_d96_causal", "gqa_bwd_d128",
             "gqa_bwd_d128_causal"],
)  # fmt: skip
def test_attention_backward_against_autograd(name):
    task = get_task(name)
    params = task.params
    t = draw_inputs(task, small_dims(task), seed=3, device="cpu")
    # The exact O and LSE (no bf16 rounding of O), so that only the backward formulas are compared.
    exact = {n: t[n] for n in ("Q", "K", "V", "dO")}
    exact |= attention_forward(exact, **params)
    grads = run_reference(task.reference, exact, params)

    q, k, v = (t[n].double().requires_grad_() for n in ("Q", "K", "V"))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=params["causal"], scale=params["scale"],
                                       enable_gqa=task.dims["HKV"] < task.dims["H"])  # fmt: skip
    o.backward(t["dO"].double())
    for out, ref in (("dQ", q), ("dK", k), ("dV", v)):
        assert grads[out].dtype == torch.float32 and grads[out].shape == ref.shape, out
        assert rel_err(grads[out], ref.grad) < 1e-5, out
    # With the task's own derived inputs (O rounded to bf16 as a kernel receives it) the reference stays
    # well inside the task's tolerance of the exact gradient.
    derived = run_reference(task.reference, t, params)
    assert all(rel_err(derived[n], r.grad) < task.tolerance / 2 for n, r in (("dQ", q), ("dK", k), ("dV", v)))


def test_backward_inputs_are_the_forwards_o_and_lse_and_no_delta():
    task = get_task("attn_bwd_causal")
    assert [s.name for s in task.inputs] == ["Q", "K", "V", "O", "dO", "LSE"]
    t = draw_inputs(task, small_dims(task), seed=4, device="cpu")
    fwd = attention_forward(t, **task.params)
    assert t["O"].dtype == torch.bfloat16 and torch.equal(t["O"], fwd["O"].to(torch.bfloat16))
    assert t["LSE"].dtype == torch.float32 and torch.equal(t["LSE"], fwd["LSE"]) and t["LSE"].shape == (2, 6, 40)
    assert sorted(attention_backward_inputs(t, **task.params)) == ["LSE", "O"]


def test_the_backward_reads_o_for_delta():
    """Delta = rowsum(dO∘O) comes from the O the kernel is given: another O gives another dQ and dK, the
    same dV (dV = PᵀdO does not involve Delta)."""
    task = get_task("attn_bwd")
    t = draw_inputs(task, small_dims(task), seed=10, device="cpu")
    before = run_reference(task.reference, t, task.params)
    after = run_reference(task.reference, {**t, "O": t["O"] * 1.5}, task.params)
    assert torch.equal(before["dV"], after["dV"])
    assert rel_err(after["dQ"], before["dQ"]) > 0.05 and rel_err(after["dK"], before["dK"]) > 0.05


@pytest.mark.parametrize("name", ["attn_fwd_causal", "attn_bwd", "gqa_bwd_d128"])
def test_chunking_over_heads_changes_nothing(monkeypatch, name):
    task = get_task(name)
    t = draw_inputs(task, small_dims(task), seed=5, device="cpu")
    whole = run_reference(task.reference, t, task.params)
    monkeypatch.setattr(references, "HEAD_CHUNK_BYTES", 1)  # one head at a time
    assert references._head_slices(40, 3) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    chunked = run_reference(task.reference, t, task.params)
    assert all(torch.allclose(chunked[n], whole[n], rtol=1e-6, atol=1e-6) for n in whole)


@pytest.mark.parametrize("name", ["gemm", "attn_fwd", "mha_bwd_d64_causal", "gqa_bwd_d128_causal"])
def test_inputs_follow_the_task(name):
    task = get_task(name)
    dims = {"M": 64, "N": 48, "K": 32} if task.family == "gemm" else small_dims(task)
    t = draw_inputs(task, dims, seed=6, device="cpu")
    assert sorted(t) == sorted(s.name for s in task.inputs)
    for spec in task.inputs:
        assert t[spec.name].dtype == TORCH_DTYPES[spec.dtype]
        assert list(t[spec.name].shape) == shape_of(spec.shape, dims)
        assert t[spec.name].is_contiguous()


def test_draws_are_seeded():
    task = get_task("attn_fwd")
    one, same, other = (draw_inputs(task, small_dims(task), seed=s, device="cpu") for s in (7, 7, 8))
    assert all(torch.equal(one[n], same[n]) for n in one)
    assert not torch.equal(one["Q"], other["Q"])


def test_spiky_inputs_have_outliers():
    task = get_task("attn_fwd")
    t = draw_inputs(task, {**task.dims, "B": 1, "S": 256, "H": 4}, seed=9, device="cpu")  # 3 × 131,072 values
    values = torch.cat([t[n].float().flatten() for n in ("Q", "K", "V")])
    # N(0,1) plus N(0,100) on about 1 in 1000: a few hundred spikes, many beyond anything N(0,1) reaches here.
    assert 50 < (values.abs() > 6).sum().item() < 400
    assert abs(values.std().item() - (1 + 100 * 1e-3) ** 0.5) < 0.05


# ------------------------------------------------------------------------------------------------- fp8


def test_fp8_gemm_inputs_follow_the_1d2d_recipe_and_the_reference_sums_k_blocks():
    task = get_task("fp8_gemm_nt_1d2d_n4096_k7168")
    dims = {"M": 96, "N": 256, "K": 384}
    t = draw_inputs(task, dims, seed=3, device="cpu")
    assert {n: (x.dtype, tuple(x.shape)) for n, x in t.items()} == {
        "A": (torch.float8_e4m3fn, (96, 384)), "SF_A": (torch.float32, (96, 3)),
        "B": (torch.float8_e4m3fn, (256, 384)), "SF_B": (torch.float32, (2, 3)),
    }  # fmt: skip
    # Each scale maps its block's amax onto e4m3's largest value, 448.
    a_blocks = t["A"].float().view(96, 3, 128)
    assert torch.equal(a_blocks.abs().amax(-1), torch.full((96, 3), 448.0))
    b_blocks = t["B"].float().view(2, 128, 3, 128)
    assert torch.equal(b_blocks.abs().amax((1, 3)), torch.full((2, 3), 448.0))
    # Dequantized, the inputs are the bf16 N(0,1) draws (the same generator, in the inputs' order) within e4m3's
    # rounding: 3 mantissa bits, a relative step of 1/8.
    gen = torch.Generator().manual_seed(3)
    drawn = {
        n: torch.randn(shape, generator=gen).bfloat16().float() for n, shape in (("A", (96, 384)), ("B", (256, 384)))
    }
    a = (a_blocks * t["SF_A"][..., None]).view(96, 384)
    b = (b_blocks * t["SF_B"][:, None, :, None]).view(256, 384)
    assert 0.01 < rel_err(a, drawn["A"]) < 0.05 and 0.01 < rel_err(b, drawn["B"]) < 0.05
    # The paper's pseudo-code, K block by K block in float64: scale = SF_A · SF_B, partial product times it.
    d = run_reference(task.reference, t, task.params)["D"]
    want = torch.zeros(96, 256, dtype=torch.float64)
    for kb in range(3):
        ks = slice(128 * kb, 128 * (kb + 1))
        partial = t["A"][:, ks].double() @ t["B"][:, ks].double().T
        want += partial * (t["SF_A"][:, kb, None].double() * t["SF_B"][:, kb].double().repeat_interleave(128)[None])
    assert d.dtype == torch.float32 and rel_err(d, want) < 1e-6


@pytest.mark.parametrize("name", ["fp8_mha_with_lse_d64", "fp8_mha_with_lse_d256_causal"])
def test_fp8_attention_is_the_forward_on_dequantized_inputs(name):
    task = get_task(name)
    t = draw_inputs(task, {**task.dims, "B": 1, "H": 3, "S": 48}, seed=4, device="cpu")
    for n in ("Q", "K", "V"):
        assert t[n].dtype == torch.float8_e4m3fn and t[f"descale_{n.lower()}"].shape == (1,)
        assert t[n].float().abs().max() == 448.0  # per-tensor scale: the amax lands on e4m3's largest value
    out = run_reference(task.reference, t, task.params)
    q, k, v = (t[n].double() * t[f"descale_{n.lower()}"].double() for n in ("Q", "K", "V"))
    o_ref, _ = sdpa_math(q, k, v, is_causal=task.params["causal"], scale=task.params["scale"])
    assert out["O"].dtype == torch.float32 and rel_err(out["O"], o_ref) < 1e-5
    scores = q @ k.transpose(-1, -2) * task.params["scale"]
    if task.params["causal"]:
        scores = scores.masked_fill(torch.ones(48, 48, dtype=torch.bool).triu(1), float("-inf"))
    assert rel_err(out["LSE"], torch.logsumexp(scores, -1)) < 1e-5
