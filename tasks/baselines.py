"""The frontier library calls a task is timed against, by the names tasks/catalog.py gives them.

Each `prepare_*` takes the task's inputs and params, does any untimed set-up, and returns a zero-argument
callable to time; the callable returns the outputs by name so that the baseline itself can be checked
against the reference. cuDNN takes the tasks' [B, H, S, D] tensors as they are, K/V heads shared by
several query heads included (seen on the H200, 2026-12-01: `aten._scaled_dot_product_cudnn_attention` takes
unexpanded 8-head K/V under 48 query heads and returns LSE as [B, H, S, 1]). The fp8 baselines are the best that
runs on our GPU image: torch._scaled_mm's block-scaled GEMM (cuBLAS) in place of the paper's DeepGEMM, which is not
available there, and the paper's own cuDNN fp8 SDPA.
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


def scaled_mm_blockwise(t: Mapping[str, torch.Tensor]) -> Callable[[], Outputs]:
    """cuBLAS's block-scaled fp8 GEMM through torch._scaled_mm (seen on the H200: 0.187 ms at 4096×4096×7168). It
    wants the per-token scales M-major ([M, K/128] with stride (1, M)) and B's block scales as the transpose of the
    task's [N/128, K/128]; the M-major copy is made here, untimed."""
    a, b = t["A"], t["B"]
    scale_a = t["SF_A"].t().contiguous().t()
    scale_b = t["SF_B"].t()
    return lambda: {"D": torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=torch.bfloat16)}


FP8_MAX = 448.0


def cudnn_fp8_attention_forward(t: Mapping[str, torch.Tensor], *, causal: bool, scale: float) -> Callable[[], Outputs]:
    """cuDNN's fp8 SDPA forward through cudnn-frontend's graph API (the `fp8` extra), built once here, untimed.
    The softmax probabilities, in [0, 1], are scaled by 448 into e4m3's range inside the kernel (scale_s, undone
    by descale_s): that is the kernel's business, not the task's. O is written with scale_o = 1, the plain cast
    the task defines."""
    try:
        import cudnn
    except ImportError:
        raise RuntimeError(
            "cuDNN's fp8 attention needs cudnn-frontend: pip install 'ptxbench[fp8]' (nvidia-cudnn-frontend)"
        ) from None
    q, k, v = t["Q"], t["K"], t["V"]
    b, h, s, _ = q.shape
    e4m3, fp32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle)
    tensors = {n: graph.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=e4m3)
               for n, x in (("q", q), ("k", k), ("v", v))}  # fmt: skip
    one = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32)
    scalars = {n: graph.tensor(name=n, **one) for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                                                         "scale_o")}  # fmt: skip
    common = dict(**tensors, **scalars, attn_scale=scale, use_causal_mask=causal)
    try:
        o, stats, amax_s, amax_o = graph.sdpa_fp8(**common, generate_stats=True)
    except TypeError:  # frontends before generate_stats named it by its opposite (as the H200 probe found)
        o, stats, amax_s, amax_o = graph.sdpa_fp8(**common, is_inference=False)
    o.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride())).set_data_type(e4m3)
    stats.set_output(True).set_dim([b, h, s, 1]).set_stride([h * s, s, 1, 1]).set_data_type(fp32)
    for amax in (amax_s, amax_o):
        amax.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(fp32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    dev = q.device
    values = {n: t[n].reshape(1, 1, 1, 1).float() for n in ("descale_q", "descale_k", "descale_v")}
    values |= {"scale_s": torch.full((1, 1, 1, 1), FP8_MAX, device=dev),
               "descale_s": torch.full((1, 1, 1, 1), 1 / FP8_MAX, device=dev),
               "scale_o": torch.ones(1, 1, 1, 1, device=dev)}  # fmt: skip
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, 1, device=dev)
    workspace = torch.empty(graph.get_workspace_size(), device=dev, dtype=torch.uint8)
    pack = {tensors["q"]: q, tensors["k"]: k, tensors["v"]: v, o: out, stats: lse,
            amax_s: torch.empty(1, 1, 1, 1, device=dev), amax_o: torch.empty(1, 1, 1, 1, device=dev)}  # fmt: skip
    pack |= {scalars[n]: x for n, x in values.items()}

    def run() -> Outputs:
        graph.execute(pack, workspace, handle=handle)
        return {"O": out, "LSE": lse.view(b, h, s)}

    return run


BASELINES: dict[str, Callable[..., Callable[[], Outputs]]] = {
    "cublas_gemm": cublas_gemm,
    "cudnn_attention_forward": cudnn_attention_forward,
    "cudnn_attention_backward": cudnn_attention_backward,
    "scaled_mm_blockwise": scaled_mm_blockwise,
    "cudnn_fp8_attention_forward": cudnn_fp8_attention_forward,
}


def prepare_baseline(
    call: str, tensors: Mapping[str, torch.Tensor], params: Mapping[str, float | bool]
) -> Callable[[], Outputs]:
    return BASELINES[call](tensors, **params)
