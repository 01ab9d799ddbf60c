/*
 * diff.h: comparisons read back from the store, for `precgate diff`, and the
 * pieces `history` and `runs` share with it: the table of layer metrics a
 * user may name, opening a database that must already exist, and reading a
 * run's row.
 *
 * A diff has two sides, A (the baseline) and B (the candidate):
 *   - two runs: A = RUN_A, B = RUN_B, each layer's value of one variant in A
 *     against the same capture, layer and variant in B;
 *   - two modes of one run (--run N --modes MODE,BASE): A = BASE, B = MODE,
 *     each layer of MODE against the same capture, layer and backend in BASE
 *     (the orientation eval_pairs stores: mode_a - mode_b = MODE - BASE).
 * Per layer: A, B, B - A and B / A, ordered worst first by how much the error
 * grew relative to A (see diff_layer.worsening). A layer present on one side
 * only is kept and marked so. End-task rows compare eval_scores accuracy the
 * same way, with a 95% interval; a modes diff also carries the stored
 * eval_pairs rows.
 *
 * Two diverge runs compare each mode's divergence summary (and the noise
 * floor's): mean KLD, same top and PPL ratio in A and B, B - A and B / A,
 * and, when the caller pairs a mode over the same sequences, its paired
 * interval (diff_div_paired). A diverge run is never diffed against a run
 * of another kind.
 *
 * The rows come from the store's readers (db/report_store.h: runs and
 * whole-layer rows; db/eval_store.h: scores and pairs; db/attribution_store.h;
 * db/divergence_store.h).
 */
#ifndef PG_DIFF_H
#define PG_DIFF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/metric.h"
#include "base/status.h"
#include "db/eval_store.h"
#include "db/store.h"

/* z of a two-sided 95% normal interval. */
#define DIFF_Z95 1.96
/* The metric compared when none is named. */
#define DIFF_DEFAULT_METRIC PG_METRIC_REL_L2

/* The printf format of one value of metric m (one double), as the tables show it. */
const char *diff_metric_value_fmt(pg_metric m);

/* The printf format of a difference of two values of m, with its sign. */
const char *diff_metric_delta_fmt(pg_metric m);

/* Looks name up among every metric of base/metric.h for command cmd (used
 * in the message) into *out; PG_ERR_USAGE "CMD: --metric 'NAME' is not a
 * metric (one of: rel_l2, ...)" when there is no such metric. */
pg_status diff_metric_parse(const char *cmd, const char *name, pg_metric *out, pg_err *err);

struct cJSON;

/* Longest text kept of a run's short fields (kind, status, times, git rev). */
#define DIFF_RUN_FIELD_MAX 64

/* The runs row of one run, as a report shows it. */
typedef struct diff_run {
    int64_t id;
    char kind[DIFF_RUN_FIELD_MAX];
    char status[DIFF_RUN_FIELD_MAX];
    char started_at[DIFF_RUN_FIELD_MAX];
    char git_rev[DIFF_RUN_FIELD_MAX];  /* "" when NULL */
    char *label;                       /* malloc'd; NULL when the run has none */
} diff_run;

/* Reads run id into *run (free its label with free()); PG_ERR_DB naming the
 * run when there is no such run ("<cmd>: no run <id> in <path>"), or when
 * the query fails. */
pg_status diff_run_read(pg_store *s, const char *cmd, const char *db_path, int64_t id,
                        diff_run *run, pg_err *err);

/* Where a compared row was found. */
typedef enum diff_presence { DIFF_BOTH, DIFF_ONLY_A, DIFF_ONLY_B } diff_presence;

/* The JSON name of p: "both", "only_a" or "only_b". */
const char *diff_presence_name(diff_presence p);

/* Which way a layer's metric moved from A to B. */
typedef enum diff_change {
    DIFF_WORSE,      /* the error grew (worsening > 1) */
    DIFF_UNDEFINED,  /* a value is NaN (a cosine stored as NULL) or both are unbounded */
    DIFF_SAME,       /* worsening == 1 (equal values) */
    DIFF_BETTER      /* the error shrank */
} diff_change;

/* One layer (head -1 rows) on both sides. Strings are malloc'd (NULL where
 * a side is missing) and owned by the diff_result. */
