/*
 * mode.h: the precision modes as data (issue #29). A mode is one row of the
 * table in mode.c; every path that must know what a mode does (the CPU
 * specification's dispatch, the GPU's support test, attribution, the quant
 * counters, advise's memory, the reports' baseline) reads the row's traits,
 * never the mode's name.
 *
 * The row says which tensors are quantized and to what number format, the
 * granularity of the KV scales and where they come from, how the attention
 * kernel consumes the cache, the vLLM --kv-cache-dtype value the mode
 * models, the bytes a cached element and its inline scales take, and whether
 * it is the baseline every other mode is measured against. Its profiles (the
 * kernels that run it, MODE@PROFILE) are the second table here; the grammar
 * of variant names over them is base/variant.h's.
 */
#ifndef PG_MODE_H
#define PG_MODE_H

#include <stddef.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The precision modes, in table order (the baseline first). Only mode.c's
 * table gives them meaning; code reads pg_mode_traits_of, not the values. */
typedef enum pg_mode {
    PG_MODE_BF16,
    PG_MODE_FP8KV,
    PG_MODE_FP8QKV,
    PG_MODE_FP8KV_E5M2,
    PG_MODE_FP8KV_PER_TOKEN_HEAD,
    PG_MODE_INT8KV_PER_TOKEN_HEAD,
    PG_MODE_INT4KV_PER_TOKEN_HEAD,
    PG_MODE_NVFP4KV,
    PG_MODE_TURBOQUANT_K8V4,
    PG_MODE_TURBOQUANT_4BIT_NC,
    PG_MODE_TURBOQUANT_K3V4_NC,
    PG_MODE_TURBOQUANT_3BIT_NC
} pg_mode;
/* How many modes there are. */
#define PG_MODE_COUNT 12
/* The cache every smaller format is weighed against in memory: vLLM's
 * --kv-cache-dtype fp8 (per-tensor e4m3). */
#define PG_MODE_KV_FP8_REFERENCE PG_MODE_FP8KV
/* The baseline mode's name: the one every other mode is measured against. */
#define PG_MODE_BASELINE_NAME "bf16"

/* The tensors of one attention a mode may quantize, as bits (the values of
 * kernels/attn.h's attn_tensor). */
typedef enum pg_tensor_bit {
    PG_TENSOR_Q = 1,
    PG_TENSOR_K = 2,
    PG_TENSOR_V = 4,
    PG_TENSOR_P = 8
} pg_tensor_bit;

/* A number format a quantized tensor is stored in. */
typedef enum pg_number_format {
    PG_FORMAT_BF16,   /* not quantized */
    PG_FORMAT_E4M3,   /* OCP e4m3fn, max 448 (kernels/numerics.h) */
    PG_FORMAT_E5M2,   /* OCP e5m2, max 57344 */
    PG_FORMAT_INT8,   /* two's-complement int8 codes, -128 .. 127 */
    PG_FORMAT_INT4_ZP, /* unsigned 4-bit codes 0 .. 15 less a zero point per row */
    PG_FORMAT_NVFP4,   /* e2m1 codes, an e4m3 scale per 16 elements and a per-tensor scale */
    PG_FORMAT_LLOYD_MAX, /* indices into a Lloyd-Max codebook of the rotated unit row, with
                          * the row's fp16 norm (kernels/turboquant.h) */
    PG_FORMAT_UINT_MINMAX /* unsigned codes 0 .. 2^bits - 1 over [min, max] of the row, an
                           * fp16 scale and min per row (TurboQuant's values) */
} pg_number_format;

/* The granularity of the KV cache's scales. */
typedef enum pg_scale_granularity {
    PG_SCALES_NONE,            /* no scales (bf16 cache) */
    PG_SCALES_PER_TENSOR,      /* one k_scale and one v_scale per layer */
    PG_SCALES_PER_TOKEN_HEAD,  /* one per (token, KV head), for K and for V */
    PG_SCALES_PER_BLOCK_AND_TENSOR /* one per block of kv_block_elements along the head
                                    * dim, computed at the write, times a per-tensor one */
} pg_scale_granularity;

/* Where the KV scales come from. */
typedef enum pg_scale_source {
    PG_SCALES_FROM_NOWHERE,     /* no scales */
    PG_SCALES_FROM_RUN_POLICY,  /* per tensor, as run --scales says: the capture's, a
                                 * calibration's, or vLLM's defaults */
    PG_SCALES_AT_CACHE_WRITE    /* dynamic: computed from each written row's absmax */
} pg_scale_source;

/* The rotation a mode applies around its KV cache. */
typedef enum pg_kv_rotation {
    PG_ROTATION_NONE,
    PG_ROTATION_RHT,   /* vLLM's randomized Hadamard transform (kernels/rht.h) of K and V
                        * before the cache write and of Q to match; the output
                        * inverse-rotated */
    PG_ROTATION_HADAMARD_K /* Sylvester's orthonormal Hadamard matrix H / sqrt(d), no signs,
                            * on each unit K row before the cache write and on Q to match;
                            * V and the output unrotated (TurboQuant) */
} pg_kv_rotation;

/* How the attention kernel consumes the KV cache. */
typedef enum pg_kv_consumption {
    PG_KV_READ_AS_BF16,          /* a bf16 cache, read as it is */
    PG_KV_DEQUANT_TO_BF16_COPY,  /* a dequant gather writes a compact bf16 copy (vLLM PR
                                  * #24197), then bf16 attention reads it */
    PG_KV_DEQUANT_IN_REGISTERS,  /* the attention kernel casts the codes as it loads them
                                  * and applies the scales itself */
    PG_KV_FP8_MATMULS,           /* the codes enter fp8 matmuls, Q quantized too */
    PG_KV_CENTROID_SCORES        /* TurboQuant's split-KV decode kernel: each key scored
                                  * against its codebook centroids (or its fp8 codes), the
                                  * values dequantized in registers, fp32 throughout */
} pg_kv_consumption;

