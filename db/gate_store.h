/*
 * gate_store.h: the regression gate's rows in precgate's store (schema
 * version 6): named baselines, the rows a gate pass compares, and the
 * flags it writes, with their vocabulary (harness/regress.h decides every
 * verdict).
 *
 * Every function works on an open pg_store (db/store.h) through
 * store_handle() (db/sql_util.h), with statements prepared for the call and bound
 * parameters only. Failures are PG_ERR_DB naming the database file, what
 * failed and SQLite's message, except where a contract says otherwise; a
 * NULL store or a NULL argument that must not be NULL is PG_ERR_INTERNAL.
 * Reads see the committed state; the only write that spans several rows
 * (gate_store_put_flags) is one transaction.
 *
 * The store decides nothing about baselines: it lists the candidates of a
 * run (gate_store_baseline_candidates) with what is stored about each, and
 * the gate's lifecycle (harness/gate_baseline.h) chooses among them.
 */
#ifndef PG_GATE_STORE_H
#define PG_GATE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/metric.h"
#include "base/status.h"
#include "eval_store.h"
#include "report_store.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the flags' vocabulary and rows ------------------------------------ */

/* Flag metric names beyond the layer_metrics columns (flags.metric). */
#define GATE_METRIC_NONFINITE "nonfinite"
#define GATE_METRIC_PRESENT "present"
#define GATE_METRIC_ACCURACY "accuracy"
#define GATE_METRIC_DIFF_PREFIX "diff_vs_"
#define GATE_METRIC_SAMPLES "samples"
#define GATE_METRIC_CONTENT "content"
#define GATE_METRIC_SCALE_BUG "scale_bug"
#define GATE_METRIC_BASELINE "baseline"  /* gate --require-baseline: none was found */
#define GATE_METRIC_COMPLETE "complete"   /* a run lacking rows its config implies */
#define GATE_METRIC_SUPPORTED "supported" /* cells the kernel cannot compute (skipped) */
#define GATE_METRIC_IDENTICAL_PREFIX "identical_to_"  /* + mode_b: two modes answered alike */
/* The divergence scope's metrics (harness/regress.h, regress_divergence). */
#define GATE_METRIC_KLD_MEAN "kld_mean"
#define GATE_METRIC_SAME_TOP "same_top"
#define GATE_METRIC_TAIL_MASS "tail_mass"
#define GATE_METRIC_SEQUENCES "sequences"
#define GATE_METRIC_NOISE_FLOOR "noise_floor"
#define GATE_METRIC_BUDGET "budget"
#define GATE_METRIC_KLD_VS_BASELINE "kld_mean_vs_baseline"      /* a mode against its baseline run */
#define GATE_METRIC_SAME_TOP_VS_BASELINE "same_top_vs_baseline"

/* What a flag compares (the flags.scope values, in this order). */
typedef enum gate_scope {
    GATE_SCOPE_LAYER = 0,
    GATE_SCOPE_MODE_PAIR,
    GATE_SCOPE_EVAL,
    GATE_SCOPE_DIVERGENCE,   /* schema version 16 */
    GATE_SCOPE_COUNT
} gate_scope;

/* The flags.verdict values, in this order. */
typedef enum gate_verdict {
    GATE_VERDICT_PASS = 0,
    GATE_VERDICT_REGRESSION,
    GATE_VERDICT_IMPROVEMENT,
    GATE_VERDICT_NO_CHANGE,
    GATE_VERDICT_INCONCLUSIVE,
    GATE_VERDICT_ERROR,
    GATE_VERDICT_SKIPPED,   /* schema version 19: a cell the kernel cannot compute */
    GATE_VERDICT_COUNT
} gate_verdict;

/* "layer", "mode_pair", "eval", "divergence" (the flags.scope values); "?" outside the enum. */
const char *gate_scope_name(gate_scope s);

/* "pass", "regression", "improvement", "no change", "inconclusive", "error",
 * "skipped" (the flags.verdict values); "?" outside the enum. */
const char *gate_verdict_name(gate_verdict v);

/* One verdict, as a flags row. Strings are owned (gate_flags_free). */
typedef struct gate_flag {
    gate_scope scope;
    char *capture;       /* layer, mode_pair; NULL for eval */
    int layer;           /* -1 for eval */
    char *variant;       /* layer, mode_pair ("fp8kv@fixed", "fp8kv@fixed-bf16"); NULL for eval */
    char *eval, *mode, *effort;  /* eval; NULL otherwise */
    char *metric;
    double value, baseline_value, threshold;  /* NaN: none (stored NULL) */
    gate_verdict verdict;
    char *message;
} gate_flag;

/* A growing list of flags; zero-initialise. */
typedef struct gate_flags {
    gate_flag *v;
    size_t n, cap;
} gate_flags;

/* Frees one flag's strings (not f itself); NULL is a no-op. */
void gate_flag_free(gate_flag *f);

/* Frees every flag's strings and the array, and zeroes f; NULL is a no-op. */
void gate_flags_free(gate_flags *f);

/* What a gate needs to know about a run. Strings owned: gate_run_free. */
typedef struct gate_run {
    int64_t id;
    char *kind;
    char *label;    /* NULL when the run has none */
    char *status;   /* "running", "complete", "incomplete", "failed" */
    char *error;    /* why it failed; NULL unless failed */
} gate_run;

/* Frees r's strings and zeroes it; NULL is a no-op. */
void gate_run_free(gate_run *r);

