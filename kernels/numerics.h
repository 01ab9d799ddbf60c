/*
 * numerics.h: the number formats of the precision modes, bit for bit.
 *
 * bf16 is stored as uint16_t (the top half of an IEEE binary32), fp8 as
 * uint8_t. Formats follow the OCP 8-bit floating point specification
 * (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv 2209.05433):
 *   e4m3fn: bias 7, max 448, no infinities, NaN = 0x7F / 0xFF,
 *           smallest subnormal 2^-9.
 *   e5m2:   bias 15, max 57344, infinities 0x7C / 0xFC, NaNs above them.
 * Encoders round to nearest even and saturate to the largest finite value,
 * like CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (cuda_fp8.h);
 * a NaN input encodes to 0x7F in both fp8 formats, as CUDA does.
 */
#ifndef PG_NUMERICS_H
#define PG_NUMERICS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/mode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest finite e4m3fn value (OCP spec). */
#define FP8_E4M3_MAX 448.0f
/* Largest finite e5m2 value (OCP spec). */
#define FP8_E5M2_MAX 57344.0f
/* The NaN that the fp8 encoders return for a NaN input (CUDA's choice). */
#define FP8_NAN_BITS 0x7Fu

/* The binary32 bit pattern of x (memcpy: no aliasing or union tricks). */
static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The binary32 whose bit pattern is u. */
static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds x to the nearest bf16, ties to even; NaN stays NaN (quieted, sign kept). */
uint16_t bf16_from_f32(float x);

/* The exact fp32 value of the bf16 bits h (inline: it runs on every element). */
static inline float bf16_to_f32(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of binary32 */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds x to IEEE binary16, nearest even, subnormals kept, |x| >= 65520
 * to +-inf (PTX cvt.rn.f16.f32, Triton's fp32 -> fp16); NaN stays NaN. */
uint16_t fp16_from_f32(float x);

/* The exact fp32 value of the binary16 bits h. */
float fp16_to_f32(uint16_t h);

/* Rounds x to e4m3fn, ties to even, saturating at +-448; NaN -> 0x7F. */
uint8_t fp8_e4m3_encode(float x);

/* The exact fp32 value of the e4m3fn byte b (NaN for 0x7F/0xFF). */
float fp8_e4m3_decode(uint8_t b);

/* Rounds x to e5m2, ties to even, saturating at +-57344 (inf too); NaN -> 0x7F. */
uint8_t fp8_e5m2_encode(float x);

/* The exact fp32 value of the e5m2 byte b (+-inf for 0x7C/0xFC, NaN above). */
float fp8_e5m2_decode(uint8_t b);

/* vLLM's KV-cache write of one value: e4m3 encode of (x / scale) computed in
 * fp32 (csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh). */
uint8_t fp8_e4m3_encode_scaled(float x, float scale);

/* Counters that describe one tensor's quantization to a format with a
 * scale (the fp8 formats, and int8 with its own bounds). */
typedef struct fp8_quant_stats {
    uint64_t n;            /* values seen */
    uint64_t n_saturated;  /* |x / scale| > the format's max (FP8_E4M3_MAX, FP8_E5M2_MAX;
                            * int8: outside its clamp range) in fp32, inf included, NaN not */
    uint64_t n_nonzero;    /* x != 0 as an IEEE compare: a NaN counts, +-0 does not */
    uint64_t n_underflow;  /* x != 0 but encoded to +-0 (a NaN encodes to 0x7F: never) */
} fp8_quant_stats;

/* Encodes n bf16 values with fp8_e4m3_encode_scaled into out (may be NULL to
 * only count) and adds to *stats (may be NULL; counters are added, not reset). */
void fp8_e4m3_quantize_bf16(const uint16_t *x, size_t n, float scale,
                            uint8_t *out, fp8_quant_stats *stats);

/* The same with vLLM's activation quantizer's arithmetic: e4m3(x * fp32(1 /
 * scale)) (csrc/quantization/w8a8/fp8/common.cu, older trees csrc/quantization/fp8/common.cu:
 * scaled_fp8_quant_kernel);
 * the statistics are of y = x * fp32(1 / scale). */
void fp8_e4m3_quantize_bf16_inverse(const uint16_t *x, size_t n, float scale,
                                    uint8_t *out, fp8_quant_stats *stats);

/* The same into e5m2 (vLLM's fp8_e5m2 cache write: e5m2(x / scale) in fp32,
 * saturating; csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh
 * scaled_vec_conversion with __NV_E5M2). */
void fp8_e5m2_quantize_bf16(const uint16_t *x, size_t n, float scale,
                            uint8_t *out, fp8_quant_stats *stats);

/* The least per-token-head scale vLLM's cache write gives (its tl.maximum
 * with 1e-6, as binary32), so an all-zero row has a positive scale. */
#define FP8_PER_TOKEN_HEAD_MIN_SCALE 1e-6f

/* vLLM's fp8_per_token_head cache write of one (token, KV head) row of n
 * bf16 values: scale = max(absmax / 448, 1e-6) in fp32, codes e4m3(x *
 * fp32(1 / scale)) into out (may be NULL); adds to *stats (may be NULL:
 * n_saturated counts |x * (1 / scale)| > 464, where the saturation changes a
 * code, never the absmax's own rounding); returns the scale (numerics.c
 * gives the source). */
float fp8_e4m3_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                            fp8_quant_stats *stats);

/* vLLM's int8_per_token_head clamp range (vllm/v1/attention/ops/
 * triton_quant_kv/_per_token_head_core.py _INT8_QUANT_MAX, _INT8_QUANT_MIN). */
#define INT8_PER_TOKEN_HEAD_QUANT_MAX 127.0f
#define INT8_PER_TOKEN_HEAD_QUANT_MIN -128.0f

/* The value of the int8 code b (two's complement: 0x80 is -128). */
float int8_decode(uint8_t b);

/* vLLM's int8_per_token_head cache write of one (token, KV head) row of n
 * bf16 values: scale = max(absmax / 127, 1e-6) in fp32, codes
 * trunc(clamp(x * fp32(1 / scale), -128, 127)), toward zero (Triton's fp32
 * -> int8 store), into out (may be NULL); adds to *stats (may be NULL:
 * n_saturated counts the codes the clamp changed, y >= 128 or y <= -129,
 * n_underflow the nonzero ones truncated to 0); returns the scale (numerics.c gives the source). */
float int8_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                        fp8_quant_stats *stats);

