// cuda_attn_reference.cu: the fp64 reference attention on the GPU, held to
// the CPU reference (kernels/attn_reference.c) within relative L2 1e-12.
//
// FlashAttention-style, fp64 on Hopper's fp64 tensor cores (DMMA, PTX
// mma.sync m16n8k8 .f64). One block = BM query rows of one query head of one
// sequence; key tiles of BN keys stream through shared memory: each
// tile's bf16 K and V arrive by cp.async while the tile before is computed,
// and are converted to fp64 once per block. Softmax with a lazy maximum:
//   S = sum_d (q * sm_scale) . k in fp64, masked to [lo_r, hi_r];
//   the row's reference m moves to the tile's maximum only when that exceeds
//   m by more than REF_RESCALE_MARGIN (then alpha = exp(m - m_new) rescales
//   l and O), otherwise P = exp(S - m) <= e^margin, which fp64 holds;
//   l += sum P, O += P.V;   out = O * (1 / l).
// The result does not depend on m beyond rounding (O / l is invariant), so a
// stale m costs nothing but the rescales it saves: 2 fp64 multiplies per
// score. The exponential is exp_f64_table.h (10 fp64 instructions against
// CUDA exp's ~16; a DFMA and a DMMA share the fp64 pipe).
// A sink is an initial logit: m = sink, l = 1 (= exp(sink - m)), O = 0;
// without sinks m = -inf, l = 0, and the first tile a row sees sets m.
// Every product and sum is fp64 rounded to nearest (DMMA computes in IEEE
// fp64), bf16 -> fp64 is exact, q * sm_scale is exact (8 by 24 significant
// bits), and exp is within 2 ulp with the CPU's flush below -700, so the only
// differences from the CPU reference are the order of the sums and the
// exponential's rounding: relative error ~1e-15, far inside 1e-12.
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

// Declares the launchers (extern "C") defined here.
#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "exp_f64_table.h"

#define REF_WARP_SIZE 32
#define REF_FULL_MASK 0xFFFFFFFFu
// Products run as 16x8x8 fp64 tiles per warp, D[16x8] += A[16x8] . B[8x8],
// each one DMMA m16n8k8 (dmma_16x8x8).
#define REF_MMA_M 16
#define REF_MMA_N 8
#define REF_MMA_K 8
// Lanes sharing one fragment row (lane % REF_QUAD is the column group), and
// the row distance of a lane's two rows in a 16-row tile.
#define REF_QUAD 4
#define REF_HALF_M 8
// Query rows per warp: one m16 tile.
#define REF_ROWS_PER_WARP REF_MMA_M
// Keys per tile (BN, a multiple of REF_MMA_N): 16 for d <= 64, which with
// 160 registers lets 3 blocks (12 warps) share an SM: 328 ms against 350 ms
// with 32 keys and 2 blocks on the 36-layer benchmark (H200, 2026-12-02);
// 32 for d <= 128 (one block of 8 warps either way).
#define REF_BN_SMALL_D 16
#define REF_BN_LARGE_D 32
// Row pads (doubles) of the shared tiles, for conflict-free fragment loads.
// sQ / sK rows (stride DMAX + 8, = 64 B mod 128 B) are read 16 B (dims
// 2q, 2q+1; q = lane % 4) by 8 lanes per quarter warp: rows g, g+1 x 4 x 16 B
// fill the 128 B of banks once. sV rows (stride DMAX + 2, = 16 B mod 128 B)
// are read 8 B at keys 2q + e by 8 consecutive dims: per half warp 4 keys
// 32 B apart x 4 dims x 8 B, again every bank once.
#define REF_QK_PAD 8
#define REF_V_PAD 2
// bf16 values converted per fill step (one 16-byte double2 store).
#define REF_FILL_VEC 2
// bf16 values per 16-byte cp.async chunk of the staged K/V tiles.
#define REF_CHUNK_ELEMS 8
// The lazy maximum: a row's m moves only when a score exceeds it by more than
// this, so P = exp(S - m) <= e^256 ~ 1.5e111, and l, O (at most 2^31 keys
// times |v| <= 3.4e38, bf16's largest) stay below 1e160, inside fp64's
// 1.8e308 with room to spare.
#define REF_RESCALE_MARGIN 256.0
// Head-dim templates and their block shapes: warps per block, and the
// resident blocks per SM that __launch_bounds__ holds the registers to
// (smem: 58 KiB x 3 for d <= 64, 219 KiB x 1 for d <= 128; the limit is 227).
#define REF_D_SMALL 64
#define REF_D_MAX 128
#define REF_WARPS_SMALL_D 4
#define REF_WARPS_LARGE_D 8
#define REF_BLOCKS_SMALL_D 3
#define REF_BLOCKS_LARGE_D 1
// Head dims must be a multiple of this (a whole cp.async chunk per row).
#define REF_D_MULTIPLE 8
// Largest gridDim.y / gridDim.z (CUDA limit).
#define REF_MAX_GRID_YZ 65535
// Alignment (bytes) of k and v (16-byte cp.async chunks) and of q (read as
// bf16 pairs); rows keep it since d % 8 == 0.
#define REF_KV_ALIGN 16
#define REF_Q_ALIGN 4
// bf16 bit fields: sign, and the magnitude range of normal numbers.
#define BF16_SIGN 0x8000u
#define BF16_MAG 0x7FFFu
#define BF16_MIN_NORMAL 0x0080u
#define BF16_INF 0x7F80u
#define BF16_MANT_MASK 0x7Fu
// A normal bf16 magnitude's bits shifted into an fp64 high word: exponent
// rebias (1023 - 127) << 20, mantissa 7 bits -> 20 bits (<< 13). A
// subnormal's biased exponent is its top bit's position plus 1023 - 133.
#define BF16_TO_F64_REBIAS 0x38000000u
#define BF16_TO_F64_SHIFT 13
#define BF16_SUBNORMAL_BIAS 890
// fp64 high word: mantissa bits, their mask, and the exponent field of Inf.
#define F64_HI_MANT_BITS 20
#define F64_HI_MANT_MASK 0xFFFFFu
#define F64_HI_INF 0x7FF00000u

