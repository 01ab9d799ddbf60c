/*
 * attn_hypothesis.c: the scale-plumbing hypotheses (attn_hypothesis.h).
 * The intended ones and kv-scales-twice are kernel profiles run as they
 * are; the fp8kv misapplications are points of the fp8kv scale plumbing
 * (attn_profile_impl.h attn_kv_plumbing), so that one computation serves
 * the profiles and the bugs; q-cast-unscaled is the default fp8qkv profile
 * given q_scale 1.0.
 * Sources, read in each report or pull request:
 *   vLLM #47847 / PR #48016: vllm/v1/attention/backends/flashinfer.py, the
 *     trtllm prefill path with an fp8 cache and a bf16 Q: the dequant kernel
 *     applies k_scale/v_scale, then bmm1_scale = q_scale*k_scale*sm_scale and
 *     bmm2_scale = v_scale are applied again, q_scale to a Q never quantized
 *     (reference/notes-kernels.md section 7).
 *   vLLM PR #37054: FlashInfer applied layer._[qkv]_scale unconditionally,
 *     also with kv_cache_dtype auto, on unscaled bf16 values (gibberish).
 *   sglang PR #18396: TRT-LLM MLA applied k_scale in BMM1 to a bf16 cache
 *     (k_scale 0.06: scores about 16x too small).
 *   FlashInfer #4979: BatchPrefillWithRaggedKVCacheWrapper ignored k_scale /
 *     v_scale for an fp8 KV cache; #1023: the scales lost in run()'s args.
 *   sglang PR #28144: Q cast to fp8 with an implicit q_scale of 1.0.
 *   The tq-* rows are the ways a reader of TurboQuant's slot can misread it
 *   (vllm/v1/attention/ops/triton_turboquant_decode.py): no report of them
 *   is known; each is one field of the slot or one step of the score left out.
 */
#include "attn_hypothesis.h"

#include <string.h>

#include "attn_profile_impl.h"
#include "base/variant.h"

typedef enum hyp_kind {
    HYP_PROFILE,       /* a kernel profile as it is */
    HYP_KV_PLUMBING,   /* the mode's dequant-copy computation with the plumbing pl and
                        * the tensors keep left bf16 */
    HYP_Q_UNSCALED,    /* the profile with q_scale taken as 1.0 */
    HYP_ROW_READ,      /* the per-token-head computation with the row read rd */
    HYP_FP8_READ,      /* the fp8-matmul computation with the read fr */
    HYP_TQ_READ        /* the TurboQuant computation with the read tq */
} hyp_kind;

/* attn_hypothesis.profile: the default profile of the hypothesis' mode (the
 * profile its bare name means, base/variant.h). */
#define HYP_MODE_DEFAULT VARIANT_PROFILE_COUNT

struct attn_hypothesis {
    const char *name;
    int intended;
    pg_mode mode;
    const char *summary;
    const char *meaning;
    hyp_kind kind;
    variant_profile_id profile; /* HYP_PROFILE, HYP_Q_UNSCALED: the profile run;
                                 * HYP_MODE_DEFAULT: mode's default profile */
    attn_kv_plumbing pl;     /* HYP_KV_PLUMBING */
    unsigned keep;           /* HYP_KV_PLUMBING: attn_tensor bits left bf16 */
    attn_row_read rd;        /* HYP_ROW_READ */
    attn_fp8_read fr;        /* HYP_FP8_READ */
    attn_tq_read tq;         /* HYP_TQ_READ */
};

