// cuda_attn_reference.cu: the fp64 reference attention on the GPU, held to
// the CPU reference (kernels/attn_reference.c) within relative L2 1e-12.
//
// FlashAttention-style, fp64 SIMT. One block = REF_BM query rows of one query
// head of one sequence; key tiles of REF_BN keys stream through shared memory
// with an online softmax:
//   S = (sum_d q.k in fp64, fma) * (double)sm_scale, masked to [lo_r, hi_r];
//   m_new = max(m, tile max), alpha = exp(m - m_new),
//   l = l*alpha + sum exp(S - m_new), O = O*alpha + P.V;   out = O * (1 / l).
// A sink is an initial logit: m = sink, l = 1 (= exp(sink - m)), O = 0;
// without sinks m = -inf, l = 0. exp(-inf - -inf) is never evaluated: while
// m_new is -inf, alpha = 1 and P = 0.
// The only differences from the CPU reference are the order of the fp64 sums
// and the exponential (CUDA's exp, <= 1 ulp, vs the CPU's < 2 ulp): relative
// error ~1e-15, far inside 1e-12.
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

// Declares the launchers (extern "C") defined here.
#include "cuda_common.cuh"

// Thread block: REF_TY rows x REF_TX lanes; threadIdx.x = ty * REF_TX + tx, so
// the REF_TX lanes of a row are one half-warp.
#define REF_TX 16
#define REF_TY 16
#define REF_THREADS (REF_TX * REF_TY)
#define REF_FULL_MASK 0xFFFFFFFFu
// Keys per tile.
#define REF_BN 64
// Row stride (doubles) of the transposed key tile Kt[d][REF_BN + 1]: the pad
// makes the transposing stores (consecutive threads -> consecutive d) hit
// distinct banks; reads along a row stay conflict-free.
#define REF_KT_STRIDE (REF_BN + 1)
// Query rows per block for d <= 64 and for 64 < d <= 128.
#define REF_BM_SMALL_D 128
#define REF_BM_LARGE_D 64
#define REF_D_SMALL 64
#define REF_D_MAX 128
// Head dims must be a multiple of this.
#define REF_D_MULTIPLE 8
// Largest gridDim.y / gridDim.z (CUDA limit).
#define REF_MAX_GRID_YZ 65535

