/*
 * attn_profile_impl.h: the knobs of a kernel profile, private to kernels/
 * (attn_profile.c fills the table, attn_modes.c's fp32 core reads it).
 */
#ifndef PG_ATTN_PROFILE_IMPL_H
#define PG_ATTN_PROFILE_IMPL_H

#include <math.h>

#include "attn_profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FA3's Max_offset for fp8: P = exp2(x - m + 8) in [0, 256]
 * (FORK hopper/flash_fwd_kernel_sm90.h: Softmax<..., !Is_FP8 ? 0 : 8>;
 * hopper/softmax.h scale_apply_exp2). The CPU profiles and the GPU kernel
 * (cuda_attn_fp8.cu) both use it. */
#define ATTN_FA3_FP8_MAX_OFFSET 8.0f

/* Functions both the CPU specification and the CUDA kernels compile. */
#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

/* The exponential of the final-max softmax (the bf16 and fp8kv modes,
 * fp8qkv@ideal), as the specification (attn_modes.c row_final_max) and the
 * GPU kernel (cuda_softmax.cuh) both take it: exp in double, rounded once to
 * fp32. A double exp within an ulp of double rounds to the correctly rounded
 * fp32 exp except within 2^-29 of an fp32 rounding boundary, so the two
 * sides' P agree bit for bit, where the C library's expf and CUDA's (up to 2
 * ulp) differ now and then and flip P's bf16 rounding: an error as large as
 * the mode's own at an element, which no summation order causes (issue #31
 * item 4, measured on an H100). */
static inline ATTN_HOST_DEVICE float attn_final_max_exp(float x)
{
    return (float)exp((double)x);
}

/* log2(e) as the kernels use it: M_LOG2E (a double constant, math.h) in FA3's
 * double product of softmax_scale_log2 and TRT-LLM's sink term, float(M_LOG2E)
 * in FA3's finalize_aux (FORK hopper/softmax.h), TRT-LLM's fused_scale_bmm1 *
 * float(M_LOG2E) and FlashInfer's math::log2e (a float constant). */
#define ATTN_LOG2E_F64 1.4426950408889634

/* What every quantized computation does first: b and opt checked
 * (attn_batch_check, attn_quant_options_check), then *rep zeroed (rep may
 * be NULL). */
pg_status attn_quant_run_begin(const attn_batch *b, const attn_quant_options *opt,
                               attn_quant_report *rep, pg_err *err);

/* n_threads blocks of per floats each into *out (free with attn_scratch_free);
 * PG_ERR_NOMEM, nothing left allocated. */
pg_status attn_scratch_alloc(int n_threads, size_t per, float ***out, pg_err *err);

/* Frees what attn_scratch_alloc gave (NULL: nothing). */
void attn_scratch_free(float **scratch, int n_threads);

/* fp8kv: which scales the bf16 attention after the dequant is given. */
typedef enum attn_kv_scales {
    ATTN_KV_SCALES_FIXED,  /* sm_scale alone (the dequant already applied k/v scales) */
    ATTN_KV_SCALES_TWICE   /* vLLM PR #24197: bmm1 = q*k*sm_scale, bmm2 = v_scale again */
} attn_kv_scales;

/* Where an fp8kv computation applies the k/v (and q) scales: the two
 * profiles are two points of it (attn_kv_plumbing_of), and the scale
 * bugs of attn_hypothesis.h are the others. */
typedef struct attn_kv_plumbing {
    int dequant_scaled;  /* the dequant gather multiplies the e4m3 codes by k/v_scale
                          * (0: the codes are taken as values) */
    int bmm1_q, bmm1_k;  /* the logits are multiplied by q_scale / k_scale too: bmm1_scale =
                          * q^bmm1_q * k^bmm1_k * sm_scale (attn_vllm_bmm1_scale) */
    int bmm2_v;          /* the output is multiplied by v_scale (bmm2_scale) */
} attn_kv_plumbing;

/* The plumbing of fp8kv profile p: @fixed {1, 0, 0, 0}, @vllm-24197 {1, 1, 1, 1}. */
attn_kv_plumbing attn_kv_plumbing_of(const attn_profile *p);

