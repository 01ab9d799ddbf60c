/*
 * report_data.h: one run's numbers, loaded from precgate's SQLite store into
 * plain structs for the report writers (reports/report_html.h,
 * reports/report_md.h): the run row, whole-layer and per-head error metrics,
 * fp8 quantization statistics, end-task eval scores and paired differences,
 * a diverge run's divergence summaries, the regression gate's flags, and
 * the trend over earlier runs like it.
 *
 * Loading only reads, through the store's readers (db/report_store.h,
 * db/eval_store.h, db/attribution_store.h); the rows that are shown as
 * stored keep the store's row types. The gate's `flags` table (schema
 * migration 6) is read only when the database has it; otherwise the run is
 * "not gated". Missing numbers are NaN; a NULL text column is a NULL pointer.
 *
 * Two sections need judgement that lives above reports/ (in harness/): the
 * KV cache advice and the scale-plumbing diagnosis. report_data_load leaves
 * them empty; the caller (harness/cmd_report.c) fills them as plain display
 * rows, which report_data then owns and report_data_free frees.
 */
#ifndef PG_REPORT_DATA_H
#define PG_REPORT_DATA_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "base/status.h"
#include "db/attribution_store.h"
#include "db/divergence_store.h"
#include "db/eval_store.h"
#include "db/report_store.h"
#include "db/store.h"

/* Runs in the trend unless --trend says otherwise, and the most allowed. */
#define REPORT_TREND_DEFAULT 10
#define REPORT_TREND_MAX 1000
/* Layers shown in the per-head heatmap (the worst of the worst fp8 mode). */
#define REPORT_HEATMAP_LAYERS 3
/* Most heads per layer a report accepts (far above any model's). */
#define REPORT_MAX_HEADS 4096
/* quant_stats tensors, in this order: q, k, v. */
#define REPORT_N_TENSORS 3

/* One whole-layer layer_metrics row (head -1). */
typedef struct report_cell {
    int present;                /* 0: no row for this layer and variant */
    double rel_l2, max_abs, cos_sim, sqnr_db;   /* NULL read as NaN */
    int64_t nan_count, inf_count;               /* non-finite outputs of the mode */
} report_cell;

/* Whether c's value is not finite or the mode's output had NaN/Inf: the
 * cell that sorts worst and is marked in every writer. */
int report_cell_nonfinite(const report_cell *c);

/* Room for report_cell_outputs' text (two 64-bit counts and the words). */
#define REPORT_CELL_OUTPUTS_MAX 96

/* "(N NaN, M inf outputs)" of c into buf; 0 (buf "") when its output had none. */
int report_cell_outputs(const report_cell *c, char *buf, size_t len);

/* One quant_stats row. */
typedef struct report_quant {
    int present;
    double scale;
    char source[16];                           /* "capture" or "calibrated" */
    double saturated_frac, underflow_frac;     /* NaN: nothing to count (NULL) */
} report_quant;

/* Writes where flag f applies (its non-NULL location fields joined by " / ",
 * "-" when none) to out, each string through put_escaped (HTML or Markdown). */
void report_flag_where(FILE *out, const flag_row *f,
                       void (*put_escaped)(FILE *out, const char *s));

/* What the trend follows. */
typedef enum report_trend_metric {
    REPORT_TREND_NONE,       /* nothing loaded (not set by report_data_load) */
    REPORT_TREND_REL_L2,     /* layer-mean rel_l2 per variant: a run with layer metrics,
                                or one with neither layers nor scores whose kind is not
                                eval or diverge */
    REPORT_TREND_ACCURACY,   /* accuracy per eval mode and effort: a run with eval scores
                                and no layer metrics, or an empty run of kind eval */
    REPORT_TREND_KLD         /* mean KLD per mode against the reference: a run of kind
                                diverge (its div_summaries, role mode) */
} report_trend_metric;

/* The last complete runs of the same kind and label, up to this run's id. */
typedef struct report_trend {
    report_trend_metric metric;
    size_t n_runs;                 /* oldest first; the report's own run is last when complete */
    trend_run_row *runs;
    size_t n_series;               /* variants, or "mode effort" (eval-prefixed if several) */
    char **series;
    double *values;                /* [s * n_runs + r]; NaN: no data; +inf: a layer was
                                      non-finite, so the mean is too */
    unsigned char *present;        /* [s * n_runs + r] */
} report_trend;

/* One (capture, layer, fp8 variant) of the attribution table (run
 * --attribute, harness/attribute.h), in the table's row order. */
typedef struct report_attribution {
    const char *capture, *variant;           /* point into report_data.attribution_rows */
    int layer;
    double rel_l2[ATTRIBUTION_N_TENSORS];    /* by attribution_tensors; NaN: no row (an
                                              * fp8kv variant has no q or p) */
    double sum;    /* of the single-tensor rows (q, k, v, p) present */
    double rss;    /* their root-sum-square: near the joint when errors are independent */
    int dominant;  /* attribution_tensors index of the largest single-tensor row; -1: none */
} report_attribution;

/* What the attribution split means and what it does not, one paragraph of
 * plain text (each writer escapes it): the caption of both formats' section. */
