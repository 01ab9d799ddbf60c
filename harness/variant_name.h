/*
 * variant_name.h: the one grammar of variant names, for everything that
 * stores, parses or orders them (run --variants, the store, diff, history,
 * the gate's config and flags, reports).
 *
 *   VARIANT := PROFILE            a kernel profile against the fp64 reference
 *            | PROFILE "~spec"    a GPU profile against the CPU specification's
 *                                 output (run --check-spec)
 *            | "ext:" NAME        an external implementation's output (capture
 *                                 layers.L.out.NAME)
 *   PROFILE := a variant of kernels/attn_profile.h's table ("bf16",
 *              "MODE@PROFILE"), or a MODE alone ("fp8kv", "fp8qkv"),
 *              which means that mode's default profile.
 *
 * What is stored and compared is always the full name (variant_name.full):
 * a bare mode is expanded, so runs with different numerics never meet
 * under one name. Eval modes (eval_samples.mode: bf16, fp8kv, fp8qkv, the
 * serving stack's switch) are not kernel profiles; only the ordering and
 * colour helpers take them, as their mode.
 */
#ifndef PG_VARIANT_NAME_H
#define PG_VARIANT_NAME_H

#include <stddef.h>

#include "../kernels/attn_profile.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest variant name, NUL included ("ext:" + a capture's NAME, or
 * MODE@PROFILE~spec). */
#define VARIANT_NAME_MAX 128
/* Suffix of a GPU profile checked against the CPU specification. */
#define VARIANT_SPEC_SUFFIX "~spec"
/* Prefix of an external implementation's output. */
#define VARIANT_EXT_PREFIX "ext:"
/* Room for variant_name_choices' text. */
#define VARIANT_CHOICES_MAX 512

/* Which of the grammar's three forms a name has. */
typedef enum variant_kind {
    VARIANT_PROFILE, /* a profile against the fp64 reference */
    VARIANT_SPEC,    /* PROFILE~spec */
    VARIANT_EXT      /* ext:NAME */
} variant_kind;

/* One parsed variant name. */
typedef struct variant_name {
    variant_kind kind;
    const attn_profile *profile;  /* PROFILE and SPEC: the profile; NULL for EXT */
    char full[VARIANT_NAME_MAX];  /* the name as stored: bare modes expanded */
} variant_name;

/* Parses text (the grammar above) into *out; PG_ERR_USAGE "WHAT: 'text' is
 * not a variant (...choices)" when it is not one (unknown profile, empty
 * ext NAME, too long). what names the option or key for the message. */
pg_status variant_name_parse(const char *what, const char *text, variant_name *out,
                             pg_err *err);

/* The profiles a user may write, for messages: every profile of the
 * table and how bare modes expand. The text is built once, on the first
 * call (a static buffer: make that call before threads share it). */
const char *variant_name_profile_choices(void);

/* The variant names a user may write, for messages:
 * variant_name_profile_choices and the ~spec and ext:NAME forms. */
const char *variant_name_choices(void);

/* The stored name of profile p checked against the CPU specification
 * ("fp8qkv@fa3~spec") into out. */
void variant_name_spec(const attn_profile *p, char *out, size_t len);

/* The stored name of external output NAME ("ext:NAME") into out. */
void variant_name_ext(const char *name, char *out, size_t len);

/* 1 when the stored name v has the ~spec form. */
int variant_name_is_spec(const char *v);

/* The profile a stored PROFILE name or an eval mode names (bare modes:
 * their default profile); NULL for ~spec, ext:NAME and unknown names. */
const attn_profile *variant_name_profile(const char *v);

/* Sort key of a stored variant or an eval mode: its profile's index in the
 * table (bf16 first; a bare mode ranks as its default profile), then
 * everything else (ranked attn_profile_count(), ordered by name). */
size_t variant_name_rank(const char *v);

/* Orders two names by variant_name_rank, then by name (strcmp-like). */
int variant_name_cmp(const char *a, const char *b);

#ifdef __cplusplus
}
#endif

#endif /* PG_VARIANT_NAME_H */