namespace {  // kernels and helpers are private to this file

// exp_f64_table's 2^(j/64), copied into each block's shared memory (lanes
// read it at scattered j, which the constant cache would serialize).
__constant__ double ref_exp_table[EXP_F64_TABLE_SIZE] = {EXP_F64_TABLE_VALUES};

// bf16 -> fp64, exact, by integer moves alone (a conversion instruction
// would run on the fp64 pipe the products need). Normal numbers rebias the
// exponent; subnormals (mag * 2^-133) are normalized at their top bit p,
// exponent p - 133; Inf and NaN keep their payload. Checked bit for bit
// against (double)float on all 65,536 patterns.
__device__ __forceinline__ double bf16_bits_to_f64(uint32_t h)
{
    const uint32_t mag = h & BF16_MAG, sign = (h & BF16_SIGN) << 16;
    uint32_t hi = (mag << BF16_TO_F64_SHIFT) + BF16_TO_F64_REBIAS;  // normal
    const int p = 31 - __clz(mag | 1u);                              // subnormal's top bit
    const uint32_t sub = ((uint32_t)(p + BF16_SUBNORMAL_BIAS) << F64_HI_MANT_BITS) |
                         ((mag << (F64_HI_MANT_BITS - p)) & F64_HI_MANT_MASK);
    hi = mag >= BF16_INF ? F64_HI_INF | ((mag & BF16_MANT_MASK) << BF16_TO_F64_SHIFT) : hi;
    hi = mag < BF16_MIN_NORMAL ? (mag != 0 ? sub : 0u) : hi;
    return __hiloint2double((int)(sign | hi), 0);
}

// Lowest key of the query whose highest key is hi (attn_layout.h).
__device__ __forceinline__ int key_lo(int hi, int window)
{
    return (window > 0 && hi - window + 1 > 0) ? hi - window + 1 : 0;
}

// Max / sum over the REF_QUAD lanes of one fragment row.
__device__ __forceinline__ double quad_max(double x)
{
#pragma unroll
    for (int off = 1; off < REF_QUAD; off <<= 1) x = fmax(x, __shfl_xor_sync(REF_FULL_MASK, x, off));
    return x;
}

__device__ __forceinline__ double quad_sum(double x)
{
#pragma unroll
    for (int off = 1; off < REF_QUAD; off <<= 1) x += __shfl_xor_sync(REF_FULL_MASK, x, off);
    return x;
}

// c += a . b, fp64 on the tensor cores (PTX ISA, mma .m16n8k8 .f64, sm_90):
// per lane (g = lane / 4, q = lane % 4) a[i + 2j] = A[g + 8i][q + 4j],
// b[j] = B[q + 4j][g], c[e + 2i] = C[g + 8i][2q + e]. (Four m8n8k4 DMMAs with
// the same fragments ran 6% slower on the H200: 19.1 against 20.4 TFLOP/s.)
__device__ __forceinline__ void dmma_16x8x8(double (&c)[4], const double (&a)[4],
                                            const double (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

// Block shape of ref_attn_kernel<WARPS, DMAX>.
template <int WARPS>
struct ref_shape {
    static constexpr int threads = WARPS * REF_WARP_SIZE;
    static constexpr int bm = WARPS * REF_ROWS_PER_WARP;  // query rows per block
};

// Dynamic shared memory (bytes) of ref_attn_kernel<WARPS, DMAX, BN, ...>: fp64
// sQ, sK, sV, the bf16 staging of K and V, and the exp table.
template <int WARPS, int DMAX, int BN>
constexpr size_t ref_smem_bytes()
{
    return sizeof(double) * ((size_t)(ref_shape<WARPS>::bm + BN) * (DMAX + REF_QK_PAD) +
                             (size_t)BN * (DMAX + REF_V_PAD) + EXP_F64_TABLE_SIZE) +
           sizeof(uint16_t) * 2 * BN * DMAX;
}

// grid (ceil(max_q / BM), hq, n_seqs), WARPS * 32 threads,
// ref_smem_bytes<WARPS, DMAX, BN>() dynamic smem, BM = 16 * WARPS. Block (x, h, s):
// query rows j0 = x*BM .. of head h in sequence s (a block with j0 >= seq_q[s]
// exits at once). d <= DMAX, d % 8 == 0.
// Shared memory, fp64 (bf16 converted exactly), row strides padded
// (REF_QK_PAD, REF_V_PAD): sQ [BM][DMAX + 8] (times sm_scale),
// sK [BN][DMAX + 8], sV [BN][DMAX + 2]; dims d .. DMAX-1 are 0, so
// every product runs over DMAX dims with no branch. Rows past seq_q repeat the
// last valid row (same keys, finite) and are not written; keys past seq_kv
// are 0 (their weight is 0 and 0 * 0 stays 0). Staging: stK, stV [BN][DMAX]
// bf16, filled by cp.async (keys past seq_kv zero-filled).
// Warp w owns rows 16w .. 16w+15, one m16 tile; lane (g = lane / 4, q = lane
// % 4) holds rows 16w + g + 8i (i = 0, 1), in S keys 8nt + 2q + e of each n8
// key tile nt, in O dims 8dt + 2q + e (e = 0, 1; accumulator element e + 2i).
// A 16x8x8 product sums over its 8 k slots in any order, so each product
// chooses what slot q + 4j stands for:
//   S = Q.K^T, k step k0: dim k0 + 2q + j, i.e. one 16-byte load per row of Q
//   and K per lane;
//   O += P.V, key tile nt: key 8nt + 2q + j, whose P the lane already holds
//   in its S accumulators (element j + 2i), so P never moves; B = V[8nt + 2q
//   + j][8dt + g].
// l is kept per lane (its keys of the row) and summed over the quad at the
// end; m is the same in the four lanes of a row.
// A warp skips the tiles none of its rows sees (identical to processing them:
// P = 0) and every tile when all its rows are past seq_q; tiles every row of
// the warp sees in full skip the mask.
template <int WARPS, int DMAX, int BN, int MIN_BLOCKS>
__global__ void __launch_bounds__(ref_shape<WARPS>::threads, MIN_BLOCKS)
ref_attn_kernel(const cuda_batch b, const uint16_t *__restrict__ q,
                const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                double *__restrict__ out)
{
    constexpr int THREADS = ref_shape<WARPS>::threads;
    constexpr int BM = ref_shape<WARPS>::bm;
    constexpr int QK_STRIDE = DMAX + REF_QK_PAD;   // sQ, sK row stride (doubles)
    constexpr int V_STRIDE = DMAX + REF_V_PAD;     // sV row stride (doubles)
    constexpr int KSTEPS = DMAX / REF_MMA_K;       // k8 steps of S = Q.K^T
    constexpr int DT = DMAX / REF_MMA_N;           // n8 dim tiles of O
    constexpr int LANE_DIMS = REF_MMA_K / REF_QUAD; // dims per lane per k step (a double2)
    constexpr int ROW_VECS = DMAX / REF_FILL_VEC;  // fill steps per smem row
    constexpr int FILL_ROWS = THREADS / ROW_VECS;  // rows converted per fill step
    constexpr int ROW_CHUNKS = DMAX / REF_CHUNK_ELEMS;  // cp.async chunks per staged row
    constexpr int NT = BN / REF_MMA_N;     // n8 key tiles per tile
    // k steps of S unrolled: 2 for d <= 64 (162 registers, no spill, still 3
    // blocks per SM), 1 for d <= 128 (at 255 registers already).
    constexpr int S_UNROLL = DMAX <= REF_D_SMALL ? 2 : 1;
    static_assert(DMAX % REF_MMA_K == 0 && DMAX % REF_MMA_N == 0, "dim tiling");
    static_assert(THREADS % ROW_VECS == 0 && BM % FILL_ROWS == 0 && BN % FILL_ROWS == 0,
                  "fill loops have a fixed trip count");
    static_assert(BN * ROW_CHUNKS % THREADS == 0, "staging loop has a fixed trip count");
    static_assert(REF_MMA_N == 2 * REF_QUAD && REF_MMA_K == 2 * REF_QUAD &&
                      REF_MMA_M == 2 * REF_HALF_M,
                  "fragment layout of dmma_16x8x8");

    const int s = blockIdx.z, h = blockIdx.y;
    const int sq = b.seq_q[s], skv = b.seq_kv[s];
    const int j0 = blockIdx.x * BM;
    if (j0 >= sq) return;  // whole block, before any barrier

    extern __shared__ __align__(16) unsigned char ref_smem_raw[];
    double *sQ = (double *)ref_smem_raw;   // [BM][QK_STRIDE]
    double *sK = sQ + BM * QK_STRIDE;      // [BN][QK_STRIDE]
    double *sV = sK + BN * QK_STRIDE;  // [BN][V_STRIDE]
    double *sExp = sV + BN * V_STRIDE; // [EXP_F64_TABLE_SIZE]
    uint16_t *stK = (uint16_t *)(sExp + EXP_F64_TABLE_SIZE);  // [BN][DMAX] bf16
    uint16_t *stV = stK + BN * DMAX;

    const int d = b.d;
    const int tid = threadIdx.x, warp = tid / REF_WARP_SIZE, lane = tid % REF_WARP_SIZE;
    const int fg = lane / REF_QUAD, fq = lane % REF_QUAD;  // fragment row g, column group q
    const int ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int j_last = min(j0 + BM, sq) - 1;  // last valid row of the block
    const int hi_last = ctx + j_last;
    const int64_t q_row0 = b.q_off[s], kv_row0 = b.kv_off[s];
    const double scale = (double)b.sm_scale;
    const int64_t kv_row_elems = (int64_t)b.hkv * d;  // elements between consecutive keys

    // Stages K and V of the tile at key t0 (keys past seq_kv zero-filled;
    // chunks past d are never read).
    auto stage_tile = [&](int t0) {
#pragma unroll
        for (int it = 0; it < BN * ROW_CHUNKS / THREADS; it++) {
            const int c = tid + THREADS * it, r = c / ROW_CHUNKS, cc = c % ROW_CHUNKS;
            if (cc * REF_CHUNK_ELEMS < d) {
                const bool ok = t0 + r < skv;
                const int64_t off = (kv_row0 + (ok ? t0 + r : 0)) * kv_row_elems +
                                    (int64_t)g * d + cc * REF_CHUNK_ELEMS;
                cp_async_16(stK + r * DMAX + cc * REF_CHUNK_ELEMS, k + off, ok ? 16 : 0);
                cp_async_16(stV + r * DMAX + cc * REF_CHUNK_ELEMS, v + off, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };
    const int t_begin = key_lo(ctx + j0, b.window) / BN * BN;
    stage_tile(t_begin);

    // Fill layout: thread tid converts dims fill_i, fill_i + 1 (a double2) of
    // rows fill_r0 + FILL_ROWS * it of each tile; dims past d are stored as 0.
    const int fill_i = (tid % ROW_VECS) * REF_FILL_VEC, fill_r0 = tid / ROW_VECS;
    const bool fill_dim = fill_i < d;

    // Q tile in fp64 times sm_scale (rows past seq_q repeat row j_last), and
    // the exp table.
#pragma unroll
    for (int it = 0; it < BM / FILL_ROWS; it++) {
        const int r = fill_r0 + FILL_ROWS * it;
        double2 x = make_double2(0.0, 0.0);
        if (fill_dim) {
            const uint32_t pair = *(const uint32_t *)(q + ((q_row0 + min(j0 + r, j_last)) * b.hq + h) *
                                                              (int64_t)d + fill_i);
            x = make_double2(bf16_bits_to_f64(pair & 0xFFFFu) * scale,
                             bf16_bits_to_f64(pair >> 16) * scale);
        }
        *(double2 *)&sQ[r * QK_STRIDE + fill_i] = x;
    }
    if (tid < EXP_F64_TABLE_SIZE) sExp[tid] = ref_exp_table[tid];

    // This lane's rows (i = 0, 1) and the warp's key range.
    const int wrow0 = warp * REF_ROWS_PER_WARP;  // first row of the warp in the block
    const bool warp_live = j0 + wrow0 <= j_last;
    const int warp_hi_first = ctx + min(j0 + wrow0, j_last);  // smallest hi of the warp's rows
    const int warp_hi = ctx + min(j0 + wrow0 + REF_ROWS_PER_WARP - 1, j_last);
    const int warp_lo = key_lo(warp_hi_first, b.window);  // smallest lo
    const int warp_lo_last = key_lo(warp_hi, b.window);   // largest lo
    int lo_r[2], hi_r[2];
    double m_r[2], l_r[2], o[DT][4];
    const bool has_sink = b.sinks != NULL;
    const double sink = has_sink ? (double)b.sinks[h] : -INFINITY;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        hi_r[i] = ctx + min(j0 + wrow0 + fg + REF_HALF_M * i, j_last);
        lo_r[i] = key_lo(hi_r[i], b.window);
        m_r[i] = sink;
        l_r[i] = (has_sink && fq == 0) ? 1.0 : 0.0;  // one lane of the quad holds the sink's 1
    }
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0;

    // Fragment bases: S's A (row g, dims 2q..) and B (key g, dims 2q..), P.V's
    // B (key 2q, dim g); the tile offsets added to them are constants.
    const double *qa = sQ + (wrow0 + fg) * QK_STRIDE + LANE_DIMS * fq;
    const double *kb = sK + fg * QK_STRIDE + LANE_DIMS * fq;
    const double *vb = sV + 2 * fq * V_STRIDE + fg;

    for (int t0 = t_begin; t0 <= hi_last; t0 += BN) {
        cp_async_wait<0>();
        __syncthreads();  // staging holds tile t0; the last tile's products are done

        // Staged bf16 -> fp64 sK, sV (dims past d are 0).
#pragma unroll
        for (int it = 0; it < BN / FILL_ROWS; it++) {
            const int c = fill_r0 + FILL_ROWS * it;
            double2 kx = make_double2(0.0, 0.0), vx = kx;
            if (fill_dim) {
                const uint32_t kp = *(const uint32_t *)&stK[c * DMAX + fill_i];
                const uint32_t vp = *(const uint32_t *)&stV[c * DMAX + fill_i];
                kx = make_double2(bf16_bits_to_f64(kp & 0xFFFFu), bf16_bits_to_f64(kp >> 16));
                vx = make_double2(bf16_bits_to_f64(vp & 0xFFFFu), bf16_bits_to_f64(vp >> 16));
            }
            *(double2 *)&sK[c * QK_STRIDE + fill_i] = kx;
            *(double2 *)&sV[c * V_STRIDE + fill_i] = vx;
        }
        __syncthreads();  // sQ and the table (first tile), sK, sV complete; staging free
        if (t0 + BN <= hi_last) stage_tile(t0 + BN);  // lands while this tile computes

        // Tiles none of the warp's rows sees change nothing; the warp still
        // meets the barriers above.
        if (!warp_live || t0 > warp_hi || t0 + BN - 1 < warp_lo) continue;
        // Every row of the warp sees every key of the tile: no mask.
        const bool whole = t0 >= warp_lo_last && t0 + BN - 1 <= warp_hi_first;

        // S = Q.K^T: acc[nt] is the 16x8 block of the warp's rows x keys 8nt...
        double acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0;
        // Unrolled by S_UNROLL only: further unrolling hoists loads into
        // spills; the DMMAs of the steps and the other warps on the SM cover
        // the loads' latency.
#pragma unroll S_UNROLL
        for (int ks = 0; ks < KSTEPS; ks++) {
            const int k0 = ks * REF_MMA_K;
            double a[4];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const double2 x = *(const double2 *)&qa[REF_HALF_M * i * QK_STRIDE + k0];
                a[i] = x.x;      // slot q:     dim k0 + 2q
                a[i + 2] = x.y;  // slot q + 4: dim k0 + 2q + 1
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const double2 x = *(const double2 *)&kb[nt * REF_MMA_N * QK_STRIDE + k0];
                const double bk[2] = {x.x, x.y};
                dmma_16x8x8(acc[nt], a, bk);
            }
        }

        // Mask (edge tiles only), then each lane's maximum per row.
        double mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    double &x = acc[nt][e + 2 * i];
                    if (!whole) {
                        const int t = t0 + nt * REF_MMA_N + 2 * fq + e;
                        if (t < lo_r[i] || t > hi_r[i]) x = -INFINITY;
                    }
                    mx[i] = fmax(mx[i], x);
                }
        // Lazy maximum: rescale only rows with a score past m + margin (and
        // rows seeing their first score: x - -inf = inf; a row seeing nothing
        // yet gives -inf - -inf = NaN, never true); the vote keeps the
        // shuffles warp-uniform. m_r is -inf only while a row has seen nothing.
        if (__any_sync(REF_FULL_MASK, mx[0] - m_r[0] > REF_RESCALE_MARGIN ||
                                          mx[1] - m_r[1] > REF_RESCALE_MARGIN)) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const double row_max = quad_max(mx[i]);
                if (row_max - m_r[i] > REF_RESCALE_MARGIN) {
                    const double alpha = exp(m_r[i] - row_max);  // 0 when m was -inf
                    l_r[i] *= alpha;
#pragma unroll
                    for (int dt = 0; dt < DT; dt++) {
                        o[dt][2 * i] *= alpha;
                        o[dt][2 * i + 1] *= alpha;
                    }
                    m_r[i] = row_max;
                }
            }
        }
        // P = exp(S - m), 0 below EXP_F64_TABLE_MIN (the CPU reference's
        // REF_EXP_FLUSH, the same -700), for masked scores (-inf) and for
        // rows that have seen nothing (m = -inf: NaN); exp_f64_table's
        // meaningless result for those is never used.
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    double &x = acc[nt][e + 2 * i];
                    const double arg = x - m_r[i];
                    const double p = exp_f64_table(arg, sExp);
                    x = arg >= EXP_F64_TABLE_MIN ? p : 0.0;
                    l_r[i] += x;
                }

        // O += P.V per key tile nt: slot q + 4j is key 8nt + 2q + j, A = its P.
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const double p[4] = {acc[nt][0], acc[nt][2], acc[nt][1], acc[nt][3]};
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                const double *vt = vb + nt * REF_MMA_N * V_STRIDE + dt * REF_MMA_N;
                const double bv[2] = {vt[0], vt[V_STRIDE]};
                dmma_16x8x8(o[dt], p, bv);
            }
        }
    }

    // out = O / l for valid rows (l >= the row max's weight > 0); a lane
    // writes dims 8dt + 2q, +1 of its rows.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const double l = quad_sum(l_r[i]);
        const int j = j0 + wrow0 + fg + REF_HALF_M * i;
        if (j < sq) {
            const double inv_l = 1.0 / l;
            double *orow = out + ((q_row0 + j) * b.hq + h) * (int64_t)d;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                const int col = dt * REF_MMA_N + 2 * fq;
                if (col < d) {
                    orow[col] = o[dt][2 * i] * inv_l;
                    orow[col + 1] = o[dt][2 * i + 1] * inv_l;
                }
            }
        }
    }
}