/* Reads run id into *out (zeroed first). PG_ERR_USAGE "no run N in PATH"
 * when there is no such run; PG_ERR_NOMEM. */
pg_status gate_store_run(pg_store *s, int64_t id, gate_run *out, pg_err *err);

/* One candidate for a run's automatic baseline: an older complete run of
 * its kind and label. */
typedef struct gate_candidate {
    int64_t id;
    int passed;        /* it has flags and none of them is a regression or an error */
    int same_content;  /* each config_json field compared is equal in both, or absent in both */
} gate_candidate;

/* Most content fields gate_store_baseline_candidates compares (bound as
 * parameters ?4 on, a handful above the gate's 8). */
#define GATE_CANDIDATE_FIELDS_MAX 16

/* The complete runs of run's kind and label (NULL labels match each other)
 * older than run (a smaller id: runs are numbered as they start), newest
 * first, into *out (*n of them; free() the array; NULL when none), each
 * with whether it passed its gate and whether its config_json fields
 * fields[0 .. n_fields-1] (run_config.h keys, at most
 * GATE_CANDIDATE_FIELDS_MAX) equal run's.
 * Reads only. */
pg_status gate_store_baseline_candidates(pg_store *s, const gate_run *run,
                                         const char *const *fields, int n_fields,
                                         gate_candidate **out, size_t *n, pg_err *err);

/* What a field's value reads as when a run's config lacks it. */
#define GATE_CONTENT_NONE "none"
/* Longest value kept of a differing field (a digest is 64 hex digits; a
 * variants list of every profile about 150 characters). */
#define GATE_CONTENT_VALUE_MAX 256

/* The first content field in which two runs differ; field NULL when none. */
typedef struct gate_content_diff {
    const char *field;                        /* an entry of the fields compared, or NULL */
    char run_value[GATE_CONTENT_VALUE_MAX];   /* its value in run_id (GATE_CONTENT_NONE: absent) */
    char other_value[GATE_CONTENT_VALUE_MAX]; /* its value in other_id */
} gate_content_diff;

/* Compares the n config_json fields of runs run_id and other_id (in that
 * order; e.g. the gate's defining content, harness/gate_baseline.h) into *out (zeroed
 * first; field: the first that differs). PG_ERR_USAGE when either run does
 * not exist. */
pg_status gate_store_content_diff(pg_store *s, int64_t run_id, int64_t other_id,
                                  const char *const *fields, int n, gate_content_diff *out,
                                  pg_err *err);

/* Resolves a --baseline value: a name in baselines first, else a decimal run
 * id of an existing run. *by_name says which matched. PG_ERR_USAGE naming
 * spec when neither does. */
pg_status gate_store_resolve_baseline(pg_store *s, const char *spec, int64_t *run_id,
                                      int *by_name, pg_err *err);

/* Sets baseline name to run_id (replacing its previous run), set_at now (UTC
 * ISO 8601). PG_ERR_USAGE when the run does not exist or is not complete
 * (the message says its status), or name is empty. Committed at once. */
pg_status gate_store_baseline_set(pg_store *s, const char *name, int64_t run_id, pg_err *err);

/* One baselines row joined with its run. Strings owned. */
typedef struct gate_baseline {
    char *name;
    int64_t run_id;
    char *set_at;
    char *kind, *label;   /* the run's; label NULL when it has none */
} gate_baseline;

/* Every baseline, by name, into *out (n entries; free with
 * gate_baselines_free, also after a failure). PG_ERR_NOMEM. */
pg_status gate_store_baseline_list(pg_store *s, gate_baseline **out, size_t *n, pg_err *err);

/* Frees n baselines and the array; NULL is a no-op. */
void gate_baselines_free(gate_baseline *b, size_t n);

/* Rows of one run that a gate compares; strings and arrays owned
 * (gate_rows_free). */
typedef struct gate_rows {
    layer_metric_row *layers;    /* head = -1 rows, one per (capture, layer, variant) */
    size_t n_layers;
    eval_pair_stored *pairs;     /* eval_pairs, as eval_store_read_pairs reads them */
    size_t n_pairs;
    eval_score_stored *scores;   /* eval_scores, as eval_store_read_scores reads them */
    size_t n_scores;
} gate_rows;

/* Reads run_id's whole-layer metrics, eval pairs and eval scores into *out
 * (zeroed first; free with gate_rows_free, also after a failure). Rows of
 * one (capture, layer, variant) stored under both backends (precgate run
 * stores one backend per run) give one row, the 'cpu' one. NULL REALs read
 * as NaN. One read transaction (one snapshot). PG_ERR_NOMEM. */
pg_status gate_store_load(pg_store *s, int64_t run_id, gate_rows *out, pg_err *err);

/* Frees what gate_store_load put in r and zeroes it; NULL is a no-op. */
void gate_rows_free(gate_rows *r);

/* Replaces run_id's flags with f (baseline_run_id < 0: stored NULL) in one
 * transaction (BEGIN IMMEDIATE; PG_ERR_DB when the caller holds one open);
 * on failure nothing changes. NaN numbers are stored as NULL, layer -1 as
 * NULL. PG_ERR_DB when a row breaks a CHECK (an unknown scope or verdict). */
pg_status gate_store_put_flags(pg_store *s, int64_t run_id, int64_t baseline_run_id,
                               const gate_flags *f, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_GATE_STORE_H */
