/* report_data.c: a run's numbers from the store into structs (see report_data.h). */
#include "report_data.h"

#include "base/mode.h"
#include "base/variant.h"
#include "db/shape_store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First capacity of a growing array. */
#define GROW_FIRST 16

/* Chart colours: each mode's default profile (and an eval mode) fixed,
 * anything else from the palette. */
#define COLOUR_BF16 "#1f77b4"
#define COLOUR_FP8KV "#ff7f0e"
#define COLOUR_FP8QKV "#d62728"
static const char *const PALETTE[] = {"#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                                      "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
#define PALETTE_N (sizeof PALETTE / sizeof PALETTE[0])
/* FNV-1a, for picking a palette colour from a name. */
#define FNV_OFFSET 2166136261u
#define FNV_PRIME 16777619u

/* ---- small helpers -------------------------------------------------------- */

/* Orders two variant or eval mode names: the profiles in the table's order
 * (an eval mode as its default profile), then others by name, NULL last. */
static int mode_cmp(const char *x, const char *y)
{
    if (x == NULL || y == NULL) return (x == NULL) - (y == NULL);
    return variant_name_cmp(x, y);
}

/* qsort comparator over char* names in mode order. */
static int name_ptr_cmp(const void *a, const void *b)
{
    return mode_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* Order of a reasoning effort: low, medium, high, then others. */
static int effort_rank(const char *e)
{
    if (e == NULL) return 3;
    if (strcmp(e, "low") == 0) return 0;
    if (strcmp(e, "medium") == 0) return 1;
    if (strcmp(e, "high") == 0) return 2;
    return 3;
}

/* strcmp that orders NULL first. */
static int str_cmp_null(const char *x, const char *y)
{
    if (x == NULL || y == NULL) return (x != NULL) - (y != NULL);
    return strcmp(x, y);
}

/* Orders (eval, effort) keys: by eval, then effort rank, then effort name. */
static int eval_effort_cmp(const char *eval_x, const char *effort_x, const char *eval_y,
                           const char *effort_y)
{
    int c = str_cmp_null(eval_x, eval_y);
    if (c != 0) return c;
    c = effort_rank(effort_x) - effort_rank(effort_y);
    return c != 0 ? c : str_cmp_null(effort_x, effort_y);
}

/* Orders eval_scores rows by eval, effort, mode. */
static int score_cmp(const void *a, const void *b)
{
    const eval_score_stored *x = a, *y = b;
    const int c = eval_effort_cmp(x->eval, x->effort, y->eval, y->effort);
    return c != 0 ? c : mode_cmp(x->mode, y->mode);
}

/* Orders eval_pairs rows by eval, effort, mode_a, mode_b. */
static int pair_cmp(const void *a, const void *b)
{
    const eval_pair_stored *x = a, *y = b;
    int c = eval_effort_cmp(x->eval, x->effort, y->eval, y->effort);
    if (c != 0) return c;
    c = mode_cmp(x->mode_a, y->mode_a);
    return c != 0 ? c : mode_cmp(x->mode_b, y->mode_b);
}

/* Orders layers by capture, then layer index. */
static int layer_cmp(const void *a, const void *b)
{
    const run_layer_row *x = a, *y = b;
    const int c = strcmp(x->capture, y->capture);
    return c != 0 ? c : (x->layer > y->layer) - (x->layer < y->layer);
}

/* Makes room for need elements of size elem in *p (capacity *cap); PG_ERR_NOMEM. */
static pg_status grow(void **p, size_t *cap, size_t need, size_t elem, pg_err *err)
{
    if (need <= *cap) return PG_OK;
    size_t n = *cap > 0 ? *cap : GROW_FIRST;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (q == NULL) return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    memset((char *)q + *cap * elem, 0, (n - *cap) * elem);
    *p = q;
    *cap = n;
    return PG_OK;
}

/* Zeroed array of n elements of size elem (n may be 0: then NULL); PG_ERR_NOMEM. */
static pg_status alloc_zero(void **p, size_t n, size_t elem, pg_err *err)
{
    *p = NULL;
    if (n == 0) return PG_OK;
    *p = calloc(n, elem);
    return *p != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
}

/* A copy of s (NULL stays NULL) into *out; PG_ERR_NOMEM. */
static pg_status dup_str(const char *s, char **out, pg_err *err)
{
    *out = NULL;
    if (s == NULL) return PG_OK;
    *out = strdup(s);
    return *out != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
}

/* Index of name in names[0 .. n), or -1. */
static long find_name(char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (long)i;
    return -1;
}

/* Index of (capture, layer) in d->layers, or -1. */
static long find_layer(const report_data *d, const char *capture, int layer)
{
    const run_layer_row key = {(char *)capture, layer};
    const run_layer_row *hit =
        d->n_layers == 0 ? NULL : bsearch(&key, d->layers, d->n_layers, sizeof key, layer_cmp);
    return hit != NULL ? (long)(hit - d->layers) : -1;
}

/* ---- the pieces ------------------------------------------------------------ */

/* The runs row of run_id; PG_ERR_USAGE when there is none. */
static pg_status load_run(pg_store *s, const char *dbn, int64_t run_id, run_row *r, pg_err *err)
{
    int found = 0;
    const pg_status st = report_store_run(s, run_id, r, &found, err);
    if (st == PG_OK && !found)
        return pg_fail(err, PG_ERR_USAGE, "report: %s has no run %lld", dbn, (long long)run_id);
    return st;
}

/* Moves the non-NULL names of names[0 .. n) to its front; returns how many. */
static size_t drop_null_names(char **names, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (names[i] != NULL) names[kept++] = names[i];
    return kept;
}

/* The distinct variants and (capture, layer) pairs of the run. */
static pg_status load_axes(pg_store *s, int64_t run_id, report_data *d, pg_err *err)
{
    size_t n = 0;
    pg_status st = report_store_variants(s, run_id, REPORT_VARIANTS_ALL_ROWS, &d->variants, &n, err);
    d->n_variants = drop_null_names(d->variants, n);
    if (st != PG_OK) return st;
    if (d->n_variants > 1) qsort(d->variants, d->n_variants, sizeof(char *), name_ptr_cmp);

    st = report_store_layers(s, run_id, &d->layers, &n, err);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (d->layers[i].capture != NULL) d->layers[kept++] = d->layers[i];
    d->n_layers = kept;
    if (st == PG_OK && d->n_layers > 0) qsort(d->layers, d->n_layers, sizeof *d->layers, layer_cmp);
    return st;
}

/* Whole-layer and per-head rows into d->cells and d->head_*. */
static pg_status load_metrics(pg_store *s, const char *dbn, int64_t run_id, report_data *d,
                              pg_err *err)
{
    const size_t n_cells = d->n_layers * d->n_variants;
    pg_status st = alloc_zero((void **)&d->cells, n_cells, sizeof(report_cell), err);
    if (st != PG_OK) return st;
    layer_metric_row *rows = NULL;
    size_t n = 0;
    st = report_store_layer_metrics(s, run_id, &rows, &n, err);

    /* The head arrays are sized from the largest head index. */
    int64_t max_head = -1;
    for (size_t i = 0; st == PG_OK && i < n; i++)
        if (rows[i].head > max_head) max_head = rows[i].head;
    if (st == PG_OK && max_head >= REPORT_MAX_HEADS)
        st = pg_fail(err, PG_ERR_FORMAT, "report: %s: run %lld has head %lld (at most %d heads)",
                     dbn, (long long)run_id, (long long)max_head, REPORT_MAX_HEADS);
    else if (st == PG_OK && max_head >= 0) {
        d->n_heads = (int)max_head + 1;
        const size_t nh = n_cells * (size_t)d->n_heads;
        st = alloc_zero((void **)&d->head_rel_l2, nh, sizeof(double), err);
        if (st == PG_OK) st = alloc_zero((void **)&d->head_present, nh, 1, err);
    }

    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const layer_metric_row *m = &rows[i];
        if (m->capture == NULL || m->variant == NULL) continue;
        const long l = find_layer(d, m->capture, m->layer);
        const long v = find_name(d->variants, d->n_variants, m->variant);
        if (l < 0 || v < 0) continue;
        const size_t ci = (size_t)l * d->n_variants + (size_t)v;
        if (m->head < 0) {
            report_cell *c = &d->cells[ci];
            c->present = 1;
            c->rel_l2 = m->v.rel_l2;
            c->max_abs = m->v.max_abs;
            c->cos_sim = m->v.cos_sim;
            c->sqnr_db = m->v.sqnr_db;
            c->nan_count = m->v.nan_count;
            c->inf_count = m->v.inf_count;
        } else if (m->head < d->n_heads) {
            d->head_rel_l2[ci * (size_t)d->n_heads + (size_t)m->head] = m->v.rel_l2;
            d->head_present[ci * (size_t)d->n_heads + (size_t)m->head] = 1;
        }
    }
    layer_metric_rows_free(rows, n);
    return st;
}

/* quant_stats rows into d->quant. */
static pg_status load_quant(pg_store *s, int64_t run_id, report_data *d, pg_err *err)
{
    pg_status st = alloc_zero((void **)&d->quant, d->n_layers * REPORT_N_TENSORS,
                              sizeof(report_quant), err);
    if (st != PG_OK) return st;
    quant_stat_row *rows = NULL;
    size_t n = 0;
    st = report_store_quant(s, run_id, &rows, &n, err);
    static const char tensors[REPORT_N_TENSORS] = {'q', 'k', 'v'};
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const quant_stat_row *r = &rows[i];
        const char *ten = r->tensor;
        if (r->capture == NULL || ten == NULL) continue;
        const long l = find_layer(d, r->capture, r->layer);
        const char *t = ten[0] != '\0' && ten[1] == '\0' ? memchr(tensors, ten[0], sizeof tensors)
                                                          : NULL;
        if (l < 0 || t == NULL) continue;
        report_quant *q = &d->quant[(size_t)l * REPORT_N_TENSORS + (size_t)(t - tensors)];
        q->present = 1;
        q->scale = r->scale;
        snprintf(q->source, sizeof q->source, "%s", r->scale_source != NULL ? r->scale_source : "");
        q->saturated_frac = r->saturated_frac;
        q->underflow_frac = r->underflow_frac;
        d->has_quant = 1;
    }
    quant_stat_rows_free(rows, n);
    return st;
}

