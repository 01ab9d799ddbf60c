/*
 * test_numerics.c: kernels/numerics.c against references written here by a
 * different method.
 *
 *   bf16: frexp/ldexp/floor in double, explicit tie-to-even on the integer
 *         significand (not the add-and-shift bit trick of the code).
 *   fp8:  the table of every code's value built from the format definition
 *         (sign * 2^(e-bias) * (1 + m/2^M), subnormals 2^(1-bias) * m/2^M),
 *         then an exhaustive nearest search with an explicit "tie goes to
 *         the even code" rule and saturation above the largest finite value.
 *
 * Loops count mismatches and report the first one, so a failure names an
 * input without making the passing path slow.
 */
#include "kernels/numerics.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t f32_bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Same float bit for bit (so -0 != +0); any NaN matches any NaN of the same
 * sign. */
static int same_f32(float a, float b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) && !signbit(a) == !signbit(b);
    return f32_bits_of(a) == f32_bits_of(b);
}

/* ---- fp8 reference ------------------------------------------------------ */

typedef struct ref_fmt {
    const char *name;
    int man_bits;      /* significand bits M */
    int bias;
    unsigned max_code; /* largest finite positive code */
    int has_inf;       /* all-ones exponent with m = 0 is inf (e5m2) */
    double max;        /* largest finite value, from the OCP table */
} ref_fmt;

static const ref_fmt REF_E4M3 = {"e4m3fn", 3, 7, 0x7E, 0, 448.0};
static const ref_fmt REF_E5M2 = {"e5m2", 2, 15, 0x7B, 1, 57344.0};

/* The value of byte b straight from the OCP definition, in double. */
static double ref_fp8_value(const ref_fmt *f, unsigned b)
{
    const int exp_bits = 7 - f->man_bits;
    const int e = (int)((b & 0x7Fu) >> f->man_bits);
    const int m = (int)(b & ((1u << f->man_bits) - 1u));
    const int e_all_ones = (1 << exp_bits) - 1;
    const int m_all_ones = (1 << f->man_bits) - 1;
    const double frac = (double)m / (double)(1 << f->man_bits);
    double v;
    if (!f->has_inf && e == e_all_ones && m == m_all_ones) v = NAN;      /* e4m3fn */
    else if (f->has_inf && e == e_all_ones) v = (m == 0) ? INFINITY : NAN; /* e5m2 */
    else if (e == 0) v = ldexp(frac, 1 - f->bias);                        /* subnormal */
    else v = ldexp(1.0 + frac, e - f->bias);
    return (b & 0x80u) ? -v : v;
}

/* Nearest finite code to y by exhaustive search; ties to the even code;
 * |y| > max (inf included) saturates; NaN -> 0x7F; the sign of y is kept,
 * so -tiny -> 0x80. All distances are exact in double: the two codes that
 * straddle |y| are within a factor 2 of it (Sterbenz) or one of them is 0. */
static uint8_t ref_fp8_encode(const ref_fmt *f, float y)
{
    if (isnan(y)) return 0x7F;
    const unsigned sign = signbit(y) ? 0x80u : 0u;
    const double a = fabs((double)y);
    if (a > f->max) return (uint8_t)(sign | f->max_code);
    unsigned best = 0;
    double best_d = a; /* distance to code 0 */
    for (unsigned c = 1; c <= f->max_code; c++) {
        const double v = ref_fp8_value(f, c);
        const double d = fabs(a - v);
        if (d < best_d || (d == best_d && (c % 2u) == 0u)) {
            best = c;
            best_d = d;
        }
        if (v > a && v - a > best_d) break; /* values only grow from here */
    }
    return (uint8_t)(sign | best);
}

/* ---- bf16 reference ----------------------------------------------------- */

/* Largest finite bf16, (2 - 2^-7) * 2^127. */
#define REF_BF16_MAX ldexp(2.0 - ldexp(1.0, -7), 127)

/* Nearest bf16 to a non-NaN x, ties to even, by arithmetic on the value:
 * |x| = t * q with q the bf16 quantum at |x|'s binade (8 significant bits,
 * never below the subnormal quantum 2^-133), round t to an integer. */
