/*
 * variant.h: the one grammar of variant names over the mode table's
 * profiles (base/mode.h), for everything that stores, parses or orders them
 * (run --variants, the store, diff, history, the gate's config and flags,
 * reports). The names are vocabulary and live here, below every folder;
 * what each profile rounds (its rules and sources) is the kernels'
 * (kernels/attn_profile.c, whose table is indexed by variant_profile_id).
 *
 *   VARIANT := PROFILE            a kernel profile against the fp64 reference
 *            | PROFILE "~spec"    a GPU profile against the CPU specification's
 *                                 output (run --check-spec)
 *            | "ext:" NAME        an external implementation's output (capture
 *                                 layers.L.out.NAME)
 *   PROFILE := a name of the profile table ("bf16",
 *              "MODE@PROFILE", base/mode.h), or a MODE alone ("fp8kv", "fp8qkv"),
 *              which means that mode's default profile.
 *
 * What is stored and compared is always the full name (variant_name.full):
 * a bare mode is expanded, so runs with different numerics never meet
 * under one name. Eval modes (eval_samples.mode: bf16, fp8kv, fp8qkv, the
 * serving stack's switch) are not kernel profiles; only the ordering and
 * colour helpers take them, as their mode.
 */
#ifndef PG_VARIANT_H
#define PG_VARIANT_H

#include <stddef.h>

#include "base/mode.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The profile a name means: a full name, or a bare mode (its default
 * profile); PG_ERR_USAGE naming the name and the choices otherwise. */
pg_status variant_profile_find(const char *name, variant_profile_id *out, pg_err *err);

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
    variant_profile_id profile;   /* PROFILE and SPEC: the profile; EXT: VARIANT_PROFILE_COUNT */
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

/* The stored name of profile id checked against the CPU specification
 * ("fp8qkv@fa3~spec") into out. */
void variant_name_spec(variant_profile_id id, char *out, size_t len);

/* The stored name of external output NAME ("ext:NAME") into out. */
void variant_name_ext(const char *name, char *out, size_t len);

/* 1 when the stored name v has the ~spec form. */
int variant_name_is_spec(const char *v);

/* NAME of the stored name v when it has the ext:NAME form (pointing into
 * v), else NULL (NULL v included). */
const char *variant_name_ext_name(const char *v);

/* The profile a stored PROFILE name or an eval mode names (bare modes:
 * their default profile); VARIANT_PROFILE_COUNT for ~spec, ext:NAME,
 * NULL and unknown names. It is also the name's sort key: the profiles in
 * table order, then everything else. */
variant_profile_id variant_name_profile(const char *v);

/* Orders two names by variant_name_profile, then by name (strcmp-like). */
int variant_name_cmp(const char *a, const char *b);

#ifdef __cplusplus
}
#endif

#endif /* PG_VARIANT_H */