/* eval_scores and eval_pairs rows of the run, in the report's order. */
static pg_status load_evals(pg_store *s, int64_t run_id, report_data *d, pg_err *err)
{
    pg_status st = eval_store_read_scores(s, run_id, NULL, &d->scores, &d->n_scores, err);
    if (st != PG_OK) return st;
    if (d->n_scores > 0) qsort(d->scores, d->n_scores, sizeof *d->scores, score_cmp);
    st = eval_store_read_pairs(s, run_id, NULL, &d->pairs, &d->n_pairs, err);
    if (st == PG_OK && d->n_pairs > 0) qsort(d->pairs, d->n_pairs, sizeof *d->pairs, pair_cmp);
    return st;
}

/* The gate's flags of the run, when the flags table exists. */
static pg_status load_flags(pg_store *s, int64_t run_id, report_data *d, pg_err *err)
{
    const pg_status st = report_store_flags(s, run_id, &d->flags, &d->n_flags, &d->flags_table, err);
    d->gated = st == PG_OK && d->n_flags > 0;
    return st;
}

/* Index of name among the trend's series, appended when new; -1 after PG_ERR_NOMEM. */
static long trend_series(report_trend *t, size_t *cap, const char *name, pg_err *err)
{
    const long i = find_name(t->series, t->n_series, name);
    if (i >= 0) return i;
    if (grow((void **)&t->series, cap, t->n_series + 1, sizeof(char *), err) != PG_OK) return -1;
    if (dup_str(name, &t->series[t->n_series], err) != PG_OK) return -1;
    return (long)t->n_series++;
}

