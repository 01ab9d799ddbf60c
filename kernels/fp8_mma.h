/*
 * fp8_mma.h: the accumulation rule of Hopper's fp8 tensor cores (wgmma
 * .f32.e4m3.e4m3, one k = 32 step), as the CPU specification models it.
 *
 * PROVISIONAL: the lead is measuring the rule on the H200
 * (bench/wgmma_fp8_accum.cu; first findings in bench/RESULTS.md: 13 bits kept,
 * truncation, accumulator aligned with the products) and will replace the
 * body of fp8_mma_e4m3_accumulate with the measured rule; its signature stays.
 *
 * Model (the best current one):
 *   e = floor(log2(max(|p_k|, |acc_in|))), q = 2^(e - FP8_MMA_KEPT_BITS);
 *   result = sum_k trunc(p_k / q) * q + trunc(acc_in / q) * q, summed exactly:
 *   every term is an integer multiple of q below 2^14 q, so the fp32 sum of at
 *   most 33 of them is exact. That is, FP8_MMA_KEPT_BITS bits kept below the
 *   largest exponent, truncation toward zero, the accumulator aligned with the
 *   products. DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3):
 *   "around 14 bits" on H800.
 */
#ifndef PG_FP8_MMA_H
#define PG_FP8_MMA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bits kept below the largest exponent of a k = 32 group (bench/RESULTS.md,
 * wgmma fp8 accumulation measurement). */
#define FP8_MMA_KEPT_BITS 13
/* Products of one wgmma k step for e4m3 inputs (PTX ISA, wgmma .kind e4m3: K = 32). */
#define FP8_MMA_K 32

/* The fp32 result of one wgmma k = 32 step: the n <= FP8_MMA_K exact e4m3 x
 * e4m3 products (finite) added onto the incoming fp32 accumulator acc_in by
 * the hardware rule above. */
float fp8_mma_e4m3_accumulate(const float *products, int n, float acc_in);

/* The same rule for m outputs at once (the CPU core's form; fp8_mma_e4m3_accumulate
 * is this with m = 1): for j < m, acc[j] = fp8_mma_e4m3_accumulate of the n
 * products a[k] * b[k * ldb + j] (each exact in fp32) onto acc[j]. */
void fp8_mma_e4m3_accumulate_many(const float *a, int n, const float *b, size_t ldb, int m,
                                  float *acc);

#ifdef __cplusplus
}
#endif

#endif /* PG_FP8_MMA_H */
