/* cmd_runs.c: `precgate runs`: list the runs in the database, newest last. */
#include <cjson/cJSON.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../reports/diff.h"
#include "../reports/term.h"
#include "../db/store.h"
#include "cli.h"

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
    "usage: precgate runs [--kind sweep|eval] [--label TEXT] [--limit N] [--db PATH] [--json]\n\n"
    "Lists the runs in the database, oldest first and newest last (the newest N with\n"
    "--limit): id, kind, status, start time (UTC), duration, git revision and label, and\n"
    "for a failed or interrupted run the first " RUNS_STR(RUNS_ERROR_WIDTH) " characters of its error\n"
    "on the next line. A run still marked running whose process is gone (this host, no\n"
    "such pid: killed -9, crashed) shows as interrupted; one from another host shows as\n"
    "running, with its host, pid and last heartbeat on the next line.\n\n"
    "  --kind KIND    only sweep or eval runs\n"
    "  --label TEXT   only runs with exactly this label\n"
    "  --limit N      the N newest runs (default " RUNS_STR(RUNS_DEFAULT_LIMIT)
    "; 0 lists every run)\n"
    "  --db PATH      database (default $PRECGATE_DB, else ./precgate.db); never created\n"
    "  --json         a JSON array of objects, oldest first, with the whole error, host,\n"
    "                 device, duration_s (null while a run is running), pid, heartbeat_at,\n"
    "                 stored_status and process (alive, gone, unknown; null when finished)\n\n"
    "exit status: 0 success (also when no run matches); 1 failure; 2 usage error.\n";

/* Kinds a run may have (runs.kind). */
static const char *const runs_kinds[] = {"sweep", "eval", NULL};

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
            return pg_fail(err, PG_ERR_USAGE, "runs: --kind '%s' is not sweep or eval", a->kind);
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

/* Column i as text, or NULL. */
static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

/* Adds column i of st to o under key as a string or null; 0 when out of memory. */
static int json_col(cJSON *o, const char *key, sqlite3_stmt *st, int i)
{
    const char *t = col_text(st, i);
    return (t != NULL ? cJSON_AddStringToObject(o, key, t) : cJSON_AddNullToObject(o, key)) != NULL;
}

/* Result columns of the listing query. */
enum { C_ID, C_KIND, C_LABEL, C_STATUS, C_STARTED, C_FINISHED, C_GIT, C_HOST, C_DEVICE, C_ERROR,
       C_DURATION, C_PID, C_HEARTBEAT };

/* The row's process, probed now (store_probe_process: the one place that decides). */
static store_process row_process(sqlite3_stmt *st)
{
    return store_probe_process(col_text(st, C_STATUS), col_text(st, C_HOST),
                               sqlite3_column_int64(st, C_PID));
}