/* vLLM's int4_per_token_head codes: unsigned 0 .. 15 with an asymmetric
 * zero point (vllm/v1/attention/ops/triton_quant_kv/int4_per_token_head.py). */
#define INT4_CODE_MAX 15
/* The low mantissa bits of an int4 row's stored fp32 scale that hold its
 * zero point (the kernel's `& -16` and `& 0xF`). */
#define INT4_ZERO_POINT_MASK 0xFu

/* The value of the int4 code b (0 .. 15, before its zero point). */
float int4_decode(uint8_t b);

/* An int4 row's stored scale split as vLLM's reader splits it: *scale the
 * float with the low 4 bits cleared, *zero_point those bits (0 .. 15). */
void int4_split_scale(float stored, float *scale, float *zero_point);

/* vLLM's int4_per_token_head cache write of one (token, KV head) row of n
 * bf16 values (already rotated, rht.h): scale = max((max - min) / 15, 1e-6),
 * zero point and codes rounded half away from zero and clamped to 0 .. 15,
 * into out (may be NULL); adds to *stats (may be NULL); returns the stored
 * scale, the zero point in its low 4 bits (numerics.c gives the source). */
float int4_quantize_bf16_per_token_head(const uint16_t *x, size_t n, uint8_t *out,
                                        fp8_quant_stats *stats);

/* e2m1 (OCP Microscaling Formats v1.0, FP4 E2M1): sign, 2 exponent bits
 * (bias 1), 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; no inf
 * or NaN. One code per byte here, the sign in bit 3 (codes 0 .. 15). */