static uint16_t ref_bf16_from_f32(float x)
{
    const uint16_t sign = signbit(x) ? 0x8000u : 0u;
    const double a = fabs((double)x);
    if (isinf(x)) return (uint16_t)(sign | 0x7F80u);
    if (a == 0.0) return sign;
    int e;
    (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int qexp = e - 8;
    if (qexp < -133) qexp = -133;
    const double t = ldexp(a, -qexp); /* exact: power-of-two scaling */
    double n = floor(t);
    const double frac = t - n;
    if (frac > 0.5 || (frac == 0.5 && fmod(n, 2.0) != 0.0)) n += 1.0;
    const double r = ldexp(n, qexp);
    if (r > REF_BF16_MAX) return (uint16_t)(sign | 0x7F80u);
    const uint32_t u = f32_bits_of((float)r); /* r has <= 8 significant bits */
    cr_assert_eq(u & 0xFFFFu, 0u, "reference produced a non-bf16 value");
    return (uint16_t)(sign | (u >> 16));
}

/* The value of bf16 bits h from the binary32 definition truncated to 7
 * significand bits. */
static double ref_bf16_value(uint16_t h)
{
    const int e = (h >> 7) & 0xFF;
    const int m = h & 0x7F;
    double v;
    if (e == 0xFF) v = (m == 0) ? INFINITY : NAN;
    else if (e == 0) v = ldexp(m / 128.0, -126);
    else v = ldexp(1.0 + m / 128.0, e - 127);
    return (h & 0x8000u) ? -v : v;
}

/* ---- decode ------------------------------------------------------------- */

static void check_decode_all(const ref_fmt *f, float (*decode)(uint8_t))
{
    /* The hard-coded max_code really is the largest finite code. */
    cr_assert_eq(ref_fp8_value(f, f->max_code), f->max);
    cr_assert(!isfinite(ref_fp8_value(f, f->max_code + 1u)));
    for (unsigned b = 0; b < 256u; b++) {
        const double want = ref_fp8_value(f, b);
        const float got = decode((uint8_t)b);
        if (isnan(want)) {
            cr_assert(isnan(got), "%s decode(0x%02X) = %a, want NaN", f->name, b, (double)got);
            continue;
        }
        cr_assert_eq((double)(float)want, want, "%s 0x%02X not exact in fp32", f->name, b);
        cr_assert(same_f32(got, (float)want), "%s decode(0x%02X) = %a, want %a",
                  f->name, b, (double)got, want);
    }
}

Test(numerics, e4m3_decode_all_256)
{
    check_decode_all(&REF_E4M3, fp8_e4m3_decode);
    cr_assert(isnan(fp8_e4m3_decode(0x7F)));
    cr_assert(isnan(fp8_e4m3_decode(0xFF)));
    cr_assert(signbit(fp8_e4m3_decode(0x80)) && fp8_e4m3_decode(0x80) == 0.0f);
    cr_assert_eq(fp8_e4m3_decode(0x7E), 448.0f);
    cr_assert_eq(fp8_e4m3_decode(0x01), 0x1p-9f);
    cr_assert_eq(fp8_e4m3_decode(0x07), 0.875f * 0x1p-6f);
    cr_assert_eq(fp8_e4m3_decode(0x08), 0x1p-6f);
    cr_assert_eq(fp8_e4m3_decode(0x38), 1.0f);
}

Test(numerics, e5m2_decode_all_256)
{
    check_decode_all(&REF_E5M2, fp8_e5m2_decode);
    cr_assert(isinf(fp8_e5m2_decode(0x7C)) && fp8_e5m2_decode(0x7C) > 0);
    cr_assert(isinf(fp8_e5m2_decode(0xFC)) && fp8_e5m2_decode(0xFC) < 0);
    for (unsigned b = 0x7D; b <= 0x7F; b++) {
        cr_assert(isnan(fp8_e5m2_decode((uint8_t)b)));
        cr_assert(isnan(fp8_e5m2_decode((uint8_t)(b | 0x80u))));
    }
    cr_assert_eq(fp8_e5m2_decode(0x7B), 57344.0f);
    cr_assert_eq(fp8_e5m2_decode(0x01), 0x1p-16f);
    cr_assert_eq(fp8_e5m2_decode(0x04), 0x1p-14f);
    cr_assert_eq(fp8_e5m2_decode(0x3C), 1.0f);
}

Test(numerics, bf16_to_f32_all_65536)
{
    for (uint32_t h = 0; h <= 0xFFFFu; h++) {
        const double want = ref_bf16_value((uint16_t)h);
        const float got = bf16_to_f32((uint16_t)h);
        if (isnan(want)) {
            cr_assert(isnan(got) && !signbit(got) == !(h & 0x8000u), "bf16 0x%04X", h);
        } else {
            cr_assert(same_f32(got, (float)want), "bf16_to_f32(0x%04X) = %a, want %a",
                      h, (double)got, want);
        }
    }
}

/* ---- fp8 encode: exhaustive ------------------------------------------- */

/* Every bf16 input, divided by scale in fp32, against the reference. */
static void check_e4m3_scaled_all_bf16(float scale)
{
    unsigned bad = 0, first = 0;
    uint8_t first_got = 0, first_want = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h++) {
        const float x = bf16_to_f32((uint16_t)h);
        const float y = x / scale;
        const uint8_t want = ref_fp8_encode(&REF_E4M3, y);
        const uint8_t got = fp8_e4m3_encode_scaled(x, scale);
        if (got != want && bad++ == 0) {
            first = h;
            first_got = got;
            first_want = want;
        }
    }
    cr_assert_eq(bad, 0u, "scale %a: %u mismatches; first bf16 0x%04X: got 0x%02X want 0x%02X",
                 (double)scale, bad, first, first_got, first_want);
}