/* The fp8kv computation with plumbing pl: K and V (those opt->keep_bf16 leaves
 * out excepted: read as the bf16 given) through the paged cache of kv_format
 * (e4m3 or e5m2, per-tensor scales) and its
 * dequant gather, then bf16 attention with pl's bmm1/bmm2 scales taken from
 * opt as they are (kept tensors included: attn_variant_run sets a kept
 * one's scale to 1.0 before it calls this; the hypotheses do not); as
 * attn_variant_run otherwise (opt required and checked; opt->quantize = 0
 * takes pl as {1, 0, 0, 0}). */
pg_status attn_fp8kv_plumbed_run(const attn_kv_plumbing *pl, pg_number_format kv_format,
                                 const attn_batch *b,
                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                 const attn_quant_options *opt, uint16_t *out,
                                 attn_quant_report *rep, int n_threads, pg_err *err);

/* How a per-token-head computation uses each cached row's scale. */
typedef enum attn_row_scaling {
    ATTN_ROW_SCALES_ON_S_AND_P, /* intended: S x (sm_scale * ks), P x vs (Triton unified
                                 * attention, KV_QUANT_MODE 3) */
    ATTN_ROW_SCALES_IGNORED,    /* the codes taken as values, no scale anywhere */
    ATTN_ROW_SCALES_TWICE       /* the codes also dequantized on load, bf16(code * scale),
                                 * and the scales applied on S and P again */
} attn_row_scaling;

/* Keys per tile of vLLM's Triton unified attention in a prefill: TILE_SIZE
 * 32 (vllm/v1/attention/ops/triton_unified_attention.py _get_tile_size,
 * is_prefill; Gemma3's special case is 32 too). */
#define ATTN_TRITON_PREFILL_TILE 32

/* How a per-token-head computation reads its cache: the row scaling and,
 * for a mode with zero points or a rotation (base/mode.h kv_rotation),
 * whether each is applied as the kernel intends. */
typedef struct attn_row_read {
    attn_row_scaling scaling;
    int zero_point_dropped;  /* the rows' zero points read as 0 (codes taken as signed) */
    int q_unrotated;         /* K and V rotated, Q not */
    int output_unrotated;    /* the output left in the rotated basis */
} attn_row_read;

/* The read every per-token-head profile intends. */
#define ATTN_ROW_READ_INTENDED ((attn_row_read){ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0})

/* A per-token-head mode's computation (profile p of a mode whose KV is
 * dequantized in registers; rules in attn_profile.c) read as rd: the mode's
 * rotation of Q, K and V (kernels/rht.h) when it has one, the cache write
 * of vLLM's per-token-head kernel into its format's codes (kv_cache.h),
 * then the Triton row with bf16 Q and sm_scale, and the inverse rotation of
 * the output; the tensors opt->keep_bf16 names stay bf16 with scale 1
 * (opt's per-tensor scales are never used: the scales are the rows' own);
 * opt->quantize = 0 keeps everything bf16 (attn.h), rotation included.
 * Checks as attn_variant_run; PG_ERR_SHAPE naming the head dim when the
 * rotation cannot take it. */
pg_status attn_kv_per_token_head_run(const attn_profile *p, const attn_row_read *rd,
                                     const attn_batch *b, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                     const attn_quant_options *opt, uint16_t *out,
                                     attn_quant_report *rep, int n_threads, pg_err *err);

/* exp as Triton takes it in fp32: ex2.approx.f32(x * log2e), the product
 * rounded to fp32 (triton ElementwiseOpToLLVM ExpOpConversionApprox), the
 * ex2 modelled by the C library's exp2f as for the other tiled profiles. */
static inline float attn_triton_exp(float x) { return exp2f(x * (float)ATTN_LOG2E_F64); }

/* TurboQuant's decode kernel (vllm/v1/attention/ops/triton_turboquant_decode.py
 * triton_turboquant_decode_attention): BLOCK_KV = 4 keys per tile, and
 * NUM_KV_SPLITS = vllm/config/attention.py tq_max_kv_splits_for_cuda_graph,
 * 32 by default. */
#define ATTN_TQ_DECODE_BLOCK_KV 4
#define ATTN_TQ_DECODE_KV_SPLITS 32

/* How a TurboQuant computation reads its cache, where a kernel may
 * misapply the preset (the intended read is all 0). */