#define FP4_E2M1_MAX 6.0f
/* The elements that share one block scale in NVIDIA's nvfp4 (vLLM's nvfp4
 * KV cache: head_size / 16 e4m3 scales per row). */
#define NVFP4_BLOCK 16

/* The exact value of the e2m1 code b (bits 0 .. 3; higher bits ignored). */
float fp4_e2m1_decode(uint8_t b);

/* Rounds x to e2m1, nearest with ties to the even code, saturating at +-6
 * (PTX cvt.rn.satfinite.e2m1x2.f32); NaN gives +6 (unreachable: captures
 * with NaN are refused). */
uint8_t fp4_e2m1_encode(float x);

/* vLLM's nvfp4 cache write of one row of n bf16 values (n a multiple of
 * NVFP4_BLOCK) with the tensor's global scale sf_scale = 1 / k_scale (or
 * v_scale): per block of 16, sf = e4m3(sf_scale * (amax * fp32(1 / 6))),
 * then each code e2m1(x * (1 / (sf * (1 / sf_scale)))), 0 for a block whose
 * sf is 0 (csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh
 * cvt_warp_fp16_to_fp4). Codes into out (may be NULL), each block's
 * decoded sf into block_scales[n / 16]; adds to *stats (may be NULL:
 * n_saturated counts |x * output scale| > 6, n_underflow the nonzero x
 * written as +-0). */
void nvfp4_quantize_bf16_row(const uint16_t *x, size_t n, float sf_scale, uint8_t *out,
                             float *block_scales, fp8_quant_stats *stats);

/* One number format's codec: what the caches and the CPU specification's
 * loads read instead of naming formats, so that a format with one-byte
 * codes arrives as a row of fp_codec_of's table (numerics.c). */
typedef struct fp_codec {
    size_t bytes;               /* of one element */
    uint8_t nan_code;           /* the code an unwritten slot holds: a NaN where the format
                                 * has one (0 for bf16); int8, which has none, a code its
                                 * write never gives (the row's NaN scale marks it) */
    float (*decode)(uint8_t b); /* the exact value of code b; NULL for bf16 */
    /* The per-tensor cache write of n bf16 values: codes of x / scale into
     * out (may be NULL), adding to *stats (may be NULL); NULL for bf16. */
    void (*quantize_bf16)(const uint16_t *x, size_t n, float scale, uint8_t *out,
                          fp8_quant_stats *stats);
    /* The per-(token, KV head) cache write of one row, returning its scale
     * (as fp8_e4m3_quantize_bf16_per_token_head); NULL where vLLM has none. */
    float (*quantize_bf16_per_token_head)(const uint16_t *x, size_t n, uint8_t *out,
                                          fp8_quant_stats *stats);
    /* A row's stored scale into the scale and the zero point the reader
     * uses (int4_split_scale); NULL: the stored scale as it is, zero point 0. */
    void (*split_scale)(float stored, float *scale, float *zero_point);
} fp_codec;

/* The codec of format f; bf16's for a value out of range. */
const fp_codec *fp_codec_of(pg_number_format f);

/* Largest |x| over n bf16 values, NaN ignored, an inf gives inf; 0 when n is 0
 * or every value is NaN or +-0. */
float bf16_amax(const uint16_t *x, size_t n);

/* Per-tensor calibration scale amax / FP8_E4M3_MAX in fp32, or 1.0 when amax
 * is 0 (vLLM's default for uncalibrated scales,
 * docs/features/quantization/quantized_kvcache.md). Non-finite amax is not
 * special-cased (inf -> inf, NaN -> NaN): callers reject it earlier. */
float fp8_e4m3_calibrated_scale(float amax);

/* Per-tensor scale amax / divisor rounded once in binary32; amax exactly 0
 * (either sign) gives 1.0, as fp8_e4m3_calibrated_scale (which is this with
 * divisor FP8_E4M3_MAX). divisor > 0. Non-finite amax is not special-cased. */
float fp8_scale_from_amax(float amax, float divisor);

#ifdef __cplusplus
}
#endif

#endif /* PG_NUMERICS_H */