static const attn_hypothesis hypotheses[] = {
    {"intended-bf16", 1, PG_MODE_BF16, "the bf16 mode: bf16 Q, K, V, fp32 accumulation",
     "the bf16 mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-fp8kv", 1, PG_MODE_FP8KV,
     "fp8kv@fixed: e4m3 paged cache, dequant with k/v scales, bf16 attention with sm_scale",
     "the fp8kv mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-fp8qkv", 1, PG_MODE_FP8QKV,
     "the default fp8qkv profile: e4m3 Q, K, V with their scales",
     "the fp8qkv mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"kv-scales-twice", 0, PG_MODE_FP8KV,
     "fp8kv@vllm-24197: dequant with k/v scales, then bmm1 = q*k*sm_scale and bmm2 = v_scale "
     "again (vLLM #47847, fixed by PR #48016)",
     "k/v scales applied twice", HYP_PROFILE, VARIANT_FP8KV_VLLM_24197, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"kv-scales-missing", 0, PG_MODE_FP8KV,
     "an e4m3 cache read without its k/v scales: the codes taken as values (FlashInfer "
     "#4979, #1023)",
     "k/v scales never applied", HYP_KV_PLUMBING, HYP_MODE_DEFAULT, {0, 0, 0, 0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"k-scale-on-bf16", 0, PG_MODE_FP8KV,
     "an unquantized bf16 cache, logits x k_scale and output x v_scale (sglang #18396; "
     "vLLM PR #37054)",
     "k/v scales applied to an unquantized cache", HYP_KV_PLUMBING, HYP_MODE_DEFAULT, {0, 0, 1, 1},
     ATTN_TENSOR_K | ATTN_TENSOR_V, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"q-scale-on-bf16-q", 0, PG_MODE_FP8KV,
     "fp8kv with the logits also x q_scale, Q never quantized (vLLM #47847)",
     "q_scale applied to a bf16 Q", HYP_KV_PLUMBING, HYP_MODE_DEFAULT, {1, 1, 0, 0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"q-cast-unscaled", 0, PG_MODE_FP8QKV,
     "the default fp8qkv profile with Q cast to e4m3 unscaled, q_scale 1.0 (sglang PR #28144)",
     "Q cast to fp8 without its scale", HYP_Q_UNSCALED, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-fp8kv_e5m2", 1, PG_MODE_FP8KV_E5M2,
     "fp8kv_e5m2@fixed: e5m2 paged cache, dequant with k/v scales, bf16 attention with "
     "sm_scale",
     "the fp8kv_e5m2 mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"e5m2-kv-scales-twice", 0, PG_MODE_FP8KV_E5M2,
     "fp8kv_e5m2 through the trtllm prefill path as PR #24197 merged it: dequant with k/v "
     "scales, then bmm1 = q*k*sm_scale and bmm2 = v_scale again (vLLM #47847)",
     "e5m2 k/v scales applied twice", HYP_KV_PLUMBING, HYP_MODE_DEFAULT, {1, 1, 1, 1}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"e5m2-kv-scales-missing", 0, PG_MODE_FP8KV_E5M2,
     "an e5m2 cache read without its k/v scales: the codes taken as values (as FlashInfer "
     "#4979 for e4m3)",
     "e5m2 k/v scales never applied", HYP_KV_PLUMBING, HYP_MODE_DEFAULT, {0, 0, 0, 0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-fp8kv_pth", 1, PG_MODE_FP8KV_PER_TOKEN_HEAD,
     "fp8kv_per_token_head@triton: e4m3 codes with a scale per (token, KV head), S x "
     "(sm_scale * k scale) and P x v scale in the Triton kernel",
     "the fp8kv_per_token_head mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0, {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"pth-scales-missing", 0, PG_MODE_FP8KV_PER_TOKEN_HEAD,
     "a per-token-head cache read as a per-tensor one with scale 1.0: the codes taken as "
     "values, the row scales never applied (a kernel without KV_QUANT_MODE 3's branch)",
     "per-token-head scales never applied", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_IGNORED, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"pth-scales-twice", 0, PG_MODE_FP8KV_PER_TOKEN_HEAD,
     "a per-token-head cache dequantized on load, bf16(code * scale), by a kernel that also "
     "applies the row scales on S and P (the load-time dequant of ROCm AITER's unified "
     "attention joined to vLLM's S/P scaling)",
     "per-token-head scales applied twice", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_TWICE, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-int8kv_pth", 1, PG_MODE_INT8KV_PER_TOKEN_HEAD,
     "int8kv_per_token_head@triton: int8 codes (truncated) with a scale per (token, KV "
     "head), S x (sm_scale * k scale) and P x v scale in the Triton kernel",
     "the int8kv_per_token_head mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"int8-pth-scales-missing", 0, PG_MODE_INT8KV_PER_TOKEN_HEAD,
     "an int8 per-token-head cache read without its row scales: the codes (up to 127) "
     "taken as values (a kernel without KV_QUANT_MODE 2's branch)",
     "int8 per-token-head scales never applied", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_IGNORED, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"int8-pth-scales-twice", 0, PG_MODE_INT8KV_PER_TOKEN_HEAD,
     "an int8 per-token-head cache dequantized on load, bf16(code * scale), by a kernel "
     "that also applies the row scales on S and P",
     "int8 per-token-head scales applied twice", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_TWICE, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-int4kv_pth", 1, PG_MODE_INT4KV_PER_TOKEN_HEAD,
     "int4kv_per_token_head@triton: Q, K, V rotated by the seeded Hadamard transform, int4 "
     "codes with a scale and zero point per (token, KV head), the output rotated back",
     "the int4kv_per_token_head mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"int4-zero-point-dropped", 0, PG_MODE_INT4KV_PER_TOKEN_HEAD,
     "an int4 cache read without its zero points: code x scale instead of (code - zp) x "
     "scale, as a reader of the int8 layout would (the zero point hides in the scale's low "
     "mantissa bits)",
     "int4 zero points dropped", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 1, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"int4-q-unrotated", 0, PG_MODE_INT4KV_PER_TOKEN_HEAD,
     "K and V rotated into the int4 cache but Q not rotated to match (a path that skips "
     "single_rht on the query)",
     "Q not rotated to match K", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 1, 0}, {0, 0}, {0, 0, 0, 0}},
    {"int4-output-unrotated", 0, PG_MODE_INT4KV_PER_TOKEN_HEAD,
     "the int4 path's output left in the rotated basis (the inverse transform of the "
     "output skipped)",
     "output not rotated back", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 1}, {0, 0}, {0, 0, 0, 0}},
    {"int4-pth-scales-missing", 0, PG_MODE_INT4KV_PER_TOKEN_HEAD,
     "an int4 cache read without its row scales: codes less zero points taken as values",
     "int4 row scales never applied", HYP_ROW_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_IGNORED, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-nvfp4kv", 1, PG_MODE_NVFP4KV,
     "nvfp4kv@trtllm-gen: e2m1 codes with an e4m3 scale per 16 and the per-tensor k/v scales, "
     "fp8 Q and matmuls, an e4m3 output",
     "the nvfp4kv mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"nvfp4-block-scales-lost", 0, PG_MODE_NVFP4KV,
     "an nvfp4 cache whose e2m1 codes reach the matmuls without their block scales (the "
     "kv_cache_sf views not passed, or read as 1.0)",
     "nvfp4 block scales never applied", HYP_FP8_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {1, 0}, {0, 0, 0, 0}},
    {"nvfp4-kv-scales-missing", 0, PG_MODE_NVFP4KV,
     "an nvfp4 cache written with its global scales (1 / k_scale, 1 / v_scale) but read with "
     "bmm1 and bmm2 scales that leave k_scale and v_scale out",
     "nvfp4 per-tensor k/v scales never applied", HYP_FP8_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 1}, {0, 0, 0, 0}},
    {"intended-tq_k8v4", 1, PG_MODE_TURBOQUANT_K8V4,
     "turboquant_k8v4@triton: K e4m3 unscaled, V 4-bit codes with an fp16 scale and min, "
     "the split-KV decode kernel",
     "the turboquant_k8v4 mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-tq_4bit_nc", 1, PG_MODE_TURBOQUANT_4BIT_NC,
     "turboquant_4bit_nc@triton: K 4-bit Lloyd-Max indices of the Hadamard-rotated unit "
     "row with its fp16 norm, centroids re-normalized, V 4-bit",
     "the turboquant_4bit_nc mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-tq_k3v4_nc", 1, PG_MODE_TURBOQUANT_K3V4_NC,
     "turboquant_k3v4_nc@triton: K 3-bit Lloyd-Max indices with its fp16 norm, centroids "
     "re-normalized, V 4-bit",
     "the turboquant_k3v4_nc mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"intended-tq_3bit_nc", 1, PG_MODE_TURBOQUANT_3BIT_NC,
     "turboquant_3bit_nc@triton: K 3-bit Lloyd-Max indices with its fp16 norm, centroids "
     "re-normalized, V 3-bit",
     "the turboquant_3bit_nc mode as intended", HYP_PROFILE, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 0}},
    {"tq-q-unrotated", 0, PG_MODE_TURBOQUANT_4BIT_NC,
     "K rotated by the Hadamard matrix into the codebook's basis but Q scored unrotated (a "
     "decode path that skips q @ Pi^T, as the fp8-key path rightly does)",
     "Q not rotated to match K", HYP_TQ_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {1, 0, 0, 0}},
    {"tq-key-norms-dropped", 0, PG_MODE_TURBOQUANT_K3V4_NC,
     "the keys' fp16 norms read as 1: every key scored as a unit vector (the norm bytes "
     "after the indices not read)",
     "key norms never applied", HYP_TQ_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 1, 0, 0}},
    {"tq-nc-skipped", 0, PG_MODE_TURBOQUANT_3BIT_NC,
     "an _nc cache scored with the raw centroids: the norm correction (c / |c|) skipped, "
     "each score shrunk by the codebook's |c| < 1",
     "norm correction skipped", HYP_TQ_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 1, 0}},
    {"tq-value-min-dropped", 0, PG_MODE_TURBOQUANT_K8V4,
     "values read as code x scale, their fp16 min left out (the zero half of the value "
     "metadata not read)",
     "value minimums dropped", HYP_TQ_READ, HYP_MODE_DEFAULT, {0}, 0,
     {ATTN_ROW_SCALES_ON_S_AND_P, 0, 0, 0}, {0, 0}, {0, 0, 0, 1}},
};
#define N_HYPOTHESES (sizeof hypotheses / sizeof hypotheses[0])

