"""Flash-attention forward: O = softmax(scale·QKᵀ)V and LSE (natural log), tensors [B,S,H,D] in bf16.

One program per (query block, batch·head). Q, K, V and O are read and written through TMA descriptors over
the contiguous 2-D view [B·S, H·D]: the tile of batch b, rows s…s+BLOCK, head h sits at row b·S+s,
column h·D, so each load is one box [BLOCK, D] (Triton splits it into 128-byte-swizzled halves). This
needs S to be a multiple of the block sizes, else a box would run into the next batch's rows.

The online softmax works in the exp2 domain (scores pre-multiplied by scale·log2 e, one FMA per
element); the running max m and sum l give LSE = (m + log2 l)·ln 2 at the end. Causal attention splits
the key range into the off-diagonal blocks [0, m0), which need no mask, and the diagonal blocks
[m0, m0+BLOCK_M), which do; query blocks run heaviest first (reverse order) to shorten the tail.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar
from tasks.solutions.dev.kernels.tiles import head_block, head_column, head_view, load_tile, padded_head_dim, store_tile


@triton.jit
def _fwd_block_loop(
    acc,
    l_i,
    m_i,
    q,
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
    """Fold key blocks [lo, hi) into the running (acc, l, m); MASKED applies the causal mask."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = load_tile(k_desc, row0 + start_n, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
        qk = tl.dot(q, k.T)
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            # A large finite penalty, not -inf: a fully masked row of this block then gives p = 0, never NaN.
            qk = qk * qk_scale + tl.where(offs_m[:, None] >= offs_n[None, :], 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = load_tile(v_desc, row0 + start_n, col, BLOCK_N, HEAD_DIM, SPLIT_HEADS)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    lse_ptr,
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
    row0 = (bh // H) * S  # row of (b, s=0) in the [B·S, H·D] view
    col = head_column(bh % H, HEAD_DIM, SPLIT_HEADS)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    qk_scale = sm_scale * 1.4426950408889634  # scores in log2 units

    q = load_tile(q_desc, row0 + m0, col, BLOCK_M, HEAD_DIM, SPLIT_HEADS)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_desc, v_desc, row0, col, offs_m, 0, m0, qk_scale, BLOCK_N, HEAD_DIM, SPLIT_HEADS, False
        )
        acc, l_i, m_i = _fwd_block_loop(
            acc,
            l_i,
            m_i,
            q,
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
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_desc, v_desc, row0, col, offs_m, 0, S, qk_scale, BLOCK_N, HEAD_DIM, SPLIT_HEADS, False
        )

    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back to natural log
    tl.store(lse_ptr + bh * S + offs_m, lse)
    store_tile(o_desc, row0 + m0, col, (acc / l_i[:, None]).to(tl.bfloat16), BLOCK_M, HEAD_DIM, SPLIT_HEADS)


@dataclass(frozen=True)
class AttnFwdConfig:
    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


def program(task: Task, cfg: AttnFwdConfig, arch: Arch) -> Program:
    d = task.dims["D"]
    causal = bool(task.params["causal"])
    if cfg.block_m % cfg.block_n:
        raise ValueError("BLOCK_M must be a multiple of BLOCK_N (the causal diagonal is whole key blocks)")
    view, split = head_view(d)
    params = {
        "q_desc": Desc("Q", view, head_block(cfg.block_m, d)),
        "k_desc": Desc("K", view, head_block(cfg.block_n, d)),
        "v_desc": Desc("V", view, head_block(cfg.block_n, d)),
        "o_desc": Desc("O", view, head_block(cfg.block_m, d)),
        "lse_ptr": Ptr("LSE"),
        "sm_scale": Scalar("rsqrt(D)", "fp32"),
        "S": Scalar("S", "i32"),
        "H": Scalar("H", "i32"),
    }
    constexprs = {"HEAD_DIM": padded_head_dim(d), "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "CAUSAL": causal,
                  "SPLIT_HEADS": split}  # fmt: skip
    grid = (f"cdiv(S,{cfg.block_m})", "B*H", 1)
    return Program([KernelLaunch(fn=attn_fwd_kernel, params=params, grid=grid, num_warps=cfg.num_warps,
                         num_stages=cfg.num_stages, constexprs=constexprs)])  # fmt: skip


def supports(task: Task) -> bool:
    return task.family == "attention_fwd"
