/*
 * test_fp8_mma.c: the Hopper fp8 MMA accumulation rule (kernels/fp8_mma.h)
 * on designed operands with hand-derived answers, and on operand sets whose
 * results an H200 produced (bench/wgmma_fp8_accum.cu, 2026-12-03): the rule
 * must give those bits exactly.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fp8_mma.h"
#include "kernels/numerics.h"

/* One k step of the listed products (each an exact e4m3 product: a * 1.0)
 * onto c: a[k] given as floats, b[k] = 1. */
static float step(const float *p, int n, float c)
{
    float one[FP8_MMA_K];
    for (int k = 0; k < n; k++) one[k] = 1.0f;
    return fp8_mma_e4m3_accumulate(p, one, n, c);
}

Test(fp8_mma, alignment_keeps_13_bits_below_the_largest)
{
    /* 2^8 (code 0x78 = 256) and 2^-5 (0x10 = 2^-5): 13 fraction bits below
     * 2^8 reach 2^-5, so it is kept; 2^-6 is below the quantum: dropped. */
    const float kept[2] = {256.0f, 0x1p-5f}, dropped[2] = {256.0f, 0x1p-6f};
    cr_expect_eq(step(kept, 2, 0.0f), 256.0f + 0x1p-5f);
    cr_expect_eq(step(dropped, 2, 0.0f), 256.0f);
}

Test(fp8_mma, cut_is_toward_zero_for_each_sign)
{
    /* 1.5 quanta (1.5 * 2^-5 = 0x1.8p-5, an e4m3 value) reads one quantum:
     * for a positive term, a negative term under a positive sum, and a
     * negative sum (truncation toward zero, not floor, not rounding). */
    const float pos[2] = {256.0f, 0x1.8p-5f}, neg[2] = {256.0f, -0x1.8p-5f},
                negsum[2] = {-256.0f, -0x1.8p-5f};
    cr_expect_eq(step(pos, 2, 0.0f), 256.0f + 0x1p-5f);
    cr_expect_eq(step(neg, 2, 0.0f), 256.0f - 0x1p-5f);
    cr_expect_eq(step(negsum, 2, 0.0f), -256.0f - 0x1p-5f);
}

Test(fp8_mma, accumulator_is_aligned_and_cut_with_the_products)
{
    /* c = 2^8 sets the reference exponent: a product 1.5 * 2^-5 loses half a
     * quantum as it would beside a 2^8 product; c = 1.5 * 2^-5 under a 2^8
     * product is cut the same way (fp32 addition would keep both whole). */
    const float small[1] = {0x1.8p-5f}, big[1] = {256.0f};
    cr_expect_eq(step(small, 1, 256.0f), 256.0f + 0x1p-5f);
    cr_expect_eq(step(big, 1, 0x1.8p-5f), 256.0f + 0x1p-5f);
    /* c with 24 significant bits and one product: c is cut at 2^(8 - 13). */
    cr_expect_eq(step(big, 1, 0x1.fffffep+7f), 256.0f + 0x1.fffp+7f);
}

Test(fp8_mma, reference_exponent_is_the_exponent_fields_sum)
{
    /* 1.875 * 1.875 = 3.515625 has exponent fields 0 + 0 (floor(log2) is 1),
     * so the quantum is 2^(0 - 13) and 2^-13 is kept; -1.875 * 1.75 cancels
     * most of the sum, so step 4 (13 bits below 2^-3) keeps it too. A
     * reference of floor(log2 |p|) = 1 would drop it. */
    const float a[3] = {1.875f, -1.875f, 0x1p-7f}, b[3] = {1.875f, 1.75f, 0x1p-6f};
    cr_expect_eq(fp8_mma_e4m3_accumulate(a, b, 3, 0.0f), 0.234375f + 0x1p-13f);
}