size_t attn_hypothesis_count(void) { return N_HYPOTHESES; }

const attn_hypothesis *attn_hypothesis_at(size_t i)
{
    return i < N_HYPOTHESES ? &hypotheses[i] : NULL;
}

const attn_hypothesis *attn_hypothesis_find(const char *name)
{
    for (size_t i = 0; i < N_HYPOTHESES; i++)
        if (strcmp(hypotheses[i].name, name) == 0) return &hypotheses[i];
    return NULL;
}

const char *attn_hypothesis_name(const attn_hypothesis *h) { return h->name; }

int attn_hypothesis_is_intended(const attn_hypothesis *h) { return h->intended; }

pg_mode attn_hypothesis_mode(const attn_hypothesis *h) { return h->mode; }

int attn_hypothesis_is_asked(const attn_hypothesis *h, unsigned swept_modes)
{
    return pg_mode_traits_of(h->mode)->always_diagnosed || (swept_modes >> h->mode) & 1u;
}

const char *attn_hypothesis_summary(const attn_hypothesis *h) { return h->summary; }

const char *attn_hypothesis_meaning(const attn_hypothesis *h) { return h->meaning; }

int attn_hypothesis_profile_run(const attn_hypothesis *h, const attn_quant_options *opt,
                                const attn_profile **p, attn_kv_plumbing *pl, int *has_pl,
                                attn_quant_options *o, const char **why)
{
    *o = *opt;
    *has_pl = 0;
    *p = NULL;
    if (why != NULL) *why = NULL;
    const char *name = h->profile == HYP_MODE_DEFAULT ? pg_mode_name(h->mode)
                                                      : variant_profile_name(h->profile);
    switch (h->kind) {
    case HYP_KV_PLUMBING:
        o->keep_bf16 = h->keep;
        *pl = h->pl;
        *has_pl = 1;
        break;
    case HYP_Q_UNSCALED: o->q_scale = 1.0f; break;
    case HYP_PROFILE: break;
    case HYP_ROW_READ:
    case HYP_FP8_READ:
    case HYP_TQ_READ:
        if (why != NULL)
            *why = "a misread of a per-token-head, nvfp4 or TurboQuant cache: only the CPU "
                   "specification models it";
        return 0;
    }
    return attn_profile_find(name, p, NULL) == PG_OK;
}

