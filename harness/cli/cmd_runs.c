/* cmd_runs.c: `precgate runs`: list the runs in the database, newest last. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/diff.h"
#include "reports/json_out.h"
#include "reports/term.h"
#include "db/run_list.h"
#include "db/store.h"
#include "harness/cli/cli.h"

/* Runs listed unless --limit says otherwise (0 lists all). */
#define RUNS_DEFAULT_LIMIT 50
/* Largest --limit accepted. */
#define RUNS_MAX_LIMIT 1000000000L
/* Code points of a failed run's error shown (--json keeps it whole). */
#define RUNS_ERROR_WIDTH 100
/* RUNS_ERROR_WIDTH spelled into the usage text. */
#define RUNS_STR_(x) #x
#define RUNS_STR(x) RUNS_STR_(x)
/* Code points of a label shown. */
#define RUNS_LABEL_WIDTH 32
/* Size of one formatted cell (a fitted field may take 4 bytes per code point). */
#define RUNS_CELL_MAX 512
/* Characters of an ISO 8601 time shown: "YYYY-MM-DDTHH:MM:SS". */
#define RUNS_TIME_CHARS 19
/* Seconds per minute and per hour, for durations. */
#define RUNS_MINUTE 60.0
#define RUNS_HOUR 3600.0
/* Durations below this many seconds keep two decimals. */
#define RUNS_SHORT_S 10.0
/* Column widths. */
#define RUNS_ID_WIDTH 5
#define RUNS_KIND_WIDTH 6
#define RUNS_STATUS_WIDTH 11  /* "interrupted" */
#define RUNS_TIME_WIDTH 19
#define RUNS_DUR_WIDTH 9
#define RUNS_GIT_WIDTH 12

const char cmd_runs_usage[] =
    "usage: precgate runs [--kind sweep|eval|diverge] [--label TEXT] [--limit N] [--db PATH]\n"
    "                     [--json]\n\n"
    "Lists the runs in the database, oldest first and newest last (the newest N with\n"
    "--limit): id, kind, status, start time (UTC), duration, git revision and label, and\n"
    "for a failed or interrupted run the first " RUNS_STR(RUNS_ERROR_WIDTH) " characters of its error\n"
    "on the next line. A run still marked running whose process is gone (this host, no\n"
    "such pid: killed -9, crashed) shows as interrupted; one from another host shows as\n"
    "running, with its host, pid and last heartbeat on the next line.\n\n"
    "  --kind KIND    only sweep, eval or diverge runs\n"
    "  --label TEXT   only runs with exactly this label\n"
    "  --limit N      the N newest runs (default " RUNS_STR(RUNS_DEFAULT_LIMIT)
    "; 0 lists every run)\n"
    "  --db PATH      database (default $PRECGATE_DB, else ./precgate.db); never created\n"
    "  --json         a JSON array of objects, oldest first, with the whole error, host,\n"
    "                 device, duration_s (null while a run is running), pid, heartbeat_at,\n"
    "                 stored_status and process (alive, gone, unknown; null when finished)\n\n"
    "exit status: 0 success (also when no run matches); 1 failure; 2 usage error.\n";

/* Kinds a run may have (runs.kind). */
static const char *const runs_kinds[] = {"sweep", "eval", "diverge", NULL};

/* Parsed command line. */
typedef struct runs_args {
    const char *kind, *label;
    long limit;
    int json;
} runs_args;

