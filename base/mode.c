/*
 * mode.c: the table of precision modes (see mode.h), each row with the
 * source its traits were read from.
 *
 * Sources (vllm-project/vllm):
 *   CACHE  vllm/config/cache.py CacheDType: the --kv-cache-dtype values.
 *   KVI    vllm/v1/kv_cache_interface.py KVQuantMode and the page size: the
 *          per-token-head modes keep one float32 scale per (token, KV head)
 *          for K and one for V inline in the page.
 *   WRITE  csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh scaled_convert:
 *          e4m3 / e5m2 (x / scale), __NV_SATFINITE, for fp8 and fp8_e5m2;
 *          vllm/v1/attention/ops/triton_reshape_and_cache_flash.py (and its
 *          per-token-head kernel) for the dynamic scales.
 *   FI     vllm/v1/attention/backends/flashinfer.py: get_fp8_dtype_for_flashinfer
 *          views the cache as float8_e5m2 for fp8_e5m2; the trtllm prefill
 *          path with a bf16 Q gathers the cache into a bf16 copy (PR #24197).
 *   TRITON vllm/v1/attention/ops/triton_unified_attention.py KV_QUANT_MODE 3
 *          (fp8) and 2 (int8): codes cast to Q's dtype in registers, scales
 *          on S and on P.
 *   PTH    vllm/v1/attention/ops/triton_quant_kv/_per_token_head_core.py:
 *          int8_per_token_head and fp8_per_token_head share one cache-write
 *          kernel, differing in (QUANT_MAX, QUANT_MIN) and the cache dtype.
 *   FA3    vllm/v1/attention/backends/flash_attn.py: an fp8 cache runs
 *          FlashAttention-3 with Q quantized too.
 *   INT4   vllm/v1/attention/ops/triton_quant_kv/int4_per_token_head.py (PR
 *          #40835): KVQuantMode.INT4_PER_TOKEN_HEAD "packed 2 x int4/byte,
 *          RHT + asymmetric zp"; head_size / 2 code bytes and one fp32 scale
 *          (its zero point in the low 4 bits) per (token, KV head), for K
 *          and for V; TRITON_ATTN only (its supported_kv_cache_dtypes).
 *   NVFP4  csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu (PR #37332) and
 *          vllm/v1/attention/backends/flashinfer.py (PR #40177): e2m1 codes,
 *          two per byte, and one e4m3 scale per 16 elements of a row
 *          (nvfp4_kv_cache_full_dim = head_size / 2 + head_size / 16), the
 *          per-tensor k_scale / v_scale beside; FLASHINFER's trtllm-gen on
 *          SM100 only, which needs an fp8 Q and writes an fp8 output.
 *   TQ     vllm/model_executor/layers/quantization/turboquant/config.py
 *          (TQ_PRESETS, TurboQuantConfig: key_packed_size, slot_size_aligned)
 *          and vllm/v1/attention/backends/turboquant_attn.py: K as raw e4m3
 *          (k8v4, D bytes, no scale) or as Lloyd-Max indices of the
 *          Hadamard-rotated unit row (ceil(D * bits / 8) bytes) and its
 *          fp16 norm (2 bytes); V as 4- or 3-bit codes with an fp16 scale and
 *          min (ceil(D * bits / 8) + 4 bytes); one slot per (token, KV head)
 *          holding K then V, rounded up to an even size; "_nc" presets
 *          re-normalize the centroids; TURBOQUANT backend only (its
 *          supported_kv_cache_dtypes), decoder attention, no MLA.
 */
#include "mode.h"

#include <stdio.h>
#include <string.h>

/* Bits of a bf16 element, of an fp8 code, of an int8 code and of an int4
 * code (two per byte in vLLM's page: INT4). */
/* Bits in a byte. */
#define BITS_PER_BYTE 8
#define BF16_BITS 16
#define FP8_BITS 8
#define INT8_BITS 8
#define INT4_BITS 4
#define E2M1_BITS 4
/* nvfp4's block: one e4m3 scale (1 byte) per 16 elements (NVFP4). */
#define NVFP4_BLOCK_ELEMENTS 16
#define NVFP4_BLOCK_SCALE_BYTES 1
/* The per-token-head modes' scale: one float32 per (token, KV head) (KVI). */
#define PER_TOKEN_HEAD_SCALE_BYTES 4
/* TurboQuant (TQ): an fp16 norm beside a row of Lloyd-Max key indices, an
 * fp16 scale and an fp16 min beside a row of value codes, and the slot
 * rounded up to an even number of bytes (slot_size_aligned). */
