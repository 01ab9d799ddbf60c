/* cmd_history.c: `precgate history`: one layer metric over the complete runs, newest last. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/history_store.h"
#include "reports/diff.h"
#include "reports/json_out.h"
#include "reports/term.h"
#include "harness/cli/cli.h"
#include "base/variant.h"

/* The variant followed when --variant is not given: this mode's default
 * profile (fp8kv, i.e. fp8kv@fixed). */
#define HISTORY_DEFAULT_MODE PG_MODE_FP8KV
/* Size of one formatted cell. */
#define HISTORY_CELL_MAX 256
/* Longest run field kept (times, git revision). */
#define HISTORY_FIELD_MAX 64
/* Characters of an ISO 8601 time shown: "YYYY-MM-DDTHH:MM:SS". */
#define HISTORY_TIME_CHARS 19
/* Column widths. */
#define HISTORY_ID_WIDTH 5
#define HISTORY_TIME_WIDTH 19
#define HISTORY_GIT_WIDTH 12
#define HISTORY_N_WIDTH 6
#define HISTORY_VALUE_WIDTH 13
#define HISTORY_LAYER_WIDTH 5

const char cmd_history_usage[] =
    "usage: precgate history [--variant V] [--metric NAME] [--layer L] [--label TEXT]\n"
    "                        [--capture PATH] [--backend cpu|cuda] [--db PATH] [--json]\n\n"
    "Follows one whole-layer metric of one variant over the complete runs, oldest first and\n"
    "newest last, one line per run with its id, start time (UTC) and git revision. With\n"
    "--layer, that layer's value; without, the worst over the run's layers (max for the\n"
    "error metrics and counts, min for cos_sim and sqnr_db; an undefined value, a cosine\n"
    "stored as NULL, counts as worst), the layer it is in, and the mean over layers.\n"
    "Runs without a matching row are left out.\n\n"
    "  --variant V     a kernel profile (bf16, fp8kv@fixed, fp8qkv@fa3, ...: precgate help\n"
    "                  profiles; a mode alone is its default profile), PROFILE~spec or\n"
    "                  ext:NAME (default fp8kv, i.e. fp8kv@fixed). Runs are matched on\n"
    "                  the full name: one profile's history never mixes in another's\n"
    "  --metric NAME   rel_l2 (default), max_abs, mean_abs, p99_abs, cos_sim, sqnr_db,\n"
    "                  nan_count or inf_count\n"
    "  --layer L       one layer\n"
    "  --label TEXT    only runs with exactly this label (e.g. nightly)\n"
    "  --capture PATH  only this capture (as stored: the --capture given to run)\n"
    "  --backend B     only rows computed on cpu or cuda\n"
    "  --db PATH       database (default $PRECGATE_DB, else ./precgate.db); never created\n"
    "  --json          a JSON array, one object per run, oldest first; a NaN or infinite\n"
    "                  number is null with \"<field>_nonfinite\": \"nan\", \"inf\" or \"-inf\"\n\n"
    "exit status: 0 success (also when no run matches); 1 failure; 2 usage error.\n";

/* Parsed command line. */
typedef struct history_args {
    const char *variant, *metric_name, *label, *capture, *backend;
    variant_name vn;     /* --variant parsed; vn.full is what rows are matched on */
    pg_metric metric;    /* --metric parsed */
    long layer;  /* -1: every layer */
    int json;
} history_args;