namespace {  // kernels and helpers are private to this file

__device__ __forceinline__ double bf16_bits_to_f64(uint16_t h)
{
    return (double)__uint_as_float((uint32_t)h << 16);
}

// Lowest key of the query whose highest key is hi (attn_layout.h).
__device__ __forceinline__ int key_lo(int hi, int window)
{
    return (window > 0 && hi - window + 1 > 0) ? hi - window + 1 : 0;
}

__device__ __forceinline__ double halfwarp_max(double x)
{
#pragma unroll
    for (int off = 1; off < REF_TX; off <<= 1) x = fmax(x, __shfl_xor_sync(REF_FULL_MASK, x, off));
    return x;
}

__device__ __forceinline__ double halfwarp_sum(double x)
{
#pragma unroll
    for (int off = 1; off < REF_TX; off <<= 1) x += __shfl_xor_sync(REF_FULL_MASK, x, off);
    return x;
}

// Dynamic shared memory (bytes) of ref_attn_kernel<BM> for head dim d.
size_t ref_smem_bytes(int bm, int d)
{
    return sizeof(double) * ((size_t)bm * d + (size_t)d * REF_KT_STRIDE + (size_t)REF_BN * d +
                             (size_t)bm * REF_BN);
}

// grid (ceil(max_q / BM), hq, n_seqs), REF_THREADS threads, ref_smem_bytes(BM,
// d) dynamic smem. Block (x, h, s): query rows j0 = x*BM .. of head h in
// sequence s (a block with j0 >= seq_q[s] exits at once). d <= DMAX, d % 8 ==
// 0. Thread (ty, tx) owns rows ty + 16i (i < BM/16); keys tx + 16j of each
// tile (j < BN/16) for S, dims tx + 16j (j < DMAX/16, < d) for O. Rows past
// seq_q repeat the last valid row (same keys, finite) and are not written.
// K/V rows come straight from the packed tensors at kv_off[s] + t; keys past
// seq_kv are zero in smem (their weight is 0 and 0 * 0 stays 0).
template <int BM, int DMAX>
__global__ void __launch_bounds__(REF_THREADS)
ref_attn_kernel(const cuda_batch b, const uint16_t *__restrict__ q,
                const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                double *__restrict__ out)
{
    constexpr int RI = BM / REF_TY;      // rows per thread
    constexpr int KJ = REF_BN / REF_TX;  // keys per thread per tile
    constexpr int DJ = DMAX / REF_TX;    // output dims per thread
    static_assert(BM % REF_TY == 0 && REF_BN % REF_TX == 0 && DMAX % REF_TX == 0, "tiling");

    const int s = blockIdx.z, h = blockIdx.y;
    const int sq = b.seq_q[s], skv = b.seq_kv[s];
    const int j0 = blockIdx.x * BM;
    if (j0 >= sq) return;  // whole block, before any barrier

    extern __shared__ __align__(16) unsigned char ref_smem_raw[];
    const int d = b.d;
    double *sQ = (double *)ref_smem_raw;   // [BM][d]
    double *sKt = sQ + BM * d;             // [d][REF_KT_STRIDE]
    double *sV = sKt + d * REF_KT_STRIDE;  // [REF_BN][d]
    double *sP = sV + REF_BN * d;          // [BM][REF_BN]

    const int tid = threadIdx.x, tx = tid % REF_TX, ty = tid / REF_TX;
    const int ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int j_last = min(j0 + BM, sq) - 1;  // last valid row of the block
    const int hi_last = ctx + j_last;
    const int64_t q_row0 = b.q_off[s], kv_row0 = b.kv_off[s];
    const double scale = (double)b.sm_scale;

    // Q tile in fp64 (rows past seq_q repeat row j_last).
    for (int idx = tid; idx < BM * d; idx += REF_THREADS) {
        const int r = idx / d, i = idx - r * d;
        const int j = min(j0 + r, j_last);
        sQ[idx] = bf16_bits_to_f64(q[((q_row0 + j) * b.hq + h) * (int64_t)d + i]);
    }

    int lo_r[RI], hi_r[RI];
    double m_r[RI], l_r[RI], o[RI][DJ];
    const bool has_sink = b.sinks != NULL;
    const double sink = has_sink ? (double)b.sinks[h] : -INFINITY;
#pragma unroll
    for (int i = 0; i < RI; i++) {
        hi_r[i] = ctx + min(j0 + ty + REF_TY * i, j_last);
        lo_r[i] = key_lo(hi_r[i], b.window);
        m_r[i] = sink;
        l_r[i] = has_sink ? 1.0 : 0.0;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++) o[i][jj] = 0.0;
    }

    const int t_begin = key_lo(ctx + j0, b.window) / REF_BN * REF_BN;
    for (int t0 = t_begin; t0 <= hi_last; t0 += REF_BN) {
        __syncthreads();  // previous tile's P.V is done with sV and sP

        // K (transposed) and V tiles in fp64; keys past seq_kv are 0.
        for (int idx = tid; idx < REF_BN * d; idx += REF_THREADS) {
            const int c = idx / d, i = idx - c * d;
            const int t = t0 + c;
            double kx = 0.0, vx = 0.0;
            if (t < skv) {
                const int64_t off = ((kv_row0 + t) * b.hkv + g) * (int64_t)d + i;
                kx = bf16_bits_to_f64(k[off]);
                vx = bf16_bits_to_f64(v[off]);
            }
            sKt[i * REF_KT_STRIDE + c] = kx;
            sV[c * d + i] = vx;
        }
        __syncthreads();  // sQ (first tile), sKt, sV complete

        // S = Q.K^T for rows ty + 16i, keys tx + 16j.
        double acc[RI][KJ];
#pragma unroll
        for (int i = 0; i < RI; i++)
#pragma unroll
            for (int j = 0; j < KJ; j++) acc[i][j] = 0.0;
        for (int kk = 0; kk < d; kk++) {
            double kr[KJ];
#pragma unroll
            for (int j = 0; j < KJ; j++) kr[j] = sKt[kk * REF_KT_STRIDE + tx + REF_TX * j];
#pragma unroll
            for (int i = 0; i < RI; i++) {
                const double qv = sQ[(ty + REF_TY * i) * d + kk];
#pragma unroll
                for (int j = 0; j < KJ; j++) acc[i][j] = fma(qv, kr[j], acc[i][j]);
            }
        }

        // Online softmax; every lane of a row runs the shuffles.
#pragma unroll
        for (int i = 0; i < RI; i++) {
            double mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < KJ; j++) {
                const int t = t0 + tx + REF_TX * j;
                acc[i][j] = (t >= lo_r[i] && t <= hi_r[i]) ? acc[i][j] * scale : -INFINITY;
                mx = fmax(mx, acc[i][j]);
            }
            const double m_new = fmax(m_r[i], halfwarp_max(mx));
            const bool none = (m_new == -INFINITY);  // nothing seen yet
            const double alpha = none ? 1.0 : exp(m_r[i] - m_new);
            double sum = 0.0;
#pragma unroll
            for (int j = 0; j < KJ; j++) {
                const double p = none ? 0.0 : exp(acc[i][j] - m_new);
                sP[(ty + REF_TY * i) * REF_BN + tx + REF_TX * j] = p;
                sum += p;
            }
            l_r[i] = l_r[i] * alpha + halfwarp_sum(sum);
            m_r[i] = m_new;
#pragma unroll
            for (int jj = 0; jj < DJ; jj++) o[i][jj] *= alpha;
        }
        __syncthreads();  // sP complete

