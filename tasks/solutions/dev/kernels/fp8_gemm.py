"""D[M,N] = Σ over 128-wide K blocks of (A_blk·B_blkᵀ)·SF_A·SF_B in bf16, from float8_e4m3fn A [M,K] and B [N,K]
(both K-major) and fp32 block scales SF_A [M, K/128] and SF_B [N/128, K/128] (DeepGEMM's 1D2D recipe): TMA
descriptors for A and B, one fp8 tl.dot per K block (wgmma on e4m3 operands, QGMMA, on sm_90a; tcgen05 kind::f8f6f4
on sm_100a) into a block accumulator that is scaled and added to the tile's fp32 sum, tiles in GROUP_M-row bands
as the bf16 GEMM walks them. BLOCK_N is 128, so one SF_B value covers a tile's columns; M is any size (TMA
zero-fills past it and clips the store; SF_A's loads are masked), N and K are multiples of 128.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.gemm import _tile_coords
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Ptr, Scalar

SCALE_BLOCK = 128


@triton.jit
def fp8_gemm_kernel(
    a_desc,
    b_desc,
    d_desc,
    sfa_ptr,
    sfb_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    BLOCK_K: tl.constexpr = 128  # one scale block of K per step
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    k_blocks = tl.cdiv(K, BLOCK_K)
    rows = off_m + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in tl.range(0, k_blocks):
        a = a_desc.load([off_m, kb * BLOCK_K])
        b = b_desc.load([off_n, kb * BLOCK_K])
        partial = tl.dot(a, b.T)
        sa = tl.load(sfa_ptr + rows * k_blocks + kb, mask=rows < M, other=0.0)
        sb = tl.load(sfb_ptr + pid_n * k_blocks + kb)  # BLOCK_N = 128: one block of B's rows
        acc += partial * (sa * sb)[:, None]
    d_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@dataclass(frozen=True)
class Fp8GemmConfig:
    block_m: int = 128
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 4

    def label(self) -> str:
        tile = f"{self.block_m}x{SCALE_BLOCK}x{SCALE_BLOCK}"
        return f"fp8 1d2d {tile} g{self.group_m} w{self.num_warps} s{self.num_stages}"


def program(task: Task, cfg: Fp8GemmConfig, arch: Arch) -> Program:
    """The one launch of the block-scaled fp8 GEMM; the same on both archs."""
    bm, bn = cfg.block_m, SCALE_BLOCK
    params = {
        "a_desc": Desc("A", ("M", "K"), (bm, SCALE_BLOCK)),
        "b_desc": Desc("B", ("N", "K"), (bn, SCALE_BLOCK)),
        "d_desc": Desc("D", ("M", "N"), (bm, bn)),
        "sfa_ptr": Ptr("SF_A"),
        "sfb_ptr": Ptr("SF_B"),
        "M": Scalar("M", "i32"),
        "N": Scalar("N", "i32"),
        "K": Scalar("K", "i32"),
    }
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": cfg.group_m}
    grid = (f"cdiv(M,{bm})*cdiv(N,{bn})", 1, 1)
    return Program([KernelLaunch(fn=fp8_gemm_kernel, params=params, grid=grid, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages, constexprs=constexprs)])  # fmt: skip