typedef struct diff_layer {
    char *capture;          /* A's capture (B's when only in B) */
    char *capture_b;        /* B's capture, NULL when the same as capture */
    int layer;
    char *variant_a, *variant_b;
    char *backend_a, *backend_b;
    diff_presence presence;
    double a, b;            /* the metric; NaN where missing or stored NULL */
    double delta;           /* b - a */
    double ratio;           /* b / a */
    /* How many times larger B's error is than A's, the sort key (worst
     * first): b / a for error metrics and counts, (1 - b) / (1 - a) for
     * cos_sim, 10^((a - b) / 10) (the noise power ratio) for sqnr_db; equal
     * values give exactly 1, a zero error growing gives +inf, NaN when
     * undefined. */
    double worsening;
    diff_change change;
} diff_layer;

/* How an end-task row's interval was made. */
typedef enum diff_interval {
    DIFF_INTERVAL_NONE,        /* a standard error is missing or no pair is stored */
    DIFF_INTERVAL_INDEPENDENT, /* two runs: delta +- DIFF_Z95 sqrt(se_a^2 + se_b^2) */
    DIFF_INTERVAL_PAIRED       /* one run's modes: the stored eval_pairs interval, as B - A */
} diff_interval;

/* One (eval, effort, mode) accuracy on both sides; strings as diff_layer's. */
typedef struct diff_eval {
    char *eval, *effort, *mode_a, *mode_b;
    diff_presence presence;
    double acc_a, acc_b, se_a, se_b;  /* NaN where missing or NULL */
    long n_a, n_b;                    /* problems scored; -1 where missing */
    double delta;                     /* acc_b - acc_a */
    double ci_low, ci_high;           /* NaN with DIFF_INTERVAL_NONE */
    diff_interval interval;
} diff_eval;

/* One attribution row (db/attribution_store.h) on both sides: the same
 * capture (matched by layer alone when captures_mapped), layer and tensor,
 * and the same variant (two runs) or variant_a / variant_b (a modes diff).
 * Only rows both sides hold are kept: attribution is compared where both
 * runs ran with --attribute. Strings are malloc'd, owned by the diff_result. */
typedef struct diff_attribution {
    char *capture, *variant_a, *variant_b;
    int layer;
    int tensor;             /* index into attribution_tensors */
    double a, b;            /* rel_l2 */
    double delta, ratio;    /* b - a, b / a */
} diff_attribution;

/* Longest reason kept why a mode of two diverge runs is not paired: room
 * for a config field's two values (db/gate_store.h keeps up to 256
 * characters of each) and the words around them. */
#define DIFF_UNPAIRED_MAX 640

/* One mode's change from A to B paired over the same sequences, B - A: a
 * plain copy of evals/divergence.h's div_paired (which reports/ may not
 * include), filled by the caller (harness/cmd_diff.c, diverge_pair_runs). */
typedef struct diff_div_paired {
    size_t n_sequences, n_positions;
    double kld_diff, kld_diff_se, kld_diff_low, kld_diff_high;
    double same_top_diff, same_top_diff_se, same_top_diff_low, same_top_diff_high;
} diff_div_paired;

/* One mode against its run's reference (or the noise floor) in two diverge
 * runs (div_summaries). mode is malloc'd, owned by the diff_result. */
typedef struct diff_div {
    char *mode;
    int floor;                  /* the noise floor: the reference scored again */
    diff_presence presence;
    double kld_a, kld_b;        /* mean KLD; NaN where missing or NULL */
    double kld_delta, kld_ratio;    /* b - a, b / a */
    double same_top_a, same_top_b, same_top_delta;
    double ppl_a, ppl_b;        /* PPL(mode) / PPL(reference) of each run */
    int paired;                 /* 1: pair holds the paired change (the caller's) */
    diff_div_paired pair;
    char unpaired[DIFF_UNPAIRED_MAX];  /* why not paired; "" when paired or one-sided */
} diff_div;

/* What to compare. For two runs mode_a and mode_b are NULL; for two modes
 * run_a == run_b, mode_a is the base (A) and mode_b the mode (B). */
typedef struct diff_request {
    int64_t run_a, run_b;
    const char *mode_a, *mode_b;        /* eval modes, as given */
    const char *variant_a, *variant_b;  /* the same as layer variants: their full names
                                         * (base/variant.h; "fp8kv" is fp8kv@fixed);
                                         * NULL for two runs */
    pg_metric metric;
    const char *db_path;  /* for messages */
} diff_request;