#define TQ_KEY_NORM_BYTES 2
#define TQ_VALUE_SCALE_MIN_BYTES 4
#define TQ_SLOT_ALIGN_BYTES 2
#define TQ_3_BITS 3

static const pg_mode_traits modes[PG_MODE_COUNT] = {
    [PG_MODE_BF16] = {
        .name = PG_MODE_BASELINE_NAME, .quantized = 0, .q_format = PG_FORMAT_BF16,
        .k_format = PG_FORMAT_BF16, .v_format = PG_FORMAT_BF16, .p_format = PG_FORMAT_BF16, .kv_scales = PG_SCALES_NONE,
        .kv_scale_source = PG_SCALES_FROM_NOWHERE, .kv_consumption = PG_KV_READ_AS_BF16,
        .vllm_kv_cache_dtype = "auto", .k_element_bits = BF16_BITS, .v_element_bits = BF16_BITS, .is_baseline = 1,
        .always_diagnosed = 1},
    /* CACHE fp8 = fp8_e4m3; WRITE; FI: the dequant gather of PR #24197. */
    [PG_MODE_FP8KV] = {
        .name = "fp8kv", .quantized = PG_TENSOR_K | PG_TENSOR_V, .q_format = PG_FORMAT_BF16,
        .k_format = PG_FORMAT_E4M3, .v_format = PG_FORMAT_E4M3, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TENSOR, .kv_scale_source = PG_SCALES_FROM_RUN_POLICY,
        .kv_consumption = PG_KV_DEQUANT_TO_BF16_COPY, .vllm_kv_cache_dtype = "fp8",
        .k_element_bits = FP8_BITS, .v_element_bits = FP8_BITS, .always_diagnosed = 1},
    /* FA3: Q, K, V and P in e4m3, the matmuls in fp8. */
    [PG_MODE_FP8QKV] = {
        .name = "fp8qkv", .quantized = PG_TENSOR_Q | PG_TENSOR_K | PG_TENSOR_V | PG_TENSOR_P,
        .q_format = PG_FORMAT_E4M3, .k_format = PG_FORMAT_E4M3, .v_format = PG_FORMAT_E4M3, .p_format = PG_FORMAT_E4M3,
        .kv_scales = PG_SCALES_PER_TENSOR, .kv_scale_source = PG_SCALES_FROM_RUN_POLICY,
        .kv_consumption = PG_KV_FP8_MATMULS, .vllm_kv_cache_dtype = "fp8",
        .k_element_bits = FP8_BITS, .v_element_bits = FP8_BITS, .always_diagnosed = 1},
    /* CACHE fp8_e5m2; WRITE: the per-tensor scale divides as for e4m3; FI. */
    [PG_MODE_FP8KV_E5M2] = {
        .name = "fp8kv_e5m2", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_E5M2, .v_format = PG_FORMAT_E5M2, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TENSOR, .kv_scale_source = PG_SCALES_FROM_RUN_POLICY,
        .kv_consumption = PG_KV_DEQUANT_TO_BF16_COPY, .vllm_kv_cache_dtype = "fp8_e5m2",
        .k_element_bits = FP8_BITS, .v_element_bits = FP8_BITS},
    /* CACHE fp8_per_token_head; KVI; WRITE (per-token-head kernel); TRITON. */
    [PG_MODE_FP8KV_PER_TOKEN_HEAD] = {
        .name = "fp8kv_per_token_head", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_E4M3, .v_format = PG_FORMAT_E4M3, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_DEQUANT_IN_REGISTERS,
        .vllm_kv_cache_dtype = "fp8_per_token_head", .k_element_bits = FP8_BITS, .v_element_bits = FP8_BITS,
        .k_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES, .v_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES},
    /* CACHE int8_per_token_head; KVI; PTH; TRITON (KV_QUANT_MODE 2). */
    [PG_MODE_INT8KV_PER_TOKEN_HEAD] = {
        .name = "int8kv_per_token_head", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_INT8, .v_format = PG_FORMAT_INT8, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_DEQUANT_IN_REGISTERS,
        .vllm_kv_cache_dtype = "int8_per_token_head", .k_element_bits = INT8_BITS, .v_element_bits = INT8_BITS,
        .k_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES, .v_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES},
    /* CACHE int4_per_token_head; INT4; KVI. */
    [PG_MODE_INT4KV_PER_TOKEN_HEAD] = {
        .name = "int4kv_per_token_head", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_INT4_ZP, .v_format = PG_FORMAT_INT4_ZP, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_DEQUANT_IN_REGISTERS, .kv_rotation = PG_ROTATION_RHT,
        .vllm_kv_cache_dtype = "int4_per_token_head", .k_element_bits = INT4_BITS, .v_element_bits = INT4_BITS,
        .k_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES, .v_row_scale_bytes = PER_TOKEN_HEAD_SCALE_BYTES},
    /* CACHE nvfp4; NVFP4: Q quantized to e4m3 with q_scale (QuantFP8), the
     * trtllm-gen kernel's matmuls in fp8, its output e4m3. */
    [PG_MODE_NVFP4KV] = {
        .name = "nvfp4kv", .quantized = PG_TENSOR_Q | PG_TENSOR_K | PG_TENSOR_V | PG_TENSOR_P,
        .q_format = PG_FORMAT_E4M3, .k_format = PG_FORMAT_NVFP4, .v_format = PG_FORMAT_NVFP4, .p_format = PG_FORMAT_E4M3,
        .kv_scales = PG_SCALES_PER_BLOCK_AND_TENSOR, .kv_scale_source = PG_SCALES_FROM_RUN_POLICY,
        .kv_consumption = PG_KV_FP8_MATMULS, .vllm_kv_cache_dtype = "nvfp4",
        .k_element_bits = E2M1_BITS, .v_element_bits = E2M1_BITS, .kv_block_elements = NVFP4_BLOCK_ELEMENTS,
        .kv_block_scale_bytes = NVFP4_BLOCK_SCALE_BYTES},
    /* CACHE turboquant_k8v4; TQ: K e4m3 unscaled and unrotated, V 4-bit. */
    [PG_MODE_TURBOQUANT_K8V4] = {
        .name = "turboquant_k8v4", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_E4M3,
        .v_format = PG_FORMAT_UINT_MINMAX, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_CENTROID_SCORES, .vllm_kv_cache_dtype = "turboquant_k8v4",
        .k_element_bits = FP8_BITS, .v_element_bits = INT4_BITS,
        .v_row_scale_bytes = TQ_VALUE_SCALE_MIN_BYTES, .kv_slot_align_bytes = TQ_SLOT_ALIGN_BYTES},
    /* CACHE turboquant_4bit_nc; TQ: K 4-bit Lloyd-Max, V 4-bit, norm correction. */
    [PG_MODE_TURBOQUANT_4BIT_NC] = {
        .name = "turboquant_4bit_nc", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_LLOYD_MAX,
        .v_format = PG_FORMAT_UINT_MINMAX, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_CENTROID_SCORES, .vllm_kv_cache_dtype = "turboquant_4bit_nc",
        .kv_rotation = PG_ROTATION_HADAMARD_K, .k_element_bits = INT4_BITS,
        .v_element_bits = INT4_BITS, .k_row_scale_bytes = TQ_KEY_NORM_BYTES,
        .v_row_scale_bytes = TQ_VALUE_SCALE_MIN_BYTES, .kv_slot_align_bytes = TQ_SLOT_ALIGN_BYTES,
        .kv_norm_correction = 1},
    /* CACHE turboquant_k3v4_nc; TQ: K 3-bit Lloyd-Max, V 4-bit, norm correction. */
    [PG_MODE_TURBOQUANT_K3V4_NC] = {
        .name = "turboquant_k3v4_nc", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_LLOYD_MAX,
        .v_format = PG_FORMAT_UINT_MINMAX, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_CENTROID_SCORES, .vllm_kv_cache_dtype = "turboquant_k3v4_nc",
        .kv_rotation = PG_ROTATION_HADAMARD_K, .k_element_bits = TQ_3_BITS,
        .v_element_bits = INT4_BITS, .k_row_scale_bytes = TQ_KEY_NORM_BYTES,
        .v_row_scale_bytes = TQ_VALUE_SCALE_MIN_BYTES, .kv_slot_align_bytes = TQ_SLOT_ALIGN_BYTES,
        .kv_norm_correction = 1},
    /* CACHE turboquant_3bit_nc; TQ: K 3-bit Lloyd-Max, V 3-bit, norm correction. */
    [PG_MODE_TURBOQUANT_3BIT_NC] = {
        .name = "turboquant_3bit_nc", .quantized = PG_TENSOR_K | PG_TENSOR_V,
        .q_format = PG_FORMAT_BF16, .k_format = PG_FORMAT_LLOYD_MAX,
        .v_format = PG_FORMAT_UINT_MINMAX, .p_format = PG_FORMAT_BF16,
        .kv_scales = PG_SCALES_PER_TOKEN_HEAD, .kv_scale_source = PG_SCALES_AT_CACHE_WRITE,
        .kv_consumption = PG_KV_CENTROID_SCORES, .vllm_kv_cache_dtype = "turboquant_3bit_nc",
        .kv_rotation = PG_ROTATION_HADAMARD_K, .k_element_bits = TQ_3_BITS,
        .v_element_bits = TQ_3_BITS, .k_row_scale_bytes = TQ_KEY_NORM_BYTES,
        .v_row_scale_bytes = TQ_VALUE_SCALE_MIN_BYTES, .kv_slot_align_bytes = TQ_SLOT_ALIGN_BYTES,
        .kv_norm_correction = 1},
};