/* Parses argv into the runs_args args; PG_ERR_USAGE on anything unknown or out of range. */
static pg_status runs_parse(int argc, char **argv, void *args, const char **db_option,
                            pg_err *err)
{
    runs_args *a = args;
    *a = (runs_args){.limit = RUNS_DEFAULT_LIMIT};
    const cli_option opts[] = {
        {"kind", CLI_TEXT, .to = &a->kind},
        {"label", CLI_TEXT, .to = &a->label},
        {"limit", CLI_LONG, .to = &a->limit, .min = 0, .max = RUNS_MAX_LIMIT},
        {"db", CLI_TEXT, .to = db_option},
        {"json", CLI_FLAG, .to = &a->json},
        {NULL},
    };
    if (cli_parse_options("runs", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (a->kind != NULL) {
        const char *const *k = runs_kinds;
        while (*k != NULL && strcmp(*k, a->kind) != 0) k++;
        if (*k == NULL)
            return pg_fail(err, PG_ERR_USAGE, "runs: --kind '%s' is not sweep, eval or diverge",
                           a->kind);
    }
    return PG_OK;
}

/* A duration for the table: "0.04s", "12.3s", "4m05s", "2h03m"; "-" when unknown. */
static void fmt_duration(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0) snprintf(buf, len, "-");
    else if (s < RUNS_SHORT_S) snprintf(buf, len, "%.2fs", s);
    else if (s < RUNS_MINUTE) snprintf(buf, len, "%.1fs", s);
    else if (s < RUNS_HOUR)
        snprintf(buf, len, "%dm%02ds", (int)(s / RUNS_MINUTE), (int)fmod(s, RUNS_MINUTE));
    else
        snprintf(buf, len, "%dh%02dm", (int)(s / RUNS_HOUR),
                 (int)fmod(s / RUNS_MINUTE, RUNS_MINUTE));
}

/* Adds t to o under key as a string, or null for NULL; 0 when out of memory. */
static int json_text(cJSON *o, const char *key, const char *t)
{
    return (t != NULL ? cJSON_AddStringToObject(o, key, t) : cJSON_AddNullToObject(o, key)) != NULL;
}

/* The row's process, probed now (store_probe_process: the one place that decides). */
static store_process row_process(const run_list_row *r)
{
    return store_probe_process(r->run.status, r->run.host, r->pid);
}

/* The status to show: 'interrupted' for a running run whose process is gone. */
static const char *row_status(const run_list_row *r)
{
    return store_effective_status(r->run.status, row_process(r));
}

/* A process's state as the JSON "process" field; NULL for a finished run. */
static const char *process_name(store_process p)
{
    switch (p) {
    case STORE_PROCESS_ALIVE: return "alive";
    case STORE_PROCESS_GONE: return "gone";
    case STORE_PROCESS_UNKNOWN: return "unknown";
    case STORE_PROCESS_FINISHED: break;
    }
    return NULL;
}

/* Prints one row of the table. */
static void print_row(FILE *out, const run_list_row *r)
{
    char when[RUNS_CELL_MAX], dur[RUNS_CELL_MAX], git[RUNS_CELL_MAX], label[RUNS_CELL_MAX],
        kind[RUNS_CELL_MAX], status[RUNS_CELL_MAX];
    const char *started = r->run.started_at;
    char raw[RUNS_CELL_MAX];
    snprintf(raw, sizeof raw, "%.*s", RUNS_TIME_CHARS, started != NULL ? started : "-");
    term_fit(when, sizeof when, raw, 0, 0); /* stored text: escaped */
    char *t = strchr(when, 'T');
    if (t != NULL) *t = ' ';
    fmt_duration(dur, sizeof dur, r->duration_s);
    term_fit(kind, sizeof kind, r->run.kind, RUNS_KIND_WIDTH, 0);
    term_fit(status, sizeof status, row_status(r), RUNS_STATUS_WIDTH, 0);
    term_fit(git, sizeof git, r->run.git_rev, RUNS_GIT_WIDTH, 0);
    term_fit(label, sizeof label, r->run.label, RUNS_LABEL_WIDTH, 0);
    fprintf(out, "%*lld  ", RUNS_ID_WIDTH, (long long)r->run.id);
    term_cell(out, NULL, -RUNS_KIND_WIDTH, kind);
    fputs("  ", out);
    term_cell(out, NULL, -RUNS_STATUS_WIDTH, status);
    fputs("  ", out);
    term_cell(out, NULL, -RUNS_TIME_WIDTH, when);
    fputs("  ", out);
    term_cell(out, NULL, RUNS_DUR_WIDTH, dur);
    fputs("  ", out);
    term_cell(out, NULL, -RUNS_GIT_WIDTH, git);
    fprintf(out, "  %s\n", label);
    const char *error = r->run.error;
    if (error != NULL && error[0] != '\0') {
        char e[RUNS_CELL_MAX * 2];
        term_fit(e, sizeof e, error, RUNS_ERROR_WIDTH, 0);
        fprintf(out, "%*s  error: %s\n", RUNS_ID_WIDTH, "", e);
    }
    const store_process p = row_process(r);
    if (p == STORE_PROCESS_GONE || p == STORE_PROCESS_UNKNOWN) {
        const char *host = r->run.host, *beat = r->heartbeat_at;
        char h[RUNS_CELL_MAX], b[RUNS_CELL_MAX];
        term_fit(h, sizeof h, host != NULL ? host : "unknown", RUNS_LABEL_WIDTH, 0);
        term_fit(b, sizeof b, beat != NULL ? beat : "never", RUNS_LABEL_WIDTH, 0);
        fprintf(out, "%*s  %s (host %s, pid %lld, last heartbeat %s)\n", RUNS_ID_WIDTH, "",
                p == STORE_PROCESS_GONE ? "process gone; --resume continues it"
                                        : "running elsewhere or unprobeable; --resume needs --force",
                h, (long long)r->pid, b);
    }
}

/* The JSON object of one row; NULL when out of memory. */
static cJSON *row_json(const run_list_row *r)
{
    cJSON *o = cJSON_CreateObject();
    const double d = r->duration_s;
    const int ok =
        o != NULL && cJSON_AddNumberToObject(o, "id", (double)r->run.id) != NULL &&
        json_text(o, "kind", r->run.kind) && json_text(o, "label", r->run.label) &&
        cJSON_AddStringToObject(o, "status", row_status(r)) != NULL &&
        json_text(o, "stored_status", r->run.status) &&
        (process_name(row_process(r)) != NULL
             ? cJSON_AddStringToObject(o, "process", process_name(row_process(r))) != NULL
             : cJSON_AddNullToObject(o, "process") != NULL) &&
        (!r->has_pid ? cJSON_AddNullToObject(o, "pid") != NULL
                     : cJSON_AddNumberToObject(o, "pid", (double)r->pid) != NULL) &&
        json_text(o, "heartbeat_at", r->heartbeat_at) &&
        json_text(o, "started_at", r->run.started_at) &&
        json_text(o, "finished_at", r->run.finished_at) &&
        json_text(o, "git_rev", r->run.git_rev) && json_text(o, "host", r->run.host) &&
        json_text(o, "device", r->run.device) && json_text(o, "error", r->run.error) &&
        (isnan(d) ? cJSON_AddNullToObject(o, "duration_s") != NULL
                  : report_json_number(o, "duration_s", d));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Lists the matching runs to out, as a table or JSON. */
static pg_status list_runs(pg_store *s, const runs_args *a, FILE *out, pg_err *err)
{
    const run_filter f = {.kind = a->kind, .label = a->label};
    int64_t total = 0;
    pg_status rc = run_list_count(s, &f, &total, err);
    if (rc != PG_OK) return rc;
    run_list_row *rows = NULL;
    size_t n = 0;
    rc = run_list_read(s, &f, a->limit, &rows, &n, err);
    cJSON *arr = rc == PG_OK && a->json ? cJSON_CreateArray() : NULL;
    if (rc == PG_OK && a->json && arr == NULL)
        rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
    if (rc == PG_OK && !a->json && total > 0) {
        fprintf(out, "%*s  ", RUNS_ID_WIDTH, "run");
        term_cell(out, NULL, -RUNS_KIND_WIDTH, "kind");
        fputs("  ", out);
        term_cell(out, NULL, -RUNS_STATUS_WIDTH, "status");
        fputs("  ", out);
        term_cell(out, NULL, -RUNS_TIME_WIDTH, "started (UTC)");
        fputs("  ", out);
        term_cell(out, NULL, RUNS_DUR_WIDTH, "duration");
        fputs("  ", out);
        term_cell(out, NULL, -RUNS_GIT_WIDTH, "git rev");
        fputs("  label\n", out);
    }
    for (size_t i = 0; rc == PG_OK && i < n; i++) {
        if (!a->json) {
            print_row(out, &rows[i]);
            continue;
        }
        cJSON *o = row_json(&rows[i]);
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
        }
    }
    run_list_rows_free(rows, n);
    const long long shown = (long long)n;
    if (rc == PG_OK && a->json) {
        char *text = cJSON_Print(arr);
        if (text == NULL) rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
        else fprintf(out, "%s\n", text);
        free(text);
    } else if (rc == PG_OK && total == 0) {
        fprintf(out, "no runs%s\n", a->kind != NULL || a->label != NULL ? " match" : "");
    } else if (rc == PG_OK && shown < total) {
        fprintf(out, "(the %lld newest of %lld runs; --limit 0 lists all)\n", shown,
                (long long)total);
    }
    cJSON_Delete(arr);
    return rc;
}

/* cli_store_job: list_runs to stdout. */
static pg_status runs_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    (void)db_path;
    return list_runs(store, ctx, stdout, err);
}

/* `precgate runs`: the cli_commands row runs it. */
const cli_store_command cmd_runs_store = {CLI_STORE_EXISTING_HINT, sizeof(runs_args),
                                          runs_parse, runs_job};