Test(fp8_mma, the_normalized_sum_keeps_13_fraction_bits)
{
    /* 32 terms of 448 (ea + eb = 8, no cut at 2^-5) sum to 14336 = 1.75 * 2^13
     * exactly; with 2^-5 added the exact sum needs 18 fraction bits below
     * 2^13, so step 4 cuts it back to 14336. */
    float p[FP8_MMA_K];
    for (int k = 0; k < FP8_MMA_K; k++) p[k] = 448.0f;
    cr_expect_eq(step(p, FP8_MMA_K, 0.0f), 14336.0f);
    p[31] = 0x1p-5f; /* 31 * 448 + 2^-5: leading bit 2^13, 13 bits keep down to 2^0 */
    cr_expect_eq(step(p, FP8_MMA_K, 0.0f), 13888.0f);
    p[30] = 3.0f;    /* 30 * 448 + 3 + 2^-5 = 13443.03125: cut to 13443 */
    cr_expect_eq(step(p, FP8_MMA_K, 0.0f), 13443.0f);
}

Test(fp8_mma, subnormal_inputs_are_exact)
{
    /* e4m3 subnormal 2^-9 (code 0x01) times 1: exponent field -6 + 0. */
    const uint8_t a[1] = {0x01}, b[1] = {0x38};
    cr_expect_eq(fp8_mma_e4m3_dot(a, b, 1, 0.0f), 0x1p-9f);
    /* 7 * 2^-9 (code 0x07) has exponent field -6 though floor(log2) is -7:
     * the quantum is 2^-19, so an accumulator of 2^-20 is cut away. */
    const uint8_t s7[1] = {0x07};
    cr_expect_eq(fp8_mma_e4m3_dot(s7, b, 1, 0x1p-20f), 7 * 0x1p-9f);
}

Test(fp8_mma, chained_steps_feed_each_result_into_the_next)
{
    /* 64 codes: 32 x 256 in the first step (8192, exact), then the second
     * step aligns its products with that accumulator (quantum 2^0). */
    uint8_t a[64], b[64];
    for (int k = 0; k < 64; k++) {
        a[k] = k < 32 ? 0x78 : 0x38; /* 256, then 1 */
        b[k] = k < 32 ? 0x38 : 0x00; /* 1, then 0 */
    }
    b[40] = 0x10; /* 1 * 2^-5 beside 8192: dropped */
    cr_expect_eq(fp8_mma_e4m3_dot(a, b, 64, 0.0f), 8192.0f);
    b[40] = 0x38; /* 1 * 1: kept */
    cr_expect_eq(fp8_mma_e4m3_dot(a, b, 64, 0.0f), 8193.0f);
    /* one fp32 sum of the 64 products would also give 8193 but keep 2^-5 */
    b[41] = 0x10;
    cr_expect_eq(fp8_mma_e4m3_dot(a, b, 64, 0.0f), 8193.0f);
}

/* Operand sets and the H200's result bits (one m64n64k32 wgmma; printed by
 * bench/wgmma_fp8_accum.cu as mismatches of an earlier, wrong model). */
