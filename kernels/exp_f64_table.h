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
 * a normal number; callers clamp to it. Accuracy against long double expl over
 * the whole range is tested (tests/test_exp_f64_table.c): within
 * EXP_F64_TABLE_MAX_ULP ulp when the table is correctly rounded to 1 ulp.
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
/* Largest error in ulp that the test accepts (measured 1.27 with glibc exp2
 * filling the table, 2026-12-02). */
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

/* Fills t[0 .. EXP_F64_TABLE_SIZE - 1] with 2^(j / 64) (exp2: within 1 ulp
 * on the host's libm and on CUDA). */
EXP_F64_TABLE_FN void exp_f64_table_fill(double *t)
{
    for (int j = 0; j < EXP_F64_TABLE_SIZE; j++) t[j] = exp2((double)j / EXP_F64_TABLE_SIZE);
}

/* exp(x) for x in [EXP_F64_TABLE_MIN, EXP_F64_TABLE_MAX] (outside: undefined,
 * NaN included), from table t filled by exp_f64_table_fill. 10 fp64
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
