/*
 * attn_profile.c: the table of kernel profiles (attn_profile.h) and their
 * rules, each with the source it was read from.
 *
 * Sources, read 2026-12-03 (notes: /work/wt/notes/sources15.md):
 *   FORK = vllm-project/flash-attention @ 617264c1 (2026-08-06)
 *   UP   = Dao-AILab/flash-attention @ 0251105a (2026-08-15)
 *   VLLM = vllm-project/vllm, vllm/v1/attention/backends/flashinfer.py
 */
#include <stdio.h>
#include <string.h>

#include "attn_profile_impl.h"

/* FA3's Max_offset for fp8: P = exp2(x - m + 8) in [0, 256]
 * (FORK hopper/flash_fwd_kernel_sm90.h: Softmax<..., !Is_FP8 ? 0 : 8>;
 * hopper/softmax.h scale_apply_exp2). */
#define FA3_FP8_MAX_OFFSET 8.0f

/* Separator of MODE@PROFILE variant names. */
#define VARIANT_SEP '@'

static const char rules_bf16[] =
    "Q, K, V bf16; S = (sum_d q*k in fp32, d ascending) * sm_scale in fp32.\n"
    "Softmax with the final row max (two passes); the gpt-oss sink enters the max and the sum\n"
    "  (openai/gpt-oss gpt_oss/torch/model.py sdpa).\n"
    "P = expf(S - m) in fp32, rounded to bf16 for P.V; l summed in fp32 over the unrounded P.\n"
    "O = bf16((sum_t bf16(P) v in fp32, t ascending) / l).\n";

static const char rules_fp8kv_fixed[] =
    "K, V written to a paged e4m3 cache as e4m3(x / scale), nearest even, saturating\n"
    "  (vllm csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh scaled_convert).\n"
    "Dequant gather to a compact bf16 cache: bf16(fp8 * scale)\n"
    "  (vllm PR #24197 trtllm_prefill_attn_kvfp8_dequant).\n"
    "Then bf16 attention (rules of bf16) given sm_scale alone: the scales are applied once,\n"
    "  as vLLM PR #48016 restores.\n";

static const char rules_fp8kv_vllm24197[] =
    "K, V: paged e4m3 cache and dequant gather bf16(fp8 * scale), as fp8kv@fixed.\n"
    "Then bf16 attention given bmm1_scale = q_scale * k_scale * sm_scale and bmm2_scale = v_scale\n"
    "  (vllm vllm/v1/attention/backends/flashinfer.py FlashInferImpl.forward: python floats,\n"
    "  products in double left to right, passed to trtllm_batch_context_with_kv_cache as float).\n"
    "S = (sum_d q*k in fp32) * bmm1_scale: K scaled twice, q_scale on a Q never quantized.\n"
    "O = bf16((sum_t bf16(P) v in fp32) * bmm2_scale / l): V scaled twice.\n"
    "trtllm-gen's kernels are closed cubins: where bmm2_scale is applied is not public; precgate\n"
    "  multiplies the fp32 sum before / l (exact at scale 1.0, so @vllm-24197 = @fixed there).\n"
    "Reported as vLLM issue #47847, fixed by PR #48016.\n";