/* Parses argv into the history_args args; PG_ERR_USAGE on anything unknown or invalid. */
static pg_status history_parse(int argc, char **argv, void *args, const char **db_option,
                               pg_err *err)
{
    history_args *a = args;
    *a = (history_args){.variant = pg_mode_name(HISTORY_DEFAULT_MODE),
                        .metric_name = pg_metric_name(DIFF_DEFAULT_METRIC),
                        .layer = -1};
    const cli_option opts[] = {
        {"variant", CLI_TEXT, .to = &a->variant},
        {"metric", CLI_TEXT, .to = &a->metric_name},
        {"layer", CLI_LONG, .to = &a->layer, .min = 0, .max = INT_MAX},
        {"label", CLI_TEXT, .to = &a->label},
        {"capture", CLI_TEXT, .to = &a->capture},
        {"backend", CLI_TEXT, .to = &a->backend},
        {"db", CLI_TEXT, .to = db_option},
        {"json", CLI_FLAG, .to = &a->json},
        {NULL},
    };
    if (cli_parse_options("history", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (diff_metric_parse("history", a->metric_name, &a->metric, err) != PG_OK ||
        variant_name_parse("history: --variant", a->variant, &a->vn, err) != PG_OK)
        return err->code;
    a->variant = a->vn.full;
    if (a->backend != NULL && strcmp(a->backend, "cpu") != 0 && strcmp(a->backend, "cuda") != 0)
        return pg_fail(err, PG_ERR_USAGE, "history: --backend '%s' is not cpu or cuda", a->backend);
    return PG_OK;
}

/* One run's matching rows, folded. */
typedef struct history_point {
    long long id;
    char started_at[HISTORY_FIELD_MAX], git_rev[HISTORY_FIELD_MAX];
    char *label;        /* malloc'd; NULL when none */
    long n;             /* rows folded */
    double sum;         /* of the values (NaN once one is NaN) */
    double worst;       /* NaN when a value was NaN */
    int worst_layer;
} history_point;

/* 1 when v is worse than w under metric m (an undefined v is worst). */
static int is_worse(pg_metric m, double v, double w)
{
    if (isnan(w)) return 0;
    if (isnan(v)) return 1;
    return pg_metric_higher_is_worse(m) ? v > w : v < w;
}

/* Prints the header line and the column titles. */
static void print_header(const history_args *a, FILE *out)
{
    char v[HISTORY_CELL_MAX], filt[3 * HISTORY_CELL_MAX] = "";
    term_fit(v, sizeof v, a->variant, 0, 0);
    fprintf(out, "%s %s", v, pg_metric_name(a->metric));
    if (a->layer >= 0) fprintf(out, " of layer %ld", a->layer);
    else fprintf(out, ", worst (%s) and mean over layers",
                 pg_metric_higher_is_worse(a->metric) ? "max" : "min");
    size_t at = 0;
    char f[HISTORY_CELL_MAX];
    if (a->label != NULL) {
        term_fit(f, sizeof f, a->label, 0, 0);
        at += (size_t)snprintf(filt + at, sizeof filt - at, ", label %s", f);
    }
    if (a->capture != NULL && at < sizeof filt) {
        term_fit(f, sizeof f, a->capture, 0, 0);
        at += (size_t)snprintf(filt + at, sizeof filt - at, ", capture %s", f);
    }
    if (a->backend != NULL && at < sizeof filt)
        snprintf(filt + at, sizeof filt - at, ", backend %s", a->backend);
    fprintf(out, " (whole layer; complete runs%s), newest last\n", filt);
    fprintf(out, "%*s  ", HISTORY_ID_WIDTH, "run");
    term_cell(out, NULL, -HISTORY_TIME_WIDTH, "started (UTC)");
    fputs("  ", out);
    term_cell(out, NULL, -HISTORY_GIT_WIDTH, "git rev");
    if (a->layer >= 0) {
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, "value");
    } else {
        term_cell(out, NULL, HISTORY_N_WIDTH, "layers");
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, "worst");
        term_cell(out, NULL, HISTORY_LAYER_WIDTH + 1, "layer");
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, "mean");
    }
    fputc('\n', out);
}

/* Formats v with the metric's format; "nan" for any NaN. */
static void fmt_value(char *buf, size_t len, pg_metric m, double v)
{
    if (isnan(v)) snprintf(buf, len, "nan");
    else snprintf(buf, len, diff_metric_value_fmt(m), v);
}

/* Prints one run's line. */
static void print_point(const history_args *a, const history_point *p, FILE *out)
{
    char when[HISTORY_FIELD_MAX], git[HISTORY_CELL_MAX], w[HISTORY_CELL_MAX],
        mean[HISTORY_CELL_MAX];
    char raw[HISTORY_FIELD_MAX];
    snprintf(raw, sizeof raw, "%.*s", HISTORY_TIME_CHARS, p->started_at);
    term_fit(when, sizeof when, raw, 0, 0); /* stored text: escaped */
    char *t = strchr(when, 'T');
    if (t != NULL) *t = ' ';
    term_fit(git, sizeof git, p->git_rev[0] != '\0' ? p->git_rev : "-", HISTORY_GIT_WIDTH, 0);
    fmt_value(w, sizeof w, a->metric, p->worst);
    fmt_value(mean, sizeof mean, a->metric, p->sum / (double)p->n);
    fprintf(out, "%*lld  ", HISTORY_ID_WIDTH, p->id);
    term_cell(out, NULL, -HISTORY_TIME_WIDTH, when);
    fputs("  ", out);
    term_cell(out, NULL, -HISTORY_GIT_WIDTH, git);
    if (a->layer >= 0) {
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, w);
        if (p->n > 1)
            fprintf(out, "  (worst of %ld rows: several captures or backends; --capture or "
                         "--backend picks one)", p->n);
    } else {
        fprintf(out, "%*ld", HISTORY_N_WIDTH, p->n);
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, w);
        fprintf(out, " %*d", HISTORY_LAYER_WIDTH, p->worst_layer);
        term_cell(out, NULL, HISTORY_VALUE_WIDTH, mean);
    }
    fputc('\n', out);
}

