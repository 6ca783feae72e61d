"""C[M,N] = A[M,K] · B[N,K]ᵀ in bf16 with fp32 accumulation: TMA tensor descriptors + tl.dot (wgmma on
sm_90a, tcgen05 on sm_100a).

Two schedules over the same tile loop:
- `gemm_kernel`: one program per C tile, tiles visited in GROUP_M-row bands so that the programs
  resident at once share B columns (and A rows) in L2.
- `gemm_persistent_kernel`: NUM_SMS programs stride over the tiles in the same grouped order; with
  `flatten` Triton software-pipelines across tile boundaries, so the next tile's TMA loads overlap the
  current tile's epilogue. EPILOGUE_SPLIT stores C in two column halves, halving the epilogue's shared
  memory so that one more K stage fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from tasks.schema import Arch, Task
from tasks.solutions.dev.kernels.launch import Desc, KernelLaunch, Program, Scalar

# Multiprocessors per GPU we target: H100/H200 SXM have 132, B200 has 148.
NUM_SMS = {Arch.SM_90A: 132, Arch.SM_100A: 148}


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile (pid_m, pid_n) of linear `tile_id`, walking GROUP_M tile-rows column by column."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_group) % group_rows
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def gemm_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@triton.jit
def gemm_persistent_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_tiles):
            a = a_desc.load([off_m, k * BLOCK_K])
            b = b_desc.load([off_n, k * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        if EPILOGUE_SPLIT:
            halves = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            left, right = tl.split(tl.permute(halves, (0, 2, 1)))
            c_desc.store([off_m, off_n], left.to(tl.bfloat16))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(tl.bfloat16))
        else:
            c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


@dataclass(frozen=True)
class GemmConfig:
    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    persistent: bool = False
    epilogue_split: bool = False  # persistent only
    flatten: bool = True  # persistent only

    def label(self) -> str:
        kind = "persistent" + ("+split" if self.epilogue_split else "") if self.persistent else "tiled"
        return (
            f"{kind} {self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} w{self.num_warps} s{self.num_stages}"
        )


def program(task: Task, cfg: GemmConfig, arch: Arch) -> Program:
    """The one launch of the GEMM task under `cfg`; `arch` fixes the persistent grid's width."""
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    c_block = (bm, bn // 2) if cfg.persistent and cfg.epilogue_split else (bm, bn)
    params = {
        "a_desc": Desc("A", ("M", "K"), (bm, bk)),
        "b_desc": Desc("B", ("N", "K"), (bn, bk)),
        "c_desc": Desc("C", ("M", "N"), c_block),
        "M": Scalar("M", "i32"),
        "N": Scalar("N", "i32"),
        "K": Scalar("K", "i32"),
    }
    constexprs: dict[str, int | bool] = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": cfg.group_m}
    tiles = f"cdiv(M,{bm})*cdiv(N,{bn})"
    if cfg.persistent:
        sms = NUM_SMS[arch]
        constexprs |= {"NUM_SMS": sms, "EPILOGUE_SPLIT": cfg.epilogue_split, "FLATTEN": cfg.flatten}
        fn, grid = gemm_persistent_kernel, (f"min({sms}, {tiles})", 1, 1)
    else:
        fn, grid = gemm_kernel, (tiles, 1, 1)
    return Program([KernelLaunch(fn=fn, params=params, grid=grid, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                         constexprs=constexprs)])  # fmt: skip