/* Index of run id among the trend's runs, or -1. */
static long trend_run(const report_trend *t, int64_t id)
{
    for (size_t i = 0; i < t->n_runs; i++)
        if (t->runs[i].id == id) return (long)i;
    return -1;
}

/* The series name of a trend row: the variant (rel_l2) or mode (KLD) when
 * by_name, or "mode effort", prefixed with the eval when the trend holds
 * several evals. */
static void trend_name(char *buf, size_t len, int by_name, int several_evals,
                       const trend_value_row *r)
{
    const char *a = r->name != NULL ? r->name : "";
    const char *mode = r->mode != NULL ? r->mode : "";
    const char *effort = r->effort != NULL ? r->effort : "";
    if (by_name) snprintf(buf, len, "%s", a);
    else if (several_evals) snprintf(buf, len, "%s %s %s", a, mode, effort);
    else snprintf(buf, len, "%s %s", mode, effort);
}

/* Whether the rows name more than one eval (count(DISTINCT eval) > 1: NULLs
 * are not counted). */
static int several_names(const trend_value_row *rows, size_t n)
{
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].name == NULL) continue;
        if (first == NULL) first = rows[i].name;
        else if (strcmp(rows[i].name, first) != 0) return 1;
    }
    return 0;
}

/* Longest trend series name kept. */
#define TREND_NAME_MAX 256