extern const char report_attribution_caption[];

/* One KV cache policy advice (harness/advise.h, `precgate advise`) for an
 * fp8 profile of the run at a gate config's layer bound. report_data_load
 * does not fill it: cmd_report does, from the config it is given. */
typedef struct report_advice {
    char *variant;           /* the full profile name */
    char *metric;            /* "rel_l2", ...; NULL when note says no bound */
    double budget;           /* the config's bound; NaN: none */
    char *note;              /* non-NULL: no advice for it, and why */
    char *keep;              /* the layers kept in bf16, "1, 3"; "" when none */
    char *flag;              /* the vLLM option; NULL: none needed */
    double saved_fraction;   /* KV bytes saved against all-bf16 */
    int worst_layer;         /* the worst layer left in fp8; -1: every layer kept */
    double worst_value;
} report_advice;

/* What the advice's memory saving counts and leaves out, for both writers. */
/* The caption of the KV cache memory table (what is counted). */
extern const char report_kv_memory_caption[];

/* The fraction of base bytes that bytes saves (negative: more); 0 when base is 0. */
double report_kv_saved_fraction(long long bytes, long long base);

/* The caption of the report's "Not computed" table (d->unsupported). */
extern const char report_unsupported_caption[];

/* What a kv_formats row without row scales has: "per tensor" for a mode
 * with per-tensor scales, else "none" (TurboQuant's raw e4m3 keys). */
const char *report_kv_scales_word(const char *mode);

extern const char report_advice_counts[];

/* One span of layers of an external output in the scale-plumbing diagnosis,
 * ready to show: the judging (harness/diag_verdict.h) is done by whoever
 * fills it. The char * fields are malloc'd and owned by the report_data
 * that holds the row (report_data_free frees them). */
typedef struct report_diag_row {
    char *capture;
    char *ext_name;          /* the external output's name, without "ext:" */
    char *layers;            /* "layer 3" or "layers 0-35" */
    char *message;           /* the verdict's line ("ext:vllm, layers 0-35: matches ...") */
    const char *verdict;     /* the verdict's name ("bug", ...): static storage, not freed */
    int is_bug;              /* the verdict names a scale bug */
    int is_intended;         /* the verdict names an intended scaling */
} report_diag_row;

/* The diagnosis section of a report: spans of external outputs' layers
 * against the scale-plumbing hypotheses. Everything is malloc'd and owned by
 * the report_data that holds it. report_data_load leaves it zero; the caller
 * (cmd_report) fills it; n_rows == 0 means no section. */
typedef struct report_diagnosis {
    double match_rel_l2;     /* the largest distance at which a hypothesis matches */
    double margin;           /* how many times nearer a named hypothesis must be */
    size_t n_hyp;            /* the hypothesis columns */
    char **hypotheses;       /* [h]: column h's hypothesis name */
    size_t n_rows;
    report_diag_row *rows;   /* by capture, output, first layer */
    size_t n_bugs;           /* rows with is_bug set */
    double *dist;            /* [r * n_hyp + h]: hypothesis h's largest distance over row
                                r's layers; NaN: it did not run there */
} report_diagnosis;

/* Most bins of the charts along the sequence: a long sequence's scored
 * positions are grouped so that a chart stays readable (a point per bin). */
#define REPORT_DIV_MAX_BINS 64
/* Points of the KLD percentile curve, at report_div_percentiles. */
#define REPORT_DIV_N_PERCENTILES 17

/* The percentiles (in percent, ascending, 100 last) of the KLD percentile
 * curve: evenly spread over the body, dense in the upper tail where modes
 * differ (llama-perplexity's 90, 95, 99, 99.9 among them). */
extern const double report_div_percentiles[REPORT_DIV_N_PERCENTILES];

/* A diverge run's section: its summaries (report_data_load), and the
 * curves from its per-position values, which the caller fills
 * (harness/div_curves.h: the percentiles interpolate as the summaries'
 * do, evals/divergence.h) into arrays owned here (report_data_free). */
typedef struct report_divergence {
    size_t n_rows;
    div_summary_stored *rows;   /* the modes against the reference (by mode), then the
                                   noise floor (role floor) when measured */
    int has_floor;              /* the last row is the noise floor */
    /* Along the sequence: bin b holds the scored positions first[b] .. last[b]
     * (0 = a sequence's first scored position) of every sequence. n_bins 0:
     * not filled. */
    size_t n_bins;
    size_t *bin_first, *bin_last;
    double *kld_bin;            /* [r * n_bins + b]: row r's mean KLD in bin b; NaN: none */
    double *same_top_bin;       /* [r * n_bins + b]: its fraction of the same top-1 */
    /* The percentile curve: [r * REPORT_DIV_N_PERCENTILES + k], row r's KLD at
     * report_div_percentiles[k]; NULL: not filled. */
    double *kld_percentile;
} report_divergence;

/* Everything a report shows. Zero-initialise, load, free. */
/* One mode's KV cache per token over the run's layers (layer_shapes: hkv
 * x base/mode.h pg_mode_kv_bytes_per_token_head), beside bf16's and the
 * fp8 reference's (PG_MODE_KV_FP8_REFERENCE) on the same layers. */
