/*
 * attn_profile.h: kernel profiles of the CPU specification (issue #15).
 *
 * A profile names where one real kernel rounds. Variants are written
 * MODE@PROFILE; MODE alone means that mode's default profile. The table is
 * attn_profile.c's, one row per profile in base/mode.h's variant_profile_id
 * order, each with its rules and their sources (attn_profile_rules; the
 * same text `precgate help profiles` prints), so that a new profile is a
 * row there and nowhere else.
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

/* 1 when p's kernel takes attention sinks, 0 when it refuses a layer with them
 * (fp8qkv@flashinfer-fa3, the TurboQuant decode kernel). */
int attn_profile_takes_sinks(const attn_profile *p);

/* Bytes that hold any reason attn_profile_computes gives, with its NUL. */
#define ATTN_REFUSAL_MAX 128

/* 1 when p's kernel computes a layer of b's shape (its sinks and window);
 * else 0 with why (why_len bytes; NULL allowed) saying what the kernel lacks
 * and the layer has, e.g. "the kernel has no attention sinks, and this layer
 * has them". attn_variant_run refuses exactly these (PG_ERR_UNSUPPORTED). */
int attn_profile_computes(const attn_profile *p, const attn_batch *b, char *why, size_t why_len);

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
 * and the reason when attn_profile_computes says no. */
pg_status attn_variant_run(const attn_profile *p, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                           uint16_t *out, attn_quant_report *rep, int n_threads, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_PROFILE_H */