/* The trend: the runs, then the per-run value of each series (two passes
 * over the rows: the series names, then the sums). */
static pg_status load_trend(pg_store *s, int trend_n, report_data *d, pg_err *err)
{
    report_trend *t = &d->trend;
    /* What the run holds decides; a run that holds nothing (failed early) follows its kind. */
    const int eval_kind = d->run.kind != NULL && strcmp(d->run.kind, "eval") == 0;
    t->metric = report_is_diverge(d) ? REPORT_TREND_KLD
                : d->n_layers > 0    ? REPORT_TREND_REL_L2
                : d->n_scores > 0 || eval_kind ? REPORT_TREND_ACCURACY : REPORT_TREND_REL_L2;
    const trend_query q = {.kind = d->run.kind, .label = d->run.label, .last_id = d->run.id,
                           .n_runs = trend_n};
    pg_status st = report_store_trend_runs(s, &q, &t->runs, &t->n_runs, err);
    if (st != PG_OK || t->n_runs == 0) return st;

    const int rel = t->metric == REPORT_TREND_REL_L2;
    const int by_name = t->metric != REPORT_TREND_ACCURACY;
    trend_value_row *rows = NULL;
    size_t n_rows = 0;
    const trend_source source = rel ? TREND_LAYER_REL_L2
                                : t->metric == REPORT_TREND_KLD ? TREND_DIV_KLD
                                                                : TREND_EVAL_ACCURACY;
    st = report_store_trend_values(s, &q, source, &rows, &n_rows, err);
    const int several_evals = !by_name && several_names(rows, n_rows);
    char name[TREND_NAME_MAX];
    size_t scap = 0;
    for (size_t i = 0; st == PG_OK && i < n_rows; i++) {
        trend_name(name, sizeof name, by_name, several_evals, &rows[i]);
        if (trend_series(t, &scap, name, err) < 0) st = err->code;
    }
    if (st == PG_OK && t->n_series > 1) qsort(t->series, t->n_series, sizeof(char *), name_ptr_cmp);

    const size_t n = t->n_series * t->n_runs;
    double *sum = NULL;
    size_t *count = NULL;
    unsigned char *bad = NULL;
    if (st == PG_OK && (alloc_zero((void **)&sum, n, sizeof(double), err) != PG_OK ||
                        alloc_zero((void **)&count, n, sizeof(size_t), err) != PG_OK ||
                        alloc_zero((void **)&bad, n, 1, err) != PG_OK ||
                        alloc_zero((void **)&t->values, n, sizeof(double), err) != PG_OK ||
                        alloc_zero((void **)&t->present, n, 1, err) != PG_OK))
        st = err->code;
    for (size_t i = 0; st == PG_OK && i < n_rows; i++) {
        const trend_value_row *row = &rows[i];
        trend_name(name, sizeof name, by_name, several_evals, row);
        const long r = trend_run(t, row->run_id);
        const long si = find_name(t->series, t->n_series, name);
        const double v = row->value;
        /* An accuracy or a mean KLD that is NULL means nothing was scored: no
         * data, not a failure. */
        if (r < 0 || si < 0 || (!rel && isnan(v))) continue;
        const size_t k = (size_t)si * t->n_runs + (size_t)r;
        if (!isfinite(v) || row->nonfinite > 0) bad[k] = 1;
        else sum[k] += v;
        count[k]++;
    }
    trend_value_rows_free(rows, n_rows);
    for (size_t k = 0; st == PG_OK && k < n; k++) {
        t->present[k] = count[k] > 0;
        t->values[k] = count[k] == 0 ? NAN : bad[k] ? INFINITY : sum[k] / (double)count[k];
    }
    free(sum);
    free(count);
    free(bad);
    return st;
}

