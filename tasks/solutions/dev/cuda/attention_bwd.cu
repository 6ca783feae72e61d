// Flash-attention backward on sm_90a in CUDA C++ with inline PTX: dQ, dK, dV from Q, K, V, O, dO and the
// natural-log LSE, all [B, heads, S, D] row-major (LSE [B, H, S]). The generator prepends HEAD_DIM, CAUSAL and
// KV_GROUP (query heads per K/V head); tasks/solutions/dev/cuda_bwd_answers.py says which values each task gets.
//
// Three launches:
//   attn_bwd_delta       Delta = rowsum(dO∘O), fp32, one warp per row, into the scratch `delta` [B, H, S].
//   attn_bwd_main        one CTA per (key tile of 128, batch · K/V head). K and V of the tile are loaded once
//                        by TMA; a producer warpgroup streams Q, dO, LSE and Delta of 64 queries at a time
//                        through a 3-stage mbarrier ring (all by TMA) over every query head of the group; two consumer
//                        warpgroups each own 64 keys and compute, per query tile,
//                          Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Delta),
//                          dV += Pᵀ·dO, dK += dSᵀ·Q   (Pᵀ, dSᵀ as the register A operand),
//                          dQ_partial = dS·K          (dSᵀ through shared memory, both warpgroups' keys),
//                        and add dQ_partial into the fp32 scratch `dq_accum` by TMA reduce-add, which runs
//                        while the warpgroup computes the next tile. dK, dV are summed over the group's query
//                        heads in registers (no atomics) and stored once.
//   attn_bwd_dq_convert  dQ = bf16(dq_accum · scale).
// Not persistent: 64 query tiles per CTA (×6 under GQA) make the prologue and the dK/dV store a few percent.
//
// Every operand tile in shared memory is a TMA box of [rows, 64] bf16 with the 128-byte swizzle: row r at
// r·128 bytes, its 16-byte chunk j at chunk j ^ (r % 8), 8-row atoms of 1024 bytes. A head dim of 128 is two
// such boxes side by side (chunks of 64 columns); D=96 is two boxes too, the second zero-filled by TMA past
// column 96 (the extra k-steps of Q·Kᵀ and dO·Vᵀ are skipped; the zero columns of dV, dK, dQ are dropped):
// an n=96 wgmma would read its MN-major B across one and a half swizzle atoms, which the padding avoids.
// Every wgmma is m64n64k16, so an MN-major (transposed) operand never spans more than one swizzle atom along
// MN and only the 8-row stride (SBO = 1024) of its descriptor is read.

#include <cuda_bf16.h>

#ifndef HEAD_DIM
#error "HEAD_DIM, CAUSAL and KV_GROUP are set by the generator"
#endif

#define D_PAD (HEAD_DIM > 64 ? 128 : 64)
#define CHUNKS (D_PAD / 64)          // 64-column boxes per row of a tile
#define K_STEPS_D (HEAD_DIM / 16)    // k-steps of 16 over the real head dim
#define BLOCK_N 128                  // keys per CTA
#define BLOCK_M 64                   // queries per pipeline stage
#define STAGES 3
// D_PAD = 128: warpgroup w computes dQ columns [64w, 64w+64) over all 128 keys (N split, one reduce each).
// D_PAD = 64: warpgroup w computes all 64 columns over its own 64 keys (K split, both reduce into the rows).
#define DQ_SPLIT_N (CHUNKS == 2)

