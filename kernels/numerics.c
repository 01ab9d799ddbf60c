/*
 * numerics.c: bf16, OCP fp8 (e4m3fn, e5m2) and int8 conversions (see numerics.h).
 *
 * All encoders work on the IEEE binary32 bit pattern with integer
 * arithmetic only: they run on every element of large tensors, and integer
 * rounding is exact by construction (no double rounding, no dependence on
 * the FPU rounding mode or on -ffast-math). Decoders build the binary32 bit
 * pattern directly, except for fp8 subnormals, which are small integers
 * times a power of two and so are exact as a float product.
 */
#include "numerics.h"

#include <math.h>
#include <string.h>

/* ---- IEEE 754 binary32 layout ------------------------------------------ */

/* Bits of the binary32 significand field (IEEE 754-2019, 3.4). */
#define F32_MAN_BITS 23u
/* Exponent bias of binary32. */
#define F32_BIAS 127u
/* Sign bit of binary32. */
#define F32_SIGN_MASK 0x80000000u
/* Everything but the sign bit. */
#define F32_ABS_MASK 0x7FFFFFFFu
/* +inf; an |x| pattern above it is a NaN. */
#define F32_INF_BITS 0x7F800000u
/* The implicit leading significand bit of a normal binary32. */
#define F32_IMPLICIT_BIT (1u << F32_MAN_BITS)
/* A quiet NaN with an empty payload. */
#define F32_QNAN_BITS 0x7FC00000u

/* ---- bf16: the top 16 bits of a binary32 -------------------------------- */

/* Bits dropped when a binary32 is cut to bf16. */
#define BF16_SHIFT 16u
/* The quiet bit of a bf16 NaN (top bit of its 7-bit significand). */
#define BF16_QUIET_BIT 0x0040u
/* |h| pattern of bf16 +inf; an |h| above it is a NaN. */
#define BF16_INF_BITS 0x7F80u
/* Everything but the bf16 sign bit. */
#define BF16_ABS_MASK 0x7FFFu

/* ---- OCP fp8 (arXiv 2209.05433, Table 1) -------------------------------- */

/* e4m3fn: 3 significand bits, bias 7, max 448 = 0x7E, NaN = S.1111.111. */
#define E4M3_MAN_BITS 3u
#define E4M3_BIAS 7u
#define E4M3_MAX_CODE 0x7Eu
#define E4M3_NAN_MAG 0x7Fu
/* binary32 pattern of 448.0f = 1.75 * 2^8. */
#define E4M3_MAX_F32_BITS 0x43E00000u
/* 464 = 448 + half of e4m3's step of 32 there: nearest-even rounding on an
 * unbounded e4m3 grid takes every |y| <= 464 to 448 (464 is a tie, 448 the
 * even side), so only past it does the encoder's saturation change a code. */
#define E4M3_CLIPS_ABOVE_F32_BITS 0x43E80000u

/* e5m2: 2 significand bits, bias 15, max 57344 = 0x7B, inf = S.11111.00,
 * NaN = S.11111.{01,10,11}. */
#define E5M2_MAN_BITS 2u
#define E5M2_BIAS 15u
#define E5M2_MAX_CODE 0x7Bu
#define E5M2_INF_CODE 0x7Cu
/* binary32 pattern of 57344.0f = 1.75 * 2^15. */
#define E5M2_MAX_F32_BITS 0x47600000u

/* Sign bit of an fp8 byte, and the rest of it. */
#define FP8_SIGN_BIT 0x80u
#define FP8_ABS_MASK 0x7Fu
/* Shift that moves the binary32 sign bit onto the fp8 sign bit. */
#define F32_TO_FP8_SIGN_SHIFT 24u

/* int8 codes: 256 of them, the negatives from 0x80 (two's complement);
 * 0x80 (-128) is what an unwritten slot holds (vLLM's write never gives it). */
#define INT8_CODE_COUNT 256u
#define INT8_CODES_NEGATIVE 0x80u
#define INT8_UNWRITTEN_CODE 0x80u
/* What an unwritten int4 slot holds: above every code 0..15 (its NaN scale
 * marks it too). */
#define INT4_UNWRITTEN_CODE 0xFFu
/* And of an unwritten nvfp4 slot (the codes are 0 .. 15; its NaN block
 * scales mark it). */
