"""Answers for the GEMM task used by the GPU harness tests: a plain tiled CUDA GEMM (CUDA C++ with inline
PTX) and broken variants of it, each broken in one known way. Correct but slow (CUDA cores, no wgmma)."""

from __future__ import annotations

import json

GEMM_CUDA = r"""
#include <cuda_bf16.h>

#define TILE 64
#define KT 16

__device__ unsigned int g_runs;         // launches completed; only the stateful variant uses these
__device__ unsigned int g_blocks_done;  // blocks of the current launch that finished

__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, float v) {
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(v));
  *reinterpret_cast<unsigned short*>(p) = bits;
}

// C[M,N] = A[M,K] * B[N,K]^T; 256 threads, each computing a 4x4 block of a 64x64 tile.
extern "C" __global__ void __launch_bounds__(256) gemm_bt(
    const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
    int M, int N, int K) {
  __shared__ float As[KT][TILE + 1];
  __shared__ float Bs[KT][TILE + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
  /*HANG*/
  /*STATE_CHECK*/
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += KT) {
    for (int i = threadIdx.x; i < TILE * KT; i += blockDim.x) {
      const int r = i / KT, kk = i % KT;
      As[kk][r] = __bfloat162float(A[(size_t)(row0 + r) * K + k0 + kk]);
      Bs[kk][r] = __bfloat162float(B[/*B_INDEX*/]);
    }
    /*BARRIER*/
    for (int kk = 0; kk < KT; ++kk) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) { a[i] = As[kk][ty * 4 + i]; b[i] = Bs[kk][tx * 4 + i]; }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    /*BARRIER*/
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < M && c < N) store_bf16(C + (size_t)r * N + c /*STORE_OFFSET*/, acc[i][j]);
    }
  /*STATE_UPDATE*/
  /*INPUT_WRITE*/
}
"""

CORRECT = {
    "/*B_INDEX*/": "(size_t)(col0 + r) * K + k0 + kk",
    "/*BARRIER*/": "__syncthreads();",
    "/*STORE_OFFSET*/": "",
    "/*HANG*/": "",
    "/*STATE_CHECK*/": "",
    "/*STATE_UPDATE*/": "",
    "/*INPUT_WRITE*/": "",
}

VARIANTS = {
    "correct": {},
    # Every thread of block (0,0) writes 2^40 elements past C: far outside any allocation.
    "oob_write": {"/*STORE_OFFSET*/": " + ((blockIdx.x | blockIdx.y) == 0 ? ((size_t)1 << 40) : 0)"},
    # B read as if it were stored [K, N].
    "wrong_layout": {"/*B_INDEX*/": "(size_t)(k0 + kk) * N + col0 + r"},
    # No barriers around the shared-memory tiles: a race between loading and computing.
    "race": {"/*BARRIER*/": ""},
    # Spins until A's first two elements are both 0xFFFF (a NaN the input draw never makes).
    "hang": {"/*HANG*/": "while (*(volatile const unsigned int*)A != 0xFFFFFFFFu) {}"},
    # Correct output, but block (0,0) also overwrites A's first element: inputs are read-only.
    "writes_input": {
        "/*INPUT_WRITE*/": "if ((blockIdx.x | blockIdx.y | threadIdx.x) == 0) "
        "store_bf16(const_cast<__nv_bfloat16*>(A), 12345.0f);"
    },
    # Skips all work once 3 launches have completed (the last block to finish counts a launch):
    # correct in 3 check trials, wrong after timing.
    "stateful": {
        "/*STATE_CHECK*/": "if (*(volatile unsigned int*)&g_runs >= 3) return;",
        "/*STATE_UPDATE*/": "__syncthreads(); if (threadIdx.x == 0) { __threadfence(); "
        "if (atomicAdd(&g_blocks_done, 1) == gridDim.x * gridDim.y - 1) "
        "{ g_blocks_done = 0; atomicAdd(&g_runs, 1); } }",
    },
}


def gemm_source(variant: str) -> str:
    source = GEMM_CUDA
    for marker, text in {**CORRECT, **VARIANTS[variant]}.items():
        source = source.replace(marker, text)
    return source


def launch_spec(grid_y: str = "cdiv(M,64)", shared_bytes: int = 0, block: int = 256) -> dict:
    return {
        "launches": [
            {
                "kernel": "gemm_bt",
                "grid": ["cdiv(N,64)", grid_y, 1],
                "block": [block, 1, 1],
                "shared_bytes": shared_bytes,
                "args": [
                    {"tensor": "A"},
                    {"tensor": "B"},
                    {"tensor": "C"},
                    {"scalar": "M", "type": "s32"},
                    {"scalar": "N", "type": "s32"},
                    {"scalar": "K", "type": "s32"},
                ],
            }
        ]
    }


def answer(variant: str = "correct", **spec: object) -> str:
    """A Markdown answer as a model would write it."""
    return (
        f"A tiled GEMM ({variant}).\n\n```cuda\n{gemm_source(variant)}```\n\n"
        f"```json\n{json.dumps(launch_spec(**spec), indent=2)}\n```\n"
    )