static const struct {
    float acc;
    uint32_t hw;
    uint8_t a[32], b[32];
} hw_cases[] = {
    {0.0f, 0x47698800u,
     {0x1e, 0x00, 0x96, 0xdf, 0xcd, 0xd6, 0x51, 0x7c, 0x84, 0x1e, 0x51, 0x82, 0xb3, 0x83, 0x9f, 0x8a, 0x2c, 0x77, 0x55, 0x00, 0xe1, 0xf4, 0x0f, 0x83, 0xe7, 0xfc, 0xf3, 0x08, 0x2a, 0xf0, 0xe5, 0x74},
     {0xd7, 0x00, 0x63, 0x1a, 0x9a, 0xcc, 0x66, 0x57, 0x4b, 0x79, 0xbb, 0x76, 0x9f, 0xc4, 0xde, 0xf5, 0xc8, 0x74, 0xf0, 0x00, 0x54, 0xa3, 0xe0, 0xe9, 0x8b, 0x4e, 0x39, 0x22, 0xa7, 0x86, 0xf7, 0xb8}},
    {0x1.a81276p-21, 0x46613400u,
     {0x1e, 0x00, 0x96, 0xdf, 0xcd, 0xd6, 0x51, 0x7c, 0x84, 0x1e, 0x51, 0x82, 0xb3, 0x83, 0x9f, 0x8a, 0x2c, 0x77, 0x55, 0xa7, 0xe1, 0xf4, 0x0f, 0x83, 0xe7, 0x00, 0xf3, 0x08, 0x2a, 0xf0, 0xe5, 0x74},
     {0x6f, 0x00, 0x52, 0xf9, 0x92, 0x3e, 0x60, 0xcc, 0x86, 0x0c, 0x87, 0x3b, 0x5c, 0x28, 0xbb, 0xf1, 0x73, 0x05, 0xbb, 0xa7, 0x5c, 0xa0, 0x9a, 0xaf, 0xf2, 0x00, 0x97, 0xfe, 0x75, 0x05, 0x4f, 0xc6}},
    {-0x1.d3a714p+7, 0x459c1800u,
     {0x1e, 0x00, 0x96, 0xdf, 0xcd, 0xd6, 0x00, 0x7c, 0x84, 0x1e, 0x51, 0x82, 0xb3, 0x83, 0x9f, 0x8a, 0x2c, 0x77, 0x55, 0xa7, 0xe1, 0xf4, 0x0f, 0x83, 0xe7, 0xfc, 0xf3, 0x08, 0x2a, 0xf0, 0xe5, 0x74},
     {0xf5, 0x00, 0xe2, 0xdb, 0xe0, 0xc7, 0x00, 0xca, 0x90, 0xab, 0x1c, 0x88, 0x1c, 0x35, 0x97, 0xef, 0xec, 0x8b, 0xb7, 0x16, 0x1e, 0x19, 0xa4, 0xf6, 0x1e, 0xd6, 0x8f, 0x62, 0xe5, 0xb6, 0x2c, 0x49}},
    {-0x1.e016c6p-6, 0xc70c1800u,
     {0x1e, 0x00, 0x96, 0xdf, 0xcd, 0xd6, 0x51, 0x7c, 0x84, 0x1e, 0x51, 0x82, 0xb3, 0x83, 0x9f, 0x8a, 0x2c, 0x77, 0x55, 0xa7, 0xe1, 0xf4, 0x0f, 0x83, 0xe7, 0x00, 0xf3, 0x08, 0x2a, 0xf0, 0xe5, 0x74},
     {0xcc, 0x00, 0x13, 0xf1, 0xdd, 0xf3, 0x2c, 0x81, 0xeb, 0xcd, 0xbb, 0x3b, 0x2a, 0xe4, 0xb2, 0x9b, 0xd1, 0xb3, 0x1c, 0x02, 0x4e, 0x1b, 0xf9, 0x3b, 0xb0, 0x00, 0x56, 0x6b, 0x2b, 0x03, 0x9d, 0xf5}},
    {-0x1.54f458p+2, 0x47a86c00u,
     {0x1e, 0x00, 0x96, 0xdf, 0xcd, 0xd6, 0x51, 0x7c, 0x84, 0x1e, 0x51, 0x82, 0xb3, 0x83, 0x9f, 0x8a, 0x2c, 0x77, 0x55, 0xa7, 0xe1, 0xf4, 0x0f, 0x83, 0xe7, 0xfc, 0xf3, 0x08, 0x2a, 0xf0, 0xe5, 0x74},
     {0x26, 0x00, 0x8e, 0x22, 0x03, 0x58, 0x73, 0x76, 0x40, 0xfe, 0x4c, 0x99, 0x8f, 0x4a, 0xd8, 0x45, 0x41, 0x5d, 0x66, 0xd3, 0x3b, 0x62, 0x61, 0x8b, 0xba, 0xcd, 0xe1, 0x4e, 0xf4, 0x10, 0x88, 0xe4}},
};

Test(fp8_mma, matches_h200_results_bit_for_bit)
{
    for (size_t i = 0; i < sizeof hw_cases / sizeof hw_cases[0]; i++) {
        const float r = fp8_mma_e4m3_dot(hw_cases[i].a, hw_cases[i].b, 32, hw_cases[i].acc);
        cr_expect_eq(f32_bits(r), hw_cases[i].hw, "case %zu: rule %a, H200 %08x", i, (double)r,
                     hw_cases[i].hw);
    }
}
