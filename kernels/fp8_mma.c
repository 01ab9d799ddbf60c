/* fp8_mma.c: the provisional Hopper fp8 accumulation rule (see fp8_mma.h). */
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "fp8_mma.h"

/* binary32 fields (IEEE 754). */
#define F32_MAN_BITS 23
#define F32_EXP_MAX_BIASED 254
/* Smallest biased exponent of the largest term for which q = 2^(e - KEPT) is
 * still a normal binary32 (biased exponent of q >= 1). */
#define MMA_EXP_MIN_BIASED (FP8_MMA_KEPT_BITS + 1)
/* Outputs handled per pass (stack arrays; a multiple of the vector width). */
#define MMA_BLOCK 64

static inline float f32_from_biased_exp(uint32_t e)
{
    const uint32_t u = e << F32_MAN_BITS;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * The rule over many outputs at once, vectorised over j (see fp8_mma.h):
 * q_j = 2^(e_j - KEPT) where 2^e_j is the power of two of the largest |term|
 * of output j; each term becomes trunc(term / q_j) (exact: terms and powers of
 * two), and the integers, all below 2^14 and at most 33 of them, sum exactly.
 * Dividing by q_j is multiplying by 2^(KEPT - e_j), also exact.
 */
void fp8_mma_e4m3_accumulate_many(const float *a, int n, const float *b, size_t ldb, int m,
                                  float *acc)
{
    for (int j0 = 0; j0 < m; j0 += MMA_BLOCK) {
        const int w = m - j0 < MMA_BLOCK ? m - j0 : MMA_BLOCK;
        float amax[MMA_BLOCK], sum[MMA_BLOCK], quantum[MMA_BLOCK], inv[MMA_BLOCK];
        float *c = acc + j0;
        for (int j = 0; j < w; j++) amax[j] = fabsf(c[j]);
        for (int k = 0; k < n; k++) {
            const float ak = a[k];
            const float *bk = b + (size_t)k * ldb + j0;
            for (int j = 0; j < w; j++) {
                const float p = fabsf(ak * bk[j]);
                amax[j] = p > amax[j] ? p : amax[j];
            }
        }
        for (int j = 0; j < w; j++) {
            uint32_t u;
            memcpy(&u, &amax[j], sizeof u);
            uint32_t e = u >> F32_MAN_BITS; /* biased exponent; amax >= 0 */
            /* All terms zero (e = 0) or tiny: any valid q gives the same 0 / exact sum. */
            e = e < MMA_EXP_MIN_BIASED ? MMA_EXP_MIN_BIASED : e;
            quantum[j] = f32_from_biased_exp(e - FP8_MMA_KEPT_BITS);
            inv[j] = f32_from_biased_exp(F32_EXP_MAX_BIASED + FP8_MMA_KEPT_BITS - e);
        }
        /* trunc through int32: every |term / q| is below 2^14, and the
         * conversion truncates toward zero (C17 6.3.1.4); it vectorizes. */
        for (int j = 0; j < w; j++) sum[j] = (float)(int32_t)(c[j] * inv[j]);
        for (int k = 0; k < n; k++) {
            const float ak = a[k];
            const float *bk = b + (size_t)k * ldb + j0;
            for (int j = 0; j < w; j++) sum[j] += (float)(int32_t)((ak * bk[j]) * inv[j]);
        }
        for (int j = 0; j < w; j++) c[j] = sum[j] * quantum[j];
    }
}

float fp8_mma_e4m3_accumulate(const float *products, int n, float acc_in)
{
    static const float one = 1.0f; /* b = 1 for every k (ldb 0): the terms are the products */
    float acc = acc_in;
    fp8_mma_e4m3_accumulate_many(products, n, &one, 0, 1, &acc);
    return acc;
}