#define NVFP4_UNWRITTEN_CODE 0xFFu

uint16_t bf16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & F32_ABS_MASK) > F32_INF_BITS) {
        /* NaN: keep sign and the top of the payload, force the quiet bit so
         * that a payload living only in the dropped bits stays a NaN. */
        return (uint16_t)((u >> BF16_SHIFT) | BF16_QUIET_BIT);
    }
    /* Round to nearest even on the 16 dropped bits: add just under half an
     * ulp, plus one when the kept lsb is odd. A carry out of the significand
     * bumps the exponent, which is exactly right, up to and including
     * overflow to inf (|u| >= 0x7F7F8000). No u32 overflow: |u| <= inf. */
    u += ((1u << (BF16_SHIFT - 1u)) - 1u) + ((u >> BF16_SHIFT) & 1u);
    return (uint16_t)(u >> BF16_SHIFT);
}

/* binary16: 5 exponent bits (bias 15), 10 mantissa bits (IEEE 754-2008). */
#define F16_SIGN_BIT 0x8000u
#define F16_INF_BITS 0x7C00u
#define F16_QUIET_BIT 0x0200u
#define F16_MAN_BITS 10
#define F16_MAN_MASK 0x3FFu
#define F16_EXP_MASK 0x1Fu
/* The binary32 patterns of 65520 (half-way between fp16's max 65504 and
 * 2^16: it and above round to inf) and of 2^-14 (fp16's least normal). */
#define F16_ROUNDS_TO_INF_F32_BITS 0x477FF000u
#define F16_MIN_NORMAL_F32_BITS 0x38800000u
/* binary32's exponent bias less binary16's, in the exponent field. */
#define F32_TO_F16_REBIAS ((uint32_t)(127 - 15) << 23)
/* 2^24: an fp16 subnormal's code is its value over 2^-24. */
#define F16_SUBNORMAL_UNITS 16777216.0f

uint16_t fp16_from_f32(float x)
{
    const uint32_t u = f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & F16_SIGN_BIT);
    const uint32_t a = u & F32_ABS_MASK;
    if (a > F32_INF_BITS) return (uint16_t)(sign | F16_INF_BITS | F16_QUIET_BIT | ((a >> 13) & F16_MAN_MASK));
    if (a >= F16_ROUNDS_TO_INF_F32_BITS) return (uint16_t)(sign | F16_INF_BITS);
    if (a >= F16_MIN_NORMAL_F32_BITS) {
        /* rebias, then nearest even on the 13 dropped bits (a carry bumps the exponent) */
        uint32_t r = a - F32_TO_F16_REBIAS;
        r += 0xFFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    /* subnormal or zero: |x| * 2^24 is exact; rintf rounds it to nearest even (a
     * result of 1024 is the least normal's code, which is right) */
    return (uint16_t)(sign | (uint16_t)rintf(f32_from_bits(a) * F16_SUBNORMAL_UNITS));
}

float fp16_to_f32(uint16_t h)
{
    const unsigned e = (h >> F16_MAN_BITS) & F16_EXP_MASK, m = h & F16_MAN_MASK;
    const float sign = (h & F16_SIGN_BIT) ? -1.0f : 1.0f;
    if (e == 0) return sign * ((float)m / F16_SUBNORMAL_UNITS);
    if (e == F16_EXP_MASK) return m ? NAN : sign * INFINITY;
    return f32_from_bits(((uint32_t)(h & F16_SIGN_BIT) << 16) |
                         ((e + 127u - 15u) << 23) | ((uint32_t)m << 13));
}

/*
 * Rounds the binary32 pattern u to an OCP fp8 format with man_bits
 * significand bits and exponent bias `bias`, to nearest even, saturating
 * every |x| > max (max_f32_bits, inf included) to +-max_code; a NaN gives
 * FP8_NAN_BITS. The caller passes constants, so each format gets its own
 * branch-light specialization. Both formats share the layout
 * S.E...E.M...M, so a normal fp8 code is (fp8 exponent << man_bits) | man.
 */