typedef struct report_kv_memory {
    const char *mode;        /* the kv_formats row's string */
    long long bytes, bytes_bf16, bytes_fp8;
} report_kv_memory;

typedef struct report_data {
    char *db_name;                 /* the database path, for the footer */
    run_row run;
    size_t n_variants;             /* bf16, fp8kv, fp8qkv first, then others by name */
    char **variants;
    size_t n_layers;
    run_layer_row *layers;         /* by capture, then layer */
    report_cell *cells;            /* [l * n_variants + v] */
    int n_heads;                   /* 1 + the largest head index; 0: no per-head rows */
    double *head_rel_l2;           /* [(l * n_variants + v) * n_heads + h] */
    unsigned char *head_present;   /* same index */
    unsupported_summary *unsupported; /* cells a kernel cannot compute (unsupported_cells) */
    size_t n_unsupported;
    kv_format_summary *kv_formats; /* each swept mode's K and V cache (kv_format_stats) */
    size_t n_kv_formats;
    report_kv_memory *kv_memory;   /* each of those modes' cache size (none: no layer_shapes) */
    size_t n_kv_memory;
    int has_quant;                 /* any quant_stats row */
    report_quant *quant;           /* [l * REPORT_N_TENSORS + t] */
    size_t n_scores;
    eval_score_stored *scores;     /* by eval, effort, mode (bf16, fp8kv, fp8qkv first) */
    size_t n_pairs;
    eval_pair_stored *pairs;       /* by eval, effort, mode_a, mode_b */
    int gated;                     /* the flags table exists and holds rows of this run */
    int flags_table;               /* the flags table exists */
    size_t n_flags;
    flag_row *flags;               /* regressions, errors, then the other verdicts */
    report_trend trend;
    attribution_rows attribution_rows;   /* the run's attribution table rows */
    size_t n_attribution;
    report_attribution *attribution;     /* grouped by capture, layer, variant */
    /* KV cache policy advice (filled by the caller, not report_data_load). */
    int advice_shown;              /* 1: the report has the section (a run with fp8 profiles) */
    char *advice_note;             /* why there is no advice at all; NULL when there is */
    char *advice_config;           /* the gate config the bounds came from; NULL: none */
    size_t n_advice;
    report_advice *advice;
    /* The scale-plumbing diagnosis (filled by the caller, not report_data_load). */
    report_diagnosis diag;
    /* A diverge run's divergence (the summaries loaded, the curves filled by the caller). */
    report_divergence div;
} report_data;

/* Loads run_id from s into *out (zero-initialised by the call; free with
 * report_data_free, also after a failure), with a trend over the last
 * trend_n (1 .. REPORT_TREND_MAX) complete runs of the same kind and label
 * whose id is <= run_id. db_name names the database in the footer and in
 * messages. PG_ERR_USAGE when no run has that id or trend_n is out of
 * range; PG_ERR_DB on a query failure (naming the database file);
 * PG_ERR_FORMAT when a head index is at or above REPORT_MAX_HEADS;
 * PG_ERR_NOMEM. */
pg_status report_data_load(pg_store *s, const char *db_name, int64_t run_id, int trend_n,
                           report_data *out, pg_err *err);

/* Whether d's run is a diverge run (it then has a divergence section). */
int report_is_diverge(const report_data *d);

/* Frees everything d owns and zeroes it; safe on a zeroed or partly loaded d. */
void report_data_free(report_data *d);

/* Whether layer l (< d->n_layers) has a quant_stats row for any tensor. */
int report_quant_present(const report_data *d, size_t l);

/* Writes layer l's scale source to out: the one source when q, k and v
 * share it, else "q:SRC k:SRC v:SRC"; each source through put_escaped. */
void report_quant_source(FILE *out, const report_data *d, size_t l,
                         void (*put_escaped)(FILE *out, const char *s));

/* Whether a flag's verdict fails the gate ("regression" or "error"). */
int report_flag_fails(const flag_row *f);

/* Index of the fp8 profile (fp8kv@..., fp8qkv@...; not ~spec, not ext)
 * with the largest layer-mean rel_l2 (a non-finite layer makes a profile
 * the worst); -1 when none has a whole-layer row. */
int report_worst_fp8_variant(const report_data *d);

/* Writes to out[0 .. return) the indices of the (at most max) layers with
 * the largest rel_l2 in variant v, worst first (non-finite first, ties by
 * layer order); layers without a row for v are left out. */
size_t report_worst_layers(const report_data *d, size_t v, size_t *out, size_t max);

/* The layer-mean rel_l2 of variant v: NaN with no rows, +inf when a layer's
 * value is not finite or its output had NaN/Inf. */
double report_variant_mean(const report_data *d, size_t v);

/* Colour of a variant or mode name in every chart: fixed for bf16, fp8kv,
 * fp8qkv; others from a palette by a hash of the name. */
const char *report_colour(const char *name);

#endif /* PG_REPORT_DATA_H */