// Shared memory, in bytes from a 1024-aligned base.
#define K_TILE (BLOCK_N * 128)       // one [128, 64] bf16 box
#define Q_TILE (BLOCK_M * 128)       // one [64, 64] bf16 box
#define OFF_K 0
#define OFF_V (OFF_K + CHUNKS * K_TILE)
#define OFF_Q (OFF_V + CHUNKS * K_TILE)
#define STAGE_BYTES (CHUNKS * Q_TILE)
#define OFF_DO (OFF_Q + STAGES * STAGE_BYTES)
#define OFF_DS (OFF_DO + STAGES * STAGE_BYTES)  // dSᵀ [128 keys, 64 queries] bf16, two buffers by tile parity
#define DS_BYTES (BLOCK_N * 128)
#define OFF_DQ (OFF_DS + 2 * DS_BYTES)          // dQ staging per warpgroup: two [64, 32] fp32 boxes
#define DQ_BOX (BLOCK_M * 128)
#define DQ_WG_BYTES (2 * DQ_BOX)
#define OFF_LSE (OFF_DQ + 2 * DQ_WG_BYTES)      // per stage: 64 LSE then 64 Delta, fp32
#define ROWVEC_BYTES (BLOCK_M * 4)
#define OFF_BAR (OFF_LSE + STAGES * 2 * ROWVEC_BYTES)
#define BAR_KV 0
#define BAR_FULL(s) (8 + 8 * (s))
#define BAR_EMPTY(s) (8 + 8 * STAGES + 8 * (s))
#define SMEM_USED (OFF_BAR + 8 + 16 * STAGES)
#define SMEM_BYTES (SMEM_USED + 1024)           // room to align the base to 1024

#define LOG2E 1.4426950408889634f

struct __align__(64) TmaDesc {
  unsigned long long bits[16];
};

// ------------------------------------------------------------------------------------------- barriers, TMA

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Returns once the phase of the given parity has completed (a fresh barrier counts parity 1 as completed).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, int col, int row, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_1d(unsigned dst, const TmaDesc* map, int x, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];" ::"r"(dst),
               "l"(map), "r"(x), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_reduce_add_2d(const TmaDesc* map, unsigned src, int col, int row) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map),
               "r"(col), "r"(row), "r"(src)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Generic-proxy writes to shared memory, made visible to the async proxy (wgmma operands, TMA stores).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void named_barrier(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ----------------------------------------------------------------------------------------------- wgmma

// Descriptors of 128B-swizzled operand tiles (start address within a 1024-aligned atom grid; layout type 1).
// The high word is the same for every operand here: SBO = 1024 (8-row atoms 1024 bytes apart) and the 128-byte
// swizzle (bits 62-63 = 1). The low word holds the start address >> 4 (bits 0-13) and LBO (bits 16-29). Each
// descriptor's low word is built once, outside the loops, from a warp-uniform address, and moved per k-step or
// stage by adding (byte offset >> 4): every address stays below 2^18 (shared memory is 227 KB), so the start
// field never carries into LBO, and the loops hold only uniform integer adds before each wgmma.
#define DESC_HI ((1024u >> 4) | (1u << 30))
// K-major: LBO is unused by a swizzled K-major operand (1 by convention).
__device__ __forceinline__ unsigned desc_k_major(unsigned addr) { return ((addr & 0x3FFFF) >> 4) | (1u << 16); }
// MN-major (transposed): atoms of 64 MN elements × 8 K rows, the next 8 K rows 1024 bytes on. Each MN-major
// operand here spans exactly one atom along MN (N or M = 64), so the stride between MN atoms is never needed;
// both offset fields are 1024, which reads right whichever of the two the hardware takes for the K stride.
__device__ __forceinline__ unsigned desc_mn_major(unsigned addr) {
  return ((addr & 0x3FFFF) >> 4) | ((1024u >> 4) << 16);
}
// A descriptor's low word advanced by a byte offset (a multiple of 16).
__device__ __forceinline__ unsigned desc_at(unsigned lo, unsigned bytes) { return lo + (bytes >> 4); }
__device__ __forceinline__ unsigned long long desc64(unsigned lo) {
  return ((unsigned long long)DESC_HI << 32) | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int PENDING>  // wait until at most PENDING committed groups are still running
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}
// Ties the accumulator registers to the point after a wait so that no read of them moves above it.
__device__ __forceinline__ void acc_fence(float* d) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define WG_D32 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_ACC32(d)                                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),    \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),     \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),    \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (+)= A·B, A and B from shared memory; TRANS_A / TRANS_B select the MN-major layout.
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_ss(float* d, unsigned a_lo, unsigned b_lo, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred acc;\n"
      "setp.ne.b32 acc, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", %32, %33, acc, 1, 1, %35, %36;\n"
      "}\n"
      : WG_ACC32(d)
      : "l"(desc64(a_lo)), "l"(desc64(b_lo)), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
}
// d += A·B, A (64×16 bf16) from registers in the accumulator's fragment order, B MN-major from shared memory.
__device__ __forceinline__ void wgmma_rs_bt(float* d, const unsigned* a, unsigned b_lo) {
  asm volatile(
      "{\n"
      ".reg .pred acc;\n"
      "setp.ne.b32 acc, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", {%32, %33, %34, %35}, %36, acc, 1, 1, 1;\n"
      "}\n"
      : WG_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc64(b_lo)));
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------------------------------------- kernels