static inline uint8_t fp8_round(uint32_t u, unsigned man_bits, unsigned bias,
                                uint32_t max_f32_bits, unsigned max_code)
{
    const unsigned sign = (unsigned)(u >> F32_TO_FP8_SIGN_SHIFT) & FP8_SIGN_BIT;
    const uint32_t a = u & F32_ABS_MASK;
    /* Significand bits of binary32 that do not fit in the fp8 significand. */
    const unsigned drop = F32_MAN_BITS - man_bits;
    /* binary32 biased exponent of the fp8 minimum normal 2^(1 - bias). */
    const uint32_t min_normal_exp = F32_BIAS - bias + 1u;

    if (a > F32_INF_BITS) return (uint8_t)FP8_NAN_BITS;
    if (a > max_f32_bits) return (uint8_t)(sign | max_code);

    if (a >= (min_normal_exp << F32_MAN_BITS)) {
        /* Normal: rebias the exponent field in place, then round off `drop`
         * bits to nearest even. A significand carry moves into the exponent
         * (e.g. 0.9999 -> 1.0); a <= max keeps the result <= max_code. */
        uint32_t v = a - ((F32_BIAS - bias) << F32_MAN_BITS);
        v += ((1u << (drop - 1u)) - 1u) + ((v >> drop) & 1u);
        return (uint8_t)(sign | (v >> drop));
    }

    /* Subnormal target: the code is round(|x| / 2^(1 - bias - man_bits)),
     * an integer in [0, 2^man_bits]; 2^man_bits is the minimum normal code,
     * reached by carry. With |x| = M * 2^(E - 150), M the 24-bit significand
     * with its implicit bit, that is round(M >> shift) for the shift below. */
    const uint32_t e = a >> F32_MAN_BITS;
    const int shift = (int)(F32_BIAS + F32_MAN_BITS + 1u - bias - man_bits)
                      - (int)e;
    /* M < 2^24 <= half of 2^shift: rounds to zero (binary32 subnormals and
     * zeros land here too, as their e is 0). Sign kept: -tiny -> -0. */
    if (shift > (int)(F32_MAN_BITS + 1u)) return (uint8_t)sign;
    const uint32_t m = (a & (F32_IMPLICIT_BIT - 1u)) | F32_IMPLICIT_BIT;
    const uint32_t q = (m + ((1u << (shift - 1)) - 1u) + ((m >> shift) & 1u))
                       >> shift;
    return (uint8_t)(sign | q);
}

uint8_t fp8_e4m3_encode(float x)
{
    return fp8_round(f32_bits(x), E4M3_MAN_BITS, E4M3_BIAS,
                     E4M3_MAX_F32_BITS, E4M3_MAX_CODE);
}

uint8_t fp8_e5m2_encode(float x)
{
    return fp8_round(f32_bits(x), E5M2_MAN_BITS, E5M2_BIAS,
                     E5M2_MAX_F32_BITS, E5M2_MAX_CODE);
}

/*
 * The exact binary32 value of the fp8 byte b in a format with man_bits
 * significand bits and bias `bias`, for codes that are neither NaN nor inf
 * (the callers filter those). Subnormals are mantissa * 2^(1-bias-man_bits),
 * a product of a small integer and a power of two, exact in binary32.
 */
static inline float fp8_decode_finite(unsigned b, unsigned man_bits,
                                      unsigned bias, float subnormal_unit)
{
    const unsigned mag = b & FP8_ABS_MASK;
    const uint32_t sign = (uint32_t)(b & FP8_SIGN_BIT) << F32_TO_FP8_SIGN_SHIFT;
    const unsigned exp = mag >> man_bits;
    const unsigned man = mag & ((1u << man_bits) - 1u);
    if (exp == 0u) {
        float v = (float)man * subnormal_unit;
        return sign ? -v : v; /* b = 0x80 gives -0 */
    }
    return f32_from_bits(sign | ((exp + F32_BIAS - bias) << F32_MAN_BITS)
                         | ((uint32_t)man << (F32_MAN_BITS - man_bits)));
}

/* e4m3fn smallest subnormal 2^-9 (OCP spec, Table 1). */
#define E4M3_SUBNORMAL_UNIT 0x1p-9f
/* e5m2 smallest subnormal 2^-16 (OCP spec, Table 1). */
#define E5M2_SUBNORMAL_UNIT 0x1p-16f

float fp8_e4m3_decode(uint8_t b)
{
    if ((b & FP8_ABS_MASK) == E4M3_NAN_MAG) {
        /* 0x7F / 0xFF: a quiet NaN with the byte's sign. */
        return f32_from_bits(F32_QNAN_BITS
                             | ((uint32_t)(b & FP8_SIGN_BIT) << F32_TO_FP8_SIGN_SHIFT));
    }
    return fp8_decode_finite(b, E4M3_MAN_BITS, E4M3_BIAS, E4M3_SUBNORMAL_UNIT);
}