/* One profile's name, mode and whether its mode's bare name means it. */
typedef struct profile_name {
    const char *name;
    pg_mode mode;
    int is_default;
} profile_name;

/* The profile names, indexed by variant_profile_id. */
static const profile_name profile_names[VARIANT_PROFILE_COUNT] = {
    [VARIANT_BF16] = {"bf16", PG_MODE_BF16, 1},
    [VARIANT_FP8KV_FIXED] = {"fp8kv@fixed", PG_MODE_FP8KV, 1},
    [VARIANT_FP8KV_VLLM_24197] = {"fp8kv@vllm-24197", PG_MODE_FP8KV, 0},
    [VARIANT_FP8QKV_FA3] = {"fp8qkv@fa3", PG_MODE_FP8QKV, 1},
    [VARIANT_FP8QKV_FA3_1LEVEL] = {"fp8qkv@fa3-1level", PG_MODE_FP8QKV, 0},
    [VARIANT_FP8QKV_TRTLLM] = {"fp8qkv@trtllm", PG_MODE_FP8QKV, 0},
    [VARIANT_FP8QKV_FLASHINFER_FA3] = {"fp8qkv@flashinfer-fa3", PG_MODE_FP8QKV, 0},
    [VARIANT_FP8QKV_IDEAL] = {"fp8qkv@ideal", PG_MODE_FP8QKV, 0},
    [VARIANT_FP8KV_E5M2_FIXED] = {"fp8kv_e5m2@fixed", PG_MODE_FP8KV_E5M2, 1},
    [VARIANT_FP8KV_PER_TOKEN_HEAD_TRITON] = {"fp8kv_per_token_head@triton",
                                              PG_MODE_FP8KV_PER_TOKEN_HEAD, 1},
    [VARIANT_INT8KV_PER_TOKEN_HEAD_TRITON] = {"int8kv_per_token_head@triton",
                                               PG_MODE_INT8KV_PER_TOKEN_HEAD, 1},
    [VARIANT_INT4KV_PER_TOKEN_HEAD_TRITON] = {"int4kv_per_token_head@triton",
                                               PG_MODE_INT4KV_PER_TOKEN_HEAD, 1},
    [VARIANT_NVFP4KV_TRTLLM_GEN] = {"nvfp4kv@trtllm-gen", PG_MODE_NVFP4KV, 1},
    [VARIANT_TURBOQUANT_K8V4_TRITON] = {"turboquant_k8v4@triton", PG_MODE_TURBOQUANT_K8V4, 1},
    [VARIANT_TURBOQUANT_4BIT_NC_TRITON] = {"turboquant_4bit_nc@triton",
                                           PG_MODE_TURBOQUANT_4BIT_NC, 1},
    [VARIANT_TURBOQUANT_K3V4_NC_TRITON] = {"turboquant_k3v4_nc@triton",
                                           PG_MODE_TURBOQUANT_K3V4_NC, 1},
    [VARIANT_TURBOQUANT_3BIT_NC_TRITON] = {"turboquant_3bit_nc@triton",
                                           PG_MODE_TURBOQUANT_3BIT_NC, 1},
};

