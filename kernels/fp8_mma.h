/*
 * fp8_mma.h: the accumulation rule of Hopper's fp8 tensor cores, one
 * wgmma.mma_async .f32.e4m3.e4m3 k = 32 step, as the CPU specification
 * models it, bit for bit.
 *
 * Measured on an H200 (sm_90, CUDA 13.0) with bench/wgmma_fp8_accum.cu, one
 * m64n64k32 wgmma per block on chosen operands (bench/RESULTS.md, "Hopper
 * fp8 wgmma accumulation, the rule", 2026-12-03): this rule reproduces every
 * result bit of 1,310,720 random operand sets (seven kinds: all codes, close
 * exponents, sparse, one large product over small ones, mid band, two
 * products only, same-sign terms with a carry of up to five bits;
 * accumulators 0 or +-2^[-24, 24]) and of 814 designed cases. Exact fp32
 * accumulation matches 3.4% of them.
 *
 * For the products p_k = a_k * b_k of one k = 32 step and the incoming fp32
 * accumulator c:
 *   1. Reference exponent: E = the largest of ea_k + eb_k over the nonzero
 *      products, where ea is an e4m3 value's exponent field (-6 for a
 *      subnormal), so the significand product lies in [0, 4), and of
 *      floor(log2 |c|) when c != 0. (floor(log2 |p_k|), one more where the
 *      significand product is >= 2, fits fewer cases: the probe's search.)
 *   2. Alignment: every product, and c, is cut toward zero to a multiple of
 *      q = 2^(E - FP8_MMA_ALIGN_BITS): the accumulator is aligned and cut
 *      with the products, not added afterwards in fp32.
 *   3. The cut terms are added exactly (one group of 32: no sub-group
 *      boundary shows at any position).
 *   4. The sum is normalized and cut toward zero to FP8_MMA_SUM_BITS
 *      fraction bits below its own leading bit: the fp32 result holds at most
 *      14 significant bits.
 * An empty step (all products zero) still cuts c by steps 2 and 4; that
 * case was not among those measured.
 * DeepSeek-V3 technical report (arXiv 2412.19437, section 3.3) reports
 * "around 14 bits" on H800, which this rule refines.
 */
#ifndef PG_FP8_MMA_H
#define PG_FP8_MMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fraction bits the alignment keeps below the reference exponent (step 2). */
#define FP8_MMA_ALIGN_BITS 13
/* Fraction bits the normalized sum keeps (step 4). */
#define FP8_MMA_SUM_BITS 13
/* Products of one wgmma k step for e4m3 inputs (PTX ISA, wgmma .kind e4m3: K = 32). */
#define FP8_MMA_K 32

/* Every function below takes a finite incoming accumulator (no NaN, no
 * inf): the measured cases hold no other. */

/* c_in + sum_k a[k] * b[k] over e4m3 codes (no NaN codes) as chained wgmma
 * k steps: k = 0..31 onto c_in by the rule above, the next 32 onto that
 * result, and so on (a short last step holds the rest). */
float fp8_mma_e4m3_dot(const uint8_t *a, const uint8_t *b, int n, float c_in);

/* One k step (n <= FP8_MMA_K) from the decoded operands: a[k] and b[k] are
 * exact e4m3 values as floats (the exponent field is read back from them). */
float fp8_mma_e4m3_accumulate(const float *a, const float *b, int n, float c_in);

/* The rule for m outputs at once (the CPU core's form): for j < m, acc[j]
 * becomes one k step (n <= FP8_MMA_K) of the products a[k] * b[k * ldb + j]
 * (decoded e4m3 values) onto acc[j]. */
void fp8_mma_e4m3_accumulate_many(const float *a, int n, const float *b, size_t ldb, int m,
                                  float *acc);

#ifdef __cplusplus
}
#endif

#endif /* PG_FP8_MMA_H */
