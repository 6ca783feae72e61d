"""Flash-attention backward from given O, LSE (natural log) and Delta = rowsum(dO∘O): dQ, dK, dV.

Both modes hold one key block per program in `attn_bwd_dkdv_kernel`-style loops: K and V of the block stay
in shared memory while the program walks the query blocks, recomputing Pᵀ = exp(scale·K Qᵀ − LSE) and
accumulating dV += Pᵀ dO and dK += dSᵀ Q with dSᵀ = Pᵀ∘(V dOᵀ − Delta). They differ in how dQ is made:
- "recompute" (two launches, no scratch): `attn_bwd_dq_kernel` holds a query block and walks the key
  blocks, recomputing P and dP to accumulate dQ += dS K. 7 tile products per (query, key) block pair
  instead of the minimal 5, but plain stores.
- "reduce" (two launches, an fp32 scratch): `attn_bwd_fused_kernel` also computes each pair's
  dQ part dS K and adds it into an fp32 [B·S, H·D] buffer with a TMA reduce-add
  (cp.reduce.async.bulk.tensor); `attn_bwd_dq_convert_kernel` then scales it to bf16 dQ. 5 products per
  pair, plus the reduce traffic in L2 (as FlashAttention-3 does).

Tensors are read through TMA descriptors over the [B·S, H·D] view as in the forward kernel (S must be a
multiple of the blocks). The exponent uses exp2 with LSE turned into log2 units. Causal programs split
their range into blocks on the diagonal (masked) and blocks off it (unmasked); key blocks run in
increasing order, which is heaviest first.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar, Scratch
from tasks.solutions.dev.kernels.tiles import (
    add_tile,
    head_block,
    head_column,
    head_view,
    load_tile,
    padded_head_dim,
    store_tile,
)


@triton.jit
def _dkdv_block_loop(
    dk,
    dv,
    k,
    v,
    q_desc,
    do_desc,
    lse_base,
    delta_base,
    row0,
    col,
    offs_n,
    lo,
    hi,
    qk_scale,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Accumulate dK, dV of one key block over query blocks [lo, hi); everything kept transposed."""
    for m0 in tl.range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = load_tile(q_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
        lse = tl.load(lse_base + offs_m) * 1.4426950408889634
        p_t = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse[None, :])  # [BLOCK_N, BLOCK_M]
        if MASKED:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        do = load_tile(do_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        delta = tl.load(delta_base + offs_m)
        ds_t = p_t * (tl.dot(v, do.T) - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    lse_ptr,
    delta_ptr,
    sm_scale,
    S,
    H,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
):
    n0 = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    row0 = (bh // H) * S
    col = head_column(bh % H, HEAD_DIM, SPLIT_HEADS)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    lse_base = lse_ptr + bh * S
    delta_base = delta_ptr + bh * S
    qk_scale = sm_scale * 1.4426950408889634

    k = load_tile(k_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    v = load_tile(v_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        dk, dv = _dkdv_block_loop(
            dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, row0, col, offs_n, n0, n0 + BLOCK_N, qk_scale,
            BLOCK_M, HEAD_DIM, SPLIT_HEADS, True,
        )  # fmt: skip
        dk, dv = _dkdv_block_loop(
            dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, row0, col, offs_n, n0 + BLOCK_N, S, qk_scale,
            BLOCK_M, HEAD_DIM, SPLIT_HEADS, False,
        )  # fmt: skip
    else:
        dk, dv = _dkdv_block_loop(
            dk,
            dv,
            k,
            v,
            q_desc,
            do_desc,
            lse_base,
            delta_base,
            row0,
            col,
            offs_n,
            0,
            S,
            qk_scale,
            BLOCK_M,
            HEAD_DIM,
            SPLIT_HEADS,
            False,
        )
    store_tile(dk_desc, row0 + n0, col, (dk * sm_scale).to(tl.bfloat16), BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    store_tile(dv_desc, row0 + n0, col, dv.to(tl.bfloat16), BLOCK_N, HEAD_DIM, SPLIT_HEADS)


@triton.jit
def _fused_block_loop(
    dk,
    dv,
    k,
    v,
    q_desc,
    do_desc,
    dq_acc_desc,
    lse_base,
    delta_base,
    row0,
    col,
    offs_n,
    lo,
    hi,
    qk_scale,
    BLOCK_M: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
    MASKED: tl.constexpr,
):
    """As `_dkdv_block_loop`, and add each query block's dQ part dS K into the fp32 accumulator."""
    for m0 in tl.range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = load_tile(q_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
        lse = tl.load(lse_base + offs_m) * 1.4426950408889634
        p_t = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse[None, :])  # [BLOCK_N, BLOCK_M]
        if MASKED:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        do = load_tile(do_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        delta = tl.load(delta_base + offs_m)
        ds_t = (p_t * (tl.dot(v, do.T) - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        add_tile(dq_acc_desc, row0 + m0, col, tl.dot(tl.trans(ds_t), k), BLOCK_M, HEAD_DIM, SPLIT_HEADS)
    return dk, dv


@triton.jit
def attn_bwd_fused_kernel(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    dq_acc_desc,
    lse_ptr,
    delta_ptr,
    sm_scale,
    S,
    H,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
):
    n0 = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    row0 = (bh // H) * S
    col = head_column(bh % H, HEAD_DIM, SPLIT_HEADS)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    lse_base = lse_ptr + bh * S
    delta_base = delta_ptr + bh * S
    qk_scale = sm_scale * 1.4426950408889634

    k = load_tile(k_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    v = load_tile(v_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        dk, dv = _fused_block_loop(
            dk, dv, k, v, q_desc, do_desc, dq_acc_desc, lse_base, delta_base, row0, col, offs_n, n0, n0 + BLOCK_N,
            qk_scale, BLOCK_M, HEAD_DIM, SPLIT_HEADS, True,
        )  # fmt: skip
        dk, dv = _fused_block_loop(
            dk, dv, k, v, q_desc, do_desc, dq_acc_desc, lse_base, delta_base, row0, col, offs_n, n0 + BLOCK_N, S,
            qk_scale, BLOCK_M, HEAD_DIM, SPLIT_HEADS, False,
        )  # fmt: skip
    else:
        dk, dv = _fused_block_loop(
            dk, dv, k, v, q_desc, do_desc, dq_acc_desc, lse_base, delta_base, row0, col, offs_n, 0, S, qk_scale,
            BLOCK_M, HEAD_DIM, SPLIT_HEADS, False,
        )  # fmt: skip
    store_tile(dk_desc, row0 + n0, col, (dk * sm_scale).to(tl.bfloat16), BLOCK_N, HEAD_DIM, SPLIT_HEADS)
    store_tile(dv_desc, row0 + n0, col, dv.to(tl.bfloat16), BLOCK_N, HEAD_DIM, SPLIT_HEADS)


@triton.jit
def attn_bwd_dq_convert_kernel(dq_acc_ptr, dq_ptr, sm_scale, n, BLOCK: tl.constexpr):
    """dQ = scale · dQ_acc, fp32 → bf16, elementwise over the flat tensor."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(dq_acc_ptr + offs, mask=mask)
    tl.store(dq_ptr + offs, (acc * sm_scale).to(tl.bfloat16), mask=mask)


@triton.jit
def _dq_block_loop(
    dq,
    q,
    do,
    lse,
    delta,
    k_desc,
    v_desc,
    row0,
    col,
    offs_m,
    lo,
    hi,
    qk_scale,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Accumulate dQ of one query block over key blocks [lo, hi)."""
    for n0 in tl.range(lo, hi, BLOCK_N):
        k = load_tile(k_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
        v = load_tile(v_desc, row0 + n0, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
        p = tl.math.exp2(tl.dot(q, k.T) * qk_scale - lse[:, None])  # [BLOCK_M, BLOCK_N]
        if MASKED:
            offs_n = n0 + tl.arange(0, BLOCK_N)
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        ds = p * (tl.dot(do, v.T) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dq_desc,
    lse_ptr,
    delta_ptr,
    sm_scale,
    S,
    H,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    SPLIT_HEADS: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows first
    bh = tl.program_id(1)
    row0 = (bh // H) * S
    col = head_column(bh % H, HEAD_DIM, SPLIT_HEADS)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    qk_scale = sm_scale * 1.4426950408889634

    q = load_tile(q_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
    do = load_tile(do_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
    lse = tl.load(lse_ptr + bh * S + offs_m) * 1.4426950408889634
    delta = tl.load(delta_ptr + bh * S + offs_m)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        dq = _dq_block_loop(
            dq,
            q,
            do,
            lse,
            delta,
            k_desc,
            v_desc,
            row0,
            col,
            offs_m,
            0,
            m0,
            qk_scale,
            BLOCK_N,
            HEAD_DIM,
            SPLIT_HEADS,
            False,
        )
        dq = _dq_block_loop(
            dq,
            q,
            do,
            lse,
            delta,
            k_desc,
            v_desc,
            row0,
            col,
            offs_m,
            m0,
            m0 + BLOCK_M,
            qk_scale,
            BLOCK_N,
            HEAD_DIM,
            SPLIT_HEADS,
            True,
        )
    else:
        dq = _dq_block_loop(
            dq,
            q,
            do,
            lse,
            delta,
            k_desc,
            v_desc,
            row0,
            col,
            offs_m,
            0,
            S,
            qk_scale,
            BLOCK_N,
            HEAD_DIM,
            SPLIT_HEADS,
            False,
        )
    store_tile(dq_desc, row0 + m0, col, (dq * sm_scale).to(tl.bfloat16), BLOCK_M, HEAD_DIM, SPLIT_HEADS)


@dataclass(frozen=True)
class AttnBwdConfig:
    # the key-block kernel (dK/dV, and dQ parts in "reduce" mode): BLOCK_N keys held, BLOCK_M queries per step
    kv_block_n: int = 128
    kv_block_m: int = 64
    kv_warps: int = 8
    kv_stages: int = 2
    # dQ kernel ("recompute" mode only): BLOCK_M queries held, BLOCK_N keys per step
    q_block_m: int = 128
    q_block_n: int = 64
    q_warps: int = 8
    q_stages: int = 2
    dq_mode: str = "recompute"  # or "reduce"

    def label(self) -> str:
        kv = f"{self.kv_block_n}x{self.kv_block_m} w{self.kv_warps} s{self.kv_stages}"
        if self.dq_mode == "reduce":
            return f"fused+reduce {kv}"
        return f"dkdv {kv} | dq {self.q_block_m}x{self.q_block_n} w{self.q_warps} s{self.q_stages}"


CONVERT_BLOCK = 4096


def program(task: Task, cfg: AttnBwdConfig, arch: Arch) -> Program:
    d = task.dims["D"]
    causal = bool(task.params["causal"])
    if cfg.dq_mode not in ("recompute", "reduce"):
        raise ValueError(f"dq_mode {cfg.dq_mode!r}: 'recompute' or 'reduce'")
    if cfg.kv_block_n % cfg.kv_block_m or cfg.q_block_m % cfg.q_block_n:
        raise ValueError("the held block must be a multiple of the step block (whole diagonal blocks)")
    view, split = head_view(d)
    hd = padded_head_dim(d)
    common = {"sm_scale": Scalar("rsqrt(D)", "fp32"), "S": Scalar("S", "i32"), "H": Scalar("H", "i32")}
    kv_block, kv_step = head_block(cfg.kv_block_n, d), head_block(cfg.kv_block_m, d)
    kv_params = {
        "q_desc": Desc("Q", view, kv_step),
        "k_desc": Desc("K", view, kv_block),
        "v_desc": Desc("V", view, kv_block),
        "do_desc": Desc("dO", view, kv_step),
        "dk_desc": Desc("dK", view, kv_block),
        "dv_desc": Desc("dV", view, kv_block),
    }
    kv_constexprs = {"HEAD_DIM": hd, "BLOCK_M": cfg.kv_block_m, "BLOCK_N": cfg.kv_block_n, "CAUSAL": causal,
                     "SPLIT_HEADS": split}  # fmt: skip
    kv_grid = (f"cdiv(S,{cfg.kv_block_n})", "B*H", 1)
    if cfg.dq_mode == "reduce":
        fused = KernelLaunch(
            fn=attn_bwd_fused_kernel,
            params={
                **kv_params,
                "dq_acc_desc": Desc("dq_acc", view, kv_step),
                "lse_ptr": Ptr("LSE"),
                "delta_ptr": Ptr("Delta"),
                **common,
            },
            grid=kv_grid,
            num_warps=cfg.kv_warps,
            num_stages=cfg.kv_stages,
            constexprs=kv_constexprs,
        )
        convert = KernelLaunch(
            fn=attn_bwd_dq_convert_kernel,
            params={
                "dq_acc_ptr": Ptr("dq_acc"),
                "dq_ptr": Ptr("dQ"),
                "sm_scale": common["sm_scale"],
                "n": Scalar("B*S*H*D", "i32"),
            },
            grid=(f"cdiv(B*S*H*D,{CONVERT_BLOCK})", 1, 1),
            num_warps=4,
            num_stages=1,
            constexprs={"BLOCK": CONVERT_BLOCK},
        )
        return Program([fused, convert], (Scratch("dq_acc", "float32", view),))
    dkdv = KernelLaunch(
        fn=attn_bwd_dkdv_kernel,
        params={**kv_params, "lse_ptr": Ptr("LSE"), "delta_ptr": Ptr("Delta"), **common},
        grid=kv_grid,
        num_warps=cfg.kv_warps,
        num_stages=cfg.kv_stages,
        constexprs=kv_constexprs,
    )
    q_block, q_step = head_block(cfg.q_block_m, d), head_block(cfg.q_block_n, d)
    dq = KernelLaunch(
        fn=attn_bwd_dq_kernel,
        params={
            "q_desc": Desc("Q", view, q_block),
            "k_desc": Desc("K", view, q_step),
            "v_desc": Desc("V", view, q_step),
            "do_desc": Desc("dO", view, q_block),
            "dq_desc": Desc("dQ", view, q_block),
            "lse_ptr": Ptr("LSE"),
            "delta_ptr": Ptr("Delta"),
            **common,
        },
        grid=(f"cdiv(S,{cfg.q_block_m})", "B*H", 1),
        num_warps=cfg.q_warps,
        num_stages=cfg.q_stages,
        constexprs={
            "HEAD_DIM": hd,
            "BLOCK_M": cfg.q_block_m,
            "BLOCK_N": cfg.q_block_n,
            "CAUSAL": causal,
            "SPLIT_HEADS": split,
        },
    )
    return Program([dkdv, dq])


def supports(task: Task) -> bool:
    return task.family == "attention_bwd"