const char report_attribution_caption[] =
    "Each fp8 variant run again on the CPU specification with one tensor alone quantized "
    "(the others kept bf16, the profile's other roundings kept): the bar of a tensor is the "
    "layer's rel_l2 when only it is fp8. \"none\" (every tensor bf16) is the profile's "
    "arithmetic alone, the floor every part includes; \"joint\" is the variant itself. The "
    "parts are not shares of the joint error and are not additive when the tensors interact: "
    "independent errors add roughly in quadrature (the joint near the root-sum-square, \"rss\"), "
    "so the sum overstates the joint; the saturation of one tensor can mask another's rounding "
    "or compound it, so the joint can also exceed the sum. Read the parts as \"which tensor "
    "alone would cost this much\": the largest is the tensor to keep in bf16 or rescale first.";

/* The attribution rows (attribution_store_load), grouped by capture, layer
 * and variant, with each group's sum, root-sum-square and dominant tensor. */
static pg_status load_attribution(pg_store *store, int64_t run_id, report_data *d, pg_err *err)
{
    pg_status s = attribution_store_load(store, run_id, &d->attribution_rows, err);
    const attribution_rows *r = &d->attribution_rows;
    if (s == PG_OK && r->n > 0) s = alloc_zero((void **)&d->attribution, r->n, sizeof *d->attribution, err);
    for (size_t i = 0; s == PG_OK && i < r->n; i++) {
        const attribution_row *row = &r->rows[i];
        report_attribution *g = d->n_attribution ? &d->attribution[d->n_attribution - 1] : NULL;
        if (g == NULL || g->layer != row->layer || strcmp(g->capture, row->capture) != 0 ||
            strcmp(g->variant, row->variant) != 0) {
            g = &d->attribution[d->n_attribution++];
            *g = (report_attribution){.capture = row->capture, .variant = row->variant,
                                      .layer = row->layer, .dominant = -1};
            for (int t = 0; t < ATTRIBUTION_N_TENSORS; t++) g->rel_l2[t] = NAN;
        }
        g->rel_l2[row->tensor] = row->rel_l2;
    }
    for (size_t i = 0; i < d->n_attribution; i++) {
        report_attribution *g = &d->attribution[i];
        double sq = 0;
        for (int t = ATTRIBUTION_NONE + 1; t < ATTRIBUTION_ALL; t++) {
            const double v = g->rel_l2[t];
            if (isnan(v)) continue;
            g->sum += v;
            sq += v * v;
            if (g->dominant < 0 || v > g->rel_l2[g->dominant]) g->dominant = t;
        }
        g->rss = sqrt(sq);
    }
    return s;
}

const double report_div_percentiles[REPORT_DIV_N_PERCENTILES] = {
    1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 99.5, 99.9, 100};

/* Orders divergence summaries: the modes (by mode), then the noise floor. */
static int div_row_cmp(const void *a, const void *b)
{
    const div_summary_stored *x = a, *y = b;
    const int fx = strcmp(x->role, div_role_name(DIV_ROLE_FLOOR)) == 0;
    const int fy = strcmp(y->role, div_role_name(DIV_ROLE_FLOOR)) == 0;
    return fx != fy ? fx - fy : mode_cmp(x->mode, y->mode);
}

/* A diverge run's summaries into d->div (the curves are the caller's). */
static pg_status load_divergence(pg_store *s, int64_t run_id, report_data *d, pg_err *err)
{
    if (!report_is_diverge(d)) return PG_OK;
    report_divergence *v = &d->div;
    const pg_status st = divergence_store_read_summaries(s, run_id, &v->rows, &v->n_rows, err);
    if (st != PG_OK || v->n_rows == 0) return st;
    qsort(v->rows, v->n_rows, sizeof *v->rows, div_row_cmp);
    v->has_floor = strcmp(v->rows[v->n_rows - 1].role, div_role_name(DIV_ROLE_FLOOR)) == 0;
    return PG_OK;
}

/* ---- public --------------------------------------------------------------- */