typedef struct attn_tq_read {
    int q_unrotated;             /* K rotated into the codebook's basis, Q scored unrotated */
    int key_norms_dropped;       /* the keys' fp16 norms read as 1 */
    int norm_correction_skipped; /* an "_nc" cache scored with the raw centroids */
    int value_min_dropped;       /* values code x scale, their fp16 min left out */
} attn_tq_read;

/* The read every TurboQuant profile intends. */
#define ATTN_TQ_READ_INTENDED ((attn_tq_read){0, 0, 0, 0})

/* A TurboQuant mode's computation (profile p; rules in attn_profile.c) read
 * as rd: the cache write of turboquant.h, then the decode kernel for every
 * query row, the row's keys [0, hi] split 32 ways and tiled by 4, merged by
 * log-sum-exp; the tensors opt->keep_bf16 names stay bf16 (K: scored
 * unrotated against the bf16 row); opt->quantize = 0 keeps both.
 * Checks as attn_variant_run; PG_ERR_UNSUPPORTED for sinks or a window (the
 * kernel has neither), tq_layout_of's errors for the head dim. */
pg_status attn_turboquant_run(const attn_profile *p, const attn_tq_read *rd, const attn_batch *b,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v,
                              const attn_quant_options *opt, uint16_t *out,
                              attn_quant_report *rep, int n_threads, pg_err *err);

/* How an fp8-matmul computation reads its cache, where a kernel may
 * misapply the scales (the intended read is {0, 0}). */
typedef struct attn_fp8_read {
    int block_scales_dropped; /* nvfp4: e2m1 codes converted without their block scales */
    int kv_scales_dropped;    /* k_scale left out of bmm1 and v_scale out of bmm2 */
} attn_fp8_read;

/* A mode with fp8 matmuls (fp8qkv's profiles, nvfp4kv@trtllm-gen) read as
 * rd: Q quantized to e4m3 with q_scale, the cache written in the mode's
 * format with opt's per-tensor scales (nvfp4: then converted to e4m3), the
 * profile's core, its output e4m3 when the profile says so; the tensors
 * opt->keep_bf16 names stay bf16 with scale 1; opt->quantize = 0 keeps
 * everything bf16 and reads as intended. Checks as attn_variant_run. */
pg_status attn_fp8_matmuls_run(const attn_profile *p, const attn_fp8_read *rd,
                               const attn_batch *b, const uint16_t *q, const uint16_t *k,
                               const uint16_t *v, const attn_quant_options *opt, uint16_t *out,
                               attn_quant_report *rep, int n_threads, pg_err *err);

/* How the softmax is taken. */
typedef enum attn_softmax {
    ATTN_SOFTMAX_FINAL_MAX,  /* two passes: final row max, P = expf(S*qk_scale - m) */
    ATTN_SOFTMAX_FA3,        /* FA3 online softmax: running max per key tile, tiles last
                              * to first, exp2f with Max_offset (hopper/softmax.h) */
    ATTN_SOFTMAX_TRTLLM,     /* TensorRT-LLM fmha_v2 sm90 e4m3: tiles first to last,
                              * fma.rz then exp2 with the 256 offset (warpspec/epilogue.h) */
    ATTN_SOFTMAX_FLASHINFER, /* FlashInfer's FA3 fp8: tiles last to first, P in [0, 1]
                              * then x p_scale (hopper/variants.cuh StandardFP8Attention) */
    ATTN_SOFTMAX_TRITON      /* vLLM's Triton unified attention: tiles first to last, the
                              * per-key k/v scales on S and on P (softmax_step) */
} attn_softmax;

/* How the fp8 products of Q.K^T and P.V are summed. */
typedef enum attn_accum {
    ATTN_ACCUM_EXACT,      /* fp32 sums, one product at a time, in index order */
    ATTN_ACCUM_MMA_1LEVEL, /* Hopper fp8 wgmma (fp8_mma.h); P.V chains the running O
                            * through every tile's k = 32 steps */
    ATTN_ACCUM_MMA_2LEVEL  /* the same, but each tile's P.V starts from 0 and is added
                            * into O in fp32 (vLLM's FA3 fork, hopper/utils.h gemm) */
} attn_accum;

/* A tile table row: head dims up to max_d use kBlockN keys (local: window > 0). */
typedef struct attn_tile_row {
    int max_d, block_n, block_n_local;
} attn_tile_row;

/* Rows of a tile table (ascending max_d; the last row covers every larger d). */
#define ATTN_TILE_ROWS 5

