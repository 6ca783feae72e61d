"""fp32 PyTorch references, by the names tasks/catalog.py gives them.

Each takes the task's tensors by name (bf16 or fp32, on any device) plus the task's params, and returns
its outputs in fp32, in the task's layouts ([B, H, S, D]; LSE [B, H, S]). Attention works per batch and in
chunks of query heads so that the S×S score matrices stay a few hundred MB at the full shape. Grouped-query
attention (K/V with fewer heads than Q) lets query head h read K/V head h // (H / H_kv), as cuDNN does.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

Tensors = Mapping[str, torch.Tensor]
HEAD_CHUNK_BYTES = 1 << 29  # fp32 scores held at once


# fp32 S×S matrices (scores, probabilities, dP, dS) alive at once in a head chunk of the backward; the forward
# holds fewer. With the fp32 copies of the tensors, this is what a reference needs beyond its inputs.
CHUNK_MATRICES = 4


def working_bytes(name: str, dims: Mapping[str, int]) -> int:
    """The most the reference `name` holds at once besides fp32 copies of the task's tensors: its head chunk's
    score matrices (attention), nothing for a GEMM."""
    if "attention" not in name:
        return 0
    s = dims["S"]
    heads_per_chunk = max(1, HEAD_CHUNK_BYTES // (4 * s * s))
    return CHUNK_MATRICES * 4 * s * s * min(heads_per_chunk, dims["H"])


def gemm(t: Tensors) -> dict[str, torch.Tensor]:
    return {"C": t["A"].float() @ t["B"].float().T}


def _head_slices(s: int, h: int) -> list[slice]:
    step = max(1, HEAD_CHUNK_BYTES // (4 * s * s))
    return [slice(h0, min(h, h0 + step)) for h0 in range(0, h, step)]


def _kv_heads(kv: torch.Tensor, heads: slice, group: int) -> torch.Tensor:
    """The K/V heads (of one batch, [H_kv, S, D]) that query heads `heads` read, one per query head."""
    return kv[torch.arange(heads.start, heads.stop, device=kv.device) // group]


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """scale·QKᵀ for q, k in [h, S, D] fp32, with future keys at -inf when causal."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        n = s.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        s.masked_fill_(future, float("-inf"))
    return s