Test(numerics, e4m3_encode_scaled_all_bf16)
{
    const float scales[] = {
        1.0f, 0.5f, 2.0f, 0.0173f, 3.7f, 1.0f / 448.0f,
        1e-3f,  /* everything above 0.448 saturates */
        1e-30f, /* nearly everything saturates */
        1e30f,  /* nearly everything underflows, through fp32 subnormals */
    };
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
        check_e4m3_scaled_all_bf16(scales[i]);
}

Test(numerics, e5m2_encode_all_bf16)
{
    unsigned bad = 0, first = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h++) {
        const float x = bf16_to_f32((uint16_t)h);
        if (fp8_e5m2_encode(x) != ref_fp8_encode(&REF_E5M2, x) && bad++ == 0) first = h;
    }
    cr_assert_eq(bad, 0u, "%u mismatches; first bf16 0x%04X: got 0x%02X want 0x%02X", bad,
                 first, fp8_e5m2_encode(bf16_to_f32((uint16_t)first)),
                 ref_fp8_encode(&REF_E5M2, bf16_to_f32((uint16_t)first)));
}

/* fp32 inputs carry bits below bf16's lsb (sticky bits that break ties):
 * a stride over all 2^32 patterns, and each midpoint between neighbouring
 * codes with its two fp32 neighbours, both signs. */
static void check_fp8_f32_sweep(const ref_fmt *f, uint8_t (*encode)(float))
{
    unsigned bad = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4099u) {
        const float x = bits_f32((uint32_t)u);
        if (encode(x) != ref_fp8_encode(f, x) && bad++ == 0) first = (uint32_t)u;
    }
    for (unsigned c = 0; c < f->max_code + 1u; c++) {
        const double lo = ref_fp8_value(f, c);
        /* Above max_code the "next value" is the one RNE without saturation
         * would reach: max + one ulp at the top binade. */
        const double hi = (c < f->max_code) ? ref_fp8_value(f, c + 1u)
                                            : f->max + ldexp(1.0, (int)log2(f->max) - f->man_bits);
        const float mid = (float)((lo + hi) / 2.0);
        cr_assert_eq((double)mid, (lo + hi) / 2.0, "%s midpoint not exact", f->name);
        const float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY),
                                (float)hi, (float)lo};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            for (int s = 0; s < 2; s++) {
                const float x = s ? -probes[i] : probes[i];
                if (encode(x) != ref_fp8_encode(f, x) && bad++ == 0) first = f32_bits_of(x);
            }
        }
    }
    cr_assert_eq(bad, 0u, "%s: %u mismatches; first fp32 0x%08X: got 0x%02X want 0x%02X",
                 f->name, bad, first, encode(bits_f32(first)),
                 ref_fp8_encode(f, bits_f32(first)));
}