float fp8_e5m2_decode(uint8_t b)
{
    const uint32_t sign = (uint32_t)(b & FP8_SIGN_BIT) << F32_TO_FP8_SIGN_SHIFT;
    const unsigned mag = b & FP8_ABS_MASK;
    if (mag == E5M2_INF_CODE) return f32_from_bits(sign | F32_INF_BITS);
    if (mag > E5M2_INF_CODE) return f32_from_bits(sign | F32_QNAN_BITS);
    return fp8_decode_finite(b, E5M2_MAN_BITS, E5M2_BIAS, E5M2_SUBNORMAL_UNIT);
}

/*
 * The quotient is a plain binary32 division, as in vLLM's kernel (its
 * build does not use fast math for this file); this file is compiled
 * without fast math or contraction, so it is the correctly rounded
 * quotient. A zero scale gives +-inf -> +-448 for x != 0 and NaN -> 0x7F
 * for x = 0; callers pass a positive finite scale.
 */
uint8_t fp8_e4m3_encode_scaled(float x, float scale)
{
    return fp8_e4m3_encode(x / scale);
}

/*
 * Statistics, per value x (as fp32) and y = x / scale (fp32 quotient):
 *   n_saturated: |y| > 448, infinities included; NaN never counts.
 *   n_nonzero:   x != 0 as an IEEE comparison, so a NaN counts (it is not a
 *                zero, and it does not become one); n - n_nonzero is exactly
 *                the number of +-0 inputs.
 *   n_underflow: x != 0 and the byte is +-0 (0x00 / 0x80). A NaN encodes to
 *                0x7F, so it never counts; n_underflow <= n_nonzero.
 * The counters are added to, never reset, so one stats can span tensors.
 */
/* Adds one row's counters to *stats (NULL: nowhere). */
static void stats_add(fp8_quant_stats *stats, size_t n, uint64_t n_sat, uint64_t n_nz,
                      uint64_t n_uf)
{
    if (stats == NULL) return;
    stats->n += (uint64_t)n;
    stats->n_saturated += n_sat;
    stats->n_nonzero += n_nz;
    stats->n_underflow += n_uf;
}

/* The loop of the quantizers: y = x / scale, or x * scale when by_inverse
 * (scale is then the inverse), encoded to e5m2 when e5m2 (its largest finite
 * value's bits are the saturation bound), else to e4m3. */
static void quantize_bf16(const uint16_t *x, size_t n, float scale, int by_inverse, int e5m2,
                          uint32_t max_bits, uint8_t *out, fp8_quant_stats *stats)
{
    uint64_t n_sat = 0, n_nz = 0, n_uf = 0;
    for (size_t i = 0; i < n; i++) {
        const float xf = bf16_to_f32(x[i]);
        const float y = by_inverse ? xf * scale : xf / scale;
        const uint8_t b = e5m2 ? fp8_e5m2_encode(y) : fp8_e4m3_encode(y);
        if (out != NULL) out[i] = b;
        /* |y| > max_bits' value on the bit pattern: NaN patterns exceed
         * inf's and are excluded by the upper bound. */
        const uint32_t ay = f32_bits(y) & F32_ABS_MASK;
        n_sat += (ay > max_bits && ay <= F32_INF_BITS);
        const int nz = (xf != 0.0f);
        n_nz += (uint64_t)nz;
        n_uf += (uint64_t)(nz && (b & FP8_ABS_MASK) == 0u);
    }
    stats_add(stats, n, n_sat, n_nz, n_uf);
}

void fp8_e4m3_quantize_bf16(const uint16_t *x, size_t n, float scale,
                            uint8_t *out, fp8_quant_stats *stats)
{
    quantize_bf16(x, n, scale, 0, 0, E4M3_MAX_F32_BITS, out, stats);
}

void fp8_e5m2_quantize_bf16(const uint16_t *x, size_t n, float scale,
                            uint8_t *out, fp8_quant_stats *stats)
{
    quantize_bf16(x, n, scale, 0, 1, E5M2_MAX_F32_BITS, out, stats);
}

