"""Flash-attention forward: O = softmax(scale·QKᵀ)V and LSE (natural log), tensors [B, H, S, D] in bf16.

One program per (query block, batch·head). Every tensor is read and written through a TMA descriptor over
its contiguous 2-D view [B·heads·S, D] (heads.py): the tile of (batch, head, rows s…) is one box of
[BLOCK, HEAD_DIM] at row (b·heads + h)·S + s. K and V may have fewer heads than Q (grouped-query
attention): query head bh reads K/V head bh // KV_GROUP. This needs S to be a multiple of the blocks.

The online softmax works in the exp2 domain (scores pre-multiplied by scale·log2 e, one FMA per
element); the running max m and sum l give LSE = (m + log2 l)·ln 2 at the end. Causal attention splits
the key range into the off-diagonal blocks [0, m0), which need no mask, and the diagonal blocks
[m0, m0+BLOCK_M), which do; query blocks run heaviest first (reverse order) to shorten the tail.

FLAW (left at its default 0 by every reference answer) plants one of FLAWS' deliberate bugs, for the broken
fixtures tests/fixtures/make_attention_fixtures.py writes: the same kernel, wrong in one known way.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.heads import kv_group, padded_head_dim, row_view
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar

# Deliberate bugs (the kernel's FLAW constexpr): what each does, and so what a check must catch.
FLAWS = {
    "causal_mask_off_by_one": 1,  # the causal mask lets query i see key i+1 (key ≤ query+1): wrong O rows, LSE
    "lse_in_log2": 2,  # LSE written in log2 units (m + log2 l, the ·ln 2 dropped): O right, LSE 1.44× too large
    "scores_saturated_at_12": 3,  # unmasked scores capped at 12 (log2 units): N(0,1) never gets there, spikes do
}


@triton.jit
def _fwd_block_loop(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, lo, hi, qk_scale,
                    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FLAW: tl.constexpr = 0):  # fmt: skip
    """Fold key blocks [lo, hi) into the running (acc, l, m); MASKED applies the causal mask."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([kv_row + start_n, 0])
        qk = tl.dot(q, k.T)
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            # A large finite penalty, not -inf: a fully masked row of this block then gives p = 0, never NaN. (The
            # reference kernel's line stays whole in the else branch: the same operations in the same order.)
            if FLAW == 1:
                qk = qk * qk_scale + tl.where(offs_m[:, None] + 1 >= offs_n[None, :], 0.0, -1.0e6)
            else:
                qk = qk * qk_scale + tl.where(offs_m[:, None] >= offs_n[None, :], 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        elif FLAW == 3:  # a plain min on the accumulator (a clamp of Q itself went wrong on the H200, cause not found)
            qk = tl.minimum(qk * qk_scale, 12.0)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([kv_row + start_n, 0])
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
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    KV_GROUP: tl.constexpr,
    FLAW: tl.constexpr = 0,
):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows first
    bh = tl.program_id(1)
    q_row = bh * S  # row of (b, h, s=0) in the [B·H·S, D] view
    kv_row = (bh // KV_GROUP) * S
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    qk_scale = sm_scale * 1.4426950408889634  # scores in log2 units

    q = q_desc.load([q_row + m0, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, 0, m0, qk_scale, BLOCK_N, False, FLAW
        )
        acc, l_i, m_i = _fwd_block_loop(acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, m0, m0 + BLOCK_M, qk_scale,
                                        BLOCK_N, True, FLAW)  # fmt: skip
    else:
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_desc, v_desc, kv_row, offs_m, 0, S, qk_scale, BLOCK_N, False, FLAW
        )

    if FLAW == 2:  # noqa: SIM108 (a compile-time branch, as above)
        lse = m_i + tl.math.log2(l_i)
    else:
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back to natural log
    tl.store(lse_ptr + q_row + offs_m, lse)
    o_desc.store([q_row + m0, 0], (acc / l_i[:, None]).to(tl.bfloat16))


@dataclass(frozen=True)
class AttnFwdConfig:
    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


def program(task: Task, cfg: AttnFwdConfig, arch: Arch, flaw: str | None = None) -> Program:
    """The forward's launch; `flaw`: one of FLAWS planted (None: the reference kernel, FLAW at its default)."""
    if cfg.block_m % cfg.block_n:
        raise ValueError("BLOCK_M must be a multiple of BLOCK_N (the causal diagonal is whole key blocks)")
    hd = padded_head_dim(task.dims["D"])
    q_view, kv_view = row_view(task, "Q"), row_view(task, "K")
    params = {
        "q_desc": Desc("Q", q_view, (cfg.block_m, hd)),
        "k_desc": Desc("K", kv_view, (cfg.block_n, hd)),
        "v_desc": Desc("V", kv_view, (cfg.block_n, hd)),
        "o_desc": Desc("O", q_view, (cfg.block_m, hd)),
        "lse_ptr": Ptr("LSE"),
        "sm_scale": Scalar("rsqrt(D)", "fp32"),
        "S": Scalar("S", "i32"),
    }
    constexprs = {"HEAD_DIM": hd, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
                  "CAUSAL": bool(task.params["causal"]), "KV_GROUP": kv_group(task)}  # fmt: skip
    if flaw is not None:
        if flaw not in FLAWS:
            raise ValueError(f"unknown flaw {flaw!r}; known: {', '.join(FLAWS)}")
        constexprs["FLAW"] = FLAWS[flaw]
    grid = (f"cdiv(S,{cfg.block_m})", "B*H", 1)
    return Program([KernelLaunch(fn=attn_fwd_kernel, params=params, grid=grid, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages, constexprs=constexprs)])  # fmt: skip