int report_is_diverge(const report_data *d)
{
    return d->run.kind != NULL && strcmp(d->run.kind, DIV_RUN_KIND) == 0;
}

int report_cell_nonfinite(const report_cell *c)
{
    return !isfinite(c->rel_l2) || c->nan_count + c->inf_count > 0;
}

int report_cell_outputs(const report_cell *c, char *buf, size_t len)
{
    buf[0] = '\0';
    if (c->nan_count + c->inf_count <= 0) return 0;
    snprintf(buf, len, "(%lld NaN, %lld inf outputs)", (long long)c->nan_count,
             (long long)c->inf_count);
    return 1;
}

/* d->kv_memory: each distinct mode of d->kv_formats that the mode table
 * knows, summed over run_id's layer_shapes rows (none without them). */
static pg_status load_kv_memory(pg_store *db, int64_t run_id, report_data *d, pg_err *err)
{
    if (d->n_kv_formats == 0) return PG_OK;
    shape_row *shapes = NULL;
    size_t ns = 0;
    pg_status st = shape_store_load(db, run_id, &shapes, &ns, err);
    if (st != PG_OK || ns == 0) {
        shape_rows_free(shapes, ns);
        return st;
    }
    d->kv_memory = calloc(d->n_kv_formats, sizeof *d->kv_memory);
    if (d->kv_memory == NULL) {
        shape_rows_free(shapes, ns);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory for the KV memory table");
    }
    for (size_t i = 0; i < d->n_kv_formats; i++) {
        const char *name = d->kv_formats[i].mode;
        pg_mode m;
        int seen = 0;
        for (size_t j = 0; j < d->n_kv_memory && !seen; j++)
            seen = strcmp(d->kv_memory[j].mode, name) == 0;
        if (seen || name == NULL || pg_mode_find(name, &m, NULL) != PG_OK) continue;
        report_kv_memory *r = &d->kv_memory[d->n_kv_memory++];
        r->mode = name;
        for (size_t l = 0; l < ns; l++) {
            const long long hkv = shapes[l].shape.hkv;
            const int hd = shapes[l].shape.d;
            r->bytes += hkv * pg_mode_kv_bytes_per_token_head(m, hd);
            r->bytes_bf16 += hkv * pg_mode_kv_bytes_per_token_head(pg_mode_baseline(), hd);
            r->bytes_fp8 += hkv * pg_mode_kv_bytes_per_token_head(PG_MODE_KV_FP8_REFERENCE, hd);
        }
    }
    shape_rows_free(shapes, ns);
    return PG_OK;
}

