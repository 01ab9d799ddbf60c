// cuda_attn_reference.cu: the fp64 reference attention on the GPU, held to
// the CPU reference (kernels/attn_reference.c) within relative L2 1e-12.
//
// FlashAttention-style, fp64 on Hopper's fp64 tensor cores (DMMA, PTX
// mma.sync m16n8k8 .f64). A pre-pass (ref_kv_f64_kernel) converts the
// layer's K and V to fp64 once, into per-head tiles padded to whole key
// tiles; the attention kernel then streams those fp64 tiles into shared
// memory by cp.async, double-buffered (tile t+1 lands while tile t is
// computed, one barrier per tile). Converting bf16 in every block instead
// (each K/V element once per query block and head) was 43% of the kernel's
// instructions (Nsight Compute, H200, 2026-12-03). One block = BM query rows
// of one query head of one sequence. Softmax with a lazy maximum:
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
// Keys per tile (BN, a multiple of REF_MMA_N): 16, which for d <= 64 with
// ~160 registers lets 3 blocks (12 warps) share an SM: 328 ms against 350 ms
// with 32 keys and 2 blocks on the 36-layer benchmark (H200, 2026-12-02);
// for d <= 128 it keeps the double-buffered tiles inside shared memory.
#define REF_BN 16
// Shared layouts (doubles), each chosen so that a lane's fragment is one or
// two 16-byte loads straight into the DMMA's operand registers, with the 8
// lanes of each quarter-warp phase on distinct 16-byte bank groups:
//  sQ (S's A): per warp and g = row % 8, one row of DMAX dims x 2 rows (g,
//    g + 8) interleaved, so dims 2q, 2q+1 of both rows (a[0..3]) are 32
//    contiguous bytes; row stride 2 DMAX + 2 (= 16 B mod 128 B).
//  sK (S's B): [key][DMAX], stride DMAX + 8 (= 64 B mod 128 B); dims 2q, 2q+1
//    of key g are b[0..1].
//  sV (P.V's B): [key pair][DMAX][2], keys 2p and 2p+1 of each dim side by
//    side, so b[0..1] (keys 2q, 2q+1 of dim g) are 16 contiguous bytes; pair
//    stride 2 DMAX + 4 (= 32 B mod 128 B).
// (Loading A as two double2 of one row each and permuting them cost 12 moves
// per two DMMAs, a third of the S loop's instructions.)
#define REF_Q_PAD 2
#define REF_K_PAD 8
#define REF_V_PAD 4
// Doubles per 16-byte cp.async chunk.
#define REF_CHUNK_DOUBLES 2
// Threads per block of the K/V pre-pass, and dims each thread converts.
#define REF_KV_THREADS 256
#define REF_KV_DIMS 2
// Keys side by side in sV's (and vf's) layout.
#define REF_KEYS_PER_PAIR 2
// The lazy maximum: a row's m moves only when a score exceeds it by more than
// this, so P = exp(S - m) <= e^256 ~ 1.5e111, and l, O (at most 2^31 keys
// times |v| <= 3.4e38, bf16's largest) stay below 1e160, inside fp64's
// 1.8e308 with room to spare.
#define REF_RESCALE_MARGIN 256.0
// Head-dim templates and their block shapes: warps per block, and the
// resident blocks per SM that __launch_bounds__ holds the registers to
// (smem: 67.5 KiB x 3 for d <= 64, 196 KiB x 1 for d <= 128; the limit is 227).
#define REF_D_SMALL 64
#define REF_D_MAX 128
#define REF_WARPS_SMALL_D 4
#define REF_WARPS_LARGE_D 8
#define REF_BLOCKS_SMALL_D 3
#define REF_BLOCKS_LARGE_D 1
// Head dims must be a multiple of this (bf16 pairs of 4 bytes: q's loads).
#define REF_D_MULTIPLE 8
// Alignment (bytes) of q, k and v (read as bf16 pairs); rows keep it since
// d % 8 == 0.
#define REF_QKV_ALIGN 4
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