Test(numerics, e4m3_encode_f32_sweep)
{
    check_fp8_f32_sweep(&REF_E4M3, fp8_e4m3_encode);
}

Test(numerics, e5m2_encode_f32_sweep)
{
    check_fp8_f32_sweep(&REF_E5M2, fp8_e5m2_encode);
}

/* ---- fp8 encode: named cases -------------------------------------------- */

typedef struct enc_case {
    float x;
    uint8_t want;
    const char *what;
} enc_case;

Test(numerics, e4m3_encode_named_cases)
{
    const enc_case cases[] = {
        {0.0f, 0x00, "+0"},
        {-0.0f, 0x80, "-0"},
        {1.0f, 0x38, "1"},
        {-1.0f, 0xB8, "-1"},
        {1.0625f, 0x38, "1+1/16: tie 0x38/0x39 -> even 0x38"},
        {1.1875f, 0x3A, "1+3/16: tie 0x39/0x3A -> even 0x3A"},
        {0.53125f, 0x30, "0.5*(1+1/16): tie -> even 0x30"},
        {-0.53125f, 0xB0, "-0.5*(1+1/16): tie -> even 0xB0"},
        {240.0f, 0x77, "240"},
        {256.0f, 0x78, "256"},
        {432.0f, 0x7E, "432: tie 416 (0x7D) / 448 (0x7E) -> even 0x7E"},
        {448.0f, 0x7E, "448 = max"},
        {464.0f, 0x7E, "464: tie 448 / (480) -> saturate to 448"},
        {480.0f, 0x7E, "480: saturate, not NaN"},
        {1e9f, 0x7E, "1e9: saturate"},
        {INFINITY, 0x7E, "+inf: saturate"},
        {-INFINITY, 0xFE, "-inf: saturate"},
        {-464.0f, 0xFE, "-464: saturate"},
        {0x1p-9f, 0x01, "2^-9: min subnormal"},
        {0x1p-10f, 0x00, "2^-10: tie 0 / 2^-9 -> even 0"},
        {-0x1p-10f, 0x80, "-2^-10: -> -0"},
        {0x1.000002p-10f, 0x01, "just above 2^-10"},
        {1.5f * 0x1p-10f, 0x01, "1.5*2^-10"},
        {3.0f * 0x1p-10f, 0x02, "3*2^-10: tie 0x01/0x02 -> even 0x02"},
        {5.0f * 0x1p-10f, 0x02, "5*2^-10: tie 0x02/0x03 -> even 0x02"},
        {0.875f * 0x1p-6f, 0x07, "0.875*2^-6: max subnormal"},
        {15.0f * 0x1p-10f, 0x08, "15*2^-10: tie max subnormal / min normal -> 0x08"},
        {0x1.dffffep-7f, 0x07, "just below that tie"},
        {0x1p-6f, 0x08, "2^-6: min normal"},
        {1.0625f * 0x1p-6f, 0x08, "2^-6*(1+1/16): tie -> even 0x08"},
        {0x1p-149f, 0x00, "fp32 min subnormal -> +0"},
        {-0x1p-149f, 0x80, "-fp32 min subnormal -> -0"},
        {FLT_MIN, 0x00, "FLT_MIN -> +0"},
        {NAN, 0x7F, "NaN"},
        {-NAN, 0x7F, "-NaN -> 0x7F (CUDA)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint8_t got = fp8_e4m3_encode(cases[i].x);
        cr_expect_eq(got, cases[i].want, "%s: got 0x%02X want 0x%02X", cases[i].what, got,
                     cases[i].want);
        /* The reference must agree too, or it is the reference that is off. */
        cr_expect_eq(ref_fp8_encode(&REF_E4M3, cases[i].x), cases[i].want, "ref: %s",
                     cases[i].what);
    }
}

Test(numerics, e5m2_encode_named_cases)
{
    const enc_case cases[] = {
        {0.0f, 0x00, "+0"},
        {-0.0f, 0x80, "-0"},
        {1.0f, 0x3C, "1"},
        {-2.0f, 0xC0, "-2"},
        {1.125f, 0x3C, "1.125: tie 0x3C/0x3D -> even 0x3C"},
        {1.375f, 0x3E, "1.375: tie 0x3D/0x3E -> even 0x3E"},
        {49152.0f, 0x7A, "49152"},
        {53248.0f, 0x7A, "53248: tie 0x7A/0x7B -> even 0x7A"},
        {57344.0f, 0x7B, "57344 = max"},
        {61440.0f, 0x7B, "61440: tie max / (65536) -> saturate"},
        {65536.0f, 0x7B, "65536: saturate, not inf"},
        {1e9f, 0x7B, "1e9"},
        {INFINITY, 0x7B, "+inf: saturate"},
        {-INFINITY, 0xFB, "-inf: saturate"},
        {0x1p-16f, 0x01, "2^-16: min subnormal"},
        {0x1p-17f, 0x00, "2^-17: tie -> even 0"},
        {-0x1p-17f, 0x80, "-2^-17 -> -0"},
        {1.5f * 0x1p-17f, 0x01, "1.5*2^-17"},
        {3.0f * 0x1p-17f, 0x02, "3*2^-17: tie -> even 0x02"},
        {0.75f * 0x1p-14f, 0x03, "max subnormal"},
        {7.0f * 0x1p-17f, 0x04, "7*2^-17: tie max subnormal / min normal -> 0x04"},
        {0x1p-14f, 0x04, "2^-14: min normal"},
        {NAN, 0x7F, "NaN"},
        {-NAN, 0x7F, "-NaN -> 0x7F (CUDA)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint8_t got = fp8_e5m2_encode(cases[i].x);
        cr_expect_eq(got, cases[i].want, "%s: got 0x%02X want 0x%02X", cases[i].what, got,
                     cases[i].want);
        cr_expect_eq(ref_fp8_encode(&REF_E5M2, cases[i].x), cases[i].want, "ref: %s",
                     cases[i].what);
    }
}

Test(numerics, e4m3_encode_scaled_named_cases)
{
    cr_assert_eq(fp8_e4m3_encode_scaled(896.0f, 2.0f), 0x7E, "896/2 = 448");
    cr_assert_eq(fp8_e4m3_encode_scaled(900.0f, 2.0f), 0x7E, "450 saturates");
    cr_assert_eq(fp8_e4m3_encode_scaled(1.0f, 1.0f / 448.0f), 0x7E, "1/(1/448) ~ 448");
    cr_assert_eq(fp8_e4m3_encode_scaled(-3.0f, 0.5f), 0xCC, "-6 = -1.5*2^2");
    cr_assert_eq(fp8_e4m3_encode_scaled(1.0f, 0.0f), 0x7E, "x/0 = inf saturates");
    cr_assert_eq(fp8_e4m3_encode_scaled(0.0f, 0.0f), 0x7F, "0/0 = NaN");
    cr_assert_eq(fp8_e4m3_encode_scaled(NAN, 1.0f), 0x7F, "NaN");
    /* The quotient is rounded to fp32 first: 0.1f / 3.0f is not 0.1/3. */
    const float y = 0.1f / 3.0f;
    cr_assert_eq(fp8_e4m3_encode_scaled(0.1f, 3.0f), fp8_e4m3_encode(y));
}

/* ---- round trip --------------------------------------------------------- */

Test(numerics, fp8_round_trip)
{
    for (unsigned b = 0; b < 256u; b++) {
        const float v4 = fp8_e4m3_decode((uint8_t)b);
        if (!isnan(v4)) {
            cr_assert_eq(fp8_e4m3_encode(v4), b, "e4m3 0x%02X", b);
            cr_assert(same_f32(fp8_e4m3_decode(fp8_e4m3_encode(v4)), v4), "e4m3 0x%02X", b);
        }
        const float v5 = fp8_e5m2_decode((uint8_t)b);
        if (isnan(v5)) continue;
        if (isinf(v5)) {
            cr_assert_eq(fp8_e5m2_encode(v5), (b & 0x80u) | 0x7Bu, "e5m2 inf saturates");
        } else {
            cr_assert_eq(fp8_e5m2_encode(v5), b, "e5m2 0x%02X", b);
            cr_assert(same_f32(fp8_e5m2_decode(fp8_e5m2_encode(v5)), v5), "e5m2 0x%02X", b);
        }
    }
}

/* ---- bf16 encode -------------------------------------------------------- */

/* Checks one fp32 pattern; returns 1 on mismatch. */
static int bf16_mismatch(uint32_t u)
{
    const float x = bits_f32(u);
    const uint16_t got = bf16_from_f32(x);
    if (isnan(x)) {
        /* NaN stays NaN, quiet, sign kept. */
        return !(isnan(bf16_to_f32(got)) && (got & 0x0040u) && (got >> 15) == (u >> 31));
    }
    return got != ref_bf16_from_f32(x);
}

Test(numerics, bf16_from_f32_sweep)
{
    unsigned bad = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4099u) {
        if (bf16_mismatch((uint32_t)u) && bad++ == 0) first = (uint32_t)u;
    }
    /* Every bf16 value: exact, just below / at / just above the tie to the
     * next one, and just below the next one. */
    const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
    for (uint32_t h = 0; h <= 0xFFFFu; h++) {
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
            const uint32_t u = (h << 16) | lows[i];
            if (bf16_mismatch(u) && bad++ == 0) first = u;
        }
    }
    cr_assert_eq(bad, 0u, "%u mismatches; first fp32 0x%08X: got 0x%04X want 0x%04X", bad,
                 first, bf16_from_f32(bits_f32(first)), ref_bf16_from_f32(bits_f32(first)));
}

