/*
 * attn_hypothesis.h: scale-plumbing hypotheses (issue #16). Each one
 * emulates, from one layer's bf16 q/k/v and its fp8 scales, either the
 * computation a precision mode intends or one known way serving stacks
 * misapply the fp8 scales. An external output (capture layers.L.out.NAME)
 * is then measured against each, and the nearest one says what the stack
 * computed. Every misapplication is silent at scale 1.0: there it equals an
 * intended hypothesis bit for bit, so only calibrated scales tell them apart.
 *
 * The table is attn_hypothesis.c's, each row with its mode, what it
 * computes and its source (attn_hypothesis_summary), so that a new one is a
 * row there and nowhere else.
 */
#ifndef PG_ATTN_HYPOTHESIS_H
#define PG_ATTN_HYPOTHESIS_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_profile.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One hypothesis (opaque; the table's entries live for the program's life). */
typedef struct attn_hypothesis attn_hypothesis;

/* Longest hypothesis name, NUL included. */
#define ATTN_HYPOTHESIS_NAME_MAX 24

/* Number of hypotheses in the table. */
size_t attn_hypothesis_count(void);

/* The i-th hypothesis in table order, NULL when i >= attn_hypothesis_count(). */
const attn_hypothesis *attn_hypothesis_at(size_t i);

/* The hypothesis named name, or NULL. */
const attn_hypothesis *attn_hypothesis_find(const char *name);

/* Its name ("intended-fp8kv", "kv-scales-twice", ...). */
const char *attn_hypothesis_name(const attn_hypothesis *h);

/* The precision mode whose computation (intended or misapplied) it emulates. */
pg_mode attn_hypothesis_mode(const attn_hypothesis *h);

/* 1 when a diagnosis runs h for a run that sweeps the modes whose bits
 * (1u << pg_mode) swept_modes holds: its mode is always diagnosed
 * (base/mode.h always_diagnosed) or swept. */
int attn_hypothesis_is_asked(const attn_hypothesis *h, unsigned swept_modes);

/* 1 for the intended-* hypotheses (what a correct stack computes), 0 for the bugs. */
int attn_hypothesis_is_intended(const attn_hypothesis *h);

/* One line saying what it emulates and where that bug was reported. */
const char *attn_hypothesis_summary(const attn_hypothesis *h);

/* A few words naming the bug for a verdict line ("k/v scales applied twice");
 * for an intended one, what it is ("the fp8kv mode as intended"). */
const char *attn_hypothesis_meaning(const attn_hypothesis *h);

/* Runs hypothesis h on one layer on the CPU specification: q bf16
 * [Tq,hq,d], k/v bf16 [Tkv,hkv,d], the scales and paging of opt (required,
 * attn_quant_options_check; keep_bf16 must be 0) -> out bf16 [Tq,hq,d]. */
pg_status attn_hypothesis_run(const attn_hypothesis *h, const attn_batch *b, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                              uint16_t *out, int n_threads, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_HYPOTHESIS_H */