const char *variant_profile_name(variant_profile_id id)
{
    return (unsigned)id < VARIANT_PROFILE_COUNT ? profile_names[id].name : NULL;
}

pg_mode variant_profile_mode(variant_profile_id id)
{
    return (unsigned)id < VARIANT_PROFILE_COUNT ? profile_names[id].mode : PG_MODE_BF16;
}

int variant_profile_is_default(variant_profile_id id)
{
    return (unsigned)id < VARIANT_PROFILE_COUNT && profile_names[id].is_default;
}

const pg_mode_traits *pg_mode_traits_of(pg_mode m)
{
    return &modes[(unsigned)m < PG_MODE_COUNT ? m : PG_MODE_BF16];
}

pg_mode pg_mode_baseline(void)
{
    for (int m = 0; m < PG_MODE_COUNT; m++)
        if (modes[m].is_baseline) return (pg_mode)m;
    return PG_MODE_BF16; /* the table has one (test_kv_formats holds it) */
}

const char *pg_mode_name(pg_mode m)
{
    return (unsigned)m < PG_MODE_COUNT ? modes[m].name : "?";
}

pg_status pg_mode_find(const char *name, pg_mode *out, pg_err *err)
{
    char choices[512];
    size_t used = 0;
    for (int i = 0; i < PG_MODE_COUNT; i++) {
        if (name != NULL && strcmp(name, modes[i].name) == 0) {
            *out = (pg_mode)i;
            return PG_OK;
        }
        const int w = snprintf(choices + used, sizeof choices - used, "%s%s", i ? ", " : "",
                               modes[i].name);
        if (w > 0 && (size_t)w < sizeof choices - used) used += (size_t)w;
    }
    return pg_fail(err, PG_ERR_USAGE, "'%s' is not a precision mode (%s)",
                   name != NULL ? name : "(null)", choices);
}

