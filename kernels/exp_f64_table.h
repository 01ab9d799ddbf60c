/*
 * exp_f64_table.h: exp(x) in fp64 from a table of 2^(j/64) and a degree-5
 * polynomial, for the GPU reference's softmax (kernels/cuda_attn_reference.cu).
 *
 * Why not the math library's exp: on the H200 a DFMA and a DMMA share one
 * pipe (bench/gpu_fp64_peak.cu: 66.2 TFLOP/s of DMMA alone, 38.3 + 9.6 mixed),
 * so every fp64 instruction of the softmax takes time from the reference's
 * products. CUDA's exp spends about 16 fp64 instructions (a degree-11
 * polynomial on |r| <= ln2/2); this one spends 10, reducing further by the
 * table: |r| <= ln2/128, where the degree-5 Taylor polynomial's truncation is
 * r^6/720 < 3.6e-17 relative.
 *
 * Valid for x in [EXP_F64_TABLE_MIN, EXP_F64_TABLE_MAX], where 2^(n/64) stays
 * a normal number; outside it (NaN and infinities included) the result is
 * meaningless, and callers replace it (the GPU reference gives weight 0
 * below EXP_F64_TABLE_MIN, as the CPU reference's REF_EXP_FLUSH does).
 * Accuracy against long double expl over the whole range is tested
 * (tests/test_exp_f64_table.c): within EXP_F64_TABLE_MAX_ULP ulp.
 *
 * Valid C17 and CUDA C++: the same code is compiled for the host (the test)
 * and the device (the kernel).
 */
#ifndef PRECGATE_EXP_F64_TABLE_H
#define PRECGATE_EXP_F64_TABLE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define EXP_F64_TABLE_FN __host__ __device__ __forceinline__ static
#else
#define EXP_F64_TABLE_FN static inline
#endif

/* Table of 2^(j / EXP_F64_TABLE_SIZE), j = 0 .. EXP_F64_TABLE_SIZE - 1. */
#define EXP_F64_TABLE_BITS 6
#define EXP_F64_TABLE_SIZE (1 << EXP_F64_TABLE_BITS)
/* The range: n = round(x * 64 / ln2) keeps 2^(n >> 6) >= 2^-1010 and
 * <= 2^1010, so the result and its exponent field stay normal. */
#define EXP_F64_TABLE_MIN (-700.0)
#define EXP_F64_TABLE_MAX 700.0
/* Largest error in ulp that the test accepts (measured: 1.27, 2026-12-02). */
#define EXP_F64_TABLE_MAX_ULP 2.0
/* 1.5 * 2^52: x * 64/ln2 + this rounds to an integer held in the low 32 bits
 * (round to nearest even: the reduced |r| <= ln2/128). */
#define EXP_F64_TABLE_SHIFTER 6755399441055744.0
/* 64 / ln 2 rounded to double (Python: 64/math.log(2)), and ln 2 / 64 as a
 * double STEP plus the rest STEP_LO (Cody-Waite; Python decimal, 60 digits).
 * STEP alone would leave its rounding error (up to 2^-60) times |n| <= 64,700
 * in r: hundreds of ulp at the range's ends, 26 at x = -36. */
#define EXP_F64_TABLE_INV_STEP 92.33248261689366
#define EXP_F64_TABLE_STEP 0.010830424696249145
#define EXP_F64_TABLE_STEP_LO 3.623510646634843e-19
/* Taylor coefficients 1/k! of the polynomial (exact enough in double: they
 * multiply terms at most r^2 / 2 < 1.5e-5). */
#define EXP_F64_TABLE_C2 0.5
#define EXP_F64_TABLE_C3 (1.0 / 6.0)
#define EXP_F64_TABLE_C4 (1.0 / 24.0)
#define EXP_F64_TABLE_C5 (1.0 / 120.0)

/* 2^(j / 64), j = 0 .. 63, correctly rounded (Python decimal at 80 digits,
 * float(2 ** (Decimal(j) / 64)), printed with float.hex). Literals rather
 * than exp2 at run time so that the host the test runs on and the device
 * hold the same table. Initializer of a double[EXP_F64_TABLE_SIZE]. */
#define EXP_F64_TABLE_VALUES \
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, \
    0x1.0874518759bc8p+0, 0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, \
    0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0, 0x1.172b83c7d517bp+0, \
    0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0, \
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, \
    0x1.2d285a6e4030bp+0, 0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, \
    0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0, 0x1.3dea64c123422p+0, \
    0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0, \
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, \
    0x1.56f4736b527dap+0, 0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, \
    0x1.6247eb03a5585p+0, 0x1.6623882552225p+0, 0x1.6a09e667f3bcdp+0, \
    0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0, \
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, \
    0x1.868d99b4492edp+0, 0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, \
    0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0, 0x1.9c49182a3f090p+0, \
    0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0, \
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, \
    0x1.bcc1e904bc1d2p+0, 0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, \
    0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0, 0x1.d5818dcfba487p+0, \
    0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0, \
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, \
    0x1.fa7c1819e90d8p+0

/* exp(x) for x in [EXP_F64_TABLE_MIN, EXP_F64_TABLE_MAX] (outside:
 * meaningless, NaN included), from t = {EXP_F64_TABLE_VALUES}. 10 fp64
 * instructions (the shifter's fma, an add, 2 fma for r, 5 for the polynomial
 * and the table entry, a mul), a table read and integer work on the exponent. */
EXP_F64_TABLE_FN double exp_f64_table(double x, const double *t)
{
    const double s = fma(x, EXP_F64_TABLE_INV_STEP, EXP_F64_TABLE_SHIFTER);
    const double kd = s - EXP_F64_TABLE_SHIFTER; /* n as a double, exact */
    const double r = fma(kd, -EXP_F64_TABLE_STEP_LO, fma(kd, -EXP_F64_TABLE_STEP, x));
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    const int32_t n = (int32_t)(uint32_t)bits; /* low word: n in two's complement */
    double a = fma(r, EXP_F64_TABLE_C5, EXP_F64_TABLE_C4);
    a = fma(a, r, EXP_F64_TABLE_C3);
    a = fma(a, r, EXP_F64_TABLE_C2);
    a = fma(a, r, 1.0); /* a * r = e^r - 1 up to r^6 / 720 */
    const int32_t j = n & (EXP_F64_TABLE_SIZE - 1);
    const double tj = t[j];
    double y = fma(tj, a * r, tj); /* 2^(j/64) e^r, in [1, 2) up to rounding */
    const int64_t e = (int64_t)(n - j) / EXP_F64_TABLE_SIZE; /* exact: n - j = 64 e */
    memcpy(&bits, &y, sizeof bits);
    bits += (uint64_t)e << 52; /* times 2^e: y and the result are normal */
    memcpy(&y, &bits, sizeof bits);
    return y;
}

#endif /* PRECGATE_EXP_F64_TABLE_H */
