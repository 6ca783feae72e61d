"""fp8 flash-attention forward: O = softmax(S)·V and LSE, Q, K, V float8_e4m3fn [B, H, S, D] with per-tensor
descales, S = scale·descale_q·descale_k·QKᵀ, O = float8_e4m3fn(softmax(S)·V·descale_v), LSE fp32 (natural log).

The bf16 forward's design (attention_fwd.py), with both products on fp8 operands: Q·Kᵀ and P·V are e4m3
`tl.dot`s (wgmma → QGMMA on sm_90a, tcgen05.mma kind::f8f6f4 on sm_100a) accumulating in fp32. The descales
are folded in, never applied to a tile: descale_q·descale_k into the score scale (with scale and log2 e, one FMA
per element as before), descale_v into the output's 1/l.

Hopper's fp8 wgmma wants both shared-memory operands K-major. Kᵀ is (D is K of Q·Kᵀ and contiguous); V, the B
operand of P·V, is not: its K is the key axis and D is contiguous. Triton 3.6 handles that itself: it loads each V
tile (TMA, as stored) from shared memory into registers and writes it back transposed before the wgmma (a
`local_load` + `local_alloc` in the TTGIR), an on-chip transpose per key block. Blackwell's kind::f8f6f4 takes
MN-major fp8 operands directly.

P is rounded to e4m3 for the P·V product. Its values exp2(s − m) lie in (0, 1], where most of a diffuse row sits
below e4m3's smallest normal (2⁻⁶) and would lose its mantissa to subnormal rounding. So p is taken 2⁸ larger,
exp2(s − (m − 8)) ∈ (0, 256], inside e4m3's normal range down to 2⁻¹⁴ of the row max (cuDNN scales P by 448 for
the same reason); the running sum l carries the same factor, so O = acc / l needs no correction and
LSE = (m + log2 l − 8)·ln 2.

P·V accumulates in place across key blocks in the MMA's fp32 accumulator. Hopper's fp8 MMA adds with about 13
bits kept after aligning to the largest addend (the accumulator included); emulated that way at S 4096, D 128, O's
error before its own rounding is 4.5e-3 against 4.2e-3 with exact sums, so a per-block partial product added in
fp32 (which spills at D 256) is not worth its registers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.attention_fwd import AttnFwdConfig
from tasks.solutions.dev.kernels.heads import padded_head_dim, row_view
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar

P_SHIFT = tl.constexpr(8.0)  # log2 of P's scale: p ∈ (0, 2⁸], in e4m3's normal range (max 448)


@triton.jit
def _fp8_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row, offs_m, lo, hi, qk_scale,
                    BLOCK_N: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """Fold key blocks [lo, hi) into the running (acc, l, m); MASKED applies the causal mask."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([row + start_n, 0])
        qk = tl.dot(q, k.T)
        if MASKED:
            offs_n = start_n + tl.arange(0, BLOCK_N)
            # A large finite penalty, not -inf: a fully masked row of this block then gives p = 0, never NaN.
            qk = qk * qk_scale + tl.where(offs_m[:, None] >= offs_n[None, :], 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - (m_new - P_SHIFT)[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - (m_new - P_SHIFT)[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([row + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def fp8_attn_fwd_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    lse_ptr,
    descale_q_ptr,
    descale_k_ptr,
    descale_v_ptr,
    sm_scale,
    S,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows first
    row = tl.program_id(1) * S  # row of (b, h, s=0) in the [B·H·S, D] views
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    # Scores in log2 units, the inputs' descales folded in.
    qk_scale = sm_scale * tl.load(descale_q_ptr) * tl.load(descale_k_ptr) * 1.4426950408889634

    q = q_desc.load([row + m0, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        acc, l_i, m_i = _fp8_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row, offs_m, 0, m0, qk_scale, BLOCK_N, False)
        acc, l_i, m_i = _fp8_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row, offs_m, m0, m0 + BLOCK_M, qk_scale,
                                        BLOCK_N, True)  # fmt: skip
    else:
        acc, l_i, m_i = _fp8_block_loop(acc, l_i, m_i, q, k_desc, v_desc, row, offs_m, 0, S, qk_scale, BLOCK_N, False)

    lse = (m_i + tl.math.log2(l_i) - P_SHIFT) * 0.6931471805599453  # P unscaled, natural log
    tl.store(lse_ptr + row + offs_m, lse)
    o_scale = tl.load(descale_v_ptr) / l_i
    o_desc.store([row + m0, 0], (acc * o_scale[:, None]).to(tl.float8e4nv))


def program(task: Task, cfg: AttnFwdConfig, arch: Arch) -> Program:
    """The one launch of the fp8 forward; the same on both archs."""
    if cfg.block_m % cfg.block_n:
        raise ValueError("BLOCK_M must be a multiple of BLOCK_N (the causal diagonal is whole key blocks)")
    hd = padded_head_dim(task.dims["D"])
    view = row_view(task, "Q")  # Q, K, V and O share [B, H, S, D]
    params = {
        "q_desc": Desc("Q", view, (cfg.block_m, hd)),
        "k_desc": Desc("K", view, (cfg.block_n, hd)),
        "v_desc": Desc("V", view, (cfg.block_n, hd)),
        "o_desc": Desc("O", view, (cfg.block_m, hd)),
        "lse_ptr": Ptr("LSE"),
        "descale_q_ptr": Ptr("descale_q"),
        "descale_k_ptr": Ptr("descale_k"),
        "descale_v_ptr": Ptr("descale_v"),
        "sm_scale": Scalar("rsqrt(D)", "fp32"),
        "S": Scalar("S", "i32"),
    }
    constexprs = {"HEAD_DIM": hd, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "CAUSAL": bool(task.params["causal"])}
    grid = (f"cdiv(S,{cfg.block_m})", "B*H", 1)
    return Program([KernelLaunch(fn=fp8_attn_fwd_kernel, params=params, grid=grid, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages, constexprs=constexprs)])  # fmt: skip