struct attn_profile {
    /* Its name, mode and default mark are base/variant.h's, by its index. */
    const char *summary;
    const char *rules;
    attn_kv_scales kv_scales;          /* fp8kv only */
    attn_softmax softmax;              /* fp8qkv only; bf16/fp8kv: final max */
    float p_exp_offset;                /* FA3 / TRT-LLM: P = 2^(... + offset), offset 8 */
    float p_scale;                     /* FlashInfer: P multiplied by it after the exp */
    int q_by_inverse;                  /* Q8 = e4m3(q * fp32(1 / q_scale)), vLLM's
                                        * scaled_fp8_quant; else e4m3(q / q_scale) */
    int no_sinks;                      /* the kernel has no attention sinks: refused */
    int no_window;                     /* the kernel has no sliding window: refused */
    int pv_in_fp32;                    /* Triton: P x v scale enters P.V in fp32 (the int4
                                        * kernel's fp32 tl.dot), else rounded to bf16 */
    int out_e4m3;                      /* tiled softmaxes: the kernel writes an e4m3 output */
    attn_accum accum;                  /* fp8qkv only */
    attn_tile_row tiles[ATTN_TILE_ROWS]; /* tiled softmaxes only */
};

/* Keys per tile (kBlockN) of profile p for head dim d (window > 0: local). */
int attn_profile_block_n(const attn_profile *p, int d, int window);

/* vLLM's bmm1_scale = q_scale * k_scale * sm_scale: python floats (double),
 * left to right, given to the kernel as float (vllm/v1/attention/backends/
 * flashinfer.py FlashInferImpl.forward). */
float attn_vllm_bmm1_scale(float q_scale, float k_scale, float sm_scale);

/* FA3's softmax_scale_log2: float(softmax_scale * M_LOG2E) (the product in
 * double: M_LOG2E is a double constant), then *= q_descale * k_descale in fp32
 * (FORK hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp to_underlying_arguments;
 * hopper/flash_fwd_kernel_sm90.h). The CPU and the GPU use this one. */
float attn_fa3_scale_log2(float sm_scale, float q_descale, float k_descale);

/* What a tiled fp8-matmul core (a profile with softmax FA3, TRTLLM or
 * FLASHINFER) multiplies by, from the per-tensor scales as the run applies
 * them (rules and sources: attn_modes.c row_tiled, attn_fp8_matmuls_run).
 * The CPU specification and the GPU kernel (cuda_attn_fp8.cu) both take
 * them from attn_tiled_scales_of. */
typedef struct attn_tiled_scales {
    float scale_log2; /* s: the raw fp8 S times s is the logit in log2 units */
    float max_offset; /* FA3 / TRT-LLM: P = 2^(S s - m s + max_offset) */
    float p_scale;    /* FlashInfer: P multiplied by it before the cast (else 0) */
    float v_descale;  /* O's last factor: FA3 v_descale, TRT-LLM bmm2_scale,
                       * FlashInfer pv_scale = v_scale / p_scale */
} attn_tiled_scales;

/* 1 and *out filled when p's softmax is tiled (FA3, TRTLLM, FLASHINFER),
 * given sm_scale and the q/k/v scales the core uses (1 for a tensor kept
 * bf16); else 0 and *out zeroed. */
int attn_tiled_scales_of(const attn_profile *p, float sm_scale, float q_scale, float k_scale,
                         float v_scale, attn_tiled_scales *out);

/* A scale-plumbing hypothesis (attn_hypothesis.h) as a run of a kernel
 * profile, for a backend other than the CPU specification: *p its profile,
 * *pl the fp8kv plumbing it forces where *has_pl (else the profile's own),
 * *o opt as it adjusts it (keep_bf16, q_scale), with the kept tensors'
 * scales taken as they are (attn_fp8kv_plumbed_run). 1 for the hypotheses
 * that are such runs; 0 for the reads only the CPU specification models
 * (per-token-head rows, nvfp4, TurboQuant), with *why saying so. */
struct attn_hypothesis;
int attn_hypothesis_profile_run(const struct attn_hypothesis *h, const attn_quant_options *opt,
                                const attn_profile **p, attn_kv_plumbing *pl, int *has_pl,
                                attn_quant_options *o, const char **why);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_PROFILE_IMPL_H */
