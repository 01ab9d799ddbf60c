/* cmd_report.c: `precgate report`: one run's report as self-contained HTML or Markdown. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../db/store.h"
#include "../reports/atomic_file.h"
#include "../reports/report_data.h"
#include "../reports/report_html.h"
#include "../reports/report_md.h"
#include "cli.h"

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
    "intervals (eval runs), and the trend over earlier runs of the same kind and label.\n\n"
    "  --run N              the run to report (required)\n"
    "  -o, --output FILE    where to write (required); written to a temporary file\n"
    "                       beside FILE, then renamed over it\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --trend N            the trend's runs: the last N complete runs of the same kind\n"
    "                       and label, up to this one (default 10, at most 1000)\n\n"
    "exit status: 0 on success; 1 on failure; 2 on a usage error or an unknown run.\n";

/* A report format's writer. */
typedef pg_status (*report_writer)(const report_data *d, FILE *out, pg_err *err);

/* Parsed command line. */
typedef struct report_args {
    long run, trend;
    const char *output, *db;
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

/* Parses argv into a; PG_ERR_USAGE on anything unknown, missing or malformed. */
static pg_status report_parse(int argc, char **argv, report_args *a, pg_err *err)
{
    enum { O_RUN = 256, O_DB, O_TREND };
    static const struct option opts[] = {
        {"run", required_argument, NULL, O_RUN},
        {"output", required_argument, NULL, 'o'},
        {"db", required_argument, NULL, O_DB},
        {"trend", required_argument, NULL, O_TREND},
        {NULL, 0, NULL, 0},
    };
    *a = (report_args){.run = -1, .trend = REPORT_TREND_DEFAULT};
    optind = 1;
    opterr = 0;
    int c, have_run = 0;
    pg_status st = PG_OK;
    while (st == PG_OK && (c = getopt_long(argc, argv, ":o:", opts, NULL)) != -1) {
        switch (c) {
        case O_RUN:
            st = cli_parse_int("--run", optarg, 1, LONG_MAX, &a->run, err);
            have_run = 1;
            break;
        case 'o': a->output = optarg; break;
        case O_DB: a->db = optarg; break;
        case O_TREND: st = cli_parse_int("--trend", optarg, 1, REPORT_TREND_MAX, &a->trend, err); break;
        case ':':
        default: return cli_getopt_fail("report", c, argv[optind - 1], err);
        }
    }
    if (st != PG_OK) return st;
    if (optind < argc)
        return pg_fail(err, PG_ERR_USAGE, "report: unexpected argument '%s'", argv[optind]);
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

/* `precgate report`: parses argv, loads the run from the database (which must
 * exist: a report never creates one) and writes the chosen format atomically;
 * returns the exit status (cli.h). */
int cmd_report(int argc, char **argv)
{
    pg_err err = {0};
    report_args a;
    if (report_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    const char *db_path = cli_db_path(a.db);
    pg_store *store = NULL;
    if (cli_open_existing_store("report", db_path, &store, &err) != PG_OK) return cli_report(&err);
    report_data d;
    pg_status st = report_data_load(store_handle(store), db_path, (int64_t)a.run, (int)a.trend, &d,
                                    &err);
    report_job job = {a.write, &d};
    if (st == PG_OK) st = atomic_file_write(a.output, REPORT_FILE_MODE, write_report, &job, &err);
    if (st == PG_OK)
        printf("report: wrote %s (%s, run %ld from %s)\n", a.output, a.format, a.run, db_path);
    report_data_free(&d);
    store_close(store);
    return st == PG_OK ? 0 : cli_report(&err);
}