// Shared-memory strides and sizes (doubles) of ref_attn_kernel<WARPS, DMAX>
// (the layouts: REF_Q_PAD's comment); K and V have two buffers each.
template <int WARPS, int DMAX>
struct ref_smem {
    static constexpr int q_stride = 2 * DMAX + REF_Q_PAD;  // per (warp, row % 8)
    static constexpr int k_stride = DMAX + REF_K_PAD;      // per key
    static constexpr int v_stride = 2 * DMAX + REF_V_PAD;  // per key pair
    static constexpr int q_doubles = WARPS * REF_HALF_M * q_stride;
    static constexpr int k_doubles = REF_BN * k_stride;      // one buffer
    static constexpr int v_doubles = REF_BN / 2 * v_stride;  // one buffer
    static constexpr size_t bytes =
        sizeof(double) * ((size_t)q_doubles + 2 * (size_t)(k_doubles + v_doubles) +
                          EXP_F64_TABLE_SIZE);
};

// The fp64 K/V a layer's reference reads (written by ref_kv_f64_kernel):
// kf [hkv][tp][DMAX] and vf [hkv][tp / 2][DMAX][2] (keys 2p, 2p + 1 of each
// dim side by side, sV's layout), where sequence s's key t is padded row
// kvp_off[s] + t; each sequence's rows are padded with zeros to a multiple of
// REF_BN (so every key tile is whole and starts at an even row), and dims
// d .. DMAX - 1 are zero.
struct ref_kv {
    const int64_t *kvp_off;  // [n_seqs]
    int64_t tp;              // padded rows per head (>= the last sequence's end)
    double *kf, *vf;
};

// Padded rows per head for a batch: at least each sequence rounded up to
// REF_BN, itself a multiple of REF_BN.
__host__ __device__ inline int64_t ref_kv_rows(int64_t tkv, int n_seqs)
{
    return (tkv + (int64_t)n_seqs * (REF_BN - 1) + REF_BN - 1) / REF_BN * REF_BN;
}

// Bytes of each of ref_kv's kf and vf for a batch, at head-dim template DMAX.
inline size_t ref_kv_bytes(int64_t tkv, int n_seqs, int hkv, int dmax)
{
    return (size_t)ref_kv_rows(tkv, n_seqs) * (size_t)hkv * (size_t)dmax * sizeof(double);
}

// Bytes of the reference's scratch: kf, vf, then kvp_off.
inline size_t ref_scratch_bytes(int64_t tkv, int n_seqs, int hkv, int dmax)
{
    return 2 * ref_kv_bytes(tkv, n_seqs, hkv, dmax) + (size_t)n_seqs * sizeof(int64_t);
}

// <<<1, 1>>>: kvp_off[s] = sum over s' < s of seq_kv[s'] rounded up to
// REF_BN. Sequential: a batch's sequences number at most 65,535 (grid z),
// microseconds for the hundreds a capture holds.
__global__ void ref_kv_offsets_kernel(const int32_t *__restrict__ seq_kv, int n_seqs,
                                      int64_t *__restrict__ kvp_off)
{
    int64_t o = 0;
    for (int s = 0; s < n_seqs; s++) {
        kvp_off[s] = o;
        o += (seq_kv[s] + REF_BN - 1) / REF_BN * REF_BN;
    }
}