/* Adds one run's object to arr; 0 when out of memory. */
static int point_json(const history_args *a, const history_point *p, cJSON *arr)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL && cJSON_AddNumberToObject(o, "run_id", (double)p->id) != NULL &&
             cJSON_AddStringToObject(o, "started_at", p->started_at) != NULL &&
             (p->git_rev[0] != '\0' ? cJSON_AddStringToObject(o, "git_rev", p->git_rev)
                                    : cJSON_AddNullToObject(o, "git_rev")) != NULL &&
             (p->label != NULL ? cJSON_AddStringToObject(o, "label", p->label)
                               : cJSON_AddNullToObject(o, "label")) != NULL &&
             cJSON_AddStringToObject(o, "variant", a->variant) != NULL &&
             cJSON_AddStringToObject(o, "metric", pg_metric_name(a->metric)) != NULL &&
             cJSON_AddNumberToObject(o, "n_rows", (double)p->n) != NULL;
    if (ok && a->layer >= 0)
        ok = cJSON_AddNumberToObject(o, "layer", (double)a->layer) != NULL &&
             report_json_number(o, "value", p->worst);
    else if (ok)
        ok = report_json_number(o, "worst", p->worst) &&
             cJSON_AddNumberToObject(o, "worst_layer", p->worst_layer) != NULL &&
             report_json_number(o, "mean", p->sum / (double)p->n);
    if (ok && cJSON_AddItemToArray(arr, o)) return 1;
    cJSON_Delete(o);
    return 0;
}

/* Emits p (a table line or a JSON object) and frees its label. */
static int flush_point(const history_args *a, history_point *p, cJSON *arr, FILE *out)
{
    int ok = 1;
    if (arr != NULL) ok = point_json(a, p, arr);
    else print_point(a, p, out);
    free(p->label);
    p->label = NULL;
    return ok;
}

/* Reads the matching rows, run by run (oldest first), and prints them. */
static pg_status history(pg_store *s, const history_args *a, FILE *out, pg_err *err)
{
    const history_query q = {.variant = a->variant, .label = a->label, .capture = a->capture,
                             .backend = a->backend, .layer = a->layer, .metric = a->metric};
    history_row *rows = NULL;
    size_t n = 0;
    pg_status rc = history_store_read(s, &q, &rows, &n, err);
    cJSON *arr = rc == PG_OK && a->json ? cJSON_CreateArray() : NULL;
    if (rc == PG_OK && a->json && arr == NULL)
        rc = pg_fail(err, PG_ERR_NOMEM, "history: out of memory");
    history_point p = {.id = -1};
    long runs = 0;
    for (size_t i = 0; rc == PG_OK && i < n; i++) {
        const history_row *r = &rows[i];
        const long long id = r->run_id;
        const int layer = r->layer;
        const double v = r->value;
        if (id != p.id) {
            if (runs == 0 && !a->json) print_header(a, out);
            if (p.id >= 0 && !flush_point(a, &p, arr, out)) {
                rc = pg_fail(err, PG_ERR_NOMEM, "history: out of memory");
                break;
            }
            runs++;
            p = (history_point){.id = id, .worst = v, .worst_layer = layer};
            snprintf(p.started_at, sizeof p.started_at, "%s",
                     r->started_at != NULL ? r->started_at : "");
            snprintf(p.git_rev, sizeof p.git_rev, "%s", r->git_rev != NULL ? r->git_rev : "");
            if (r->label != NULL && (p.label = strdup(r->label)) == NULL) {
                rc = pg_fail(err, PG_ERR_NOMEM, "history: out of memory");
                break;
            }
        } else if (is_worse(a->metric, v, p.worst)) {
            p.worst = v;
            p.worst_layer = layer;
        }
        p.n++;
        p.sum += v;
    }
    history_rows_free(rows, n);
    if (rc == PG_OK && p.id >= 0 && !flush_point(a, &p, arr, out))
        rc = pg_fail(err, PG_ERR_NOMEM, "history: out of memory");
    free(p.label);
    if (rc == PG_OK && a->json) {
        char *text = cJSON_Print(arr);
        if (text == NULL) rc = pg_fail(err, PG_ERR_NOMEM, "history: out of memory");
        else fprintf(out, "%s\n", text);
        free(text);
    } else if (rc == PG_OK && runs == 0) {
        char v[HISTORY_CELL_MAX];
        term_fit(v, sizeof v, a->variant, 0, 0);
        fprintf(out, "no complete run has %s %s rows matching the filters\n", v,
                pg_metric_name(a->metric));
    }
    cJSON_Delete(arr);
    return rc;
}

/* cli_store_job: history to stdout. */
static pg_status history_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    (void)db_path;
    return history(store, ctx, stdout, err);
}

/* `precgate history`: the cli_commands row runs it. */
const cli_store_command cmd_history_store = {CLI_STORE_EXISTING_HINT, sizeof(history_args),
                                             history_parse, history_job};