extern "C" __global__ void __launch_bounds__(256) attn_bwd_delta(const __nv_bfloat16* __restrict__ O,
                                                                 const __nv_bfloat16* __restrict__ dO,
                                                                 float* __restrict__ delta, unsigned rows) {
  const unsigned row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(O + (size_t)row * HEAD_DIM);
  const __nv_bfloat162* g = reinterpret_cast<const __nv_bfloat162*>(dO + (size_t)row * HEAD_DIM);
  float acc = 0.0f;
#pragma unroll
  for (unsigned p = lane; p < HEAD_DIM / 2; p += 32) {
    const float2 a = __bfloat1622float2(o[p]), b = __bfloat1622float2(g[p]);
    acc += a.x * b.x + a.y * b.y;
  }
#pragma unroll
  for (int s = 16; s > 0; s /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) delta[row] = acc;
}

extern "C" __global__ void __launch_bounds__(256) attn_bwd_dq_convert(const float4* __restrict__ acc,
                                                                      uint2* __restrict__ dq, float scale,
                                                                      unsigned quads) {
  const unsigned i = blockIdx.x * 256 + threadIdx.x;
  if (i >= quads) return;
  const float4 v = acc[i];
  dq[i] = make_uint2(pack_bf16(v.x * scale, v.y * scale), pack_bf16(v.z * scale, v.w * scale));
}

