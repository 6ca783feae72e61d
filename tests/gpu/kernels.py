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
    # Correct, but the tiles lose their padding column: each warp's stores `As[kk][r]`/`Bs[kk][r]` (kk = thread % 16)
    # fall 64 words apart, in one bank: 16-way bank conflicts on those two lines.
    "bank_conflicts": {"[TILE + 1]": "[TILE]"},
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


# The same out-of-bounds store in a PTX answer and a CUDA answer for the GEMM task: every block writes zeros into
# its part of C, except that block 3 adds 2^40 bytes to its address, far outside every allocation (so that the
# worker faults whatever memory its allocator keeps around C). A diagnosis must name the store's line.
OOB_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry oob_store(.param .u64 c, .param .u32 n)
.reqntid 256, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<6>;
    .reg .b16 %h;
    ld.param.u64 %rd1, [c];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r2, 256, %r3;
    setp.ge.u32 %p0, %r4, %r1;
    @%p0 bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r4, 2;
    add.s64 %rd3, %rd1, %rd2;
    setp.eq.u32 %p1, %r2, 3;
    selp.b64 %rd4, 1099511627776, 0, %p1;
    add.s64 %rd5, %rd3, %rd4;
    mov.b16 %h, 0;
    st.global.b16 [%rd5], %h;
DONE:
    ret;
}
"""
OOB_CUDA = """\
extern "C" __global__ void __launch_bounds__(256) oob_store(unsigned short* c, unsigned int n) {
  const unsigned int i = blockIdx.x * 256 + threadIdx.x;
  if (i >= n) return;
  const unsigned long long past = blockIdx.x == 3 ? 1ull << 39 : 0;  // block 3: 2^40 bytes past the end of C
  c[i + past] = 0;
}
"""
# A shared-memory race small enough for racecheck: block 0 alone writes its threads' slots and reads another
# warp's slot with no barrier between; the other blocks leave C unwritten, so the attempt is a mismatch.
RACY_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry racy(.param .u64 c, .param .u32 n)
.reqntid 256, 1, 1
{
    .shared .align 4 .b32 slots[256];
    .reg .pred %p;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    .reg .b16 %h;
    mov.u32 %r1, %ctaid.x;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, slots;
    shl.b32 %r4, %r2, 2;
    add.u32 %r5, %r3, %r4;
    st.shared.b32 [%r5], %r2;
    xor.b32 %r6, %r4, 128;
    add.u32 %r7, %r3, %r6;
    ld.shared.b32 %r8, [%r7];
    cvt.rn.f32.u32 %r9, %r8;
    cvt.rn.bf16.f32 %h, %r9;
    ld.param.u64 %rd1, [c];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r2, 2;
    add.s64 %rd3, %rd1, %rd2;
    st.global.b16 [%rd3], %h;
DONE:
    ret;
}
"""
# One thread per element of C (the grid covers M·N), for the kernels above.
ELEMENTWISE_SPEC = {"launches": [{"kernel": "KERNEL", "grid": ["cdiv(M*N,256)", 1, 1], "block": [256, 1, 1],
                                  "args": [{"tensor": "C"}, {"scalar": "M*N", "type": "u32"}]}]}  # fmt: skip


def elementwise_answer(language: str, source: str, kernel: str) -> str:
    spec = json.dumps(ELEMENTWISE_SPEC).replace("KERNEL", kernel)
    return f"A deliberately broken kernel.\n\n```{language}\n{source}```\n\n```json\n{spec}\n```\n"


def line_of(source: str, text: str) -> int:
    """The 1-based line of `source` holding `text`."""
    return next(i for i, line in enumerate(source.splitlines(), start=1) if text in line)


# An mbarrier wait that never completes: thread 0 has the barrier expect 1024 bytes, but its bulk copy brings 512,
# so the phase never flips and every warp of every block spins in the try_wait loop (issue 28's wrong expect_tx).
MBARRIER_HANG_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry hang_on_mbarrier(.param .u64 c, .param .u32 n)
.reqntid 128, 1, 1
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b64 full_bar;
    .shared .align 128 .b8 tile[512];
    ld.param.u64 %rd1, [c];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, full_bar;
    mov.u32 %r3, tile;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r2], 1;
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r2], 1024;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd2], 512, [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
    @!%p2 bra WAIT;
    ret;
}
"""
MBARRIER_HANG_SPEC = {"launches": [{"kernel": "hang_on_mbarrier", "grid": [2, 1, 1], "block": [128, 1, 1],
                                    "args": [{"tensor": "C"}, {"scalar": "M*N", "type": "u32"}]}]}  # fmt: skip


def mbarrier_hang_answer() -> str:
    return f"A kernel whose mbarrier never completes.\n\n```ptx\n{MBARRIER_HANG_PTX}```\n\n```json\n" + (
        json.dumps(MBARRIER_HANG_SPEC) + "\n```\n"
    )
