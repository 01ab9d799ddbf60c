/*
 * diag_verdict.h: what an external output's distances to the scale-plumbing
 * hypotheses (kernels/attn_hypothesis.h, stored in ext_diagnosis by the
 * sweep, harness/diagnose.h) say about the serving stack that produced it.
 * Pure functions: no I/O, no global state.
 *
 * For one (capture, layer, ext:NAME), with d_X the distance rel_l2 = ||ext -
 * X|| / ||X|| to hypothesis X, I the nearest intended-* hypothesis and B the
 * nearest bug hypothesis (among those that ran), in this order:
 *   bug                d_B * DIAG_MARGIN <= d_I, d_B < d_I and d_B <= DIAG_MATCH_REL_L2
 *   intended           d_I * DIAG_MARGIN <= d_B, d_I < d_B and d_I <= DIAG_MATCH_REL_L2
 *   indistinguishable  otherwise when the nearest is <= DIAG_MATCH_REL_L2: the
 *                      hypotheses within DIAG_MARGIN of the nearest are listed;
 *                      NEVER a bug (at unit scales every misapplication equals an
 *                      intended hypothesis bit for bit, and the distances tie)
 *   unexplained        the nearest is > DIAG_MATCH_REL_L2: no hypothesis matches
 *   no evidence        no hypothesis ran on the layer
 * (The strict d_B < d_I keeps a tie at 0, an output equal to both, from
 * passing the margin test 0 * 4 <= 0.) A hypothesis that did not run (it
 * refused the layer, or its row is missing) is left out of I and B and
 * named in every message; with no intended (or no bug) hypothesis that ran,
 * neither bug nor intended can be said, and the verdict is indistinguishable
 * or unexplained.
 */
#ifndef PG_DIAG_VERDICT_H
#define PG_DIAG_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "db/diagnosis_store.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How much nearer the named hypothesis must be than every one of the other
 * side (intended against bugs) before it is named. For one output E measured
 * against two emulations X and Y, the triangle inequality gives
 * |d_X - d_Y| <= ||X - Y|| / ||X|| (up to the normalisation by ||X|| or ||Y||):
 * the distances cannot differ by more than the emulations' own separation.
 * A 4x gap (d_Y >= 4 d_X) therefore needs ||X - Y|| >= 3 d_X: the named
 * bug's own effect on the output must be three times the rounding mismatch
 * between the stack's kernel and our emulation of it before it is named. */
#define DIAG_MARGIN 4.0

/* The largest distance at which a hypothesis still "matches". Measured: the
 * largest rel_l2 between two profiles of one mode (every ordered pair of the
 * profiles that run on the layer, each as the other's reference; fp8kv has
 * one intended profile, fp8kv@vllm-24197 being the kv-scales-twice bug, and
 * fp8qkv@flashinfer-fa3 refuses gpt-oss's sinks) over the 36 layers of the
 * shipped synthetic capture at calibrated (amax / 448) scales,
 *   precgate synth --preset gpt-oss-120b -o /tmp/gptoss.safetensors
 *   build/diag_match /tmp/gptoss.safetensors 2
 * is 0.0241 (fp8qkv@fa3 against fp8qkv@ideal, layer 23; 2026-12-03,
 * bench/RESULTS.md): a real kernel of the mode sits about that far from
 * our default profile. Times a safety factor of 2 (a kernel we have no
 * profile for may round further off than the ones we do), rounded up. */
#define DIAG_MATCH_REL_L2 0.05

/* The verdicts, in this order. */
typedef enum diag_verdict {
    DIAG_INTENDED = 0,
    DIAG_BUG,
    DIAG_INDISTINGUISHABLE,
    DIAG_UNEXPLAINED,
    DIAG_NO_EVIDENCE,
    DIAG_VERDICT_COUNT
} diag_verdict;

/* "intended", "bug", "indistinguishable", "unexplained", "no evidence"; "?" outside the enum. */
const char *diag_verdict_name(diag_verdict v);

/* One hypothesis's distance for one (capture, layer, ext). Strings borrowed. */
typedef struct diag_entry {
    const char *hypothesis;
    int intended;          /* 1: an intended-* hypothesis, 0: a bug */
    double rel_l2;         /* NaN: it did not run */
    const char *not_run;   /* why it did not run (NULL when it ran) */
} diag_entry;

/* Most hypotheses one judgement takes (the bit masks below). */
#define DIAG_MAX_HYPOTHESES 64

/* The verdict of one set of entries and what it rests on (indices into them). */
typedef struct diag_judgement {
    diag_verdict verdict;
    int nearest;        /* the nearest that ran (first in order on ties); -1: none ran */
    int intended;       /* the nearest intended-* that ran; -1: none */
    int bug;            /* the nearest bug hypothesis that ran; -1: none */
    uint64_t within;    /* bit i: entry i ran and d_i <= DIAG_MARGIN * d_nearest */
    int coincide;       /* 1: every entry in within has exactly the nearest's distance */
    uint64_t not_run;   /* bit i: entry i did not run */
} diag_judgement;

/* Judges e[0..n) (n <= DIAG_MAX_HYPOTHESES; more: entries past it ignored)
 * as the top of this file says. */
diag_judgement diag_judge(const diag_entry *e, size_t n);

/* Consecutive layers of one (capture, ext) with the same verdict and
 * hypothesis (and, when indistinguishable, the same hypotheses within the
 * margin). Strings owned (diag_spans_free). */
typedef struct diag_span {
    char *capture, *ext_name;
    int first_layer, last_layer;
    diag_verdict verdict;
    char *hypothesis;    /* the nearest (NULL: no evidence) */
    double d_max;        /* its largest distance over the span */
    char *other;         /* bug: the nearest intended-*; intended: the nearest bug
                            (the one nearest on any layer of the span); else NULL */
    double d_other_min;  /* its distance there (NaN: none) */
    char *within;        /* indistinguishable: the hypotheses within the margin, ", "-joined */
    int coincide;        /* indistinguishable: they coincide bit for bit on every layer */
    char *not_run;       /* "NAME (why); ..." of hypotheses that did not run; NULL: none */
} diag_span;

/* Groups rows (diagnosis_store_load's order: capture, ext, layer, then
 * hypothesis order) into spans, judging each layer against the hypothesis
 * table (kernels/attn_hypothesis.h): a table hypothesis without a row for
 * a layer counts as not run ("no stored row"). PG_ERR_DB naming it for a
 * row whose hypothesis the table does not know; PG_ERR_NOMEM. *out (n_out
 * spans) is freed with diag_spans_free, also after a failure. */
pg_status diag_spans(const diagnosis_row *rows, size_t n, diag_span **out, size_t *n_out,
                     pg_err *err);

/* Frees n spans and the array; NULL is a no-op. */
void diag_spans_free(diag_span *s, size_t n);

/* The span's line into buf, e.g. "ext:vllm, layers 0-35: matches kv-scales-twice
 * (rel_l2 1.9e-03), not intended-fp8kv (0.98): k/v scales applied twice";
 * indistinguishable, unexplained and no-evidence spans say so in words. */
void diag_span_message(const diag_span *s, char *buf, size_t len);

/* "layer L" or "layers A-B" into buf. */
void diag_layers_text(int first, int last, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PG_DIAG_VERDICT_H */