/*
 * vLLM's scaled_fp8_quant_kernel: "Invert the scale so that we can use
 * multiplications to avoid expensive division": inverted_scale = 1.0f /
 * (*scale), then x * inverted_scale (csrc/quantization/w8a8/fp8/common.cu; older trees csrc/quantization/fp8/).
 */
void fp8_e4m3_quantize_bf16_inverse(const uint16_t *x, size_t n, float scale,
                                    uint8_t *out, fp8_quant_stats *stats)
{
    quantize_bf16(x, n, 1.0f / scale, 1, 0, E4M3_MAX_F32_BITS, out, stats);
}

/* A per-token-head row's scale, as vLLM's cache-write kernel computes it
 * for every such format: tl.maximum(absmax / quant_max, 1e-6) in fp32. */
static float per_token_head_scale(const uint16_t *x, size_t n, float quant_max)
{
    const float scale = bf16_amax(x, n) / quant_max;
    return scale >= FP8_PER_TOKEN_HEAD_MIN_SCALE ? scale : FP8_PER_TOKEN_HEAD_MIN_SCALE;
}

/*
 * vLLM's per-token-head cache write, one (token, KV head) row
 * (vllm/v1/attention/ops/triton_quant_kv/_per_token_head_core.py
 * _reshape_cache_per_token_head_kernel, QUANT_MAX 448 for float8_e4m3fn):
 *   x in fp32; scale = tl.maximum(tl.max(tl.abs(x)) / QUANT_MAX, 1e-6);
 *   q = tl.clamp(x * (1.0 / scale), -448, 448), stored to the e4m3 cache
 *   (Triton's fp32 -> fp8e4nv store: cvt.rn.satfinite.e4m3x2.f32).
 * The two divisions are binary32 divisions here, correctly rounded; Triton
 * lowers an fp32 '/' to div.full.f32 (at most 2 ulp off), which only the
 * GPU check can hold to this (issue #31). The clamp changes nothing the
 * saturating encode would not. n_saturated counts |y| > 464, the values the
 * saturation changes (E4M3_CLIPS_ABOVE_F32_BITS): the row's own absmax
 * lands within rounding of 448, on either side, and is no clipping, so a
 * row scale never saturates its row (only a value past 464 would count).
 */
float fp8_e4m3_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                            fp8_quant_stats *stats)
{
    const float scale = per_token_head_scale(x, n, FP8_E4M3_MAX);
    quantize_bf16(x, n, 1.0f / scale, 1, 0, E4M3_CLIPS_ABOVE_F32_BITS, out, stats);
    return scale;
}

float int8_decode(uint8_t b)
{
    return b < INT8_CODES_NEGATIVE ? (float)b : (float)b - (float)INT8_CODE_COUNT;
}

/*
 * vLLM's int8_per_token_head cache write, one (token, KV head) row: the
 * same kernel as the fp8 one above (_per_token_head_core.py
 * _reshape_cache_per_token_head_kernel) with QUANT_MAX 127, QUANT_MIN -128:
 *   scale = tl.maximum(tl.max(tl.abs(x)) / 127, 1e-6);
 *   q = tl.clamp(x * (1.0 / scale), -128, 127), stored to the int8 cache.
 * The store casts fp32 to int8 as Triton casts a float to a signed integer
 * (triton/language/semantic.py cast: fp_to_si, LLVM fptosi), which rounds
 * toward zero: the codes are truncated, not rounded. The module's
 * docstring says round(x / scale), and vLLM's test reference rounds too,
 * though its own QuantConfig says "INT8 Triton stores truncate"
 * (tests/quantization/test_per_token_kv_cache.py, uses_trunc=True; its
 * tolerance of 0.1 cannot tell them apart). The kernel, not the docstring,
 * is what serves. After the clamp |y| <= 127 + a few ulp, so -128 is never
 * written (0x80 is what an unwritten slot holds). A NaN y (unreachable: a
 * capture with NaN or Inf is refused) gives code 0 here.
 */
