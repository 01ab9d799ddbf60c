/* cli.c: the subcommand table, the option-table parser, the environment and
 * the database runner every subcommand shares (see cli.h). */
#include "harness/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/store.h"
#include "harness/interrupt.h"
#include "kernels/parallel.h"
#include "reports/diff.h"
#include "reports/term.h"

/* Most rows an option table may have. */
#define CLI_OPTIONS_MAX 40
/* getopt_long's code for row i of an option table: CLI_OPTION_CODE0 + i, above every char. */
#define CLI_OPTION_CODE0 256
/* Longest "--NAME" an option's messages spell. */
#define CLI_OPTION_NAME_MAX 64

const cli_command cli_commands[] = {
    {"run", "sweep a capture through every precision mode into SQLite", cmd_run_usage, cmd_run,
     NULL},
    {"synth", "write a synthetic capture shaped like a real model's", cmd_synth_usage,
     cmd_synth, NULL},
    {"eval", "end-task accuracy per precision mode (live servers or recorded)", cmd_eval_usage,
     cmd_eval, NULL},
    {"diverge", "teacher-forced divergence between the servers of precision modes",
     cmd_diverge_usage, cmd_diverge, NULL},
    {"convert-aime", "convert public AIME 2024/2025 JSONL into eval traces",
     cmd_convert_aime_usage, cmd_convert_aime, NULL},
    {"runs", "list the runs in the database, newest last", cmd_runs_usage, NULL,
     &cmd_runs_store},
    {"history", "one layer metric over the complete runs, newest last", cmd_history_usage, NULL,
     &cmd_history_store},
    {"diff", "per-layer and end-task deltas between two runs or two modes", cmd_diff_usage, NULL,
     &cmd_diff_store},
    {"report", "one run's report: self-contained HTML (charts) or Markdown", cmd_report_usage,
     NULL, &cmd_report_store},
    {"gate", "compare a run with its baseline: exit 0 pass, 1 regression, 2 error",
     cmd_gate_usage, cmd_gate, NULL},
    {"advise", "which layers keep a bf16 KV cache within a budget, and the vLLM flag",
     cmd_advise_usage, NULL, &cmd_advise_store},
    {"baseline", "name a complete run as a baseline for gate, or list the names",
     cmd_baseline_usage, NULL, &cmd_baseline_store},
    {"merge", "fold the shard databases of sharded runs and evals into one run per job",
     cmd_merge_usage, NULL, &cmd_merge_store},
    {"slurm", "write Slurm array, merge and resubmit scripts of a sharded sweep or eval",
     cmd_slurm_usage, cmd_slurm, NULL},
    {"help", "show the commands, or one command's usage", cmd_help_usage, cmd_help,
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

pg_status cli_split_endpoint(const char *cmd, char *value, const char **modes, const char **urls,
                             int *n, int max, pg_err *err)
{
    char *eq = strchr(value, '=');
    if (eq == NULL || eq == value || eq[1] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "%s: --endpoint '%s' is not MODE=URL", cmd, value);
    if (*n >= max) return pg_fail(err, PG_ERR_USAGE, "%s: more than %d --endpoint", cmd, max);
    *eq = '\0';
    modes[*n] = value;
    urls[(*n)++] = eq + 1;
    return PG_OK;
}

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
    /* The detail may embed stored text (labels, paths, names): escaped. */
    term_printf(stderr, "precgate: error: %s\n",
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

/* CLI_DOUBLE: a number in [lo, hi] into *out; PG_ERR_USAGE naming cmd and opt. */
static pg_status parse_double(const char *cmd, const char *opt, const char *value, double lo,
                              double hi, double *out, pg_err *err)
{
    char *end = NULL;
    const double x = strtod(value, &end);
    if (end == value || *end != '\0' || !(x >= lo && x <= hi))
        return pg_fail(err, PG_ERR_USAGE, "%s: %s: '%s' is not a number in [%g, %g]", cmd, opt,
                       value, lo, hi);
    *out = x;
    return PG_OK;
}

/* Takes value into row o as its type says (cmd names the command in messages). */
static pg_status take_option(const char *cmd, const cli_option *o, char *value, pg_err *err)
{
    char opt[CLI_OPTION_NAME_MAX];
    snprintf(opt, sizeof opt, "--%s", o->name);
    if (o->given != NULL) *o->given = 1;
    long v = 0;
    pg_status st = PG_OK;
    switch (o->type) {
    case CLI_FLAG: *(int *)o->to = 1; break;
    case CLI_TEXT: *(const char **)o->to = value; break;
    case CLI_LONG: st = cli_parse_int(opt, value, o->min, o->max, o->to, err); break;
    case CLI_INT:
        st = cli_parse_int(opt, value, o->min, o->max, &v, err);
        if (st == PG_OK) *(int *)o->to = (int)v;
        break;
    case CLI_U64: st = cli_parse_u64(opt, value, o->to, err); break;
    case CLI_DOUBLE: st = parse_double(cmd, opt, value, o->lo, o->hi, o->to, err); break;
    case CLI_CALL: st = o->parse(value, o->to, err); break;
    }
    return st;
}

pg_status cli_parse_options_worded(const char *cmd, int argc, char **argv,
                                   const cli_option *opts, int *rest, cli_refusal refused,
                                   pg_err *err)
{
    struct option longs[CLI_OPTIONS_MAX + 1];
    char shorts[2 * CLI_OPTIONS_MAX + 2] = ":";
    size_t n = 0, ns = 1;
    for (; opts[n].name != NULL; n++) {
        if (n == CLI_OPTIONS_MAX)
            return pg_fail(err, PG_ERR_INTERNAL, "%s: more than %d options", cmd, CLI_OPTIONS_MAX);
        const int has_arg = opts[n].type == CLI_FLAG ? no_argument : required_argument;
        longs[n] = (struct option){opts[n].name, has_arg, NULL, CLI_OPTION_CODE0 + (int)n};
        if (opts[n].short_name != '\0') {
            shorts[ns++] = opts[n].short_name;
            if (has_arg == required_argument) shorts[ns++] = ':';
        }
    }
    longs[n] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = '\0';
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
        const cli_option *o = NULL;
        if (c >= CLI_OPTION_CODE0 && c < CLI_OPTION_CODE0 + (int)n)
            o = &opts[c - CLI_OPTION_CODE0];
        for (size_t i = 0; o == NULL && c != ':' && c != '?' && i < n; i++)
            if (opts[i].short_name == c) o = &opts[i];
        if (o == NULL) return refused(cmd, c, argv[optind - 1], err);
        const pg_status st = take_option(cmd, o, optarg, err);
        if (st != PG_OK) return st;
    }
    if (rest != NULL) *rest = optind;
    else if (optind < argc)
        return pg_fail(err, PG_ERR_USAGE, "%s: unexpected argument '%s'", cmd, argv[optind]);
    return PG_OK;
}

const cli_option *cli_option_find(const cli_option *opts, const char *name)
{
    for (const cli_option *o = opts; o->name != NULL; o++)
        if (strcmp(o->name, name) == 0) return o;
    return NULL;
}

pg_status cli_parse_options(const char *cmd, int argc, char **argv, const cli_option *opts,
                            int *rest, pg_err *err)
{
    return cli_parse_options_worded(cmd, argc, argv, opts, rest, cli_getopt_fail, err);
}

/* Every environment variable the command line reads; cli_env is where it
 * reads them. */
typedef enum cli_env_var {
    CLI_ENV_DB,
    CLI_ENV_THREADS,
    CLI_ENV_NO_COLOR,
    CLI_ENV_CUDA_MEM_LIMIT
} cli_env_var;

static const char *const cli_env_names[] = {
    [CLI_ENV_DB] = STORE_PATH_ENV,
    [CLI_ENV_THREADS] = CLI_THREADS_ENV,
    [CLI_ENV_NO_COLOR] = TERM_NO_COLOR_ENV,
    [CLI_ENV_CUDA_MEM_LIMIT] = CLI_CUDA_MEM_LIMIT_ENV,
};

const char *cli_env_value(const char *name)
{
    return name != NULL ? getenv(name) : NULL;
}

/* The value of variable v, NULL when it is unset. */
static const char *cli_env(cli_env_var v)
{
    return cli_env_value(cli_env_names[v]);
}

pg_status cli_cuda_mem_limit(double *bytes, pg_err *err)
{
    *bytes = 0;
    const char *cap = cli_env(CLI_ENV_CUDA_MEM_LIMIT);
    if (cap == NULL || cap[0] == '\0') return PG_OK;
    char *end = NULL;
    const double c = strtod(cap, &end);
    if (end == cap || *end != '\0' || !(c > 0))
        return pg_fail(err, PG_ERR_USAGE, "%s='%s' is not a positive number of bytes",
                       CLI_CUDA_MEM_LIMIT_ENV, cap);
    *bytes = c;
    return PG_OK;
}

const char *cli_db_path(const char *db_option)
{
    if (db_option != NULL) return db_option;
    const char *env = cli_env(CLI_ENV_DB);
    if (env != NULL && env[0] != '\0') return env;
    return STORE_DEFAULT_PATH;
}

int cli_default_threads(void)
{
    const char *env = cli_env(CLI_ENV_THREADS);
    if (env != NULL && env[0] != '\0') {
        char *end = NULL;
        const long n = strtol(env, &end, 10);
        if (*end == '\0' && n >= 1 && n <= PARALLEL_MAX_THREADS) return (int)n;
        static atomic_int warned;
        if (atomic_exchange(&warned, 1) == 0)
            fprintf(stderr, "precgate: %s='%s' is not an integer in [1, %d]; using the online "
                            "CPUs\n", CLI_THREADS_ENV, env, PARALLEL_MAX_THREADS);
    }
    return parallel_default_threads();
}

int cli_use_colour(FILE *out)
{
    if (out == NULL) return 0;
    const int fd = fileno(out);
    return term_colour_wanted(fd >= 0 && isatty(fd), cli_env(CLI_ENV_NO_COLOR));
}

/* Opens the database at db_path for cmd as mode says; other failures as store_open. */
static pg_status store_open_as(const char *cmd, const char *db_path, cli_store_mode mode,
                               pg_store **out, pg_err *err)
{
    *out = NULL;
    switch (mode) {
    case CLI_STORE_CREATE: break;
    case CLI_STORE_EXISTING_CMD:
        if (access(db_path, F_OK) != 0)
            return pg_fail(err, PG_ERR_IO, "%s: database %s: %s", cmd, db_path, strerror(errno));
        break;
    case CLI_STORE_EXISTING_HINT: return store_open_existing(db_path, out, err);
    }
    return store_open_reader(db_path, out, err);
}

/* Says on stderr how store was opened when it is not for writing. */
static void say_read_only(const char *cmd, const char *db_path, const pg_store *store)
{
    const store_access how = store_access_mode(store);
    if (how == STORE_READ_WRITE) return;
    term_printf(stderr, "precgate: %s: note: %s is opened read-only (it or its directory is not "
                        "writable): nothing is stored in it%s\n", cmd, db_path,
                how == STORE_IMMUTABLE ? "; and as immutable (no -shm file could be made): "
                                         "changes another process makes while this one reads "
                                         "are not seen" : "");
}

int cli_with_store(const char *cmd, const char *db_option, cli_store_mode mode, cli_store_job job,
                   void *ctx)
{
    pg_err err = {0};
    const char *db_path = cli_db_path(db_option);
    pg_store *store = NULL;
    pg_status st = store_open_as(cmd, db_path, mode, &store, &err);
    if (st == PG_OK) say_read_only(cmd, db_path, store);
    if (st == PG_OK) st = job(store, db_path, ctx, &err);
    store_close(store);
    return st == PG_OK ? 0 : cli_report(&err);
}

int cli_run(const cli_command *c, int argc, char **argv)
{
    if (c->handler != NULL) return c->handler(argc, argv);
    pg_err err = {0};
    void *args = calloc(1, c->store->args_size);
    if (args == NULL) {
        pg_fail(&err, PG_ERR_NOMEM, "%s: out of memory", c->name);
        return cli_report(&err);
    }
    const char *db_option = NULL;
    const int rc = c->store->parse(argc, argv, args, &db_option, &err) != PG_OK
                       ? cli_report(&err)
                       : cli_with_store(c->name, db_option, c->store->mode, c->store->job, args);
    free(args);
    return rc;
}