pg_status report_data_load(pg_store *db, const char *db_name, int64_t run_id, int trend_n,
                           report_data *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (db == NULL || db_name == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "report: no store or database name");
    if (trend_n < 1 || trend_n > REPORT_TREND_MAX)
        return pg_fail(err, PG_ERR_USAGE, "report: --trend %d is outside [1, %d]", trend_n,
                       REPORT_TREND_MAX);
    /* The loaders read the failure's code back, so they get an err that is never NULL. */
    pg_err local = {0};
    pg_status s = dup_str(db_name, &out->db_name, &local);
    if (s == PG_OK) s = load_run(db, db_name, run_id, &out->run, &local);
    if (s == PG_OK) s = load_axes(db, run_id, out, &local);
    if (s == PG_OK) s = load_metrics(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_quant(db, run_id, out, &local);
    if (s == PG_OK)
        s = report_store_kv_formats(db, run_id, &out->kv_formats, &out->n_kv_formats, &local);
    if (s == PG_OK) s = load_kv_memory(db, run_id, out, &local);
    if (s == PG_OK)
        s = report_store_unsupported(db, run_id, &out->unsupported, &out->n_unsupported, &local);
    if (s == PG_OK) s = load_evals(db, run_id, out, &local);
    if (s == PG_OK) s = load_divergence(db, run_id, out, &local);
    if (s == PG_OK) s = load_flags(db, run_id, out, &local);
    if (s == PG_OK) s = load_trend(db, trend_n, out, &local);
    if (s == PG_OK) s = load_attribution(db, run_id, out, &local);
    if (s != PG_OK) pg_fail(err, local.code, "%s", local.msg);
    return s;
}

const char report_kv_memory_caption[] =
    "K and V of every layer per token (hkv slots of the mode's per (token, KV head) bytes: "
    "codes, block scales, inline scales, zero points and norms, TurboQuant's slot rounded up "
    "to even bytes), against the same layers all bf16 and all fp8 (per-tensor e4m3). Not "
    "counted: per-tensor scales, block padding, and vLLM keeping only the window's tokens of "
    "a sliding-window layer.";

const char report_unsupported_caption[] =
    "Variants whose kernel cannot compute these layers, as its source states (no attention "
    "sinks, no sliding window): stored as not supported with the reason, measured nowhere, "
    "and skipped by the gate (never a pass).";

double report_kv_saved_fraction(long long bytes, long long base)
{
    return base != 0 ? (double)(base - bytes) / (double)base : 0.0;
}

const char *report_kv_scales_word(const char *mode)
{
    pg_mode m;
    if (mode == NULL || pg_mode_find(mode, &m, NULL) != PG_OK) return "?";
    return pg_mode_traits_of(m)->kv_scales == PG_SCALES_PER_TENSOR ? "per tensor" : "none";
}

const char report_advice_counts[] =
    "NaN/Inf outputs and undefined metrics keep bf16. The saving counts K and V per token from "
    "the stored shapes (2 x hkv x d elements a layer, 2 bytes in bf16, the mode's element bytes "
    "quantized: 1 for fp8 and int8) and a per-token-head cache's inline scales, not per-tensor "
    "scales, block padding, or vLLM keeping only the window's tokens of a sliding-window "
    "layer.";

void report_data_free(report_data *d)
{
    if (d == NULL) return;
    free(d->db_name);
    run_row_free(&d->run);
    report_names_free(d->variants, d->n_variants);
    run_layer_rows_free(d->layers, d->n_layers);
    free(d->cells);
    free(d->head_rel_l2);
    free(d->head_present);
    free(d->quant);
    kv_format_summaries_free(d->kv_formats, d->n_kv_formats);
    unsupported_summaries_free(d->unsupported, d->n_unsupported);
    free(d->kv_memory);
    free(d->attribution);
    attribution_rows_free(&d->attribution_rows);
    eval_store_scores_free(d->scores, d->n_scores);
    eval_store_pairs_free(d->pairs, d->n_pairs);
    flag_rows_free(d->flags, d->n_flags);
    report_diagnosis *g = &d->diag;
    for (size_t i = 0; i < g->n_hyp && g->hypotheses != NULL; i++) free(g->hypotheses[i]);
    free(g->hypotheses);
    for (size_t i = 0; i < g->n_rows; i++) {
        report_diag_row *r = &g->rows[i];
        char *rs[] = {r->capture, r->ext_name, r->layers, r->message};
        for (size_t j = 0; j < sizeof rs / sizeof rs[0]; j++) free(rs[j]);
    }
    free(g->rows);
    free(g->dist);
    report_trend *t = &d->trend;
    trend_run_rows_free(t->runs, t->n_runs);
    for (size_t i = 0; i < t->n_series; i++) free(t->series[i]);
    free(t->series);
    free(t->values);
    free(t->present);
    for (size_t i = 0; i < d->n_advice; i++) {
        report_advice *a = &d->advice[i];
        char *as[] = {a->variant, a->metric, a->note, a->keep, a->flag};
        for (size_t j = 0; j < sizeof as / sizeof as[0]; j++) free(as[j]);
    }
    free(d->advice);
    free(d->advice_note);
    free(d->advice_config);
    report_divergence *v = &d->div;
    divergence_store_summaries_free(v->rows, v->n_rows);
    free(v->bin_first);
    free(v->bin_last);
    free(v->kld_bin);
    free(v->same_top_bin);
    free(v->kld_percentile);
    memset(d, 0, sizeof *d);
}

int report_flag_fails(const flag_row *f)
{
    return f->verdict != NULL &&
           (strcmp(f->verdict, "regression") == 0 || strcmp(f->verdict, "error") == 0);
}

double report_variant_mean(const report_data *d, size_t v)
{
    double sum = 0.0;
    size_t n = 0;
    for (size_t l = 0; l < d->n_layers; l++) {
        const report_cell *c = &d->cells[l * d->n_variants + v];
        if (!c->present) continue;
        if (report_cell_nonfinite(c)) return INFINITY;
        sum += c->rel_l2;
        n++;
    }
    return n > 0 ? sum / (double)n : NAN;
}

int report_worst_fp8_variant(const report_data *d)
{
    int worst = -1;
    double worst_mean = -INFINITY;
    for (size_t v = 0; v < d->n_variants; v++) {
        const variant_profile_id p = variant_name_profile(d->variants[v]);
        if (p == VARIANT_PROFILE_COUNT || !pg_mode_quantizes(variant_profile_mode(p))) continue;
        const double m = report_variant_mean(d, v);
        if (isnan(m)) continue;
        if (worst < 0 || m > worst_mean) {
            worst = (int)v;
            worst_mean = m;
        }
    }
    return worst;
}

/* The sort key of a cell: +inf when it or its output is non-finite. */
static double cell_badness(const report_cell *c)
{
    return report_cell_nonfinite(c) ? INFINITY : c->rel_l2;
}

size_t report_worst_layers(const report_data *d, size_t v, size_t *out, size_t max)
{
    size_t n = 0;
    for (size_t l = 0; l < d->n_layers; l++) {
        const report_cell *c = &d->cells[l * d->n_variants + v];
        if (!c->present) continue;
        const double b = cell_badness(c);
        /* Insertion into the top list, worst first, earlier layers ahead on ties. */
        size_t pos = n;
        while (pos > 0 && cell_badness(&d->cells[out[pos - 1] * d->n_variants + v]) < b) pos--;
        if (pos >= max) continue;
        const size_t end = n < max ? n : max - 1;
        for (size_t k = end; k > pos; k--) out[k] = out[k - 1];
        out[pos] = l;
        if (n < max) n++;
    }
    return n;
}

const char *report_colour(const char *name)
{
    if (name == NULL) return PALETTE[0];
    const variant_profile_id prof = variant_name_profile(name);
    /* The colours of the first modes' default profiles (the baseline's
     * alone is its mode); the other names hash into the palette. */
    static const char *const mode_colour[PG_MODE_COUNT] = {
        [PG_MODE_BF16] = COLOUR_BF16, [PG_MODE_FP8KV] = COLOUR_FP8KV,
        [PG_MODE_FP8QKV] = COLOUR_FP8QKV};
    const pg_mode mode = variant_profile_mode(prof);
    if (prof != VARIANT_PROFILE_COUNT && variant_profile_is_default(prof) &&
        mode_colour[mode] != NULL)
        return mode_colour[mode];
    unsigned h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) h = (h ^ *p) * FNV_PRIME;
    return PALETTE[h % PALETTE_N];
}