pg_status attn_hypothesis_run(const attn_hypothesis *h, const attn_batch *b, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                              uint16_t *out, int n_threads, pg_err *err)
{
    pg_status st = attn_quant_options_check(opt, err);
    if (st != PG_OK) return st;
    if (opt->keep_bf16 != 0 || !opt->quantize)
        return pg_fail(err, PG_ERR_USAGE, "hypothesis %s: the options must quantize as the "
                       "stack does (quantize 1, keep_bf16 0)", h->name);
    attn_quant_options o = *opt;
    const attn_profile *p = NULL;
    switch (h->kind) {
    case HYP_KV_PLUMBING:
        o.keep_bf16 = h->keep;
        return attn_fp8kv_plumbed_run(&h->pl, pg_mode_traits_of(h->mode)->k_format, b, q, k, v,
                                      &o, out, NULL, n_threads, err);
    case HYP_ROW_READ:
        st = attn_profile_find(pg_mode_name(h->mode), &p, err);
        if (st != PG_OK) return st;
        return attn_kv_per_token_head_run(p, &h->rd, b, q, k, v, &o, out, NULL, n_threads, err);
    case HYP_FP8_READ:
        st = attn_profile_find(pg_mode_name(h->mode), &p, err);
        if (st != PG_OK) return st;
        return attn_fp8_matmuls_run(p, &h->fr, b, q, k, v, &o, out, NULL, n_threads, err);
    case HYP_TQ_READ:
        st = attn_profile_find(pg_mode_name(h->mode), &p, err);
        if (st != PG_OK) return st;
        return attn_turboquant_run(p, &h->tq, b, q, k, v, &o, out, NULL, n_threads, err);
    case HYP_Q_UNSCALED:
        o.q_scale = 1.0f;
        /* fall through */
    case HYP_PROFILE:
        st = attn_profile_find(h->profile == HYP_MODE_DEFAULT ? pg_mode_name(h->mode)
                                                              : variant_profile_name(h->profile),
                               &p, err);
        if (st != PG_OK) return st;
        return attn_variant_run(p, b, q, k, v, &o, out, NULL, n_threads, err);
    }
    return pg_fail(err, PG_ERR_INTERNAL, "hypothesis %s: unknown kind", h->name);
}