/* Bytes of one row of d elements of `bits` each, rounded up, with its block scales. */
static long long row_bytes(const pg_mode_traits *t, int bits, int d)
{
    long long row = ((long long)d * bits + BITS_PER_BYTE - 1) / BITS_PER_BYTE;
    if (t->kv_block_elements > 0)
        row += ((long long)d + t->kv_block_elements - 1) / t->kv_block_elements *
               t->kv_block_scale_bytes;
    return row;
}

long long pg_mode_kv_bytes_per_token_head(pg_mode m, int d)
{
    const pg_mode_traits *t = pg_mode_traits_of(m);
    long long slot = row_bytes(t, t->k_element_bits, d) + t->k_row_scale_bytes +
                     row_bytes(t, t->v_element_bits, d) + t->v_row_scale_bytes;
    if (t->kv_slot_align_bytes > 1)
        slot = (slot + t->kv_slot_align_bytes - 1) / t->kv_slot_align_bytes * t->kv_slot_align_bytes;
    return slot;
}

int pg_mode_quantizes(pg_mode m) { return pg_mode_traits_of(m)->quantized != 0; }

const char *pg_scale_granularity_name(pg_scale_granularity g)
{
    switch (g) {
    case PG_SCALES_NONE: return "no";
    case PG_SCALES_PER_TENSOR: return "per-tensor";
    case PG_SCALES_PER_TOKEN_HEAD: return "per (token, KV head)";
    case PG_SCALES_PER_BLOCK_AND_TENSOR: return "per block of the head dim and per-tensor";
    }
    return "?";
}

const char *pg_number_format_name(pg_number_format f)
{
    switch (f) {
    case PG_FORMAT_BF16: return "bf16";
    case PG_FORMAT_E4M3: return "e4m3";
    case PG_FORMAT_E5M2: return "e5m2";
    case PG_FORMAT_INT8: return "int8";
    case PG_FORMAT_INT4_ZP: return "int4";
    case PG_FORMAT_NVFP4: return "nvfp4";
    case PG_FORMAT_LLOYD_MAX: return "lloyd-max";
    case PG_FORMAT_UINT_MINMAX: return "uint-minmax";
    }
    return "?";
}
