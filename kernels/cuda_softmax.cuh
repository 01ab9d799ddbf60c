// cuda_softmax.cuh: the softmax of the bf16 tensor-core attention kernel
// (cuda_attn_bf16.cu) on its fp32 score accumulators, as the CPU
// specification takes it (attn_modes.c row_final_max): the final row max
// first (a pass over the scores alone), then P = exp(S * qk_scale - m) in
// natural units against it, l the fp32 sum of the unrounded P. The fp8
// kernel (cuda_attn_fp8.cu) keeps its own online softmax, as FA3 does, and
// shares only the visibility rule.
//
// Layout (mma m16n8 accumulators): a thread holds rows row0 and row0 + 8 of its
// 16-row tile; sc[nt][e] is key n0 + 8 nt + 2 (lane % 4) + (e & 1) of row
// row0 + 8 (e / 2). The 4 lanes of a quad share rows.
#ifndef PG_CUDA_SOFTMAX_CUH
#define PG_CUDA_SOFTMAX_CUH

#include <math.h>

#include "attn_profile_impl.h"
#include "cuda_common.cuh"
#include "cuda_mma.cuh"

// Whether query row j (of a sequence with sq new tokens after ctx cached
// ones) sees key t: causal, and within the window when b has one.
__device__ __forceinline__ bool softmax_key_visible(const cuda_batch &b, int j, int t, int sq,
                                                    int ctx)
{
    const int hi = ctx + j;
    const int lo = b.window > 0 ? hi - b.window + 1 : 0;
    return j < sq && t <= hi && t >= lo;
}

// One key tile of raw scores: sc = S * qk_scale (one fp32 product, as the
// specification's sc[t] *= qk_scale), keys a row does not see -inf (the test
// skipped when the whole tile is inside every row's range). row_tile: which
// 16 rows of the block the calling warp's accumulators hold (rows m0 + 16
// row_tile .. + 15).
template <int BN>
__device__ __forceinline__ void softmax_scale_mask(float (&sc)[BN / 8][4], const cuda_batch &b,
                                                   int m0, int row_tile, int lane, int n0, int sq,
                                                   int ctx, float qk_scale)
{
    const int row0 = m0 + row_tile * 16 + lane / 4;
    const int j_first = m0 + row_tile * 16;
    const bool inside = n0 + BN - 1 <= ctx + j_first &&
                        (b.window == 0 || n0 >= ctx + j_first + 15 - b.window + 1);
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = row0 + (e / 2) * 8;
            const int t = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
            sc[nt][e] = inside || softmax_key_visible(b, j, t, sq, ctx) ? sc[nt][e] * qk_scale
                                                                        : -INFINITY;
        }
}

// mx[r] = max(mx[r], this thread's scores of row r in the tile).
template <int BN>
__device__ __forceinline__ void softmax_tile_max(const float (&sc)[BN / 8][4], float (&mx)[2])
{
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], sc[nt][e]);
}

// The final max of each row: the quad's partial maxima and the sink (head
// h's logit, natural units; sinks may be NULL). Every lane must call it.
__device__ __forceinline__ void softmax_final_max(float (&mx)[2], const float *sinks, int h)
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        if (sinks != nullptr) mx[r] = fmaxf(mx[r], sinks[h]);
    }
}

// Replaces the tile's scaled scores by P = attn_final_max_exp(sc - m) (the
// specification's exp, attn_profile_impl.h; masked keys give 0) and adds
// them to this thread's partial row sums l. m: the rows' final max, finite
// (every row sees its own key).
template <int BN>
__device__ __forceinline__ void softmax_tile_exp(float (&sc)[BN / 8][4], const float (&m)[2],
                                                 float (&l)[2])
{
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[nt][e] = attn_final_max_exp(sc[nt][e] - m[e / 2]);
            l[e / 2] += sc[nt][e];
        }
}

// Row r's whole sum: the quad's partial sums, then the sink's term
// attn_final_max_exp(sink - m) (the specification starts l with it). Every
// lane must call it.
__device__ __forceinline__ float softmax_row_sum(const float (&l)[2], const float (&m)[2], int r,
                                                 const float *sinks, int h)
{
    float s = l[r];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    if (sinks != nullptr) s += attn_final_max_exp(sinks[h] - m[r]);
    return s;
}

#endif  // PG_CUDA_SOFTMAX_CUH
