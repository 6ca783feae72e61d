// FlashAttention-3-style attention forward for Hopper (sm_90a): O = softmax(scale·QKᵀ)V and LSE (natural log).
// Q, K, V, O bf16 [B, heads, S, D] contiguous, LSE fp32 [B, H, S]; K/V may have fewer heads (grouped-query
// attention: query head h reads K/V head h / KV_GROUP). Hand-written for PTXBench; specialised by the macros
// below, which tasks/solutions/dev/cuda_answers.py defines in front of this source for each task.
//
// Shape of the kernel:
// - A persistent grid (one CTA per SM) walking work items (128-row query tile, batch·head); see work_item for the
//   order, which keeps the CTAs running at once on the K/V of a few heads (they share it in L2) and, when causal,
//   gives every CTA the same work.
// - 3 warpgroups: warpgroup 0 produces (one thread issues every TMA load: Q per item, then a ring of STAGES K tiles
//   and STAGES V tiles with full/empty mbarriers; K and V have separate rings because K_n is free after S_n while
//   V_n is read one step later); warpgroups 1 and 2 consume, each owning 64 rows of the item's 128-row tile (the
//   FA3 split: both read the same K/V tiles, so the ring and L2 traffic serve 128 rows, and a warpgroup's S tile
//   is 64 registers, which leaves room for O, S and P at once).
// - Per key tile: S = Q·Kᵀ (wgmma m64n128k16, both operands in shared memory, K-major, 128B swizzle, as TMA wrote
//   them), the online softmax in the exp2 domain, O += P·V (wgmma with P from registers, V's descriptor MN-major).
//   Inside a warpgroup the next tile's S is issued before the current P·V (two groups in flight); between the two
//   warpgroups, named barriers pass a turn so that one's softmax overlaps the other's wgmmas.
// - Causal: key tiles beyond the diagonal are never loaded; the diagonal tile (the last) alone is masked.
// - D=96: the tiles are 128 wide in shared memory; TMA zero-fills columns 96..127 (the tensor map's width is 96),
//   S = Q·Kᵀ runs 6 k16 steps (the exact 96), P·V runs n=128 and the zero columns of O are never stored.
//   (n=96 would read 1.5 swizzle atoms of V along N, a layout the MN-major descriptor does not describe.)
// Requires S to be a multiple of 128 (the task's S are 2048 and 4096).

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef KV_GROUP
#define KV_GROUP 1
#endif

struct alignas(64) TensorMap { unsigned char bytes[128]; };

static constexpr int D = HEAD_DIM;
static constexpr int D_PAD = D <= 64 ? 64 : 128;        // the tiles' width in shared memory
static constexpr int NBOX = D_PAD / 64;                 // TMA boxes [128, 64] per tile (128B swizzle: 64 bf16 a row)
static constexpr int BLOCK_M = 128;                     // query rows per item (64 per consumer warpgroup)
static constexpr int BLOCK_N = 128;                     // keys per tile
// K tiles and V tiles in flight. D=64: 4 (16 KiB tiles; the ring index is then a mask, and the producer runs 3
// tiles ahead through the DRAM reads at the start of each round of heads).
static constexpr int STAGES = D <= 64 ? 4 : 2;
static constexpr int HEADS_PER_CHUNK = 8;
static constexpr int BOX_BYTES = 128 * 128;             // [128 rows, 64 bf16]
static constexpr int TILE_BYTES = NBOX * BOX_BYTES;
static constexpr int QK_STEPS = D / 16;                 // k16 steps of S = Q·Kᵀ
static constexpr int PV_STEPS = BLOCK_N / 16;           // k16 steps of O += P·V
static constexpr int O_REGS = D_PAD / 2;                // fp32 accumulators of a 64 x D_PAD tile per thread
static constexpr int Q_OFF = 0;
static constexpr int K_OFF = Q_OFF + TILE_BYTES;
static constexpr int V_OFF = K_OFF + STAGES * TILE_BYTES;
static constexpr int BAR_OFF = V_OFF + STAGES * TILE_BYTES;
static constexpr int NUM_BARS = 2 + 4 * STAGES;         // q_full, q_empty, k_full[], k_empty[], v_full[], v_empty[]
static constexpr int SMEM_BYTES = 1024 + BAR_OFF + 8 * NUM_BARS;  // 1024: room to align the base to 1024 bytes
static_assert(SMEM_BYTES <= 227 * 1024, "over Hopper's 227 KiB of shared memory per block");
#ifdef SHARED_BYTES
static_assert(SMEM_BYTES == SHARED_BYTES, "the LaunchSpec's shared_bytes must be this kernel's");
#endif
static constexpr int CONSUMER_THREADS = 256;
static constexpr float LOG2E = 1.4426950408889634f;
static constexpr float LN2 = 0.6931471805599453f;
#define NEG_INF __int_as_float(0xff800000)  // −∞ (NVRTC has no math.h for INFINITY)

