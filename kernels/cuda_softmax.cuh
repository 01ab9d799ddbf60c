// cuda_softmax.cuh: the online softmax both tensor-core attention kernels
// (cuda_attn_bf16.cu, cuda_attn_fp8.cu) run on their fp32 score accumulators.
//
// Layout (mma m16n8 accumulators): a thread holds rows row0 and row0 + 8 of its
// 16-row tile; sc[nt][e] is key n0 + 8 nt + 2 (lane % 4) + (e & 1) of row
// row0 + 8 (e / 2). The 4 lanes of a quad share rows. Scores are kept in log2
// units (S * scale * log2 e) so that exponentials are one ex2 each.
#ifndef PG_CUDA_SOFTMAX_CUH
#define PG_CUDA_SOFTMAX_CUH

#include <math.h>

#include "cuda_common.cuh"
#include "cuda_mma.cuh"

// log2(e): exp(x) = 2^(x log2 e).
#define SOFTMAX_LOG2E 1.4426950408889634f

// Per-thread running state of two rows.
struct softmax_rows {
    float m[2];  // running max (log2 units)
    float l[2];  // this thread's part of the running sum
};

// Whether query row j (of a sequence with sq new tokens after ctx cached
// ones) sees key t: causal, and within the window when b has one.
__device__ __forceinline__ bool softmax_key_visible(const cuda_batch &b, int j, int t, int sq,
                                                    int ctx)
{
    const int hi = ctx + j;
    const int lo = b.window > 0 ? hi - b.window + 1 : 0;
    return j < sq && t <= hi && t >= lo;
}

// One key tile: masks keys outside each row's range (skipped when the whole
// tile is inside every row's range), scales into log2 units, updates the
// running max, replaces sc by exp2(sc - max) and adds them to the partial
// sums. Returns through alpha the factor the rows' O accumulators must be
// multiplied by. row_tile: which 16 rows of the block the calling warp's
// accumulators hold (rows m0 + 16 row_tile .. + 15).
template <int BN>
__device__ __forceinline__ void softmax_tile(float (&sc)[BN / 8][4], softmax_rows &st,
                                             float (&alpha)[2], const cuda_batch &b, int m0,
                                             int row_tile, int lane, int n0, int sq, int ctx,
                                             float scale_log2)
{
    const int row0 = m0 + row_tile * 16 + lane / 4;
    const int j_first = m0 + row_tile * 16;
    const bool inside = n0 + BN - 1 <= ctx + j_first &&
                        (b.window == 0 || n0 >= ctx + j_first + 15 - b.window + 1);
    float mx[2] = {-INFINITY, -INFINITY};
    if (inside) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                sc[nt][e] *= scale_log2;
                mx[e / 2] = fmaxf(mx[e / 2], sc[nt][e]);
            }
    } else {
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = row0 + (e / 2) * 8;
                const int t = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
                sc[nt][e] = softmax_key_visible(b, j, t, sq, ctx) ? sc[nt][e] * scale_log2
                                                                  : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], sc[nt][e]);
            }
    }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_new = fmaxf(st.m[r], mx[r]);
        m_use[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet
        alpha[r] = fast_exp2(st.m[r] - m_use[r]);
        st.m[r] = m_new;
        st.l[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[nt][e] = fast_exp2(sc[nt][e] - m_use[e / 2]);
            st.l[e / 2] += sc[nt][e];
        }
}

// Multiplies the O accumulators (D / 8 tiles of m16n8) by each row's alpha.
template <int D>
__device__ __forceinline__ void softmax_rescale(float (&o)[D / 8][4], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
    }
}

// The factor row r's O accumulators are multiplied by at the end: the sink
// (a logit with no value vector, natural units) joins the max and the sum,
// then 1 / l.
__device__ __forceinline__ float softmax_finish(const softmax_rows &st, int r, const float *sinks,
                                                int h)
{
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float a = 1.f;
    if (sinks != nullptr) {
        const float sink = sinks[h] * SOFTMAX_LOG2E;
        const float m_new = fmaxf(st.m[r], sink);
        a = fast_exp2(st.m[r] - m_new);
        l = l * a + fast_exp2(sink - m_new);
    }
    return a / l;
}

#endif  // PG_CUDA_SOFTMAX_CUH
