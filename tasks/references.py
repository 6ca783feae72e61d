"""fp32 PyTorch references, by the names tasks/catalog.py gives them.

Each takes the task's tensors by name (bf16 or fp32, on any device) plus the task's params, and returns
its outputs in fp32, in the task's layouts. Attention works per batch and in chunks of heads so that the
S×S score matrices stay a few hundred MB at the full shape.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

Tensors = Mapping[str, torch.Tensor]
HEAD_CHUNK_BYTES = 1 << 29  # fp32 scores held at once


def gemm(t: Tensors) -> dict[str, torch.Tensor]:
    return {"C": t["A"].float() @ t["B"].float().T}


def _head_slices(s: int, h: int) -> list[slice]:
    step = max(1, HEAD_CHUNK_BYTES // (4 * s * s))
    return [slice(h0, min(h, h0 + step)) for h0 in range(0, h, step)]


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """scale·QKᵀ for q, k in [h, S, D] fp32, with future keys at -inf when causal."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        n = s.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        s.masked_fill_(future, float("-inf"))
    return s


def attention_forward(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    q_all, k_all, v_all = (t[n].float().transpose(1, 2) for n in ("Q", "K", "V"))  # [B,H,S,D]
    b, h, s, _ = q_all.shape
    out = torch.empty_like(q_all)
    lse = torch.empty(b, h, s, dtype=torch.float32, device=q_all.device)
    for bi in range(b):
        for hs in _head_slices(s, h):
            scores = _scores(q_all[bi, hs], k_all[bi, hs], scale, causal)
            row_lse = torch.logsumexp(scores, dim=-1)
            out[bi, hs] = torch.matmul(torch.exp(scores - row_lse[..., None]), v_all[bi, hs])
            lse[bi, hs] = row_lse
    return {"O": out.transpose(1, 2).contiguous(), "LSE": lse}


def attention_backward_inputs(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """The backward task's derived inputs: O (bf16) and LSE from the forward, Delta = rowsum(dO∘O)."""
    fwd = attention_forward(t, causal=causal, scale=scale)
    o = fwd["O"].to(t["Q"].dtype)
    delta = (t["dO"].float() * o.float()).sum(-1).transpose(1, 2).contiguous()  # [B,S,H] → [B,H,S]
    return {"O": o, "LSE": fwd["LSE"], "Delta": delta}


def attention_backward(t: Tensors, *, causal: bool, scale: float) -> dict[str, torch.Tensor]:
    """dQ, dK, dV as a function of exactly the inputs a kernel receives (LSE and Delta included)."""
    q_all, k_all, v_all, do_all = (t[n].float().transpose(1, 2) for n in ("Q", "K", "V", "dO"))
    lse_all, delta_all = t["LSE"].float(), t["Delta"].float()
    b, h, s, _ = q_all.shape
    grads = {n: torch.empty_like(q_all) for n in ("dQ", "dK", "dV")}
    for bi in range(b):
        for hs in _head_slices(s, h):
            q, k, v, do = q_all[bi, hs], k_all[bi, hs], v_all[bi, hs], do_all[bi, hs]
            p = torch.exp(_scores(q, k, scale, causal) - lse_all[bi, hs][..., None])
            grads["dV"][bi, hs] = torch.matmul(p.transpose(-1, -2), do)
            ds = p * (torch.matmul(do, v.transpose(-1, -2)) - delta_all[bi, hs][..., None])
            grads["dQ"][bi, hs] = torch.matmul(ds, k) * scale
            grads["dK"][bi, hs] = torch.matmul(ds.transpose(-1, -2), q) * scale
    return {n: g.transpose(1, 2).contiguous() for n, g in grads.items()}


def run_reference(name: str, tensors: Tensors, params: Mapping[str, float | bool]) -> dict[str, torch.Tensor]:
    """Call the reference or derivation function a task names."""
    fn = {
        "gemm": gemm,
        "attention_forward": attention_forward,
        "attention_backward": attention_backward,
        "attention_backward_inputs": attention_backward_inputs,
    }[name]
    return fn(tensors, **params)