// ------------------------------------------------------------------------------------------ PTX wrappers

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra WAIT; }"
        ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// One box [128 rows, 64 columns] at (column, row) of the tensor map's 2-D view into shared memory at dst.
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, int column, int row, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(column), "r"(row), "r"(bar) : "memory");
}
// A tile's row `row` and its NBOX boxes, into one tile of shared memory, counted on `bar`.
__device__ __forceinline__ void load_tile(unsigned dst, const TensorMap& map, int row, unsigned bar) {
    mbar_expect(bar, TILE_BYTES);
#pragma unroll
    for (int b = 0; b < NBOX; ++b) tma_load(dst + b * BOX_BYTES, map, b * 64, row, bar);
}
// The consumer warpgroups take turns issuing wgmmas: named barrier 1 + w is warpgroup w's turn.
__device__ __forceinline__ void wait_turn(int w) { asm volatile("bar.sync %0, 256;" ::"r"(1 + w) : "memory"); }
__device__ __forceinline__ void pass_turn(int w) { asm volatile("bar.arrive %0, 256;" ::"r"(2 - w) : "memory"); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// NVRTC takes an asm statement to be done when it returns: these make every later read of an accumulator (and
// every reuse of an A register) stay after the wait that really completes the wgmma.
// Pinned before a fence, they keep the writes of accumulators and A registers (O's rescale, P's packing) ahead of it.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(unsigned (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Matrix descriptors, 128B swizzle, tiles 1024-byte aligned. K-major (Q, K): SBO 1024 (8 rows of 128 bytes), LBO
// unused (1). MN-major (V: keys down the rows, head dims along them): LBO = a box (the next 64 head dims), SBO 1024
// (the next 8 keys). The high word (SBO 64, swizzle mode 1 at bit 62) is the same for both. The low word's start
// address is addr >> 4 in bits 0..13: every shared address here is below 228 KiB and a multiple of 16, so the
// descriptor of addr + offset is the low word plus offset >> 4, with no carry into LBO. The kernel builds each tile's
// low word once (desc_lo_*) and each wgmma adds its constant step to it: one integer add a wgmma, no 64-bit
// construction in the inner loops.
static constexpr unsigned DESC_HI = 64u | (1u << 30);
__device__ __forceinline__ unsigned desc_lo_k_major(unsigned addr) { return (addr >> 4) | (1u << 16); }
__device__ __forceinline__ unsigned desc_lo_mn_major(unsigned addr) {
    return (addr >> 4) | (static_cast<unsigned>(BOX_BYTES >> 4) << 16);
}
__device__ __forceinline__ unsigned long long desc(unsigned lo) {
    return (static_cast<unsigned long long>(DESC_HI) << 32) | lo;
}

__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], unsigned long long a, unsigned long long b, int accumulate) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %66, 0; "
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long b) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %69, 0; "
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long b) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %37, 0; "
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float log2_approx(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ------------------------------------------------------------------------------------------ the pieces

struct Work {
    unsigned bh;      // batch·H + query head
    unsigned m_tile;  // query tile
};

// The order of the work. Not causal: every item costs the same; items come in chunks of HEADS_PER_CHUNK heads,
// query tiles outermost inside a chunk, and CTA i takes items i, i + grid, ...: the 132 CTAs at work share 8 heads'
// K/V (16 MiB at S=4096) in L2.
// Causal: item (m_tile, head) costs m_tile + 1 key tiles, so a plain stride would leave the CTAs with unequal work
// and drifting apart over the heads (each re-reading its own heads' K/V from DRAM). Instead a head's M = S/128 query
// tiles are ordered heaviest, lightest, next heaviest, next lightest (tiles M−1, 0, M−2, 1, ...), heads one after the
// other, and CTA i takes the PAIRS of consecutive items i, i + grid, ...: a pair (M−1−q, q) costs M + 1 key tiles
// whatever q, so each CTA's rounds take the same time and all CTAs stay in step, round r working on pairs
// [r·grid, (r+1)·grid), i.e. on 2·grid/M consecutive heads (8.25 heads' K/V = 16.5 MiB at S=4096 D=128, the same at
// S=2048) that every one of them reads from tile 0 up at about the same time. Balance: 192 heads at S=4096 make 3072
// pairs, 24 rounds at most for 23.3 on average (97%; 12 for 11.6 at S=2048). (An odd M pairs items across two heads:
// still right, less even.)
__device__ __forceinline__ unsigned nth_item(unsigned k) {  // this CTA's k-th item (may be past the last)
    if (CAUSAL) return 2 * (blockIdx.x + (k / 2) * gridDim.x) + (k & 1);
    return blockIdx.x + k * gridDim.x;
}
__device__ __forceinline__ Work work_item(unsigned item, unsigned m_tiles, unsigned batch_heads) {
    Work w;
    if (CAUSAL) {
        w.bh = item / m_tiles;
        const unsigned r = item - w.bh * m_tiles;
        w.m_tile = (r & 1) ? r / 2 : m_tiles - 1 - r / 2;
        return w;
    }
    const unsigned per_chunk = HEADS_PER_CHUNK * m_tiles;
    const unsigned chunk = item / per_chunk;
    const unsigned rest = item - chunk * per_chunk;
    const unsigned heads = min(static_cast<unsigned>(HEADS_PER_CHUNK), batch_heads - chunk * HEADS_PER_CHUNK);
    const unsigned m_index = rest / heads;
    w.bh = chunk * HEADS_PER_CHUNK + (rest - m_index * heads);
    w.m_tile = m_index;
    return w;
}
__device__ __forceinline__ unsigned key_tiles(const Work& w, unsigned m_tiles) {
    return CAUSAL ? w.m_tile + 1 : m_tiles;  // BLOCK_M == BLOCK_N: the diagonal tile is key tile m_tile
}

// S = Q·Kᵀ for this warpgroup's 64 rows: Q's rows 64·w.. of each box, K's 128 rows; k16 step j reads 32 bytes of
// each row, in box j / 4. q_lo, k_lo: the K-major descriptors' low words of the two tiles.
__device__ __forceinline__ void issue_qk(float (&s)[64], unsigned q_lo, unsigned k_lo) {
#pragma unroll
    for (int j = 0; j < QK_STEPS; ++j) {
        const unsigned step = ((j / 4) * BOX_BYTES + (j % 4) * 32) >> 4;
        wgmma_ss_n128(s, desc(q_lo + step), desc(k_lo + step), j > 0);
    }
}
// O += P·V: k16 step j takes P's keys 16j.. (registers p[4j..4j+3]) and V's rows 16j.. (2048 bytes further).
// v_lo: the MN-major descriptor's low word of the V tile.
template <int N>
__device__ __forceinline__ void issue_pv(float (&o)[N], const unsigned (&p)[32], unsigned v_lo) {
#pragma unroll
    for (int j = 0; j < PV_STEPS; ++j) {
        const unsigned long long b = desc(v_lo + j * (2048 >> 4));
        if constexpr (N == 64) {
            wgmma_rs_n128(o, p[4 * j], p[4 * j + 1], p[4 * j + 2], p[4 * j + 3], b);
        } else {
            wgmma_rs_n64(o, p[4 * j], p[4 * j + 1], p[4 * j + 2], p[4 * j + 3], b);
        }
    }
}

// The accumulator layout: register 4i + e holds (row r, column 8i + 2·(lane % 4) + e) and 4i + 2 + e row r + 8,
// r = 16·warp + lane / 4. The diagonal tile: key column > query row is masked (same tile index, same offsets).
__device__ __forceinline__ void mask_diagonal(float (&s)[64], int row) {
    const int col0 = 2 * (threadIdx.x % 4);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int col = 8 * i + col0 + e;
            if (col > row) s[4 * i + e] = NEG_INF;
            if (col > row + 8) s[4 * i + 2 + e] = NEG_INF;
        }
    }
}