/* One mode's row. */
typedef struct pg_mode_traits {
    const char *name;                 /* "bf16", "fp8kv", ... (stored, parsed, in configs) */
    unsigned quantized;               /* pg_tensor_bit bits the mode quantizes */
    pg_number_format q_format;        /* Q's format (BF16 unless Q is quantized) */
    pg_number_format k_format;        /* K's format in the cache */
    pg_number_format v_format;        /* V's format in the cache */
    pg_number_format p_format;        /* P's format for P.V (BF16 unless P is quantized) */
    pg_scale_granularity kv_scales;
    pg_scale_source kv_scale_source;
    pg_kv_consumption kv_consumption;
    const char *vllm_kv_cache_dtype;  /* the vLLM --kv-cache-dtype value it models */
    pg_kv_rotation kv_rotation;
    int k_element_bits;               /* bits of one cached K element in vLLM's page */
    int v_element_bits;               /* bits of one cached V element */
    int k_row_scale_bytes;            /* inline bytes per (token, KV head) beside K's codes:
                                       * scales, zero points, norms (0: none) */
    int v_row_scale_bytes;            /* the same beside V's codes */
    int kv_slot_align_bytes;          /* a (token, KV head)'s K and V bytes together rounded up
                                       * to a multiple of it (0 or 1: not rounded) */
    int kv_norm_correction;           /* TurboQuant's "_nc": each key's centroid vector
                                       * re-normalized to unit length before scoring */
    int kv_block_elements;            /* elements per block scale (0: no block scales) */
    int kv_block_scale_bytes;         /* bytes of one block scale in the page */
    int is_baseline;                  /* 1 for the mode every other is measured against */
    int always_diagnosed;             /* 1: every diagnosis of an external output runs this
                                       * mode's hypotheses (the serving switch's first three
                                       * modes, diagnosed since issue #16); 0: only a run
                                       * that sweeps the mode runs them */
} pg_mode_traits;

/* Each mode's profiles: the kernels that run it (their rules and sources
 * are kernels/attn_profile.c's), in table order (bf16 first). Their full names are
 * MODE@PROFILE (bf16 alone has none); each mode has one default profile,
 * the one its bare name means. */
typedef enum variant_profile_id {
    VARIANT_BF16,
    VARIANT_FP8KV_FIXED,
    VARIANT_FP8KV_VLLM_24197,
    VARIANT_FP8QKV_FA3,
    VARIANT_FP8QKV_FA3_1LEVEL,
    VARIANT_FP8QKV_TRTLLM,
    VARIANT_FP8QKV_FLASHINFER_FA3,
    VARIANT_FP8QKV_IDEAL,
    VARIANT_FP8KV_E5M2_FIXED,
    VARIANT_FP8KV_PER_TOKEN_HEAD_TRITON,
    VARIANT_INT8KV_PER_TOKEN_HEAD_TRITON,
    VARIANT_INT4KV_PER_TOKEN_HEAD_TRITON,
    VARIANT_NVFP4KV_TRTLLM_GEN,
    VARIANT_TURBOQUANT_K8V4_TRITON,
    VARIANT_TURBOQUANT_4BIT_NC_TRITON,
    VARIANT_TURBOQUANT_K3V4_NC_TRITON,
    VARIANT_TURBOQUANT_3BIT_NC_TRITON,
    VARIANT_PROFILE_COUNT   /* also "no profile" (ext:NAME, ~spec, unknown) */
} variant_profile_id;

/* Profile id's full stored name ("bf16", "fp8kv@fixed", ...); NULL out of range. */
const char *variant_profile_name(variant_profile_id id);

/* The mode profile id runs (PG_MODE_BF16 out of range). */
pg_mode variant_profile_mode(variant_profile_id id);

/* 1 when profile id is the one its mode's name alone means, else 0. */
int variant_profile_is_default(variant_profile_id id);

/* The row of mode m; the baseline's row for a value out of range. */
const pg_mode_traits *pg_mode_traits_of(pg_mode m);

/* The baseline mode (the row with is_baseline). */
pg_mode pg_mode_baseline(void);

/* The mode's name ("bf16", "fp8kv", ...); "?" out of range. */
const char *pg_mode_name(pg_mode m);

/* The mode named name; PG_ERR_USAGE naming it and the modes otherwise. */
pg_status pg_mode_find(const char *name, pg_mode *out, pg_err *err);

/* 1 when mode m quantizes any tensor (every mode but the baseline's kind). */
int pg_mode_quantizes(pg_mode m);

/* Bytes one (token, KV head) takes in mode m's cache at head dim d: K's
 * and V's codes (each row rounded up to whole bytes), their block scales
 * and inline row bytes, the two rounded up to kv_slot_align_bytes; the
 * per-tensor scales (one per layer) not counted. */
long long pg_mode_kv_bytes_per_token_head(pg_mode m, int d);

/* The format's name ("bf16", "e4m3", "e5m2", "int8", "int4", "nvfp4", "lloyd-max",
 * "uint-minmax"). */
const char *pg_number_format_name(pg_number_format f);

/* The granularity's words ("no", "per-tensor", "per (token, KV head)"). */
const char *pg_scale_granularity_name(pg_scale_granularity g);

#ifdef __cplusplus
}
#endif

#endif /* PG_MODE_H */
