/* cmd_report.c: `precgate report`: one run's report as self-contained HTML or Markdown. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/diagnosis_store.h"
#include "db/store.h"
#include "kernels/attn_hypothesis.h"
#include "reports/atomic_file.h"
#include "reports/report_data.h"
#include "reports/report_html.h"
#include "reports/report_md.h"
#include "harness/advise.h"
#include "harness/advise_evidence.h"
#include "harness/cli/cli.h"
#include "reports/term.h"
#include "harness/diag_verdict.h"
#include "harness/div_curves.h"
#include "harness/gate_config.h"
#include "base/variant.h"

/* Mode of a new report file before the umask (as fopen would create it). */
#define REPORT_FILE_MODE 0666

const char cmd_report_usage[] =
    "usage: precgate report --run N -o FILE.html|FILE.md [options]\n\n"
    "Writes one run's report, chosen by FILE's extension: a self-contained HTML page\n"
    "(.html, .htm: inline CSS and SVG charts, no script, no network) or Markdown for a\n"
    "pull-request comment (.md, .markdown: the same verdicts and tables, no charts).\n"
    "It shows the gate's regressions first (\"not gated\" when none were recorded),\n"
    "rel_l2 per layer and mode (log scale), a per-head heatmap of the worst 3 layers of\n"
    "the worst fp8 mode, fp8 saturation and underflow, end-task accuracy with 95%\n"
    "intervals (eval runs), and the trend over earlier runs of the same kind and label.\n"
    "A diverge run gets a divergence section: per mode and the noise floor, mean KLD\n"
    "with its SE and 95% interval, percentiles, same top, delta p, PPL ratio, median\n"
    "tail mass (KLD is a top-K lower bound); in HTML, KLD along the sequence (at most\n"
    "64 bins of positions), the KLD percentile curve and same top along the sequence,\n"
    "the noise floor a grey dashed line; its trend follows mean KLD per mode.\n\n"
    "  --run N              the run to report (required)\n"
    "  -o, --output FILE    where to write (required); written to a temporary file\n"
    "                       beside FILE, then renamed over it\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --trend N            the trend's runs: the last N complete runs of the same kind\n"
    "                       and label, up to this one (default 10, at most 1000)\n"
    "  --config FILE        a gate config (precgate gate --config FILE): a sweep's report\n"
    "                       then carries, for each fp8 profile, the advice of precgate\n"
    "                       advise at the config's layer bounds (layer.abs, layer.metric_abs);\n"
    "                       without it the report says there is no budget (the gate stores\n"
    "                       thresholds that mix in the baseline, not its bounds)\n\n"
    "exit status: 0 on success; 1 on failure; 2 on a usage error or an unknown run.\n";

/* A report format's writer. */
typedef pg_status (*report_writer)(const report_data *d, FILE *out, pg_err *err);

/* Parsed command line. */
typedef struct report_args {
    long run, trend;
    const char *output, *config;
    report_writer write;
    const char *format;     /* "html" or "markdown", for the closing message */
} report_args;

/* Whether path ends with suffix, ignoring ASCII case. */
static int ends_with(const char *path, const char *suffix)
{
    const size_t n = strlen(path), m = strlen(suffix);
    if (n < m) return 0;
    for (size_t i = 0; i < m; i++) {
        char c = path[n - m + i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != suffix[i]) return 0;
    }
    return 1;
}