float int8_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                        fp8_quant_stats *stats)
{
    const float scale = per_token_head_scale(x, n, INT8_PER_TOKEN_HEAD_QUANT_MAX);
    const float inv = 1.0f / scale;
    uint64_t n_sat = 0, n_nz = 0, n_uf = 0;
    for (size_t i = 0; i < n; i++) {
        const float xf = bf16_to_f32(x[i]);
        float y = xf * inv;
        /* the clamp changes a truncated code only from 128 up or -129 down: the
         * row's absmax, within rounding of +-127, is no clipping */
        n_sat += (uint64_t)(y >= INT8_PER_TOKEN_HEAD_QUANT_MAX + 1.0f ||
                            y <= INT8_PER_TOKEN_HEAD_QUANT_MIN - 1.0f);
        if (y > INT8_PER_TOKEN_HEAD_QUANT_MAX || y < INT8_PER_TOKEN_HEAD_QUANT_MIN)
            y = y > 0.0f ? INT8_PER_TOKEN_HEAD_QUANT_MAX : INT8_PER_TOKEN_HEAD_QUANT_MIN;
        const int is_number = (y == y);
        const int code = is_number ? (int)y : 0; /* C's float -> int conversion truncates */
        if (out != NULL) out[i] = (uint8_t)(code < 0 ? code + (int)INT8_CODE_COUNT : code);
        const int nz = (xf != 0.0f);
        n_nz += (uint64_t)nz;
        n_uf += (uint64_t)(nz && is_number && code == 0);
    }
    stats_add(stats, n, n_sat, n_nz, n_uf);
    return scale;
}

/* int4 codes round half away from zero as vLLM's kernel writes it:
 * (v + 0.5).to(int32) for v >= 0, (v - 0.5).to(int32) below (truncating casts). */
static int int4_round_half_away(float v)
{
    return v >= 0.0f ? (int)(v + 0.5f) : (int)(v - 0.5f);
}

/* v clamped to [0, INT4_CODE_MAX]. */
static int int4_clamp(int v)
{
    return v < 0 ? 0 : v > INT4_CODE_MAX ? INT4_CODE_MAX : v;
}

float int4_decode(uint8_t b) { return (float)b; }

void int4_split_scale(float stored, float *scale, float *zero_point)
{
    const uint32_t u = f32_bits(stored);
    *scale = f32_from_bits(u & ~INT4_ZERO_POINT_MASK);
    *zero_point = (float)(u & INT4_ZERO_POINT_MASK);
}

/*
 * vLLM's int4_per_token_head cache write, one (token, KV head) row of the
 * rotated K or V (vllm/v1/attention/ops/triton_quant_kv/int4_per_token_head.py
 * _reshape_cache_int4_kernel, PR #40835, read at 1882959):
 *   x in fp32; scale = tl.maximum((max(x) - min(x)) / 15.0, 1e-6);
 *   zp = clamp(round_half_away(-min / scale), 0, 15);
 *   code = clamp(round_half_away(x * (1.0 / scale) + zp), 0, 15);
 *   stored scale = bitcast((bits(scale) & -16) | zp) ("zero-point steganography").
 * The codes use the unmasked scale, the reader the masked one (2^-19 apart
 * at most). x * inv + zp is one fma here: Triton fuses a multiply and an add
 * by default (enable_fp_fusion), inferred, not read in the compiled kernel.
 * The divisions are correctly rounded here (Triton: div.full.f32, 2 ulp), as
 * for the fp8 row. n_saturated counts the codes the clamp changed (a row
 * whose min > 0 clamps zp to 0 and its top values), n_underflow the
 * nonzero x whose code equals zp (decoded to 0).
 */
float int4_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                        fp8_quant_stats *stats)
{
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const float xf = bf16_to_f32(x[i]);
        lo = fminf(lo, xf);
        hi = fmaxf(hi, xf);
    }
    if (n == 0) lo = hi = 0.0f;
    float scale = (hi - lo) / (float)INT4_CODE_MAX;
    if (!(scale >= FP8_PER_TOKEN_HEAD_MIN_SCALE)) scale = FP8_PER_TOKEN_HEAD_MIN_SCALE;
    const int zp = int4_clamp(int4_round_half_away(-lo / scale));
    const float inv = 1.0f / scale;
    uint64_t n_sat = 0, n_nz = 0, n_uf = 0;
    for (size_t i = 0; i < n; i++) {
        const float xf = bf16_to_f32(x[i]);
        const int r = int4_round_half_away(fmaf(xf, inv, (float)zp));
        const int code = int4_clamp(r);
        n_sat += (uint64_t)(code != r);
        if (out != NULL) out[i] = (uint8_t)code;
        const int nz = (xf != 0.0f);
        n_nz += (uint64_t)nz;
        n_uf += (uint64_t)(nz && code == zp);
    }
    stats_add(stats, n, n_sat, n_nz, n_uf);
    return f32_from_bits((f32_bits(scale) & ~INT4_ZERO_POINT_MASK) | (uint32_t)zp);
}