// The online softmax of one S tile, in place (S becomes P = 2^(c·s − m')), for this thread's two rows. m is the
// running max of c·s, l this thread's share of the running sum (the quad's four shares add up at the end).
// Returns the factors O's rows must be scaled by, 2^(m − m').
__device__ __forceinline__ float2 softmax_step(float (&s)[64], float c, float& m0, float& m1, float& l0, float& l1) {
    float x0 = NEG_INF, x1 = NEG_INF;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        x0 = fmaxf(x0, fmaxf(s[4 * i], s[4 * i + 1]));
        x1 = fmaxf(x1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    const float n0 = fmaxf(m0, quad_max(x0) * c);
    const float n1 = fmaxf(m1, quad_max(x1) * c);
    const float2 alpha = make_float2(exp2_approx(m0 - n0), exp2_approx(m1 - n1));
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            s[4 * i + e] = exp2_approx(fmaf(s[4 * i + e], c, -n0));
            s[4 * i + 2 + e] = exp2_approx(fmaf(s[4 * i + 2 + e], c, -n1));
            sum0 += s[4 * i + e];
            sum1 += s[4 * i + 2 + e];
        }
    }
    l0 = l0 * alpha.x + sum0;
    l1 = l1 * alpha.y + sum1;
    m0 = n0;
    m1 = n1;
    return alpha;
}
__device__ __forceinline__ void rescale(float (&o)[O_REGS], float2 alpha) {
#pragma unroll
    for (int i = 0; i < O_REGS / 4; ++i) {
        o[4 * i] *= alpha.x;
        o[4 * i + 1] *= alpha.x;
        o[4 * i + 2] *= alpha.y;
        o[4 * i + 3] *= alpha.y;
    }
}
// P as the A operand of P·V: the k16 step j's four registers are columns 16j.. of the accumulator layout.
__device__ __forceinline__ void pack_p(unsigned (&p)[32], const float (&s)[64]) {
#pragma unroll
    for (int i = 0; i < 32; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
}

// ------------------------------------------------------------------------------------------ the kernel

extern "C" __global__ void __launch_bounds__(384, 1)
attention_fwd(const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
              const __grid_constant__ TensorMap v_map, unsigned short* __restrict__ out, float* __restrict__ lse,
              unsigned seq_len, unsigned batch_heads, float scale) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned base = (static_cast<unsigned>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
    const unsigned q_tile = base + Q_OFF;
    const unsigned q_full = base + BAR_OFF, q_empty = q_full + 8;
    const unsigned k_full = q_full + 16, k_empty = k_full + 8 * STAGES;
    const unsigned v_full = k_empty + 8 * STAGES, v_empty = v_full + 8 * STAGES;
    const int tid = threadIdx.x;
    const int warpgroup = tid / 128;

    if (tid == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, CONSUMER_THREADS);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full + 8 * s, 1);
            mbar_init(k_empty + 8 * s, CONSUMER_THREADS);
            mbar_init(v_full + 8 * s, 1);
            mbar_init(v_empty + 8 * s, CONSUMER_THREADS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const unsigned m_tiles = seq_len / BLOCK_M;
    const unsigned items = m_tiles * batch_heads;

    if (warpgroup == 0) {  // the producer: 24 registers are plenty for one thread's loop
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid != 0) return;
        unsigned kv = 0, t = 0;  // K/V tiles and items loaded so far (the rings' and Q's phases)
        for (;; ++t) {
            const unsigned item = nth_item(t);
            if (item >= items) break;
            const Work w = work_item(item, m_tiles, batch_heads);
            const unsigned tiles = key_tiles(w, m_tiles);
            mbar_wait(q_empty, (t & 1) ^ 1);  // a fresh barrier's "previous phase" (parity 1) counts as done
            load_tile(q_tile, q_map, static_cast<int>(w.bh * seq_len + w.m_tile * BLOCK_M), q_full);
            const unsigned kv_row = (w.bh / KV_GROUP) * seq_len;
            for (unsigned n = 0; n < tiles; ++n, ++kv) {
                const unsigned stage = kv % STAGES, parity = ((kv / STAGES) & 1) ^ 1;
                const int row = static_cast<int>(kv_row + n * BLOCK_N);
                mbar_wait(k_empty + 8 * stage, parity);
                load_tile(base + K_OFF + stage * TILE_BYTES, k_map, row, k_full + 8 * stage);
                mbar_wait(v_empty + 8 * stage, parity);
                load_tile(base + V_OFF + stage * TILE_BYTES, v_map, row, v_full + 8 * stage);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    // consumer 0 or 1: rows 64·cw.. of each item's tile. Read through a shuffle so that the compiler knows it is the
    // same in the whole warp, and keeps the descriptors built from it in uniform registers (as CUTLASS does).
    const int cw = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
    const int row_in_tile = 64 * cw + 16 * ((tid / 32) % 4) + (tid % 32) / 4;  // this thread's first row
    // The descriptors' low words: this warpgroup's 64 rows of Q's boxes (128 bytes a row), K and V stage 0; stage s
    // is s·TILE_BYTES further.
    const unsigned q_lo = desc_lo_k_major(q_tile + cw * 64 * 128);
    const unsigned k_lo = desc_lo_k_major(base + K_OFF), v_lo = desc_lo_mn_major(base + V_OFF);
    static constexpr unsigned STAGE_STEP = TILE_BYTES >> 4;
    const float c = scale * LOG2E;
    float o[O_REGS], s[64];
    unsigned p[32];
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) p[i] = 0u;
    if (cw == 1) pass_turn(cw);  // consumer 0 issues first
    unsigned kv = 0, t = 0;
    for (;; ++t) {
        const unsigned item = nth_item(t);
        if (item >= items) break;
        const Work w = work_item(item, m_tiles, batch_heads);
        const unsigned tiles = key_tiles(w, m_tiles);
#pragma unroll
        for (int i = 0; i < O_REGS; ++i) o[i] = 0.f;
        float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
        mbar_wait(q_full, t & 1);

        // Key tile 0: S alone.
        unsigned stage = kv % STAGES;
        mbar_wait(k_full + 8 * stage, (kv / STAGES) & 1);
        wait_turn(cw);
        pin(o);
        pin(p);
        wgmma_fence();
        issue_qk(s, q_lo, k_lo + stage * STAGE_STEP);
        wgmma_commit();
        pass_turn(cw);
        wgmma_wait<0>();
        pin(s);
        mbar_arrive(k_empty + 8 * stage);
        if (tiles == 1) mbar_arrive(q_empty);
        if (CAUSAL && tiles == 1) mask_diagonal(s, row_in_tile);
        rescale(o, softmax_step(s, c, m0, m1, l0, l1));
        pack_p(p, s);

        // Key tiles 1..: S of tile n, then P·V of tile n − 1, both in flight; the softmax of n runs behind P·V.
        for (unsigned n = 1; n < tiles; ++n) {
            const unsigned k_index = kv + n, v_index = k_index - 1;
            const unsigned k_stage = k_index % STAGES, v_stage = v_index % STAGES;
            mbar_wait(k_full + 8 * k_stage, (k_index / STAGES) & 1);
            mbar_wait(v_full + 8 * v_stage, (v_index / STAGES) & 1);
            wait_turn(cw);
            pin(o);  // O's rescale and P's packing stay before the fence
            pin(p);
            wgmma_fence();
            issue_qk(s, q_lo, k_lo + k_stage * STAGE_STEP);
            wgmma_commit();
            issue_pv(o, p, v_lo + v_stage * STAGE_STEP);
            wgmma_commit();
            pass_turn(cw);
            wgmma_wait<1>();  // S is done; P·V runs on
            pin(s);
            mbar_arrive(k_empty + 8 * k_stage);
            if (n == tiles - 1) mbar_arrive(q_empty);
            if (CAUSAL && n == tiles - 1) mask_diagonal(s, row_in_tile);
            const float2 alpha = softmax_step(s, c, m0, m1, l0, l1);
            wgmma_wait<0>();
            pin(o);
            pin(p);
            mbar_arrive(v_empty + 8 * v_stage);
            rescale(o, alpha);
            pack_p(p, s);
        }

        // The last tile's P·V.
        const unsigned v_index = kv + tiles - 1;
        stage = v_index % STAGES;
        mbar_wait(v_full + 8 * stage, (v_index / STAGES) & 1);
        wait_turn(cw);
        pin(o);
        pin(p);
        wgmma_fence();
        issue_pv(o, p, v_lo + stage * STAGE_STEP);
        wgmma_commit();
        pass_turn(cw);
        wgmma_wait<0>();
        pin(o);
        pin(p);
        mbar_arrive(v_empty + 8 * stage);
        kv += tiles;

        // Epilogue: O / l as bf16 straight from the accumulator layout, LSE = (m + log2 l)·ln 2 from a quad's lane 0.
        l0 = quad_sum(l0);
        l1 = quad_sum(l1);
        const float r0 = rcp_approx(l0), r1 = rcp_approx(l1);
        const unsigned long long row = static_cast<unsigned long long>(w.bh) * seq_len + w.m_tile * BLOCK_M + row_in_tile;
        if (tid % 4 == 0) {
            lse[row] = (m0 + log2_approx(l0)) * LN2;
            lse[row + 8] = (m1 + log2_approx(l1)) * LN2;
        }
        unsigned* o0 = reinterpret_cast<unsigned*>(out + row * D + 2 * (tid % 4));
        unsigned* o1 = reinterpret_cast<unsigned*>(out + (row + 8) * D + 2 * (tid % 4));
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            o0[4 * i] = pack_bf16(o[4 * i] * r0, o[4 * i + 1] * r0);
            o1[4 * i] = pack_bf16(o[4 * i + 2] * r1, o[4 * i + 3] * r1);
        }
    }
}