Test(numerics, bf16_from_f32_named_cases)
{
    const struct {
        uint32_t in;
        uint16_t want;
        const char *what;
    } cases[] = {
        {0x3F800000u, 0x3F80u, "1.0"},
        {0x3F808000u, 0x3F80u, "tie, even lsb stays"},
        {0x3F818000u, 0x3F82u, "tie, odd lsb rounds up"},
        {0x3F808001u, 0x3F81u, "just above tie"},
        {0x3F807FFFu, 0x3F80u, "just below tie"},
        {0x3F7FFFFFu, 0x3F80u, "carry into exponent"},
        {0x7F7F7FFFu, 0x7F7Fu, "just below overflow threshold"},
        {0x7F7F8000u, 0x7F80u, "overflow threshold -> +inf"},
        {0xFF7F8000u, 0xFF80u, "overflow threshold -> -inf"},
        {0x7F7E8000u, 0x7F7Eu, "tie below max, even"},
        {0x7F800000u, 0x7F80u, "+inf"},
        {0xFF800000u, 0xFF80u, "-inf"},
        {0x00000000u, 0x0000u, "+0"},
        {0x80000000u, 0x8000u, "-0"},
        {0x00008000u, 0x0000u, "fp32 subnormal tie -> +0"},
        {0x80008000u, 0x8000u, "negative subnormal tie -> -0"},
        {0x00018000u, 0x0002u, "subnormal tie, odd -> up"},
        {0x007FFFFFu, 0x0080u, "largest fp32 subnormal -> bf16 min normal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = bf16_from_f32(bits_f32(cases[i].in));
        cr_expect_eq(got, cases[i].want, "%s: got 0x%04X want 0x%04X", cases[i].what, got,
                     cases[i].want);
        cr_expect_eq(ref_bf16_from_f32(bits_f32(cases[i].in)), cases[i].want, "ref: %s",
                     cases[i].what);
    }
    /* NaNs: a signalling NaN whose payload sits only in the dropped bits
     * must not turn into inf. */
    cr_assert_eq(bf16_from_f32(bits_f32(0x7F800001u)), 0x7FC0u);
    cr_assert_eq(bf16_from_f32(bits_f32(0xFF800001u)), 0xFFC0u);
    cr_assert_eq(bf16_from_f32(bits_f32(0x7FC00000u)), 0x7FC0u);
    cr_assert_eq(bf16_from_f32(bits_f32(0xFFFFFFFFu)), 0xFFFFu);
}

/* ---- quantize stats, amax, scale ---------------------------------------- */

/* bf16 bits of an fp32 value that must be exact in bf16. */
static uint16_t exact_bf16(float x)
{
    const uint16_t h = bf16_from_f32(x);
    cr_assert(same_f32(bf16_to_f32(h), x), "%a is not a bf16 value", (double)x);
    return h;
}

Test(numerics, quantize_stats_hand_made)
{
    const uint16_t x[] = {
        exact_bf16(0.0f),        /* zero */
        exact_bf16(-0.0f),       /* zero */
        exact_bf16(1.0f),        /* plain */
        exact_bf16(500.0f),      /* saturated */
        exact_bf16(-1000.0f),    /* saturated */
        exact_bf16(448.0f),      /* max, not saturated */
        exact_bf16(464.0f),      /* > 448: saturated though RNE would give 448 too */
        exact_bf16(0x1p-11f),    /* underflow */
        exact_bf16(-0x1p-12f),   /* underflow, -0 */
        exact_bf16(0x1p-10f),    /* tie to 0: underflow */
        exact_bf16(0x1p-9f),     /* min subnormal: kept */
        exact_bf16(INFINITY),    /* saturated, nonzero */
        0x7FC0u,                 /* NaN: nonzero only */
        0xFFC1u,                 /* -NaN: nonzero only */
    };
    const uint8_t want_out[] = {0x00, 0x80, 0x38, 0x7E, 0xFE, 0x7E, 0x7E,
                                0x00, 0x80, 0x00, 0x01, 0x7E, 0x7F, 0x7F};
    const size_t n = sizeof x / sizeof x[0];
    cr_assert_eq(n, sizeof want_out);
    uint8_t out[sizeof want_out];
    fp8_quant_stats st = {0};
    fp8_e4m3_quantize_bf16(x, n, 1.0f, out, &st);
    cr_assert_eq(st.n, 14u);
    cr_assert_eq(st.n_saturated, 4u);
    cr_assert_eq(st.n_nonzero, 12u);
    cr_assert_eq(st.n_underflow, 3u);
    cr_assert_arr_eq(out, want_out, n);

    /* Counters accumulate; out may be NULL. */
    fp8_e4m3_quantize_bf16(x, n, 1.0f, NULL, &st);
    cr_assert_eq(st.n, 28u);
    cr_assert_eq(st.n_saturated, 8u);
    cr_assert_eq(st.n_nonzero, 24u);
    cr_assert_eq(st.n_underflow, 6u);

    /* The scale applies before the tests: with scale 2, 500 / 2 = 250 and
     * 464 / 2 = 232 fit, 1000 / 2 = 500 does not, 2^-9 / 2 ties to 0. */
    fp8_quant_stats s2 = {0};
    fp8_e4m3_quantize_bf16(x, n, 2.0f, NULL, &s2);
    cr_assert_eq(s2.n_saturated, 2u, "-1000 and inf");
    cr_assert_eq(s2.n_underflow, 4u);
    cr_assert_eq(s2.n_nonzero, 12u);

    /* stats may be NULL. */
    fp8_e4m3_quantize_bf16(x, n, 1.0f, out, NULL);
    cr_assert_arr_eq(out, want_out, n);
}

/* Over every bf16 value, out matches the scalar encoder and the counters
 * match counts taken here from their definitions. */
Test(numerics, quantize_all_bf16_consistent)
{
    static uint16_t x[65536];
    static uint8_t out[65536];
    for (uint32_t h = 0; h <= 0xFFFFu; h++) x[h] = (uint16_t)h;
    const float scale = 0.0173f;
    fp8_quant_stats st = {0};
    fp8_e4m3_quantize_bf16(x, 65536, scale, out, &st);
    uint64_t sat = 0, nz = 0, uf = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h++) {
        const float v = bf16_to_f32((uint16_t)h);
        const float y = v / scale;
        cr_assert_eq(out[h], fp8_e4m3_encode_scaled(v, scale), "bf16 0x%04X", h);
        sat += !isnan(y) && fabsf(y) > FP8_E4M3_MAX;
        nz += !(v == 0.0f);
        uf += !(v == 0.0f) && (out[h] == 0x00 || out[h] == 0x80);
    }
    cr_assert_eq(st.n, 65536u);
    cr_assert_eq(st.n_saturated, sat);
    cr_assert_eq(st.n_nonzero, nz);
    cr_assert_eq(st.n_underflow, uf);
    cr_assert_eq(nz, 65534u, "only +-0 are zero; NaNs count as nonzero");
    cr_assert(sat > 0 && uf > 0);
}

