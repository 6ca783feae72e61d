"""The frontier library calls a task is timed against, by the names tasks/catalog.py gives them.

Each `prepare_*` takes the task's inputs and params, does any untimed set-up, and returns a zero-argument
callable to time; the callable returns the outputs by name so that the baseline itself can be checked
against the reference. cuDNN takes the tasks' [B, H, S, D] tensors as they are, K/V heads shared by
several query heads included (seen on the H200, 2026-12-01: `aten._scaled_dot_product_cudnn_attention` takes
unexpanded 8-head K/V under 48 query heads and returns LSE as [B, H, S, 1]).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

Outputs = dict[str, torch.Tensor]


def cublas_gemm(t: Mapping[str, torch.Tensor]) -> Callable[[], Outputs]:
    a, b = t["A"], t["B"]
    return lambda: {"C": a @ b.T}


def _cudnn_forward(t: Mapping[str, torch.Tensor], causal: bool, scale: float) -> tuple:
    """cuDNN's forward: (O, LSE [B, H, S, 1], …, philox seed, philox offset, …)."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention(
        t["Q"], t["K"], t["V"], None, True, 0.0, causal, False, scale=scale
    )


def cudnn_attention_forward(t: Mapping[str, torch.Tensor], *, causal: bool, scale: float) -> Callable[[], Outputs]:
    def run() -> Outputs:
        out = _cudnn_forward(t, causal, scale)
        return {"O": out[0], "LSE": out[1].reshape(out[1].shape[:3])}

    return run


def cudnn_attention_backward(t: Mapping[str, torch.Tensor], *, causal: bool, scale: float) -> Callable[[], Outputs]:
    """cuDNN's backward from the task's own O and LSE (it computes Delta = rowsum(dO∘O) itself, as a
    candidate must); the untimed forward call only supplies the dropout RNG state the call signature wants."""
    fwd = _cudnn_forward(t, causal, scale)
    seed, offset = fwd[6], fwd[7]
    q, k, v, o, do = (t[n] for n in ("Q", "K", "V", "O", "dO"))
    lse = t["LSE"].unsqueeze(-1)  # cuDNN's [B, H, S, 1]
    s = q.shape[2]

    def run() -> Outputs:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse, seed, offset, None, None, None, s, s, 0.0, causal, scale=scale
        )
        return {"dQ": dq, "dK": dk, "dV": dv}

    return run


def prepare_baseline(
    call: str, tensors: Mapping[str, torch.Tensor], params: Mapping[str, float | bool]
) -> Callable[[], Outputs]:
    fn = {
        "cublas_gemm": cublas_gemm,
        "cudnn_attention_forward": cudnn_attention_forward,
        "cudnn_attention_backward": cudnn_attention_backward,
    }[call]
    return fn(tensors, **params)
