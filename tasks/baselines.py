"""The frontier library calls a task is timed against, by the names tasks/catalog.py gives them.

Each `prepare_*` takes the task's inputs and params, does any untimed set-up (the backward's forward
pass), and returns a zero-argument callable to time; the callable returns the outputs by name so that
the baseline itself can be checked against the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

Outputs = dict[str, torch.Tensor]


def cublas_gemm(t: Mapping[str, torch.Tensor]) -> Callable[[], Outputs]:
    a, b = t["A"], t["B"]
    return lambda: {"C": a @ b.T}


def _heads_first(t: Mapping[str, torch.Tensor], *names: str) -> list[torch.Tensor]:
    """[B,S,H,D] tensors as [B,H,S,D] views over the same memory, as cuDNN takes them."""
    return [t[n].transpose(1, 2) for n in names]


def cudnn_attention_forward(t: Mapping[str, torch.Tensor], *, causal: bool, scale: float) -> Callable[[], Outputs]:
    q, k, v = _heads_first(t, "Q", "K", "V")

    def run() -> Outputs:
        out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
        return {"O": out[0].transpose(1, 2), "LSE": out[1].reshape(out[1].shape[:3])}

    return run


def cudnn_attention_backward(t: Mapping[str, torch.Tensor], *, causal: bool, scale: float) -> Callable[[], Outputs]:
    q, k, v, do = _heads_first(t, "Q", "K", "V", "dO")
    fwd = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    o, lse, seed, offset = fwd[0], fwd[1], fwd[6], fwd[7]
    s = q.shape[2]

    def run() -> Outputs:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse, seed, offset, None, None, None, s, s, 0.0, causal, scale=scale
        )
        return {"dQ": dq.transpose(1, 2), "dK": dk.transpose(1, 2), "dV": dv.transpose(1, 2)}

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