// grid (ceil(rows * DMAX / 2 / REF_KV_THREADS), hkv, n_seqs), REF_KV_THREADS
// threads, rows = max_kv rounded up to REF_BN: converts sequence s's K and V
// of kv head g (bf16, packed [tkv, hkv, d]) into kv's padded fp64 layout, two
// dims per thread, zeros past seq_kv and past d.
template <int DMAX>
__global__ void __launch_bounds__(REF_KV_THREADS)
ref_kv_f64_kernel(const cuda_batch b, const uint16_t *__restrict__ k,
                  const uint16_t *__restrict__ v, const ref_kv kv)
{
    constexpr int PAIRS = DMAX / REF_KV_DIMS;
    const int s = blockIdx.z, g = blockIdx.y;
    const int skv = b.seq_kv[s];
    const int rows = (skv + REF_BN - 1) / REF_BN * REF_BN;
    const int64_t i = (int64_t)blockIdx.x * REF_KV_THREADS + threadIdx.x;
    if (i >= (int64_t)rows * PAIRS) return;
    const int t = (int)(i / PAIRS), dim = (int)(i % PAIRS) * REF_KV_DIMS;
    double k0 = 0.0, k1 = 0.0, v0 = 0.0, v1 = 0.0;
    if (t < skv && dim < b.d) {
        const int64_t off = ((b.kv_off[s] + t) * b.hkv + g) * (int64_t)b.d + dim;
        const uint32_t kp = *(const uint32_t *)(k + off), vp = *(const uint32_t *)(v + off);
        k0 = bf16_bits_to_f64(kp & 0xFFFFu);
        k1 = bf16_bits_to_f64(kp >> 16);
        v0 = bf16_bits_to_f64(vp & 0xFFFFu);
        v1 = bf16_bits_to_f64(vp >> 16);
    }
    const int64_t r = kv.kvp_off[s] + t;  // padded row
    *(double2 *)(kv.kf + ((int64_t)g * kv.tp + r) * DMAX + dim) = make_double2(k0, k1);
    double *vd = kv.vf + ((int64_t)g * kv.tp + (r & ~(int64_t)1)) * DMAX + 2 * dim + (r & 1);
    vd[0] = v0;
    vd[REF_KEYS_PER_PAIR] = v1;  // dim + 1
}

