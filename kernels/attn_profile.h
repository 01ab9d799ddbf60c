/*
 * attn_profile.h: kernel profiles of the CPU specification (issue #15).
 *
 * A profile names where one real kernel rounds. Variants are written
 * MODE@PROFILE; MODE alone means that mode's default profile. The table, in
 * order (attn_profile_rules gives each one's rules with their sources):
 *   bf16               the bf16 mode (attn.h)
 *   fp8kv@fixed        default: paged e4m3 cache, dequant once, bf16 attention
 *                      with sm_scale alone (what vLLM PR #48016 restores)
 *   fp8kv@vllm-24197   vLLM PR #24197 as merged: the same dequant, then
 *                      bmm1_scale = q_scale*k_scale*sm_scale and bmm2_scale =
 *                      v_scale applied again (K and V scaled twice)
 *   fp8qkv@fa3         default: vLLM's FlashAttention-3 fork, fp8 on Hopper
 *   fp8qkv@fa3-1level  the same with upstream FA3's single-level accumulation
 *                      and tile table
 *   fp8qkv@trtllm      TensorRT-LLM fmha_v2 fp8 context FMHA on Hopper (the open
 *                      proxy of vLLM's trtllm-gen path)
 *   fp8qkv@flashinfer-fa3  FlashInfer's FA3 fp8 prefill (P x 448; no sinks)
 *   fp8qkv@ideal       final row max, P unscaled e4m3, exact fp32 sums (the
 *                      fp8qkv of precgate before issue #15: an ideal bound)
 *   fp8kv_e5m2@fixed   default: vLLM's fp8_e5m2 cache, dequant once, bf16
 *                      attention with sm_scale (issue #29)
 *   fp8kv_per_token_head@triton  default: vLLM's fp8_per_token_head cache, a
 *                      scale per (token, KV head), Triton unified attention
 * The profiles' knobs are private to kernels/ (attn_profile_impl.h).
 */
#ifndef PG_ATTN_PROFILE_H
#define PG_ATTN_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "base/status.h"
#include "base/variant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel profile (opaque; the table's entries live for the program's life). */
typedef struct attn_profile attn_profile;

/* The profile of a variant name: "bf16", "fp8kv" / "fp8qkv" (the mode's default
 * profile), or "MODE@PROFILE"; PG_ERR_USAGE naming the name and the choices otherwise. */
pg_status attn_profile_find(const char *name, const attn_profile **out, pg_err *err);

/* Number of profiles in the table. */
size_t attn_profile_count(void);

/* The i-th profile in table order (bf16 first; i is a variant_profile_id of
 * base/variant.h), NULL when i >= attn_profile_count(). */
const attn_profile *attn_profile_at(size_t i);

/* The profile's id in base/variant.h's table of names. */
variant_profile_id attn_profile_id(const attn_profile *p);

/* The full stored variant name: "bf16", "fp8kv@fixed", "fp8qkv@fa3", ... */
const char *attn_profile_variant(const attn_profile *p);

/* The mode the profile runs. */
pg_mode attn_profile_mode(const attn_profile *p);

/* 1 when p is the profile its mode's name alone means, else 0. */
int attn_profile_is_default(const attn_profile *p);

/* One line saying what the profile is. */
const char *attn_profile_summary(const attn_profile *p);

/* Several lines, each ending in '\n': where the profile rounds, each rule with
 * its source (repository, file, function); `precgate help profiles` shows them. */
const char *attn_profile_rules(const attn_profile *p);

/* Runs variant p on one layer: q bf16 [Tq,hq,d], k/v bf16 [Tkv,hkv,d] -> out
 * bf16 [Tq,hq,d]. opt is required for the fp8 modes (NULL allowed for bf16);
 * rep (may be NULL) is filled for the fp8 modes. PG_ERR_UNSUPPORTED naming p
 * when the profile's kernel cannot take the layer (sinks on a kernel without). */
pg_status attn_variant_run(const attn_profile *p, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                           uint16_t *out, attn_quant_report *rep, int n_threads, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_PROFILE_H */