/* Parses argv into the report_args args; PG_ERR_USAGE on anything unknown, missing or malformed. */
static pg_status report_parse(int argc, char **argv, void *args, const char **db_option,
                              pg_err *err)
{
    report_args *a = args;
    *a = (report_args){.run = -1, .trend = REPORT_TREND_DEFAULT};
    int have_run = 0;
    const cli_option opts[] = {
        {"run", CLI_LONG, .to = &a->run, .min = 1, .max = LONG_MAX, .given = &have_run},
        {"output", CLI_TEXT, .to = &a->output, .short_name = 'o'},
        {"db", CLI_TEXT, .to = db_option},
        {"trend", CLI_LONG, .to = &a->trend, .min = 1, .max = REPORT_TREND_MAX},
        {"config", CLI_TEXT, .to = &a->config},
        {NULL},
    };
    if (cli_parse_options("report", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (!have_run) return pg_fail(err, PG_ERR_USAGE, "report: --run N is required");
    if (a->output == NULL) return pg_fail(err, PG_ERR_USAGE, "report: -o FILE is required");
    if (ends_with(a->output, ".html") || ends_with(a->output, ".htm")) {
        a->write = report_html_write;
        a->format = "html";
    } else if (ends_with(a->output, ".md") || ends_with(a->output, ".markdown")) {
        a->write = report_md_write;
        a->format = "markdown";
    } else {
        return pg_fail(err, PG_ERR_USAGE,
                       "report: -o %s: the name must end in .html, .htm, .md or .markdown",
                       a->output);
    }
    return PG_OK;
}

/* Why a report without --config advises nothing. */
static const char ADVICE_NO_CONFIG[] =
    "No budget: give report --config FILE (a gate config) to advise at its layer bounds. "
    "The gate stores each flag's threshold, which mixes the baseline run's value with the "
    "bound, not the bound itself, so none is inferred here.";

/* strdup that records a failure in *oom; NULL stays NULL. */
static char *dup_or_flag(const char *s, int *oom)
{
    if (s == NULL) return NULL;
    char *c = strdup(s);
    if (c == NULL) *oom = 1;
    return c;
}

/* r's kept layers as "1, 3" ("" when none), malloc'd; NULL when out of memory. */
static char *kept_layers(const advise_result *r)
{
    const size_t len = 13 * r->n_keep + 1;  /* ", " and at most 11 characters a layer */
    char *s = malloc(len);
    if (s == NULL) return NULL;
    size_t at = 0;
    s[0] = '\0';
    for (size_t i = 0; i < r->n_layers; i++)
        if (r->layers[i].reason != ADVISE_FP8)
            at += (size_t)snprintf(s + at, len - at, "%s%d", at ? ", " : "", r->layers[i].layer);
    return s;
}

/* Fills e (variant v on metric m at budget b) from ev; a failure of the
 * advice itself (missing evidence) is e's note, not the report's. */
static void advise_into(const advise_evidence *ev, const char *v, pg_metric m, double b,
                        report_advice *e, int *oom)
{
    *e = (report_advice){.variant = dup_or_flag(v, oom),
                         .metric = dup_or_flag(pg_metric_name(m), oom), .budget = b,
                         .worst_layer = -1, .worst_value = NAN};
    const advise_request rq = {v, m, b};
    advise_result r;
    pg_err why = {0};
    if (advise_evidence_compute(ev, &rq, &r, &why) != PG_OK) {
        e->note = dup_or_flag(why.msg, oom);
        return;
    }
    e->keep = kept_layers(&r);
    *oom |= e->keep == NULL;
    int flag_oom = 0;
    e->flag = advise_vllm_flag(&r, &flag_oom);
    *oom |= flag_oom;
    e->saved_fraction = r.kv_bytes_saved_fraction;
    if (r.worst_fp8 >= 0) {
        e->worst_layer = r.layers[r.worst_fp8].layer;
        e->worst_value = r.layers[r.worst_fp8].value;
    }
    advise_result_free(&r);
}

/* The KV cache policy advice of d's fp8 profiles at config_path's layer
 * bounds (harness/advise.h), into d. A run without fp8 profiles gets no
 * section; without a config, or without the evidence (not complete, no
 * layer shapes), the section says why. A config that does not load is the
 * report's failure. */
static pg_status fill_advice(pg_store *store, const char *config_path, report_data *d,
                             pg_err *err)
{
    size_t n_fp8 = 0;
    for (size_t i = 0; i < d->n_variants; i++) {
        const variant_profile_id p = variant_name_profile(d->variants[i]);
        n_fp8 += p != VARIANT_PROFILE_COUNT && pg_mode_quantizes(variant_profile_mode(p));
    }
    if (n_fp8 == 0) return PG_OK;
    d->advice_shown = 1;
    int oom = 0;
    if (config_path == NULL) {
        d->advice_note = dup_or_flag(ADVICE_NO_CONFIG, &oom);
        return oom ? pg_fail(err, PG_ERR_NOMEM, "report: out of memory") : PG_OK;
    }
    gate_config cfg;
    pg_status st = gate_config_load(config_path, &cfg, err);
    if (st != PG_OK) return st;
    d->advice_config = dup_or_flag(config_path, &oom);
    advise_evidence ev;
    pg_err why = {0};
    if (advise_evidence_load(store, d->run.id, &ev, &why) != PG_OK) {
        char note[PG_ERR_MSG_MAX + 32];
        snprintf(note, sizeof note, "No advice: %s", why.msg);
        d->advice_note = dup_or_flag(note, &oom);
        return oom ? pg_fail(err, PG_ERR_NOMEM, "report: out of memory") : PG_OK;
    }
    /* at most one entry per fp8 profile and metric */
    d->advice = calloc(n_fp8 * PG_METRIC_VALUE_COUNT, sizeof *d->advice);
    oom |= d->advice == NULL;
    for (size_t i = 0; !oom && i < d->n_variants; i++) {
        const char *v = d->variants[i];
        const variant_profile_id p = variant_name_profile(v);
        if (p == VARIANT_PROFILE_COUNT || !pg_mode_quantizes(variant_profile_mode(p))) continue;
        size_t bounded = 0;
        for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++) {
            const double b = advise_config_budget(&cfg, v, (pg_metric)m);
            if (isnan(b)) continue;
            advise_into(&ev, v, (pg_metric)m, b, &d->advice[d->n_advice++], &oom);
            bounded++;
        }
        if (bounded > 0) continue;
        char note[PG_ERR_MSG_MAX];
        snprintf(note, sizeof note, "%s has no layer bound for %s (layer.abs or "
                 "layer.metric_abs): no budget, so no advice", config_path, v);
        report_advice *e = &d->advice[d->n_advice++];
        *e = (report_advice){.variant = dup_or_flag(v, &oom), .budget = NAN,
                             .note = dup_or_flag(note, &oom), .worst_layer = -1,
                             .worst_value = NAN};
    }
    advise_evidence_free(&ev);
    return oom ? pg_fail(err, PG_ERR_NOMEM, "report: out of memory") : PG_OK;
}

/* Longest diagnosis line and layer range a report shows (longer ones are cut). */
#define DIAG_LINE_MAX 1024
#define DIAG_LAYERS_MAX 48

/* Row r of the diagnosis section from span sp (strings copied into d's ownership). */
static void diag_row_from_span(const diag_span *sp, report_diag_row *r, int *oom)
{
    char layers[DIAG_LAYERS_MAX], line[DIAG_LINE_MAX];
    diag_layers_text(sp->first_layer, sp->last_layer, layers, sizeof layers);
    diag_span_message(sp, line, sizeof line);
    *r = (report_diag_row){.capture = dup_or_flag(sp->capture, oom),
                           .ext_name = dup_or_flag(sp->ext_name, oom),
                           .layers = dup_or_flag(layers, oom),
                           .message = dup_or_flag(line, oom),
                           .verdict = diag_verdict_name(sp->verdict),
                           .is_bug = sp->verdict == DIAG_BUG,
                           .is_intended = sp->verdict == DIAG_INTENDED};
}

/* The scale-plumbing diagnosis of d's run (ext_diagnosis, judged in spans of
 * layers by harness/diag_verdict.h) into d->diag: one row per span, a column
 * per hypothesis of the table (kernels/attn_hypothesis.h) holding its
 * largest distance over the span's layers. A run without diagnosis rows
 * leaves d->diag empty. PG_ERR_DB from the store or for a hypothesis the
 * table does not know; PG_ERR_NOMEM. */
static pg_status fill_diagnosis(pg_store *store, report_data *d, pg_err *err)
{
    diagnosis_row *rows = NULL;
    size_t n = 0, n_spans = 0;
    diag_span *spans = NULL;
    pg_status st = diagnosis_store_load(store, d->run.id, &rows, &n, err);
    if (st == PG_OK) st = diag_spans(rows, n, &spans, &n_spans, err);
    report_diagnosis *g = &d->diag;
    int oom = 0;
    if (st == PG_OK && n_spans > 0) {
        g->match_rel_l2 = DIAG_MATCH_REL_L2;
        g->margin = DIAG_MARGIN;
        /* The columns: the hypotheses every diagnosis asks, and those this
         * run asked (they have rows; diag_verdict.h judges the same set). */
        const size_t n_table = attn_hypothesis_count();
        g->hypotheses = calloc(n_table, sizeof *g->hypotheses);
        g->rows = calloc(n_spans, sizeof *g->rows);
        g->dist = malloc(n_spans * n_table * sizeof *g->dist);
        oom = g->hypotheses == NULL || g->rows == NULL || g->dist == NULL;
        for (size_t h = 0; !oom && h < n_table; h++) {
            const attn_hypothesis *hy = attn_hypothesis_at(h);
            int asked = attn_hypothesis_is_asked(hy, 0);
            for (size_t i = 0; i < n && !asked; i++)
                asked = strcmp(rows[i].hypothesis, attn_hypothesis_name(hy)) == 0;
            if (asked) g->hypotheses[g->n_hyp++] = dup_or_flag(attn_hypothesis_name(hy), &oom);
        }
        if (g->rows != NULL) g->n_rows = n_spans;
        for (size_t k = 0; k < g->n_rows; k++) {
            diag_row_from_span(&spans[k], &g->rows[k], &oom);
            g->n_bugs += g->rows[k].is_bug;
        }
    }
    for (size_t i = 0; !oom && i < g->n_rows * g->n_hyp; i++) g->dist[i] = NAN;
    for (size_t i = 0; !oom && i < n; i++) {
        const diagnosis_row *r = &rows[i];
        for (size_t k = 0; k < g->n_rows; k++) {
            const diag_span *sp = &spans[k];
            if (r->layer < sp->first_layer || r->layer > sp->last_layer ||
                strcmp(r->capture, sp->capture) != 0 || strcmp(r->ext_name, sp->ext_name) != 0)
                continue;
            for (size_t h = 0; h < g->n_hyp; h++) {
                double *cell = &g->dist[k * g->n_hyp + h];
                if (strcmp(r->hypothesis, g->hypotheses[h]) == 0 && !isnan(r->rel_l2) &&
                    !(*cell >= r->rel_l2))
                    *cell = r->rel_l2;
            }
        }
    }
    diag_spans_free(spans, n_spans);
    diagnosis_rows_free(rows, n);
    if (st == PG_OK && oom) st = pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    return st;
}

/* What atomic_file_write hands the chosen format's writer. */
typedef struct report_job {
    report_writer write;
    const report_data *d;
} report_job;

/* atomic_file_writer: the chosen format's writer on the loaded data. */
static pg_status write_report(void *ctx, FILE *out, pg_err *err)
{
    const report_job *j = ctx;
    return j->write(j->d, out, err);
}

/* cli_store_job: loads the run of the report_args ctx and writes the chosen
 * format atomically. */
static pg_status report_job_run(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    const report_args *a = ctx;
    report_data d;
    pg_status st = report_data_load(store, db_path, (int64_t)a->run, (int)a->trend,
                                    &d, err);
    if (st == PG_OK) st = fill_diagnosis(store, &d, err);
    if (st == PG_OK) st = fill_advice(store, a->config, &d, err);
    if (st == PG_OK) st = div_curves_fill(store, &d, err);
    report_job job = {a->write, &d};
    if (st == PG_OK) st = atomic_file_write(a->output, REPORT_FILE_MODE, write_report, &job, err);
    if (st == PG_OK)
        term_printf(stdout, "report: wrote %s (%s, run %ld from %s)\n", a->output, a->format, a->run, db_path);
    report_data_free(&d);
    return st;
}

/* `precgate report`: the cli_commands row runs it. */
const cli_store_command cmd_report_store = {CLI_STORE_EXISTING_CMD, sizeof(report_args),
                                            report_parse, report_job_run};