Test(numerics, bf16_amax)
{
    const uint16_t a[] = {exact_bf16(1.0f), exact_bf16(-3.0f), 0x7FC0u, exact_bf16(2.0f),
                          0xFFFFu};
    cr_assert_eq(bf16_amax(a, 5), 3.0f, "NaN ignored, |-3| wins");
    const uint16_t nans[] = {0x7FC0u, 0xFF81u};
    cr_assert_eq(bf16_amax(nans, 2), 0.0f, "all NaN -> 0");
    cr_assert_eq(bf16_amax(NULL, 0), 0.0f, "empty -> 0");
    const uint16_t zeros[] = {0x8000u, 0x0000u};
    cr_assert(same_f32(bf16_amax(zeros, 2), 0.0f), "+-0 -> +0");
    const uint16_t inf[] = {exact_bf16(5.0f), 0xFF80u, 0x7FC0u};
    cr_assert(isinf(bf16_amax(inf, 3)) && bf16_amax(inf, 3) > 0, "-inf -> +inf");
    const uint16_t tiny[] = {0x8001u};
    cr_assert_eq(bf16_amax(tiny, 1), 0x1p-133f, "bf16 min subnormal");
    /* Largest finite bf16, over all 65536 minus NaNs and infs. */
    static uint16_t all[65536];
    size_t k = 0;
    for (uint32_t h = 0; h <= 0xFFFFu; h++)
        if ((h & 0x7FFFu) < 0x7F80u) all[k++] = (uint16_t)h;
    cr_assert_eq(bf16_amax(all, k), (float)REF_BF16_MAX);
}