/* The status to show: 'interrupted' for a running run whose process is gone. */
static const char *row_status(sqlite3_stmt *st)
{
    return store_effective_status(col_text(st, C_STATUS), row_process(st));
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
static void print_row(FILE *out, sqlite3_stmt *st)
{
    char when[RUNS_CELL_MAX], dur[RUNS_CELL_MAX], git[RUNS_CELL_MAX], label[RUNS_CELL_MAX],
        kind[RUNS_CELL_MAX], status[RUNS_CELL_MAX];
    const char *started = col_text(st, C_STARTED);
    snprintf(when, sizeof when, "%.*s", RUNS_TIME_CHARS, started != NULL ? started : "-");
    char *t = strchr(when, 'T');
    if (t != NULL) *t = ' ';
    const double d = sqlite3_column_type(st, C_DURATION) == SQLITE_NULL
                         ? NAN
                         : sqlite3_column_double(st, C_DURATION);
    fmt_duration(dur, sizeof dur, d);
    term_fit(kind, sizeof kind, col_text(st, C_KIND), RUNS_KIND_WIDTH, 0);
    term_fit(status, sizeof status, row_status(st), RUNS_STATUS_WIDTH, 0);
    term_fit(git, sizeof git, col_text(st, C_GIT), RUNS_GIT_WIDTH, 0);
    term_fit(label, sizeof label, col_text(st, C_LABEL), RUNS_LABEL_WIDTH, 0);
    fprintf(out, "%*lld  ", RUNS_ID_WIDTH, (long long)sqlite3_column_int64(st, C_ID));
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
    const char *error = col_text(st, C_ERROR);
    if (error != NULL && error[0] != '\0') {
        char e[RUNS_CELL_MAX * 2];
        term_fit(e, sizeof e, error, RUNS_ERROR_WIDTH, 0);
        fprintf(out, "%*s  error: %s\n", RUNS_ID_WIDTH, "", e);
    }
    const store_process p = row_process(st);
    if (p == STORE_PROCESS_GONE || p == STORE_PROCESS_UNKNOWN) {
        const char *host = col_text(st, C_HOST), *beat = col_text(st, C_HEARTBEAT);
        char h[RUNS_CELL_MAX];
        term_fit(h, sizeof h, host != NULL ? host : "unknown", RUNS_LABEL_WIDTH, 0);
        fprintf(out, "%*s  %s (host %s, pid %lld, last heartbeat %s)\n", RUNS_ID_WIDTH, "",
                p == STORE_PROCESS_GONE ? "process gone; --resume continues it"
                                        : "running elsewhere or unprobeable; --resume needs --force",
                h, (long long)sqlite3_column_int64(st, C_PID), beat != NULL ? beat : "never");
    }
}

/* The JSON object of one row; NULL when out of memory. */
static cJSON *row_json(sqlite3_stmt *st)
{
    cJSON *o = cJSON_CreateObject();
    const double d = sqlite3_column_type(st, C_DURATION) == SQLITE_NULL
                         ? NAN
                         : sqlite3_column_double(st, C_DURATION);
    const double id = (double)sqlite3_column_int64(st, C_ID);
    const int ok =
        o != NULL && cJSON_AddNumberToObject(o, "id", id) != NULL &&
        json_col(o, "kind", st, C_KIND) && json_col(o, "label", st, C_LABEL) &&
        cJSON_AddStringToObject(o, "status", row_status(st)) != NULL &&
        json_col(o, "stored_status", st, C_STATUS) &&
        (process_name(row_process(st)) != NULL
             ? cJSON_AddStringToObject(o, "process", process_name(row_process(st))) != NULL
             : cJSON_AddNullToObject(o, "process") != NULL) &&
        (sqlite3_column_type(st, C_PID) == SQLITE_NULL
             ? cJSON_AddNullToObject(o, "pid") != NULL
             : cJSON_AddNumberToObject(o, "pid", (double)sqlite3_column_int64(st, C_PID)) != NULL) &&
        json_col(o, "heartbeat_at", st, C_HEARTBEAT) && json_col(o, "started_at", st, C_STARTED) &&
        json_col(o, "finished_at", st, C_FINISHED) && json_col(o, "git_rev", st, C_GIT) &&
        json_col(o, "host", st, C_HOST) && json_col(o, "device", st, C_DEVICE) &&
        json_col(o, "error", st, C_ERROR) &&
        (isnan(d) ? cJSON_AddNullToObject(o, "duration_s") != NULL
                  : report_json_number(o, "duration_s", d));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Counts the runs the filters match into *total. */
static pg_status count_runs(pg_store *s, const runs_args *a, long long *total, pg_err *err)
{
    sqlite3 *db = store_handle(s);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM runs WHERE (?1 IS NULL OR kind = ?1) "
                           "AND (?2 IS NULL OR label = ?2)",
                           -1, &st, NULL) != SQLITE_OK)
        return pg_fail(err, PG_ERR_DB, "runs: cannot prepare query: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, a->kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->label, -1, SQLITE_STATIC);
    pg_status rc = PG_OK;
    if (sqlite3_step(st) == SQLITE_ROW) *total = sqlite3_column_int64(st, 0);
    else rc = pg_fail(err, PG_ERR_DB, "runs: counting runs: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

/* Lists the matching runs to out, as a table or JSON. */
static pg_status list_runs(pg_store *s, const runs_args *a, FILE *out, pg_err *err)
{
    long long total = 0;
    pg_status rc = count_runs(s, a, &total, err);
    if (rc != PG_OK) return rc;
    sqlite3 *db = store_handle(s);
    sqlite3_stmt *st = NULL;
    /* The newest N, then put back in order: oldest first, newest last. */
    static const char sql[] =
        "SELECT * FROM (SELECT id, kind, label, status, started_at, finished_at, git_rev, host, "
        "device, error, (julianday(finished_at) - julianday(started_at)) * 86400.0, pid, "
        "heartbeat_at "
        "FROM runs WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR label = ?2) "
        "ORDER BY started_at DESC, id DESC LIMIT ?3) ORDER BY started_at, id";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return pg_fail(err, PG_ERR_DB, "runs: cannot prepare query: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, a->kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->label, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, a->limit == 0 ? -1 : a->limit); /* LIMIT -1: no limit */
    cJSON *arr = a->json ? cJSON_CreateArray() : NULL;
    if (a->json && arr == NULL) rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
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
    long long shown = 0;
    int step = SQLITE_DONE;
    while (rc == PG_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        shown++;
        if (!a->json) {
            print_row(out, st);
            continue;
        }
        cJSON *o = row_json(st);
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
        }
    }
    if (rc == PG_OK && step != SQLITE_DONE)
        rc = pg_fail(err, PG_ERR_DB, "runs: reading runs: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (rc == PG_OK && a->json) {
        char *text = cJSON_Print(arr);
        if (text == NULL) rc = pg_fail(err, PG_ERR_NOMEM, "runs: out of memory");
        else fprintf(out, "%s\n", text);
        free(text);
    } else if (rc == PG_OK && total == 0) {
        fprintf(out, "no runs%s\n", a->kind != NULL || a->label != NULL ? " match" : "");
    } else if (rc == PG_OK && shown < total) {
        fprintf(out, "(the %lld newest of %lld runs; --limit 0 lists all)\n", shown, total);
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