        // O += P.V for rows ty + 16i, dims tx + 16j.
        for (int c = 0; c < REF_BN; c++) {
            double p[RI];
#pragma unroll
            for (int i = 0; i < RI; i++) p[i] = sP[(ty + REF_TY * i) * REF_BN + c];
#pragma unroll
            for (int jj = 0; jj < DJ; jj++) {
                const int col = tx + REF_TX * jj;
                if (col < d) {
                    const double vv = sV[c * d + col];
#pragma unroll
                    for (int i = 0; i < RI; i++) o[i][jj] = fma(p[i], vv, o[i][jj]);
                }
            }
        }
    }

    // out = O / l for valid rows (l >= the row max's weight 1 > 0).
#pragma unroll
    for (int i = 0; i < RI; i++) {
        const int j = j0 + ty + REF_TY * i;
        if (j < sq) {
            const double inv_l = 1.0 / l_r[i];
            double *orow = out + ((q_row0 + j) * b.hq + h) * (int64_t)d;
#pragma unroll
            for (int jj = 0; jj < DJ; jj++) {
                const int col = tx + REF_TX * jj;
                if (col < d) orow[col] = o[i][jj] * inv_l;
            }
        }
    }
}

// Sets the kernel's dynamic smem limit and launches it.
template <int BM, int DMAX>
pg_status ref_launch(const cuda_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, double *out, cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_attn_reference";
    const size_t smem = ref_smem_bytes(BM, b->d);
    CUDA_TRY(what, cudaFuncSetAttribute(ref_attn_kernel<BM, DMAX>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((b->max_q + BM - 1) / BM), (unsigned)b->hq, (unsigned)b->n_seqs);
    ref_attn_kernel<BM, DMAX><<<grid, REF_THREADS, smem, stream>>>(*b, q, k, v, out);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}

}  // namespace

// Contract (cuda_common.cuh): q bf16 [tq, hq, d], k/v bf16 [tkv, hkv, d]
// packed, out fp64 [tq, hq, d], b's arrays (seq_q, seq_kv, q_off, kv_off,
// sinks or NULL) all on the device; the batch passed attn_batch_check on the
// host (1 <= seq_q <= seq_kv) and b->max_q is the longest seq_q. d a multiple
// of 8 up to 128, else PG_ERR_SHAPE. Writes every out row of the batch.
// Asynchronous on stream (dynamic smem: ~193 KB for d <= 64, ~225 KB for d = 128).
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
    if (b->n_seqs == 0 || b->max_q == 0) return PG_OK;
    if (b->d <= REF_D_SMALL)
        return ref_launch<REF_BM_SMALL_D, REF_D_SMALL>(b, q, k, v, out, stream, err);
    return ref_launch<REF_BM_LARGE_D, REF_D_MAX>(b, q, k, v, out, stream, err);
}