/* Rules shared by the FA3 profiles (FORK and UP agree here). */
#define RULES_FA3_COMMON                                                                         \
    "Q = e4m3(q / q_scale); K, V from the paged e4m3 cache (x / scale, nearest even, saturating).\n" \
    "S = q8 . k8 raw, one wgmma chain per key over the head dim: k = 32 steps from a zero\n"     \
    "  accumulator (FORK hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp mma: gemm<zero_init=true>),\n" \
    "  each step by the Hopper fp8 rule of kernels/fp8_mma.h.\n"                                 \
    "s = float(sm_scale * M_LOG2E) * (q_descale * k_descale) in fp32\n"                          \
    "  (FORK mainloop to_underlying_arguments; hopper/flash_fwd_kernel_sm90.h).\n"               \
    "Key tiles of kBlockN keys aligned at key 0, visited from the last (the partial one) to\n"   \
    "  the first (FORK mainloop mma: n_block = n_block_max - 1, then --n_block).\n"              \
    "Running max m over the raw S of the tiles seen, masked keys excluded; at each new tile\n"   \
    "  a = exp2f((m_old - m_new) * s) rescales l and the fp32 O\n"                               \
    "  (hopper/softmax.h Softmax::max_get_scale, rescale_o).\n"                                  \
    "P = exp2f(fma(S, s, -fma(m, s, -8))) in [0, 256]: Max_offset 8 (hopper/softmax.h\n"         \
    "  scale_apply_exp2); l sums the unrounded fp32 P (online_softmax reduce_sum).\n"            \
    "P rounded to e4m3, nearest even, saturating (hopper/utils.h convert_type_out:\n"            \
    "  cvt.rn.satfinite.e4m3x2.f32).\n"                                                          \
    "Sink (FORK only): l += exp2f(fma(float(M_LOG2E), sink, -fma(m, s, -8))) with the final m,\n" \
    "  not in the max, never rounded (hopper/softmax.h Softmax::finalize_aux).\n"                \
    "O = bf16(acc * ((1 / l) * v_descale)) (hopper/softmax.h finalize; 0 when l is 0 or NaN).\n" \
    "exp2f: the kernel's ex2.approx.ftz (--use_fast_math) is modelled by the C library's exp2f.\n"

static const char rules_fp8qkv_fa3[] =
    "vLLM's FlashAttention-3 fork, fp8 on Hopper (FLASH_ATTN backend, --kv-cache-dtype fp8).\n"
    RULES_FA3_COMMON
    "kBlockN (FORK hopper/tile_size.h tile_size_fwd_sm90, fp8, two-level tiles of PR #125):\n"
    "  d <= 64: 128, <= 96: 128, <= 128: 192, <= 192: 96, else 128 (local: 64).\n"
    "P.V two-level: each tile's P.V chains its k = 32 steps (keys chunked from the tile start)\n"
    "  from a zero accumulator, then one fp32 add into O (FORK hopper/utils.h gemm,\n"
    "  Use_Two_Level = Is_FP8 && !zero_init; PR #104).\n";

static const char rules_fp8qkv_fa3_1level[] =
    "Upstream FlashAttention-3 fp8 on Hopper (no two-level accumulation).\n"
    RULES_FA3_COMMON
    "kBlockN (UP hopper/tile_size.h tile_size_fwd_sm90, fp8, paged KV without TMA as with\n"
    "  vLLM's 16-token pages): d <= 64: 160, <= 96: 128, <= 128: 160, <= 192: 160 (local: 128),\n"
    "  else 128 (local: 64).\n"
    "P.V single-level: the running O (rescaled in fp32 between tiles) is the incoming\n"
    "  accumulator of every k = 32 step (UP hopper/utils.h gemm).\n";

static const char rules_fp8qkv_ideal[] =
    "The ideal bound (precgate's fp8qkv before issue #15); no kernel rounds like this.\n"
    "Q, K, V e4m3 as in @fa3; S = (sum_d q8 k8 in fp32, exact products, d ascending) *\n"
    "  float(q_scale * k_scale * sm_scale in double).\n"
    "Softmax with the final row max; P = expf(S - m) rounded to e4m3 unscaled.\n"
    "O = bf16((sum_t p8 v8 in fp32, t ascending) * v_scale / l): exact fp32 accumulation.\n";