// Sets the kernel's dynamic smem limit and launches it.
template <int WARPS, int DMAX, int BN, int MIN_BLOCKS>
pg_status ref_launch(const cuda_batch *b, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, double *out, cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_attn_reference";
    constexpr int BM = ref_shape<WARPS>::bm;
    constexpr size_t smem = ref_smem_bytes<WARPS, DMAX, BN>();
    CUDA_TRY(what, cudaFuncSetAttribute(ref_attn_kernel<WARPS, DMAX, BN, MIN_BLOCKS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((b->max_q + BM - 1) / BM), (unsigned)b->hq, (unsigned)b->n_seqs);
    ref_attn_kernel<WARPS, DMAX, BN, MIN_BLOCKS>
        <<<grid, ref_shape<WARPS>::threads, smem, stream>>>(*b, q, k, v, out);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}

}  // namespace

// Contract (cuda_common.cuh): q bf16 [tq, hq, d], k/v bf16 [tkv, hkv, d]
// packed, out fp64 [tq, hq, d], b's arrays (seq_q, seq_kv, q_off, kv_off,
// sinks or NULL) all on the device; the batch passed attn_batch_check on the
// host (1 <= seq_q <= seq_kv) and b->max_q is the longest seq_q. d a multiple
// of 8 up to 128, else PG_ERR_SHAPE; k and v 16-byte aligned, q 4-byte
// aligned (cudaMalloc's are), else PG_ERR_SHAPE; q, k, v finite (captures are
// validated on load). Writes every out row of the batch.
// Asynchronous on stream (dynamic smem: ~58 KB for d <= 64, ~224 KB for d > 64).
extern "C" pg_status cuda_attn_reference(const cuda_batch *b, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, double *out,
                                         cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_attn_reference";
    if (b->d < 1 || b->d > REF_D_MAX || b->d % REF_D_MULTIPLE != 0)
        return pg_fail(err, PG_ERR_SHAPE, "%s: head dim %d is not a multiple of %d up to %d", what,
                       b->d, REF_D_MULTIPLE, REF_D_MAX);
    if (b->hq < 1 || b->hkv < 1 || b->hq % b->hkv != 0 || b->window < 0 || b->n_seqs < 0 ||
        b->max_q < 0)
        return pg_fail(err, PG_ERR_SHAPE, "%s: bad shape (hq %d, hkv %d, window %d, n_seqs %d)",
                       what, b->hq, b->hkv, b->window, b->n_seqs);
    if (b->hq > REF_MAX_GRID_YZ || b->n_seqs > REF_MAX_GRID_YZ)
        return pg_fail(err, PG_ERR_SHAPE, "%s: %d heads or %d sequences exceed %d", what, b->hq,
                       b->n_seqs, REF_MAX_GRID_YZ);
    if ((uintptr_t)k % REF_KV_ALIGN != 0 || (uintptr_t)v % REF_KV_ALIGN != 0 ||
        (uintptr_t)q % REF_Q_ALIGN != 0)
        return pg_fail(err, PG_ERR_SHAPE, "%s: k and v must be %d-byte aligned and q %d-byte", what,
                       REF_KV_ALIGN, REF_Q_ALIGN);
    if (b->n_seqs == 0 || b->max_q == 0) return PG_OK;
    if (b->d <= REF_D_SMALL)
        return ref_launch<REF_WARPS_SMALL_D, REF_D_SMALL, REF_BN_SMALL_D, REF_BLOCKS_SMALL_D>(
            b, q, k, v, out, stream, err);
    return ref_launch<REF_WARPS_LARGE_D, REF_D_MAX, REF_BN_LARGE_D, REF_BLOCKS_LARGE_D>(
        b, q, k, v, out, stream, err);
}
