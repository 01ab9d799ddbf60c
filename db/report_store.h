/*
 * report_store.h: the rows the reports read back from precgate's store: a
 * run's row, the (capture, layer) pairs and variants it holds, its
 * layer_metrics and quant_stats rows, the gate's flags, and the trend over
 * earlier runs of the same kind and label. reports/report_data.h (HTML and
 * Markdown), reports/sweep_table.h (the terminal table after a sweep) and
 * reports/diff.h (`precgate diff`) turn them into what they show; eval
 * scores and pairs come from db/eval_store.h, attribution rows from
 * db/attribution_store.h, diagnosis rows from db/diagnosis_store.h.
 *
 * Every function reads only, with fixed SQL and bound parameters, on an
 * open pg_store (db/store.h). Row arrays are malloc'd, *n rows of them,
 * NULL when there are none; free them with the matching *_free, also after
 * a failure (what was read by then is in them). A NULL REAL reads as NaN, a
 * NULL text as a NULL pointer, except where a contract says otherwise.
 * Failures are PG_ERR_DB naming the database file, what failed and
 * SQLite's message (sql_fail); PG_ERR_NOMEM; a NULL store or argument that
 * must not be NULL is PG_ERR_INTERNAL.
 */
#ifndef PG_REPORT_STORE_H
#define PG_REPORT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/metric.h"
#include "base/status.h"
#include "store.h"

/* One runs row, as the reports show it. Strings malloc'd (run_row_free). */
typedef struct run_row {
    int64_t id;
    char *kind, *label, *status, *started_at, *finished_at, *git_rev, *host, *device, *error;
} run_row;

/* Reads run id into *out (zeroed first; free with run_row_free, also after a
 * failure); *found is 0, and *out stays zeroed, when no run has that id. */
pg_status report_store_run(pg_store *s, int64_t id, run_row *out, int *found, pg_err *err);

/* Frees r's strings and zeroes it; NULL is a no-op. */
void run_row_free(run_row *r);

/* Which layer_metrics rows report_store_variants looks at. */
typedef enum report_variant_rows {
    REPORT_VARIANTS_ALL_ROWS,     /* every row, per-head ones included */
    REPORT_VARIANTS_WHOLE_LAYER   /* head -1 rows only */
} report_variant_rows;

/* The distinct variants of run_id's layer_metrics rows (which: all rows or
 * the whole-layer ones), in the order SQLite's DISTINCT gives them (callers
 * sort), into *names (*n of them; free with report_names_free). */
pg_status report_store_variants(pg_store *s, int64_t run_id, report_variant_rows which,
                                char ***names, size_t *n, pg_err *err);

/* Frees n names and the array; NULL is a no-op. */
void report_names_free(char **names, size_t n);

/* One (capture, layer) a run holds rows for. capture malloc'd. */
typedef struct run_layer_row {
    char *capture;
    int layer;
} run_layer_row;

/* The distinct (capture, layer) pairs of run_id's layer_metrics and
 * quant_stats rows together (a UNION: SQLite's order; callers sort) into
 * *rows (free with run_layer_rows_free). */
pg_status report_store_layers(pg_store *s, int64_t run_id, run_layer_row **rows, size_t *n,
                              pg_err *err);

/* Frees n rows' captures and the array; NULL is a no-op. */
void run_layer_rows_free(run_layer_row *rows, size_t n);

/* One layer_metrics row: the one C struct of that table, which the reports,
 * the diff, the gate and advise all read (gate_rows holds the whole-layer
 * ones). Strings malloc'd by the readers (layer_metric_rows_free); const so
 * that rows built by hand (tests) can point at literals. */
typedef struct layer_metric_row {
    const char *capture;
    int layer;
    const char *variant;
    const char *backend;              /* "cpu" or "cuda" */
    int64_t head;                     /* -1: the whole layer */
    pg_metric_values v;               /* every metric column (pg_metric_value reaches one by
                                         enum); a value NaN where NULL */
} layer_metric_row;

/* Every layer_metrics row of run_id, per-head ones included, in the
 * table's order (no ORDER BY: a caller placing rows by key does not need
 * one) into *rows (free with layer_metric_rows_free). */
pg_status report_store_layer_metrics(pg_store *s, int64_t run_id, layer_metric_row **rows,
                                     size_t *n, pg_err *err);

/* run_id's whole-layer (head -1) layer_metrics rows, only those of variant
 * when it is not NULL, ordered by capture, layer, variant, backend
 * (SQLite's BINARY collation, strcmp's order) into *rows (free with
 * layer_metric_rows_free). */
pg_status report_store_whole_layers(pg_store *s, int64_t run_id, const char *variant,
                                    layer_metric_row **rows, size_t *n, pg_err *err);

/* Frees one row's strings (not r itself); NULL is a no-op. */
void layer_metric_row_clear(layer_metric_row *r);

/* Frees n rows' strings and the array; NULL is a no-op. */
void layer_metric_rows_free(layer_metric_row *rows, size_t n);