void report_flag_where(FILE *out, const flag_row *f,
                       void (*put_escaped)(FILE *out, const char *s))
{
    const char *parts[] = {f->capture, f->variant, f->eval, f->mode, f->effort};
    int first = 1;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (i == 1 && f->layer >= 0) {
            fprintf(out, "%slayer %d", first ? "" : " / ", f->layer);
            first = 0;
        }
        if (parts[i] == NULL) continue;
        if (!first) fputs(" / ", out);
        put_escaped(out, parts[i]);
        first = 0;
    }
    if (first) fputc('-', out);
}

int report_quant_present(const report_data *d, size_t l)
{
    const report_quant *q = &d->quant[l * REPORT_N_TENSORS];
    for (int t = 0; t < REPORT_N_TENSORS; t++)
        if (q[t].present) return 1;
    return 0;
}

void report_quant_source(FILE *out, const report_data *d, size_t l,
                         void (*put_escaped)(FILE *out, const char *s))
{
    static const char *const tn[REPORT_N_TENSORS] = {"q", "k", "v"};
    const report_quant *q = &d->quant[l * REPORT_N_TENSORS];
    int same = 1;
    for (int t = 1; t < REPORT_N_TENSORS; t++) same &= strcmp(q[0].source, q[t].source) == 0;
    for (int t = 0; t < (same ? 1 : REPORT_N_TENSORS); t++) {
        if (!same) fprintf(out, "%s%s:", t > 0 ? " " : "", tn[t]);
        put_escaped(out, q[t].source);
    }
}