/* A computed diff; free with diff_result_free. */
typedef struct diff_result {
    pg_metric metric;
    int modes;                 /* 1 for a modes diff */
    char *mode_a, *mode_b;     /* copies of the request's (NULL for two runs) */
    char *variant_a, *variant_b; /* copies of the request's (NULL for two runs) */
    diff_run run_a, run_b;
    diff_layer *layers;        /* worst first, then only-in-A, then only-in-B */
    size_t n_layers;
    diff_eval *evals;          /* largest drop first, then the one-sided rows */
    size_t n_evals;
    eval_pair_stored *pairs;   /* modes diff only: stored verbatim (mode_a - mode_b) */
    size_t n_pairs;
    int captures_mapped;       /* each run had one capture, under different names */
    size_t dup_a, dup_b;       /* rows skipped: a layer stored for both backends */
    diff_attribution *attribution; /* in A's row order (capture, layer, variant, tensor) */
    size_t n_attribution;
    int divergence;            /* both runs are diverge runs (div rows follow) */
    diff_div *div;             /* the modes by name, then the noise floor; A's then B-only */
    size_t n_div;
    char *reference_a, *reference_b;   /* each run's reference mode; NULL: no summary */
    int64_t top_k_a, top_k_b;          /* each run's K; 0: no summary */
} diff_result;

/* Reads both sides from the store and computes the diff into *out (NULL on
 * failure); two diverge runs also get their divergence rows (unpaired: the
 * caller pairs them). PG_ERR_DB naming the run when a run does not exist,
 * or when a query fails; PG_ERR_USAGE naming both kinds when one run is a
 * diverge run and the other is not, or for --modes of a diverge run;
 * PG_ERR_INTERNAL for a malformed request; PG_ERR_NOMEM. */
pg_status diff_compute(pg_store *s, const diff_request *req, diff_result **out, pg_err *err);

/* Frees r; NULL is a no-op. */
void diff_result_free(diff_result *r);

/* Prints r as terminal tables to out: the runs, the layer table (with
 * colour when colour is non-zero: red worse, green better), a summary, and
 * the end-task rows. */
void diff_print_table(const diff_result *r, FILE *out, int colour);

/* Prints r as one JSON array of objects to out ("type": "layer",
 * "attribution", "eval" or "eval_pair"); numbers are JSON numbers, and a NaN or infinite value is
 * null with a sibling "<field>_nonfinite": "nan" | "inf" | "-inf".
 * PG_ERR_NOMEM when the document cannot be built. */
pg_status diff_print_json(const diff_result *r, FILE *out, pg_err *err);

/* The attribution rows of r's two sides (req's runs and, for a modes
 * diff, variants) matched into r->attribution (diff_compute calls it after
 * the layers, so r->captures_mapped is set). PG_ERR_DB / PG_ERR_NOMEM as
 * attribution_store_load. */
pg_status diff_attribution_match(pg_store *s, const diff_request *req, diff_result *r,
                                 pg_err *err);

/* Frees r's attribution rows. */
void diff_attribution_free(diff_result *r);

/* Prints r's attribution as a table per variant and tensor: the layer mean
 * of A and B, B / A of the means and the layer whose B / A is largest;
 * nothing when r has no rows. */
void diff_attribution_print(const diff_result *r, FILE *out);

/* Appends one JSON object per attribution row to arr ("type":
 * "attribution", with run_a, run_b, capture, layer, variant_a, variant_b,
 * tensor, a, b, delta, ratio); 0 when out of memory. */
int diff_attribution_json(const diff_result *r, struct cJSON *arr);

/* The divergence rows of two diverge runs (div_summaries of r's runs)
 * matched on (mode, role) into r->div, each unpaired ("" reason) until the
 * caller pairs it, with each run's reference and K. PG_ERR_DB /
 * PG_ERR_NOMEM as divergence_store_read_summaries. */
pg_status diff_divergence_match(pg_store *s, diff_result *r, pg_err *err);

/* Frees r's divergence rows and references. */
void diff_divergence_free(diff_result *r);

/* Prints r's divergence rows: per mode and the noise floor A and B mean
 * KLD, B-A, B/A, same top A, B and B-A, PPL ratio A and B, then per mode
 * its paired interval of B-A or "unpaired: <reason>"; nothing when r is no
 * divergence diff. */
void diff_divergence_print(const diff_result *r, FILE *out);

/* Appends one JSON object per divergence row to arr ("type": "divergence",
 * run_a, run_b, mode, role, presence, the numbers of the table, "paired"
 * and "unpaired", and the paired change's fields, null when not paired);
 * 0 when out of memory. */
int diff_divergence_json(const diff_result *r, struct cJSON *arr);

#endif /* PG_DIFF_H */