def attention_forward(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    q_all, k_all, v_all = (t[n].float() for n in ("Q", "K", "V"))  # [B, H, S, D]; K, V may have fewer heads
    b, h, s, _ = q_all.shape
    group = h // k_all.shape[1]
    out = torch.empty_like(q_all)
    lse = torch.empty(b, h, s, dtype=torch.float32, device=q_all.device)
    for bi in range(b):
        for hs in _head_slices(s, h):
            k, v = _kv_heads(k_all[bi], hs, group), _kv_heads(v_all[bi], hs, group)
            scores = _scores(q_all[bi, hs], k, scale, causal)
            row_lse = torch.logsumexp(scores, dim=-1)
            out[bi, hs] = torch.matmul(torch.exp(scores - row_lse[..., None]), v)
            lse[bi, hs] = row_lse
    return {"O": out, "LSE": lse}


def attention_backward_inputs(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """The backward task's derived inputs: the forward's O (rounded to the inputs' dtype) and LSE."""
    fwd = attention_forward(t, causal=causal, scale=scale)
    return {"O": fwd["O"].to(t["Q"].dtype), "LSE": fwd["LSE"]}


def attention_backward(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """dQ, dK, dV from exactly the inputs a kernel receives: Q, K, V, O, dO and LSE. Delta = rowsum(dO∘O) is
    computed here from the given O, as the kernel must compute it."""
    q_all, k_all, v_all, o_all, do_all = (t[n].float() for n in ("Q", "K", "V", "O", "dO"))
    lse_all = t["LSE"].float()
    b, h, s, _ = q_all.shape
    group = h // k_all.shape[1]
    dq = torch.empty_like(q_all)
    dk, dv = torch.zeros_like(k_all), torch.zeros_like(v_all)
    for bi in range(b):
        for hs in _head_slices(s, h):
            q, do = q_all[bi, hs], do_all[bi, hs]
            k, v = _kv_heads(k_all[bi], hs, group), _kv_heads(v_all[bi], hs, group)
            p = torch.exp(_scores(q, k, scale, causal) - lse_all[bi, hs][..., None])
            delta = (do * o_all[bi, hs]).sum(-1)
            ds = p * (torch.matmul(do, v.transpose(-1, -2)) - delta[..., None])
            dq[bi, hs] = torch.matmul(ds, k) * scale
            kv_index = torch.arange(hs.start, hs.stop, device=q.device) // group  # sum over each K/V head's queries
            dk[bi].index_add_(0, kv_index, torch.matmul(ds.transpose(-1, -2), q) * scale)
            dv[bi].index_add_(0, kv_index, torch.matmul(p.transpose(-1, -2), do))
    return {"dQ": dq, "dK": dk, "dV": dv}


FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def _to_fp8(x: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x scaled so that its amax lands on FP8_MAX, cast to e4m3, and the descale (amax / FP8_MAX) undoing it."""
    amax = amax.float().clamp_min(1e-4)
    return (x.float() * (FP8_MAX / amax)).to(torch.float8_e4m3fn), amax / FP8_MAX


def fp8_gemm_inputs(t: Tensors) -> dict[str, torch.Tensor]:
    """A and B (drawn in bf16) cast to fp8 as DeepGEMM's 1D2D recipe does: A with one scale per token per 128-wide K
    block (SF_A [M, K/128]), B with one per 128×128 block (SF_B [N/128, K/128])."""
    a, b = t["A"], t["B"]
    (m, k), n = a.shape, b.shape[0]
    a_blocks = a.view(m, k // 128, 128)
    a8, sf_a = _to_fp8(a_blocks, a_blocks.abs().amax(-1, keepdim=True))
    b_blocks = b.view(n // 128, 128, k // 128, 128)
    b8, sf_b = _to_fp8(b_blocks, b_blocks.abs().amax((1, 3), keepdim=True))
    return {
        "A": a8.view(m, k),
        "SF_A": sf_a.view(m, k // 128),
        "B": b8.view(n, k),
        "SF_B": sf_b.view(n // 128, k // 128),
    }


def fp8_gemm_block_scaled(t: Tensors) -> dict[str, torch.Tensor]:
    """D = Σ over 128-wide K blocks of (A_blk·B_blkᵀ)·SF_A·SF_B: the same as A and B dequantized block by block
    (each scale is constant over its block), then one fp32 product."""
    a, b = t["A"].float(), t["B"].float()
    block = a.shape[1] // t["SF_A"].shape[1]
    a = a * t["SF_A"].float().repeat_interleave(block, dim=1)
    b = b * t["SF_B"].float().repeat_interleave(block, dim=0).repeat_interleave(block, dim=1)
    return {"D": a @ b.T}


def fp8_attention_inputs(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """Q, K, V (drawn in bf16) cast to fp8 with one scale per tensor, and their descales."""
    out = {}
    for name in ("Q", "K", "V"):
        out[name], out[f"descale_{name.lower()}"] = _to_fp8(t[name], t[name].abs().amax().view(1))
    return out


def fp8_attention_forward(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """The bf16 forward's reference on the dequantized inputs (X.float()·descale_x)."""
    deq = {n: t[n].float() * t[f"descale_{n.lower()}"].float() for n in ("Q", "K", "V")}
    return attention_forward(deq, causal=causal, scale=scale)


def run_reference(name: str, tensors: Tensors, params: Mapping[str, float | bool]) -> dict[str, torch.Tensor]:
    """Call the reference or derivation function a task names: ours, or a FlashInfer-Bench definition's `run`."""
    if name.startswith("flashinfer_bench:"):
        from tasks import flashinfer_bench

        return flashinfer_bench.run_reference(name, dict(tensors), dict(params))
    fn = {
        "gemm": gemm,
        "attention_forward": attention_forward,
        "attention_backward": attention_backward,
        "attention_backward_inputs": attention_backward_inputs,
        "fp8_gemm_inputs": fp8_gemm_inputs,
        "fp8_gemm_block_scaled": fp8_gemm_block_scaled,
        "fp8_attention_inputs": fp8_attention_inputs,
        "fp8_attention_forward": fp8_attention_forward,
    }[name]
    return fn(tensors, **params)