Test(numerics, e4m3_calibrated_scale)
{
    cr_assert_eq(fp8_e4m3_calibrated_scale(0.0f), 1.0f);
    /* every amax-based policy: amax 0 gives 1.0, never a 0 scale */
    cr_assert_eq(fp8_scale_from_amax(0.0f, 200.0f), 1.0f);
    cr_assert_eq(fp8_scale_from_amax(-0.0f, 100.0f), 1.0f);
    cr_assert_eq(fp8_scale_from_amax(3.0f, 200.0f), 3.0f / 200.0f);
    cr_assert_eq(fp8_e4m3_calibrated_scale(-0.0f), 1.0f);
    cr_assert_eq(fp8_e4m3_calibrated_scale(448.0f), 1.0f);
    cr_assert_eq(fp8_e4m3_calibrated_scale(896.0f), 2.0f);
    cr_assert_eq(fp8_e4m3_calibrated_scale(1.0f), 1.0f / 448.0f);
    cr_assert_eq(fp8_e4m3_calibrated_scale(3.0f), 3.0f / 448.0f);
    /* The smallest nonzero bf16 amax still gives a nonzero scale. */
    cr_assert_gt(fp8_e4m3_calibrated_scale(0x1p-133f), 0.0f);
    /* Non-finite amax is passed through (callers reject it earlier). */
    cr_assert(isinf(fp8_e4m3_calibrated_scale(INFINITY)));
    cr_assert(isnan(fp8_e4m3_calibrated_scale(NAN)));
    /* amax maps to 448 (or to the fp8 value nearest it) after scaling. */
    const float amaxes[] = {1.0f, 3.0f, 0.0173f, 1234.5f, 7e-5f};
    for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++) {
        const float s = fp8_e4m3_calibrated_scale(amaxes[i]);
        cr_assert_eq(fp8_e4m3_encode_scaled(amaxes[i], s), 0x7E, "amax %a", (double)amaxes[i]);
    }
}