/* One quant_stats row. Strings malloc'd (quant_stat_rows_free). */
typedef struct quant_stat_row {
    char *capture, *tensor, *scale_source;
    int layer;
    double scale, saturated_frac, underflow_frac;   /* NaN where NULL */
} quant_stat_row;

/* Every quant_stats row of run_id, in the table's order, into *rows (free
 * with quant_stat_rows_free). */
pg_status report_store_quant(pg_store *s, int64_t run_id, quant_stat_row **rows, size_t *n,
                             pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void quant_stat_rows_free(quant_stat_row *rows, size_t n);

/* One mode's K or V cache over a run's layers (kv_format_stats, schema
 * version 18). Strings malloc'd (kv_format_summaries_free); NaN where the
 * rows hold NULL. */
typedef struct kv_format_summary {
    char *mode, *tensor, *format;
    int code_bits, n_layers, codes_used;   /* codes_used: the most of any layer */
    int64_t n_values, n_scales;
    double saturated_mean, saturated_max, underflow_mean, underflow_max;
    double entropy_bits;                   /* mean over the layers */
    double scale_floor_frac, scale_min, scale_mean, scale_max;
} kv_format_summary;

/* run_id's kv_format_stats per (mode, tensor), in the order they were
 * stored, into *rows (free with kv_format_summaries_free). */
pg_status report_store_kv_formats(pg_store *s, int64_t run_id, kv_format_summary **rows,
                                  size_t *n, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void kv_format_summaries_free(kv_format_summary *rows, size_t n);

/* The cells of one variant that its kernel cannot compute, for one reason,
 * over a capture's layers (unsupported_cells, schema version 19). Strings
 * malloc'd (unsupported_summaries_free). */
typedef struct unsupported_summary {
    char *capture, *variant, *reason;
    int n_layers, first_layer;
    char *layers;   /* "0,1,5": every such layer, ascending */
} unsupported_summary;

/* run_id's unsupported_cells per (capture, variant, reason), in the order
 * stored, into *rows (free with unsupported_summaries_free). */
pg_status report_store_unsupported(pg_store *s, int64_t run_id, unsupported_summary **rows,
                                   size_t *n, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void unsupported_summaries_free(unsupported_summary *rows, size_t n);

/* One flags row of the gate (harness/regress.h names every verdict and
 * scope). Strings malloc'd (flag_rows_free). */
typedef struct flag_row {
    int64_t baseline_run_id;        /* -1 where NULL */
    char *scope, *capture, *variant, *eval, *mode, *effort, *metric, *verdict, *message;
    int layer;                      /* -1 where NULL */
    double value, baseline_value, threshold;   /* NaN where NULL */
} flag_row;

/* run_id's flags into *rows (free with flag_rows_free): regressions, then
 * errors, inconclusive, improvements, no change, passes, other verdicts,
 * each in the order written. *has_table is 0 (and there are no rows) when
 * the database has no flags table (older than schema migration 6). */
pg_status report_store_flags(pg_store *s, int64_t run_id, flag_row **rows, size_t *n,
                             int *has_table, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void flag_rows_free(flag_row *rows, size_t n);

/* The runs of a trend: the last n_runs complete runs of kind and label
 * (NULL matches a NULL label) whose id is <= last_id. */
typedef struct trend_query {
    const char *kind, *label;
    int64_t last_id;
    int n_runs;
} trend_query;

/* One run of a trend. Strings malloc'd (trend_run_rows_free). */
typedef struct trend_run_row {
    int64_t id;
    char *started_at, *git_rev;
} trend_run_row;

/* The runs of q, oldest first, into *rows (free with trend_run_rows_free). */
pg_status report_store_trend_runs(pg_store *s, const trend_query *q, trend_run_row **rows,
                                  size_t *n, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void trend_run_rows_free(trend_run_row *rows, size_t n);

/* What a trend follows. */
typedef enum trend_source {
    TREND_LAYER_REL_L2,   /* the whole-layer layer_metrics rows' rel_l2 */
    TREND_EVAL_ACCURACY,  /* the eval_scores rows' accuracy */
    TREND_DIV_KLD         /* the div_summaries rows' kld_mean of each mode (role mode) */
} trend_source;

/* One row behind a trend. Strings malloc'd (trend_value_rows_free). */
typedef struct trend_value_row {
    int64_t run_id;
    char *name;           /* the variant (TREND_LAYER_REL_L2), the eval, or the mode
                             (TREND_DIV_KLD) */
    char *mode, *effort;  /* the eval's; NULL for TREND_LAYER_REL_L2 and TREND_DIV_KLD */
    double value;         /* rel_l2, accuracy or mean KLD; NaN where NULL */
    int64_t nonfinite;    /* nan_count + inf_count of a layer row; 0 for an eval row */
} trend_value_row;

/* The rows of source over the runs of q, in the table's order, into *rows
 * (free with trend_value_rows_free). */
pg_status report_store_trend_values(pg_store *s, const trend_query *q, trend_source source,
                                    trend_value_row **rows, size_t *n, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void trend_value_rows_free(trend_value_row *rows, size_t n);

#endif /* PG_REPORT_STORE_H */
