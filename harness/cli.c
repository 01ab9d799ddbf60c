/* cli.c: the subcommand table and shared option helpers (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../db/store.h"
#include "interrupt.h"

extern const char cmd_run_usage[];
extern const char cmd_synth_usage[];
extern const char cmd_eval_usage[];
extern const char cmd_convert_aime_usage[];
extern const char cmd_runs_usage[];
extern const char cmd_history_usage[];
extern const char cmd_diff_usage[];
extern const char cmd_report_usage[];
extern const char cmd_gate_usage[];
extern const char cmd_advise_usage[];
extern const char cmd_baseline_usage[];
extern const char cmd_help_usage[];

const cli_command cli_commands[] = {
    {"run", "sweep a capture through every precision mode into SQLite", cmd_run_usage, cmd_run},
    {"synth", "write a synthetic capture shaped like a real model's", cmd_synth_usage, cmd_synth},
    {"eval", "end-task accuracy per precision mode (live servers or recorded)", cmd_eval_usage,
     cmd_eval},
    {"convert-aime", "convert public AIME 2024/2025 JSONL into eval traces",
     cmd_convert_aime_usage, cmd_convert_aime},
    {"runs", "list the runs in the database, newest last", cmd_runs_usage, cmd_runs},
    {"history", "one layer metric over the complete runs, newest last", cmd_history_usage,
     cmd_history},
    {"diff", "per-layer and end-task deltas between two runs or two modes", cmd_diff_usage,
     cmd_diff},
    {"report", "one run's report: self-contained HTML (charts) or Markdown", cmd_report_usage,
     cmd_report},
    {"gate", "compare a run with its baseline: exit 0 pass, 1 regression, 2 error",
     cmd_gate_usage, cmd_gate},
    {"advise", "which layers keep a bf16 KV cache within a budget, and the vLLM flag",
     cmd_advise_usage, cmd_advise},
    {"baseline", "name a complete run as a baseline for gate, or list the names",
     cmd_baseline_usage, cmd_baseline},
    {"help", "show the commands, or one command's usage", cmd_help_usage, cmd_help},
    {NULL, NULL, NULL, NULL},
};

const cli_command *cli_find(const char *name)
{
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

void cli_print_overview(FILE *out)
{
    fprintf(out,
            "precgate %s: accuracy-regression harness for low-precision LLM attention\n\n"
            "usage: precgate COMMAND [OPTIONS]\n"
            "       precgate --version | --help | help COMMAND\n\ncommands:\n",
            PRECGATE_VERSION);
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        fprintf(out, "  %-13s %s\n", c->name, c->summary);
    /* The topics of cmd_help.c's table. */
    fprintf(out, "\ntopics (precgate help TOPIC):\n"
                 "  %-13s %s\n", "profiles",
            "the kernel profiles run --variants takes, with their rules and sources");
    fprintf(out, "\nexit status: 0 success, 1 failure, 2 usage error\n");
}

int cli_exit_code(pg_status code)
{
    if (code == PG_OK) return 0;
    if (code == PG_ERR_USAGE) return 2;
    if (code == PG_ERR_INTERRUPTED) {
        const int sig = interrupt_signal();
        return interrupt_exit_code(sig != 0 ? sig : SIGINT);
    }
    return 1;
}

int cli_report(const pg_err *err)
{
    fprintf(stderr, "precgate: error: %s\n",
            err->msg[0] != '\0' ? err->msg : pg_status_str(err->code));
    return cli_exit_code(err->code);
}

pg_status cli_parse_int(const char *opt, const char *value, long min, long max, long *out,
                        pg_err *err)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0')
        return pg_fail(err, PG_ERR_USAGE, "%s: '%s' is not an integer", opt, value);
    if (v < min || v > max)
        return pg_fail(err, PG_ERR_USAGE, "%s: %ld is outside [%ld, %ld]", opt, v, min, max);
    *out = v;
    return PG_OK;
}

pg_status cli_parse_u64(const char *opt, const char *value, unsigned long long *out,
                        pg_err *err)
{
    char *end = NULL;
    errno = 0;
    if (value[0] == '-')
        return pg_fail(err, PG_ERR_USAGE, "%s: '%s' must not be negative", opt, value);
    unsigned long long v = strtoull(value, &end, 0);
    if (errno != 0 || end == value || *end != '\0')
        return pg_fail(err, PG_ERR_USAGE, "%s: '%s' is not an unsigned integer", opt, value);
    *out = v;
    return PG_OK;
}

pg_status cli_getopt_fail(const char *cmd, int c, const char *arg, pg_err *err)
{
    if (c == ':') return pg_fail(err, PG_ERR_USAGE, "%s: %s requires a value", cmd, arg);
    return pg_fail(err, PG_ERR_USAGE, "%s: unknown option '%s' (see precgate %s --help)", cmd, arg,
                   cmd);
}

const char *cli_db_path(const char *db_option)
{
    if (db_option != NULL) return db_option;
    const char *env = getenv(STORE_PATH_ENV);
    if (env != NULL && env[0] != '\0') return env;
    return STORE_DEFAULT_PATH;
}

pg_status cli_open_existing_store(const char *cmd, const char *db_path, pg_store **out,
                                  pg_err *err)
{
    *out = NULL;
    if (access(db_path, F_OK) != 0)
        return pg_fail(err, PG_ERR_IO, "%s: database %s: %s", cmd, db_path, strerror(errno));
    return store_open(db_path, out, err);
}