extern "C" __global__ void __launch_bounds__(384, 1)
    attn_bwd_main(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map,
                  const __grid_constant__ TmaDesc v_map, const __grid_constant__ TmaDesc do_map,
                  const __grid_constant__ TmaDesc lse_map, const __grid_constant__ TmaDesc delta_map,
                  const __grid_constant__ TmaDesc dq_map, __nv_bfloat16* __restrict__ dK,
                  __nv_bfloat16* __restrict__ dV, float scale, unsigned S) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  const unsigned pad = ((raw + 1023) & ~1023u) - raw;
  unsigned char* smem = smem_raw + pad;
  const unsigned base = raw + pad;

  const unsigned n0 = blockIdx.x * BLOCK_N;
  const unsigned kv_bh = blockIdx.y;  // batch · K/V head
  const unsigned kv_row = kv_bh * S + n0;
  const unsigned m_first = CAUSAL ? n0 / BLOCK_M : 0;  // earlier query tiles see none of these keys
  const unsigned m_tiles = S / BLOCK_M;

  if (threadIdx.x == 0) {
    unsigned dynamic_bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    if (dynamic_bytes < SMEM_BYTES) __trap();  // the launch spec's shared_bytes must cover the layout above
    mbar_init(base + OFF_BAR + BAR_KV, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(base + OFF_BAR + BAR_FULL(s), 1);
      mbar_init(base + OFF_BAR + BAR_EMPTY(s), 256);  // every consumer thread releases the stage
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // Warp-uniform as far as the compiler can tell (a shuffle from lane 0), so that every shared address derived
  // from it, and with them the wgmma descriptors, lives in uniform registers (no R2UR before each wgmma).
  const unsigned wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (wg == 2) {
    // Producer warpgroup: one thread issues every copy; the others give their registers back and leave.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (threadIdx.x != 256) return;
    asm volatile("prefetch.tensormap [%0];" ::"l"(&q_map) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&do_map) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&lse_map) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(&delta_map) : "memory");
    const unsigned kv_bar = base + OFF_BAR + BAR_KV;
    mbar_expect_tx(kv_bar, 2 * CHUNKS * K_TILE);
    for (int c = 0; c < CHUNKS; ++c) {
      tma_load_2d(base + OFF_K + c * K_TILE, &k_map, c * 64, kv_row, kv_bar);
      tma_load_2d(base + OFF_V + c * K_TILE, &v_map, c * 64, kv_row, kv_bar);
    }
    unsigned it = 0;
    for (unsigned g = 0; g < KV_GROUP; ++g) {
      const unsigned q_bh = kv_bh * KV_GROUP + g;
      for (unsigned mt = m_first; mt < m_tiles; ++mt, ++it) {
        const unsigned stage = it % STAGES, parity = (it / STAGES) & 1;
        const unsigned full = base + OFF_BAR + BAR_FULL(stage);
        mbar_wait(base + OFF_BAR + BAR_EMPTY(stage), parity ^ 1);
        const unsigned q_row = q_bh * S + mt * BLOCK_M;
        mbar_expect_tx(full, 2 * STAGE_BYTES + 2 * ROWVEC_BYTES);
        for (int c = 0; c < CHUNKS; ++c) {
          tma_load_2d(base + OFF_Q + stage * STAGE_BYTES + c * Q_TILE, &q_map, c * 64, q_row, full);
          tma_load_2d(base + OFF_DO + stage * STAGE_BYTES + c * Q_TILE, &do_map, c * 64, q_row, full);
        }
        const unsigned vec = base + OFF_LSE + stage * 2 * ROWVEC_BYTES;
        tma_load_1d(vec, &lse_map, q_row, full);
        tma_load_1d(vec + ROWVEC_BYTES, &delta_map, q_row, full);
      }
    }
    return;
  }

  // Consumer warpgroups 0 and 1: keys n0 + 64·wg + [0, 64).
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  const unsigned t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const unsigned frag_row = 16 * warp + lane / 4;  // accumulator rows frag_row and frag_row + 8
  const unsigned frag_col = 2 * (lane % 4);        // accumulator columns frag_col + 8j + {0, 1}
  const float scale_log2 = scale * LOG2E;
  // Descriptor low words of the tiles at their first k-step (this warpgroup's 64 rows of K and V; stage 0 of
  // Q and dO; buffer 0 of dSᵀ; the K rows dQ reads), advanced by constants below.
  const unsigned k_lo = desc_k_major(base + OFF_K + wg * 64 * 128), v_lo = desc_k_major(base + OFF_V + wg * 64 * 128);
  const unsigned q_k_lo = desc_k_major(base + OFF_Q), do_k_lo = desc_k_major(base + OFF_DO);
  const unsigned q_mn_lo = desc_mn_major(base + OFF_Q), do_mn_lo = desc_mn_major(base + OFF_DO);
  const unsigned ds_mn_lo = desc_mn_major(base + OFF_DS + (DQ_SPLIT_N ? 0 : wg * 8192));
  const unsigned kq_mn_lo = desc_mn_major(base + OFF_K + wg * (DQ_SPLIT_N ? K_TILE : 8192));
  const unsigned ds_lane = (wg * 64 + frag_row) * 128 + ((frag_row % 8) << 4) + 2 * frag_col;  // dSᵀ, chunk r % 8
  const unsigned dq_stage = base + OFF_DQ + wg * DQ_WG_BYTES;
  unsigned char* dq_stage_ptr = smem + OFF_DQ + wg * DQ_WG_BYTES;

  float dv[CHUNKS][32], dk[CHUNKS][32];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int i = 0; i < 32; ++i) dv[c][i] = dk[c][i] = 0.0f;

  mbar_wait(base + OFF_BAR + BAR_KV, 0);

  // One flat loop over the tiles, in the producer's order (query head g of the group, then query tile mt): the
  // row of dq_accum (q_row) steps by BLOCK_M and jumps past the first m_first tiles of the next head when mt
  // wraps; no head counter is kept (under GQA causal it was the register that tipped the consumer into spills).
  const unsigned head_tiles = m_tiles - m_first;
  unsigned mt = m_first, q_row = kv_bh * KV_GROUP * S + m_first * BLOCK_M;
  for (unsigned it = 0; it < KV_GROUP * head_tiles; ++it) {
    const unsigned stage = it % STAGES, parity = (it / STAGES) & 1;
    const unsigned stage_off = stage * STAGE_BYTES;
    const float* lse_st = reinterpret_cast<const float*>(smem + OFF_LSE + stage * 2 * ROWVEC_BYTES);
    const float* delta_st = lse_st + BLOCK_M;
    mbar_wait(base + OFF_BAR + BAR_FULL(stage), parity);

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: [64 keys, 64 queries], both operands K-major over the head dim, in two
    // groups so that Pᵀ is computed while dPᵀ runs and dSᵀ while dV's products run.
    float s[32], dp[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < K_STEPS_D; ++kk) {
      const unsigned off = (kk / 4) * K_TILE + (kk % 4) * 32;
      const unsigned qoff = (kk / 4) * Q_TILE + (kk % 4) * 32;
      wgmma_ss<0, 0>(s, desc_at(k_lo, off), desc_at(q_k_lo, stage_off + qoff), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < K_STEPS_D; ++kk) {
      const unsigned off = (kk / 4) * K_TILE + (kk % 4) * 32;
      const unsigned qoff = (kk / 4) * Q_TILE + (kk % 4) * 32;
      wgmma_ss<0, 0>(dp, desc_at(v_lo, off), desc_at(do_k_lo, stage_off + qoff), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // Sᵀ
    acc_fence(s);

    // Pᵀ (fp32, in place of Sᵀ) and packed to bf16 in the register-A order of m64k16 (four k-steps of 16
    // queries). Accumulator columns [16k, 16k+8) are A registers 0 (row) and 1 (row+8), [16k+8, 16k+16) 2, 3.
    const unsigned key0 = n0 + wg * 64 + frag_row;
    const bool masked = CAUSAL && mt * BLOCK_M < n0 + BLOCK_N;  // a tile that crosses the diagonal
    unsigned pa[4][4], dsa[4][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned col = 8 * j + frag_col;
      const float2 lse = *reinterpret_cast<const float2*>(lse_st + col);
#pragma unroll
      for (int h = 0; h < 4; ++h) {  // h: bit 0 the column pair member, bit 1 the row half (+8)
        float e = fast_exp2(fmaf(s[4 * j + h], scale_log2, -((h & 1) ? lse.y : lse.x) * LOG2E));
        if (masked && mt * BLOCK_M + col + (h & 1) < key0 + 8 * (h >> 1)) e = 0.0f;
        s[4 * j + h] = e;
      }
      pa[j / 2][2 * (j % 2) + 0] = pack_bf16(s[4 * j + 0], s[4 * j + 1]);
      pa[j / 2][2 * (j % 2) + 1] = pack_bf16(s[4 * j + 2], s[4 * j + 3]);
    }

    // dV += Pᵀ·dO: B is [64 queries, 64 columns] with the columns contiguous (MN-major).
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_bt(dv[c], pa[kk], desc_at(do_mn_lo, stage_off + c * Q_TILE + kk * 2048));
    wgmma_commit();
    wgmma_wait<1>();  // dPᵀ (dV's products may still run)
    acc_fence(dp);

    // dSᵀ = Pᵀ∘(dPᵀ − Delta), packed the same way; then dK += dSᵀ·Q.
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 dl = *reinterpret_cast<const float2*>(delta_st + 8 * j + frag_col);
      float ds[4];
#pragma unroll
      for (int h = 0; h < 4; ++h) ds[h] = s[4 * j + h] * (dp[4 * j + h] - ((h & 1) ? dl.y : dl.x));
      dsa[j / 2][2 * (j % 2) + 0] = pack_bf16(ds[0], ds[1]);
      dsa[j / 2][2 * (j % 2) + 1] = pack_bf16(ds[2], ds[3]);
    }
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_bt(dk[c], dsa[kk], desc_at(q_mn_lo, stage_off + c * Q_TILE + kk * 2048));
    wgmma_commit();

    // dSᵀ into shared memory as [128 keys, 64 queries], 128B-swizzled: the A operand of dQ = dS·K, read
    // MN-major (queries contiguous). Two buffers by tile parity: the other warpgroup may still be reading the
    // previous tile's until both pass this tile's barrier.
    // Row r = 64·wg + frag_row (+8 for half 1, which leaves r % 8 = lane/4 alone), chunk j at j ^ (r % 8):
    // ds_lane holds the row and chunk r % 8 and XOR-ing j << 4 moves it to chunk j ^ (r % 8) (bits 4-6 only;
    // the buffer offset is 1024-aligned, so it commutes). Taken after adding the tile's buffer, so the
    // compiler forms each address here instead of keeping 16 of them live across the loop.
    const unsigned ds_tile = OFF_DS + (it & 1) * DS_BYTES + ds_lane;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<unsigned*>(smem + ((ds_tile ^ (j << 4)) + half * 8 * 128)) = dsa[j / 2][2 * (j % 2) + half];
    fence_async_shared();
    // The previous tile's dQ reduce (issued by thread 0 of each warpgroup) has read its staging before thread 0
    // reaches this barrier, so every thread past it may rewrite the staging below: one barrier serves both.
    if (t == 0) bulk_wait_read_all();
    named_barrier(1, 256);

    float dq[32];
    wgmma_fence();
    // D_PAD 128: all 128 keys of dSᵀ against K's 64-column box wg. D_PAD 64: this warpgroup's 64 keys of dSᵀ
    // (+8192 bytes for wg 1) against the same 64 rows of K (ds_mn_lo and kq_mn_lo hold the wg offsets).
    const unsigned ds_lo = desc_at(ds_mn_lo, (it & 1) * DS_BYTES);
#pragma unroll
    for (int kk = 0; kk < (DQ_SPLIT_N ? BLOCK_N / 16 : 4); ++kk)
      wgmma_ss<1, 1>(dq, desc_at(ds_lo, kk * 2048), desc_at(kq_mn_lo, kk * 2048), kk > 0);
    wgmma_commit();
    wgmma_wait<1>();  // dK's products done: Q, dO, LSE, Delta of this stage are read
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      acc_fence(dv[c]);
      acc_fence(dk[c]);
    }
    mbar_arrive(base + OFF_BAR + BAR_EMPTY(stage));
    wgmma_wait<0>();
    acc_fence(dq);

    // dQ partial → staging ([64, 32] fp32 boxes, 128B-swizzled) → TMA reduce-add into dq_accum. The copy
    // runs while this warpgroup computes the next tile; its staging is rewritten only after it has been read
    // (thread 0's wait before the dSᵀ barrier above).
    //
    // Banks of one float2 store (8 bytes a lane: the hardware serves a warp as two half-warps of 16 lanes,
    // 128 bytes each, one wavefront each when they hit 32 distinct banks). Lane l holds row r = l/4 (mod 8;
    // +16·warp, +8·half leave r%8 alone) and columns 8j + 2(l%4) + {0, 1}: box j/4, 16-byte chunk
    // c = 2(j%4) + (l%4)/2 of the row, the word pair (l%2) inside it; stored at chunk c ^ r. A half-warp holds
    // rows r = 0..3 (or 4..7) and per row two chunks {2(j%4), 2(j%4)+1}, which rows r and r^1 swizzle onto
    // the same pair: 4 distinct chunks for 16 lanes, every bank twice, 2 wavefronts per half-warp (the 2 ×
    // 50 M excess wavefronts of the perf pass). So a lane of an odd row stores its columns of j ^ 2 when the
    // even rows store j (both halves of the same box: j/4 is unchanged): chunk
    //   (2((j ^ 2·(r%2)) % 4) + (l%4)/2) ^ r,   whose upper two bits are (j%4) ^ 2·(r%2) ^ r/2
    // take four distinct values over the half-warp's four rows (r/2 ^ 2·(r%2) is 0, 2, 1, 3 for r = 0..3 and
    // 2, 0, 3, 1 for r = 4..7), the low bit is (l%4)/2 ^ r%2: 8 distinct chunks × the 2 word pairs = 32 banks,
    // one wavefront per half-warp. Every lane still stores each of its 16 float2 once (j ↦ j ^ 2 is a
    // bijection); the value goes where its own column says, so the tile in shared memory, and the TMA
    // reduce's view of it, are exactly as before. The price is two selects per store.
    const bool odd_row = (lane / 4) % 2;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned jj = odd_row ? (j ^ 2) : j;  // the j whose columns this lane stores now
        const unsigned row = frag_row + 8 * half, col = 8 * jj + frag_col;  // col in [0, 64)
        const unsigned box = col / 32, cb = col % 32;
        const unsigned byte = box * DQ_BOX + row * 128 + (((cb / 4) ^ (row % 8)) << 4) + (cb % 4) * 4;
        const float2 v = odd_row ? make_float2(dq[4 * (j ^ 2) + 2 * half], dq[4 * (j ^ 2) + 2 * half + 1])
                                 : make_float2(dq[4 * j + 2 * half], dq[4 * j + 2 * half + 1]);
        *reinterpret_cast<float2*>(dq_stage_ptr + byte) = v;
      }
    fence_async_shared();
    named_barrier(2 + wg, 128);
    if (t == 0) {
      const unsigned col0 = DQ_SPLIT_N ? wg * 64 : 0;
#pragma unroll
      for (int box = 0; box < 2; ++box)
        if (col0 + 32 * box < HEAD_DIM) tma_reduce_add_2d(&dq_map, dq_stage + box * DQ_BOX, col0 + 32 * box, q_row);
      bulk_commit();
    }
    q_row += BLOCK_M;  // the next tile's row; past the head's last tile, the next head's row 0 …
    if (++mt == m_tiles) {
      mt = m_first;
      q_row += m_first * BLOCK_M;  // … and its first tile that sees these keys
    }
  }

  // dK = scale · Σ dSᵀ·Q and dV = Σ Pᵀ·dO over the group's query heads, stored once.
  const size_t out_row = (size_t)kv_row + wg * 64 + frag_row;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned col = c * 64 + 8 * j + frag_col;
        if (col < HEAD_DIM) {
          const size_t at = (out_row + 8 * half) * HEAD_DIM + col;
          *reinterpret_cast<unsigned*>(dK + at) =
              pack_bf16(dk[c][4 * j + 2 * half] * scale, dk[c][4 * j + 2 * half + 1] * scale);
          *reinterpret_cast<unsigned*>(dV + at) = pack_bf16(dv[c][4 * j + 2 * half], dv[c][4 * j + 2 * half + 1]);
        }
      }
  if (t == 0) bulk_wait_all();
}