/* e2m1's eight magnitudes by code (OCP MX v1.0 table: e = 0 is the
 * subnormal 0.5 m; e >= 1 is 2^(e - 1) (1 + m / 2)). */
static const float e2m1_magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
/* e2m1's sign bit in a code. */
#define E2M1_SIGN_BIT 0x8u
#define E2M1_MAG_MASK 0x7u

float fp4_e2m1_decode(uint8_t b)
{
    const float m = e2m1_magnitudes[b & E2M1_MAG_MASK];
    return (b & E2M1_SIGN_BIT) ? -m : m;
}

/*
 * Nearest of the eight magnitudes, a tie to the even code: the midpoints
 * 0.25, 1.25, 2.5 and 5 go down (to codes 0, 2, 4, 6), 0.75, 1.75 and 3.5
 * up (to 2, 4, 6). The sign is kept for a zero result (-0 is code 8).
 */
uint8_t fp4_e2m1_encode(float x)
{
    if (x != x) return E2M1_MAG_MASK; /* no NaN in e2m1: saturate */
    const float m = fabsf(x);
    uint8_t c;
    if (m <= 0.25f) c = 0;
    else if (m < 0.75f) c = 1;
    else if (m <= 1.25f) c = 2;
    else if (m < 1.75f) c = 3;
    else if (m <= 2.5f) c = 4;
    else if (m < 3.5f) c = 5;
    else if (m <= 5.0f) c = 6;
    else c = 7;
    return (uint8_t)(c | (signbit(x) ? E2M1_SIGN_BIT : 0u));
}

/*
 * cvt_warp_fp16_to_fp4 (vLLM csrc/libtorch_stable/quantization/fp4/
 * nvfp4_utils.cuh, read at bde9006; called by reshape_and_cache_nvfp4_kernel
 * in nvfp4_kv_cache_kernels.cu with SFScaleVal = 1.0f / *k_scale_ptr):
 *   vecMax = max |x| of the block (exact in bf16);
 *   SFValue = SFScaleVal * (vecMax * reciprocal_approximate_ftz(6.0f));
 *   SFValue = float(__nv_fp8_e4m3(SFValue))  (nearest even, satfinite);
 *   outputScale = SFValue != 0 ? rcp(SFValue * rcp(SFScaleVal)) : 0;
 *   codes = cvt.rn.satfinite.e2m1x2.f32(x * outputScale).
 * rcp.approx.ftz.f32 is modelled as the correctly rounded reciprocal: the
 * GPU's approximate one may differ in the last bit (only a GPU kernel can be
 * held to it, issue #31), and ftz matters only for subnormal inputs.
 */
void nvfp4_quantize_bf16_row(const uint16_t *x, size_t n, float sf_scale, uint8_t *out,
                             float *block_scales, fp8_quant_stats *stats)
{
    const float rcp6 = 1.0f / FP4_E2M1_MAX;
    const float inv_sf_scale = 1.0f / sf_scale;
    uint64_t n_sat = 0, n_nz = 0, n_uf = 0;
    for (size_t b0 = 0; b0 < n; b0 += NVFP4_BLOCK) {
        const size_t len = n - b0 < NVFP4_BLOCK ? n - b0 : NVFP4_BLOCK;
        const float vmax = bf16_amax(x + b0, len);
        const float sf = fp8_e4m3_decode(fp8_e4m3_encode(sf_scale * (vmax * rcp6)));
        const float out_scale = sf != 0.0f ? 1.0f / (sf * inv_sf_scale) : 0.0f;
        if (block_scales != NULL) block_scales[b0 / NVFP4_BLOCK] = sf;
        for (size_t i = b0; i < b0 + len; i++) {
            const float xf = bf16_to_f32(x[i]);
            const float y = xf * out_scale;
            const uint8_t c = fp4_e2m1_encode(y);
            if (out != NULL) out[i] = c;
            n_sat += (uint64_t)(fabsf(y) > FP4_E2M1_MAX);
            const int nz = (xf != 0.0f);
            n_nz += (uint64_t)nz;
            n_uf += (uint64_t)(nz && (c & E2M1_MAG_MASK) == 0);
        }
    }
    stats_add(stats, n, n_sat, n_nz, n_uf);
}

