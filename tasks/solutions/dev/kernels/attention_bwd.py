"""Flash-attention backward from the given O, dO and LSE (natural log): dQ, dK, dV, tensors [B, H, S, D].

Three launches, as cuDNN's backward has (its compute_dot_do_o, bprop and convert kernels):
1. `attn_bwd_delta_kernel`: Delta = rowsum(dO∘O) in fp32 into a scratch buffer [B, H, S]. The task does not
   hand Delta in, so the kernel computes it, and its cost is timed with the rest.
2. `attn_bwd_dkdv_kernel`: one key block per program. K and V of the block stay in shared memory while the
   program walks the query blocks of every query head that reads this K/V head (one head without
   grouped-query attention), recomputing Pᵀ = exp(scale·K Qᵀ − LSE) and accumulating dV += Pᵀ dO and
   dK += dSᵀ Q with dSᵀ = Pᵀ∘(V dOᵀ − Delta). Summing over the group here is what GQA's dK, dV need.
3. `attn_bwd_dq_kernel`: one query block per program, walking the key blocks and recomputing P and dP to
   accumulate dQ += dS K. Together 7 tile products per (query, key) block pair instead of the minimal 5,
   but plain stores and no atomics.

Tensors are read through TMA descriptors over the [B·heads·S, D] views (heads.py; S must be a multiple of
the blocks). The exponent uses exp2 with LSE turned into log2 units. Causal programs split their range
into blocks on the diagonal (masked) and blocks off it (unmasked).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.heads import kv_group, padded_head_dim, row_view
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar, Scratch

DELTA_ROWS = 64  # rows of the [B·H·S, D] view per program of the Delta kernel


@triton.jit
def attn_bwd_delta_kernel(o_ptr, do_ptr, delta_ptr, D, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Delta[r] = Σ_d dO[r, d]·O[r, d] (fp32) for ROWS rows of the [B·H·S, D] views."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, HEAD_DIM)
    offs = rows[:, None] * D + cols[None, :]
    mask = cols[None, :] < D
    o = tl.load(o_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + rows, tl.sum(o * do, 1))


@triton.jit
def _dkdv_block_loop(dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, q_row, offs_n, lo, hi, qk_scale,
                     BLOCK_M: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """Accumulate dK, dV of one key block over query blocks [lo, hi) of one query head; all transposed."""
    for m0 in tl.range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = q_desc.load([q_row + m0, 0])
        lse = tl.load(lse_base + offs_m) * 1.4426950408889634
        p_t = tl.math.exp2(tl.dot(k, q.T) * qk_scale - lse[None, :])  # [BLOCK_N, BLOCK_M]
        if MASKED:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        do = do_desc.load([q_row + m0, 0])
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        delta = tl.load(delta_base + offs_m)
        ds_t = p_t * (tl.dot(v, do.T) - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_ptr, delta_ptr, sm_scale, S,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, KV_GROUP: tl.constexpr):  # fmt: skip
    n0 = tl.program_id(0) * BLOCK_N
    kv_bh = tl.program_id(1)  # batch · K/V head
    kv_row = kv_bh * S
    offs_n = n0 + tl.arange(0, BLOCK_N)
    qk_scale = sm_scale * 1.4426950408889634

    k = k_desc.load([kv_row + n0, 0])
    v = v_desc.load([kv_row + n0, 0])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(KV_GROUP):  # the query heads that read this K/V head
        q_row = (kv_bh * KV_GROUP + g) * S
        lse_base, delta_base = lse_ptr + q_row, delta_ptr + q_row
        if CAUSAL:
            dk, dv = _dkdv_block_loop(dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, q_row, offs_n, n0,
                                      n0 + BLOCK_N, qk_scale, BLOCK_M, True)  # fmt: skip
            dk, dv = _dkdv_block_loop(dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, q_row, offs_n,
                                      n0 + BLOCK_N, S, qk_scale, BLOCK_M, False)  # fmt: skip
        else:
            dk, dv = _dkdv_block_loop(dk, dv, k, v, q_desc, do_desc, lse_base, delta_base, q_row, offs_n, 0, S,
                                      qk_scale, BLOCK_M, False)  # fmt: skip
    dk_desc.store([kv_row + n0, 0], (dk * sm_scale).to(tl.bfloat16))
    dv_desc.store([kv_row + n0, 0], dv.to(tl.bfloat16))


@triton.jit
def _dq_block_loop(dq, q, do, lse, delta, k_desc, v_desc, kv_row, offs_m, lo, hi, qk_scale, BLOCK_N: tl.constexpr,
                   MASKED: tl.constexpr):  # fmt: skip
    """Accumulate dQ of one query block over key blocks [lo, hi)."""
    for n0 in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([kv_row + n0, 0])
        v = v_desc.load([kv_row + n0, 0])
        p = tl.math.exp2(tl.dot(q, k.T) * qk_scale - lse[:, None])  # [BLOCK_M, BLOCK_N]
        if MASKED:
            offs_n = n0 + tl.arange(0, BLOCK_N)
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        ds = p * (tl.dot(do, v.T) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def attn_bwd_dq_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, lse_ptr, delta_ptr, sm_scale, S,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                       KV_GROUP: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m  # the longest rows first
    bh = tl.program_id(1)
    q_row = bh * S
    kv_row = (bh // KV_GROUP) * S
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    qk_scale = sm_scale * 1.4426950408889634

    q = q_desc.load([q_row + m0, 0])
    do = do_desc.load([q_row + m0, 0])
    lse = tl.load(lse_ptr + q_row + offs_m) * 1.4426950408889634
    delta = tl.load(delta_ptr + q_row + offs_m)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        dq = _dq_block_loop(dq, q, do, lse, delta, k_desc, v_desc, kv_row, offs_m, 0, m0, qk_scale, BLOCK_N, False)
        dq = _dq_block_loop(dq, q, do, lse, delta, k_desc, v_desc, kv_row, offs_m, m0, m0 + BLOCK_M, qk_scale,
                            BLOCK_N, True)  # fmt: skip
    else:
        dq = _dq_block_loop(dq, q, do, lse, delta, k_desc, v_desc, kv_row, offs_m, 0, S, qk_scale, BLOCK_N, False)
    dq_desc.store([q_row + m0, 0], (dq * sm_scale).to(tl.bfloat16))


@dataclass(frozen=True)
class AttnBwdConfig:
    # the key-block kernel (dK, dV): BLOCK_N keys held, BLOCK_M queries per step
    kv_block_n: int = 128
    kv_block_m: int = 64
    kv_warps: int = 8
    kv_stages: int = 3
    # the query-block kernel (dQ): BLOCK_M queries held, BLOCK_N keys per step
    q_block_m: int = 128
    q_block_n: int = 64
    q_warps: int = 8
    q_stages: int = 3

    def label(self) -> str:
        return (f"dkdv {self.kv_block_n}x{self.kv_block_m} w{self.kv_warps} s{self.kv_stages} | "
                f"dq {self.q_block_m}x{self.q_block_n} w{self.q_warps} s{self.q_stages}")  # fmt: skip


def program(task: Task, cfg: AttnBwdConfig, arch: Arch) -> Program:
    if cfg.kv_block_n % cfg.kv_block_m or cfg.q_block_m % cfg.q_block_n:
        raise ValueError("the held block must be a multiple of the step block (whole diagonal blocks)")
    hd = padded_head_dim(task.dims["D"])
    q_view, kv_view = row_view(task, "Q"), row_view(task, "K")
    common = {"lse_ptr": Ptr("LSE"), "delta_ptr": Ptr("delta"), "sm_scale": Scalar("rsqrt(D)", "fp32"),
              "S": Scalar("S", "i32")}  # fmt: skip
    shared = {"HEAD_DIM": hd, "CAUSAL": bool(task.params["causal"]), "KV_GROUP": kv_group(task)}
    delta = KernelLaunch(
        fn=attn_bwd_delta_kernel,
        params={"o_ptr": Ptr("O"), "do_ptr": Ptr("dO"), "delta_ptr": Ptr("delta"), "D": Scalar("D", "i32")},
        grid=(f"cdiv(B*H*S,{DELTA_ROWS})", 1, 1),
        num_warps=4,
        num_stages=1,
        constexprs={"ROWS": DELTA_ROWS, "HEAD_DIM": hd},
    )
    kv_step, kv_block = (cfg.kv_block_m, hd), (cfg.kv_block_n, hd)
    dkdv = KernelLaunch(
        fn=attn_bwd_dkdv_kernel,
        params={"q_desc": Desc("Q", q_view, kv_step), "k_desc": Desc("K", kv_view, kv_block),
                "v_desc": Desc("V", kv_view, kv_block), "do_desc": Desc("dO", q_view, kv_step),
                "dk_desc": Desc("dK", kv_view, kv_block), "dv_desc": Desc("dV", kv_view, kv_block), **common},
        grid=(f"cdiv(S,{cfg.kv_block_n})", f"B*{task.tensor('K').shape[1]}", 1),
        num_warps=cfg.kv_warps,
        num_stages=cfg.kv_stages,
        constexprs={**shared, "BLOCK_M": cfg.kv_block_m, "BLOCK_N": cfg.kv_block_n},
    )  # fmt: skip
    q_block, q_step = (cfg.q_block_m, hd), (cfg.q_block_n, hd)
    dq = KernelLaunch(
        fn=attn_bwd_dq_kernel,
        params={"q_desc": Desc("Q", q_view, q_block), "k_desc": Desc("K", kv_view, q_step),
                "v_desc": Desc("V", kv_view, q_step), "do_desc": Desc("dO", q_view, q_block),
                "dq_desc": Desc("dQ", q_view, q_block), **common},
        grid=(f"cdiv(S,{cfg.q_block_m})", "B*H", 1),
        num_warps=cfg.q_warps,
        num_stages=cfg.q_stages,
        constexprs={**shared, "BLOCK_M": cfg.q_block_m, "BLOCK_N": cfg.q_block_n},
    )  # fmt: skip
    return Program([delta, dkdv, dq], (Scratch("delta", "float32", ("B", "H", "S")),))