// attn_grid's grid for BM, WARPS * 32 threads, ref_smem<WARPS, DMAX>::bytes
// dynamic smem, BM = 16 * WARPS. Block (h, s, qb) (attn_block_of): query rows
// j0 = qb*BM .. of head h in sequence s (a block with j0 >= seq_q[s] exits at
// once). d <= DMAX, d % 8 == 0; kv holds the layer's K/V in fp64.
// Shared memory (fp64, the layouts of REF_Q_PAD's comment): sQ (times
// sm_scale), two buffers each of sK [REF_BN keys] and sV [REF_BN / 2 key
// pairs], copied whole from kv by cp.async (padded rows and dims are 0, so
// every product runs over DMAX dims and whole tiles with no branch), and the
// exp table. Rows past seq_q repeat the last valid row (same keys, finite)
// and are not written.
// Warp w owns rows 16w .. 16w+15, one m16 tile; lane (g = lane / 4, q = lane
// % 4) holds rows 16w + g + 8i (i = 0, 1), in S keys 8nt + 2q + e of each n8
// key tile nt, in O dims 8dt + 2q + e (e = 0, 1; accumulator element e + 2i).
// A 16x8x8 product sums over its 8 k slots in any order, so each product
// chooses what slot q + 4j stands for:
//   S = Q.K^T, k step k0: dim k0 + 2q + j;
//   O += P.V, key tile nt: key 8nt + 2q + j, whose P the lane already holds
//   in its S accumulators (element j + 2i), so P never moves; B = V[8nt + 2q
//   + j][8dt + g].
// l is kept per lane (its keys of the row) and summed over the quad at the
// end; m is the same in the four lanes of a row.
// A warp skips the tiles none of its rows sees (identical to processing them:
// P = 0) and every tile when all its rows are past seq_q; tiles every row of
// the warp sees in full skip the mask.
template <int WARPS, int DMAX, int MIN_BLOCKS>
__global__ void __launch_bounds__(ref_shape<WARPS>::threads, MIN_BLOCKS)
ref_attn_kernel(const cuda_batch b, const uint16_t *__restrict__ q, const ref_kv kv,
                double *__restrict__ out)
{
    using SM = ref_smem<WARPS, DMAX>;
    constexpr int THREADS = ref_shape<WARPS>::threads;
    constexpr int BM = ref_shape<WARPS>::bm;
    constexpr int BN = REF_BN;
    constexpr int KSTEPS = DMAX / REF_MMA_K;       // k8 steps of S = Q.K^T
    constexpr int DT = DMAX / REF_MMA_N;           // n8 dim tiles of O
    constexpr int NT = BN / REF_MMA_N;             // n8 key tiles per tile
    constexpr int TILE_CHUNKS = BN * DMAX / REF_CHUNK_DOUBLES;  // cp.async chunks of a K (or V) tile
    constexpr int Q_PAIRS = DMAX / 2;              // bf16 pairs per Q row
    // k steps of S unrolled: 2 for d <= 64 (still 3 blocks per SM), 1 for
    // d <= 128 (at 255 registers already).
    constexpr int S_UNROLL = DMAX <= REF_D_SMALL ? 2 : 1;
    static_assert(DMAX % REF_MMA_K == 0 && DMAX % REF_MMA_N == 0 && BN % REF_MMA_N == 0,
                  "tiling");
    static_assert(TILE_CHUNKS % THREADS == 0 && BM * Q_PAIRS % THREADS == 0,
                  "copy loops have a fixed trip count");
    static_assert(REF_MMA_N == 2 * REF_QUAD && REF_MMA_K == 2 * REF_QUAD &&
                      REF_MMA_M == 2 * REF_HALF_M,
                  "fragment layout of dmma_16x8x8");

    const attn_block blk = attn_block_of(b.hq);
    const int s = blk.s, h = blk.h;
    const int sq = b.seq_q[s], skv = b.seq_kv[s];
    const int j0 = blk.qb * BM;
    if (j0 >= sq) return;  // whole block, before any barrier

    extern __shared__ __align__(16) unsigned char ref_smem_raw[];
    double *sQ = (double *)ref_smem_raw;   // [WARPS * 8][q_stride]
    double *sK = sQ + SM::q_doubles;       // [2][BN][k_stride]
    double *sV = sK + 2 * SM::k_doubles;   // [2][BN / 2][v_stride]
    double *sExp = sV + 2 * SM::v_doubles; // [EXP_F64_TABLE_SIZE]

    const int d = b.d;
    const int tid = threadIdx.x, warp = tid / REF_WARP_SIZE, lane = tid % REF_WARP_SIZE;
    const int fg = lane / REF_QUAD, fq = lane % REF_QUAD;  // fragment row g, column group q
    const int ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int j_last = min(j0 + BM, sq) - 1;  // last valid row of the block
    const int hi_last = ctx + j_last;
    const int64_t q_row0 = b.q_off[s];
    const double scale = (double)b.sm_scale;

    // Sequence s's key 0 of kv head g in kf and vf (same offset: a key pair
    // of vf spans two rows' doubles).
    const int64_t kv0 = ((int64_t)g * kv.tp + kv.kvp_off[s]) * DMAX;
    // Copies the K and V tile at key t0 (whole: rows are padded) into buffer buf.
    auto stage_tile = [&](int t0, int buf) {
        double *dk = sK + buf * SM::k_doubles, *dv = sV + buf * SM::v_doubles;
        const double *srck = kv.kf + kv0 + (int64_t)t0 * DMAX;
        const double *srcv = kv.vf + kv0 + (int64_t)t0 * DMAX;
#pragma unroll
        for (int it = 0; it < TILE_CHUNKS / THREADS; it++) {
            const int c = tid + THREADS * it;
            constexpr int K_ROW_CHUNKS = DMAX / REF_CHUNK_DOUBLES;       // per key
            constexpr int V_ROW_CHUNKS = 2 * DMAX / REF_CHUNK_DOUBLES;   // per key pair
            cp_async_16(dk + c / K_ROW_CHUNKS * SM::k_stride + c % K_ROW_CHUNKS * REF_CHUNK_DOUBLES,
                        srck + c * REF_CHUNK_DOUBLES, 16);
            cp_async_16(dv + c / V_ROW_CHUNKS * SM::v_stride + c % V_ROW_CHUNKS * REF_CHUNK_DOUBLES,
                        srcv + c * REF_CHUNK_DOUBLES, 16);
        }
        cp_async_commit();
    };
    const int t_begin = key_lo(ctx + j0, b.window) / BN * BN;
    stage_tile(t_begin, 0);

    // Q tile in fp64 times sm_scale, in sQ's layout (rows past seq_q repeat
    // row j_last; dims past d are 0), and the exp table.
#pragma unroll 4
    for (int it = 0; it < BM * Q_PAIRS / THREADS; it++) {
        const int c = tid + THREADS * it;
        const int r = c / Q_PAIRS, dim = c % Q_PAIRS * 2;
        double x0 = 0.0, x1 = 0.0;
        if (dim < d) {
            const uint32_t pair = *(const uint32_t *)(q + ((q_row0 + min(j0 + r, j_last)) * b.hq + h) *
                                                              (int64_t)d + dim);
            x0 = bf16_bits_to_f64(pair & 0xFFFFu) * scale;
            x1 = bf16_bits_to_f64(pair >> 16) * scale;
        }
        const int r16 = r % REF_MMA_M;
        double *dst = sQ + (r / REF_MMA_M * REF_HALF_M + r16 % REF_HALF_M) * SM::q_stride + 2 * dim +
                      r16 / REF_HALF_M;
        dst[0] = x0;
        dst[2] = x1;
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

    // Fragment bases: S's A (rows g, g + 8 at dims 2q, 2q + 1: a[0..3]), S's
    // B (key g, dims 2q, 2q + 1) and P.V's B (keys 2q, 2q + 1 of dim g) in
    // buffer 0; the tile offsets added to them are constants.
    const double *qa = sQ + (warp * REF_HALF_M + fg) * SM::q_stride + 2 * 2 * fq;
    const double *kb0 = sK + fg * SM::k_stride + 2 * fq;
    const double *vb0 = sV + fq * SM::v_stride + 2 * fg;

    int buf = 0;
    for (int t0 = t_begin; t0 <= hi_last; t0 += BN, buf ^= 1) {
        cp_async_wait<0>();
        // Tile t0 is in buffer buf for every thread; every warp is done with
        // the other buffer (the tile before), which the next copy reuses.
        // (The first pass also publishes sQ and the table.)
        __syncthreads();
        if (t0 + BN <= hi_last) stage_tile(t0 + BN, buf ^ 1);  // lands while this tile computes

        // Tiles none of the warp's rows sees change nothing; the warp still
        // meets the barrier above.
        if (!warp_live || t0 > warp_hi || t0 + BN - 1 < warp_lo) continue;
        // Every row of the warp sees every key of the tile: no mask.
        const bool whole = t0 >= warp_lo_last && t0 + BN - 1 <= warp_hi_first;
        const double *kb = kb0 + buf * SM::k_doubles;
        const double *vb = vb0 + buf * SM::v_doubles;

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
            const double2 x = *(const double2 *)&qa[2 * k0];
            const double2 y = *(const double2 *)&qa[2 * k0 + 2];
            const double a[4] = {x.x, x.y, y.x, y.y};
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const double2 z = *(const double2 *)&kb[nt * REF_MMA_N * SM::k_stride + k0];
                const double bk[2] = {z.x, z.y};
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
                const double2 z =
                    *(const double2 *)&vb[nt * REF_MMA_N / 2 * SM::v_stride + 2 * dt * REF_MMA_N];
                const double bv[2] = {z.x, z.y};
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

// Converts the layer's K/V into kv's padded fp64 layout (ref_kv), then
// launches the attention kernel; scratch is stream-ordered and freed after it.
template <int WARPS, int DMAX, int MIN_BLOCKS>
pg_status ref_launch(const cuda_batch *b, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, double *out, cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_attn_reference";
    constexpr int BM = ref_shape<WARPS>::bm;
    constexpr size_t smem = ref_smem<WARPS, DMAX>::bytes;
    dim3 grid;  // also bounds n_seqs, the pre-pass's gridDim.z
    const pg_status gst = attn_grid(b, BM, what, &grid, err);
    if (gst != PG_OK) return gst;
    const int64_t tp = ref_kv_rows(b->tkv, b->n_seqs);
    const size_t kv_bytes = ref_kv_bytes(b->tkv, b->n_seqs, b->hkv, DMAX);  // kf, vf each
    unsigned char *scratch = nullptr;
    const size_t scratch_bytes = ref_scratch_bytes(b->tkv, b->n_seqs, b->hkv, DMAX);
    const cudaError_t mrc = cudaMallocAsync((void **)&scratch, scratch_bytes, stream);
    if (mrc != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: later calls see their own errors
        return pg_fail(err, mrc == cudaErrorMemoryAllocation ? PG_ERR_NOMEM : PG_ERR_DEVICE,
                       "%s: cannot allocate %.1f MiB for the fp64 K/V: %s", what,
                       (double)scratch_bytes / (1 << 20), cudaGetErrorString(mrc));
    }
    ref_kv kv;
    kv.kf = (double *)scratch;
    kv.vf = (double *)(scratch + kv_bytes);
    kv.kvp_off = (const int64_t *)(scratch + 2 * kv_bytes);
    kv.tp = tp;
    // Launch errors are checked after the scratch is given back.
    cudaError_t rc = cudaFuncSetAttribute(ref_attn_kernel<WARPS, DMAX, MIN_BLOCKS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc == cudaSuccess) {
        ref_kv_offsets_kernel<<<1, 1, 0, stream>>>(b->seq_kv, b->n_seqs, (int64_t *)kv.kvp_off);
        const int64_t rows = (int64_t)(b->max_kv + REF_BN - 1) / REF_BN * REF_BN;
        const int64_t threads = rows * (DMAX / REF_KV_DIMS);
        const dim3 kv_grid((unsigned)((threads + REF_KV_THREADS - 1) / REF_KV_THREADS),
                           (unsigned)b->hkv, (unsigned)b->n_seqs);
        ref_kv_f64_kernel<DMAX><<<kv_grid, REF_KV_THREADS, 0, stream>>>(*b, k, v, kv);
        ref_attn_kernel<WARPS, DMAX, MIN_BLOCKS>
            <<<grid, ref_shape<WARPS>::threads, smem, stream>>>(*b, q, kv, out);
        rc = cudaGetLastError();
    }
    const cudaError_t frc = cudaFreeAsync(scratch, stream);
    CUDA_TRY(what, rc);  // the launch's error first: a failed free follows from it
    CUDA_TRY(what, frc);
    return PG_OK;
}

}  // namespace

// Contract (cuda_common.cuh).
extern "C" double cuda_attn_reference_scratch(int64_t tkv, int n_seqs, int hkv, int d)
{
    // The head-dim template cuda_attn_reference picks for d.
    return (double)ref_scratch_bytes(tkv, n_seqs, hkv, d <= REF_D_SMALL ? REF_D_SMALL : REF_D_MAX);
}

// Contract (cuda_common.cuh): q bf16 [tq, hq, d], k/v bf16 [tkv, hkv, d]
// packed, out fp64 [tq, hq, d], b's arrays (seq_q, seq_kv, q_off, kv_off,
// sinks or NULL) all on the device; the batch passed attn_batch_check on the
// host (1 <= seq_q <= seq_kv), b->max_q and b->max_kv are the longest seq_q
// and seq_kv and b->tkv the sum of seq_kv (dev_batch_make's). d a multiple
// of 8 up to 128, else PG_ERR_SHAPE; q, k and v 4-byte aligned (cudaMalloc's
// are), else PG_ERR_SHAPE; q, k, v finite (captures are validated on load).
// Writes every out row of the batch. Asynchronous on stream; allocates
// stream-ordered scratch of 16 bytes per kv element (d rounded up to 64 or
// 128, each sequence's keys to 16) for the fp64 K/V, freed on the stream
// (dynamic smem: 67.5 KiB for d <= 64, 196 KiB for d > 64).
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
    if (b->hkv > CUDA_MAX_GRID_YZ)
        return pg_fail(err, PG_ERR_SHAPE, "%s: %d kv heads exceed %d", what, b->hkv,
                       CUDA_MAX_GRID_YZ);
    if ((uintptr_t)k % REF_QKV_ALIGN != 0 || (uintptr_t)v % REF_QKV_ALIGN != 0 ||
        (uintptr_t)q % REF_QKV_ALIGN != 0)
        return pg_fail(err, PG_ERR_SHAPE, "%s: q, k and v must be %d-byte aligned", what,
                       REF_QKV_ALIGN);
    if (b->n_seqs == 0 || b->max_q == 0) return PG_OK;
    if (b->d <= REF_D_SMALL)
        return ref_launch<REF_WARPS_SMALL_D, REF_D_SMALL, REF_BLOCKS_SMALL_D>(b, q, k, v, out,
                                                                             stream, err);
    return ref_launch<REF_WARPS_LARGE_D, REF_D_MAX, REF_BLOCKS_LARGE_D>(b, q, k, v, out, stream,
                                                                         err);
}