/* Bytes of a bf16 element and of an fp8 or int8 code. */
#define BF16_ELEMENT_BYTES 2u
#define FP8_ELEMENT_BYTES 1u
#define INT8_ELEMENT_BYTES 1u
/* The emulated cache holds one int4 code per byte; vLLM packs two
 * (base/mode.h k_element_bits says what the page holds). */
#define INT4_ELEMENT_BYTES 1u
/* And one e2m1 code per byte (vLLM packs two). */
#define E2M1_ELEMENT_BYTES 1u

static const fp_codec codecs[] = {
    [PG_FORMAT_BF16] = {.bytes = BF16_ELEMENT_BYTES},
    [PG_FORMAT_E4M3] = {.bytes = FP8_ELEMENT_BYTES, .nan_code = FP8_NAN_BITS,
                        .decode = fp8_e4m3_decode, .quantize_bf16 = fp8_e4m3_quantize_bf16,
                        .quantize_bf16_per_token_head = fp8_e4m3_quantize_bf16_per_token_head},
    [PG_FORMAT_E5M2] = {.bytes = FP8_ELEMENT_BYTES, .nan_code = FP8_NAN_BITS,
                        .decode = fp8_e5m2_decode, .quantize_bf16 = fp8_e5m2_quantize_bf16},
    /* no per-tensor int8 cache in vLLM's menu: quantize_bf16 NULL */
    [PG_FORMAT_INT8] = {.bytes = INT8_ELEMENT_BYTES, .nan_code = INT8_UNWRITTEN_CODE,
                        .decode = int8_decode,
                        .quantize_bf16_per_token_head = int8_quantize_bf16_per_token_head},
    [PG_FORMAT_INT4_ZP] = {.bytes = INT4_ELEMENT_BYTES, .nan_code = INT4_UNWRITTEN_CODE,
                           .decode = int4_decode,
                           .quantize_bf16_per_token_head = int4_quantize_bf16_per_token_head,
                           .split_scale = int4_split_scale},
    /* nvfp4: block scales, written by nvfp4_quantize_bf16_row (kv_cache.h) */
    [PG_FORMAT_NVFP4] = {.bytes = E2M1_ELEMENT_BYTES, .nan_code = NVFP4_UNWRITTEN_CODE,
                         .decode = fp4_e2m1_decode},
    /* TurboQuant's codes live in its slots, packed, and are read through its
     * codebook and row scales (kernels/turboquant.h), never through a codec */
    [PG_FORMAT_LLOYD_MAX] = {.bytes = 1},
    [PG_FORMAT_UINT_MINMAX] = {.bytes = 1},
};
#define N_CODECS (sizeof codecs / sizeof codecs[0])

const fp_codec *fp_codec_of(pg_number_format f)
{
    return &codecs[(unsigned)f < N_CODECS ? f : PG_FORMAT_BF16];
}

/*
 * Works on |h| bit patterns: for non-NaN bf16 the unsigned order of the
 * magnitude bits is the order of the magnitudes (inf included, so an inf
 * input makes the result inf). x may be NULL when n is 0.
 */
float bf16_amax(const uint16_t *x, size_t n)
{
    unsigned best = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned a = x[i] & BF16_ABS_MASK;
        if (a <= BF16_INF_BITS && a > best) best = a;
    }
    return bf16_to_f32((uint16_t)best);
}

/*
 * amax / 448 rounded once in binary32; exactly 0 (either sign) gives 1.0.
 * Non-finite or negative amax is not special-cased (inf -> inf, NaN -> NaN):
 * callers reject non-finite tensors before calibrating. For amax from
 * bf16_amax the quotient never underflows to 0 (the smallest positive bf16
 * is 2^-133, and 2^-133 / 448 > 2^-149).
 */
float fp8_e4m3_calibrated_scale(float amax)
{
    return fp8_scale_from_amax(amax, FP8_E4M3_MAX);
}

float fp8_scale_from_amax(float amax, float divisor)
{
    if (amax == 0.0f) return 1.0f;
    return amax / divisor;
}