/* The table, in the order attn_profile_at lists it. */
static const attn_profile profiles[] = {
    {.variant = "bf16", .mode = ATTN_MODE_BF16, .is_default = 1,
     .summary = "bf16 Q, K, V and P, fp32 sums, final row max", .rules = rules_bf16},
    {.variant = "fp8kv@fixed", .mode = ATTN_MODE_FP8KV, .is_default = 1,
     .summary = "e4m3 paged KV cache, dequant to bf16 once, bf16 attention with sm_scale",
     .rules = rules_fp8kv_fixed, .kv_scales = ATTN_KV_SCALES_FIXED},
    {.variant = "fp8kv@vllm-24197", .mode = ATTN_MODE_FP8KV,
     .summary = "vLLM PR #24197 as merged: dequant, then q/k/v scales applied again",
     .rules = rules_fp8kv_vllm24197, .kv_scales = ATTN_KV_SCALES_TWICE},
    {.variant = "fp8qkv@fa3", .mode = ATTN_MODE_FP8QKV, .is_default = 1,
     .summary = "vLLM's FA3 fork on Hopper: tiled running max, P x 256, two-level fp8 MMA",
     .rules = rules_fp8qkv_fa3, .softmax = ATTN_SOFTMAX_FA3,
     .p_offset_log2 = FA3_FP8_MAX_OFFSET, .accum = ATTN_ACCUM_MMA_2LEVEL,
     .tiles = {{64, 128, 128}, {96, 128, 128}, {128, 192, 192}, {192, 96, 96}, {256, 128, 64}}},
    {.variant = "fp8qkv@fa3-1level", .mode = ATTN_MODE_FP8QKV,
     .summary = "upstream FA3 on Hopper: as @fa3 with single-level fp8 MMA, its tiles",
     .rules = rules_fp8qkv_fa3_1level, .softmax = ATTN_SOFTMAX_FA3,
     .p_offset_log2 = FA3_FP8_MAX_OFFSET, .accum = ATTN_ACCUM_MMA_1LEVEL,
     .tiles = {{64, 160, 160}, {96, 128, 128}, {128, 160, 160}, {192, 160, 128}, {256, 128, 64}}},
    {.variant = "fp8qkv@ideal", .mode = ATTN_MODE_FP8QKV,
     .summary = "ideal bound: final row max, P unscaled e4m3, exact fp32 sums",
     .rules = rules_fp8qkv_ideal, .softmax = ATTN_SOFTMAX_FINAL_MAX, .accum = ATTN_ACCUM_EXACT},
};

#define N_PROFILES (sizeof profiles / sizeof profiles[0])

static const char *const mode_names[] = {
    [ATTN_MODE_BF16] = "bf16", [ATTN_MODE_FP8KV] = "fp8kv", [ATTN_MODE_FP8QKV] = "fp8qkv"};

size_t attn_profile_count(void) { return N_PROFILES; }

const attn_profile *attn_profile_at(size_t i) { return i < N_PROFILES ? &profiles[i] : NULL; }

const char *attn_profile_variant(const attn_profile *p) { return p->variant; }

attn_mode attn_profile_mode(const attn_profile *p) { return p->mode; }

int attn_profile_is_default(const attn_profile *p) { return p->is_default; }

const char *attn_profile_summary(const attn_profile *p) { return p->summary; }

const char *attn_profile_rules(const attn_profile *p) { return p->rules; }

int attn_profile_block_n(const attn_profile *p, int d, int window)
{
    const attn_tile_row *row = &p->tiles[ATTN_TILE_ROWS - 1];
    for (int i = 0; i < ATTN_TILE_ROWS; i++) {
        if (d <= p->tiles[i].max_d) {
            row = &p->tiles[i];
            break;
        }
    }
    return window > 0 ? row->block_n_local : row->block_n;
}

pg_status attn_profile_find(const char *name, const attn_profile **out, pg_err *err)
{
    const char *at = strchr(name, VARIANT_SEP);
    for (size_t i = 0; i < N_PROFILES; i++) {
        const attn_profile *p = &profiles[i];
        if (strcmp(name, p->variant) == 0 ||
            (at == NULL && p->is_default && strcmp(name, mode_names[p->mode]) == 0)) {
            *out = p;
            return PG_OK;
        }
    }
    char choices[512];
    size_t used = 0;
    for (size_t i = 0; i < N_PROFILES && used < sizeof choices; i++) {
        int w = snprintf(choices + used, sizeof choices - used, "%s%s", i ? ", " : "",
                         profiles[i].variant);
        if (w > 0) used += (size_t)w;
    }
    return pg_fail(err, PG_ERR_USAGE,
                   "variant '%s' is not one of %s (or bf16, fp8kv, fp8qkv for the defaults)",
                   name, choices);
}
