/*
 * fp8_mma.c: the measured Hopper fp8 MMA accumulation rule (see fp8_mma.h).
 *
 * Everything is exact float arithmetic: e4m3 values and their products are
 * exact in fp32; multiplying by a power of two is exact; truncf is exact; a
 * cut term is an integer below 2^15 (|p| < 4 * 2^(ea + eb) <= 2^(E + 2)), so
 * the sum of at most 33 of them (< 2^21) is exact in fp32; and cutting a
 * float toward zero to 13 fraction bits is clearing its low 10 mantissa bits.
 */
#include <math.h>
#include <stdint.h>

#include "fp8_mma.h"
#include "numerics.h"

/* binary32 fields (IEEE 754). */
#define F32_MAN_BITS 23
#define F32_BIAS 127
/* The exponent field of an e4m3 subnormal (OCP FP8: 2^(1 - bias 7)). */
#define E4M3_SUBNORMAL_EXP (-6)
/* Below every reachable exponent: marks a zero product. */
#define NO_EXP (-1000)
/* Mantissa bits of a float cleared by step 4 (23 - FP8_MMA_SUM_BITS). */
#define SUM_CLEAR_MASK ((1u << (F32_MAN_BITS - FP8_MMA_SUM_BITS)) - 1u)
/* Outputs handled per pass (stack arrays). */
#define MMA_BLOCK 64

/* floor(log2 |x|) of a normal float x != 0 (every e4m3 value is one). */
static inline int f32_exp(float x)
{
    return (int)((f32_bits(x) >> F32_MAN_BITS) & 0xFFu) - F32_BIAS;
}

/* The e4m3 exponent field of a decoded e4m3 value (NO_EXP for zero): every
 * e4m3 value is a normal float, and subnormal codes (|x| < 2^-6) have -6. */
static inline int e4m3_value_exp(float x)
{
    if (x == 0.0f) return NO_EXP;
    const int e = f32_exp(x);
    return e < E4M3_SUBNORMAL_EXP ? E4M3_SUBNORMAL_EXP : e;
}

/* 2^e as a float (normal range: -126 <= e <= 127). */
static inline float pow2f(int e)
{
    return f32_from_bits((uint32_t)(e + F32_BIAS) << F32_MAN_BITS);
}

/* Step 4 applied to a finished step: the exact sum (already scaled) cut to
 * FP8_MMA_SUM_BITS fraction bits. */
static inline float cut_sum(float s)
{
    return f32_from_bits(f32_bits(s) & ~SUM_CLEAR_MASK);
}

/* x * 2^n, as ldexpf gives it: a product with a normal power of two is
 * correctly rounded, as ldexpf's result is (identical bits, subnormal and
 * overflowing results included); ldexpf itself only where 2^n is not a
 * normal float. ldexpf's library call was 30% of an @fa3 row's time. */
static inline float scale_pow2(float x, int n)
{
    return n >= 1 - F32_BIAS && n <= F32_BIAS ? x * pow2f(n) : ldexpf(x, n);
}

/* The reference exponent of an incoming accumulator c != 0: floor(log2 |c|),
 * subnormal floats included (ilogbf: the exponent field of a normal one). */
static inline int acc_exp(float c)
{
    const int field = (int)((f32_bits(c) >> F32_MAN_BITS) & 0xFFu);
    if (field != 0) return field - F32_BIAS;
    return ilogbf(c);
}

void fp8_mma_e4m3_accumulate_many(const float *a, int n, const float *b, size_t ldb, int m,
                                  float *acc)
{
    for (int j0 = 0; j0 < m; j0 += MMA_BLOCK) {
        const int w = m - j0 < MMA_BLOCK ? m - j0 : MMA_BLOCK;
        int emax[MMA_BLOCK];
        float sum[MMA_BLOCK], inv[MMA_BLOCK];
        float *c = acc + j0;
        for (int j = 0; j < w; j++) emax[j] = c[j] != 0.0f ? acc_exp(c[j]) : NO_EXP;
        for (int k = 0; k < n; k++) {
            const int ea = e4m3_value_exp(a[k]);
            if (ea == NO_EXP) continue;
            const float *bk = b + (size_t)k * ldb + j0;
            for (int j = 0; j < w; j++) {
                const int e = bk[j] != 0.0f ? ea + e4m3_value_exp(bk[j]) : NO_EXP;
                emax[j] = e > emax[j] ? e : emax[j];
            }
        }
        for (int j = 0; j < w; j++) {
            /* 2^(ALIGN - E) for the products: whenever a product is nonzero,
             * E >= 2 * E4M3_SUBNORMAL_EXP, so the clamp only touches steps
             * whose products are all zero, where inv is not used. */
            const int sh = emax[j] == NO_EXP ? 0 : FP8_MMA_ALIGN_BITS - emax[j];
            inv[j] = pow2f(sh < -126 ? -126 : sh > 127 ? 127 : sh);
            sum[j] = c[j] != 0.0f ? truncf(scale_pow2(c[j], sh)) : 0.0f;
        }
        for (int k = 0; k < n; k++) {
            const float ak = a[k];
            if (ak == 0.0f) continue;
            const float *bk = b + (size_t)k * ldb + j0;
            /* trunc through int32: every |term / q| is below 2^15, and the
             * conversion truncates toward zero (C17 6.3.1.4); it vectorizes
             * where truncf does not (GCC 12). */
            for (int j = 0; j < w; j++) sum[j] += (float)(int32_t)((ak * bk[j]) * inv[j]);
        }
        for (int j = 0; j < w; j++)
            if (emax[j] != NO_EXP) c[j] = cut_sum(scale_pow2(sum[j], emax[j] - FP8_MMA_ALIGN_BITS));
    }
}

float fp8_mma_e4m3_accumulate(const float *a, const float *b, int n, float c_in)
{
    float acc = c_in;
    fp8_mma_e4m3_accumulate_many(a, n, b, 1, 1, &acc);
    return acc;
}

float fp8_mma_e4m3_dot(const uint8_t *a, const uint8_t *b, int n, float c_in)
{
    float acc = c_in;
    for (int k0 = 0; k0 < n; k0 += FP8_MMA_K) {
        float av[FP8_MMA_K], bv[FP8_MMA_K];
        const int w = n - k0 < FP8_MMA_K ? n - k0 : FP8_MMA_K;
        for (int k = 0; k < w; k++) {
            av[k] = fp8_e4m3_decode(a[k0 + k]);
            bv[k] = fp8_e4m3_decode(b[k0 + k]);
        }
        acc = fp8_mma_e4m3_accumulate(av, bv, w, acc);
    }
    return acc;
}
