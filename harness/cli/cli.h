/*
 * cli.h: the command table and the helpers every subcommand shares.
 *
 * Each subcommand is a row {name, summary, usage, handler or store command};
 * main() looks the name up and cli_run runs it, `precgate help NAME` and
 * `precgate NAME --help` print its usage. Commands return a process exit
 * status (cli_exit_code). Options are parsed by a table (cli_option), the
 * database is opened, worked on and closed by cli_with_store.
 */
#ifndef PG_CLI_H
#define PG_CLI_H

#include <stdio.h>

#include "base/status.h"

struct cli_store_command;

/* One subcommand: a handler, or a store command that cli_run parses and
 * runs on its database. Either gets argv[0] = the command name. */
typedef struct cli_command {
    const char *name;
    const char *summary;                 /* one line for `precgate help` */
    const char *usage;                   /* full text for `help NAME` / `--help` */
    int (*handler)(int argc, char **argv);        /* NULL for a store command */
    const struct cli_store_command *store;        /* NULL for a handler */
} cli_command;

/* The table, terminated by a row with name NULL. */
extern const cli_command cli_commands[];

/* The row for name, or NULL. */
const cli_command *cli_find(const char *name);

/* Runs command c on argv (argv[0] = its name); returns the exit status. */
int cli_run(const cli_command *c, int argc, char **argv);

/* Prints the program usage and the command list to out. */
void cli_print_overview(FILE *out);

/* Process exit status for a code: 0 for PG_OK, 2 for PG_ERR_USAGE, 128 + the
 * signal caught for PG_ERR_INTERRUPTED (interrupt_exit_code: 130 for SIGINT,
 * 143 for SIGTERM; 130 when none was caught), 1 otherwise. */
int cli_exit_code(pg_status code);

/* Prints `precgate: error: <detail>` to stderr, the detail escaped
 * (term_printf: it may embed stored text), and returns the exit status
 * for err->code (falls back to pg_status_str when the detail is empty). */
int cli_report(const pg_err *err);

/* Parses an integer option value in [min, max]; PG_ERR_USAGE naming opt. */
pg_status cli_parse_int(const char *opt, const char *value, long min, long max,
                        long *out, pg_err *err);

/* Parses a 64-bit unsigned option value; PG_ERR_USAGE naming opt. */
pg_status cli_parse_u64(const char *opt, const char *value, unsigned long long *out,
                        pg_err *err);

/* The usage error of an option getopt_long refused: c == ':' for a missing
 * value, anything else for an unknown option; cmd names the subcommand and
 * arg is the offending argument (argv[optind - 1]). Returns PG_ERR_USAGE. */
pg_status cli_getopt_fail(const char *cmd, int c, const char *arg, pg_err *err);

/* --endpoint MODE=URL of command cmd: splits value in place and appends
 * its mode and URL to modes[*n], urls[*n] (*n below max); PG_ERR_USAGE
 * "CMD: --endpoint 'V' is not MODE=URL", or naming max when full. */
pg_status cli_split_endpoint(const char *cmd, char *value, const char **modes, const char **urls,
                             int *n, int max, pg_err *err);

/* Largest run id `--resume RUN` takes. */
#define CLI_RESUME_MAX (1L << 62)

/* How cli_parse_options takes one option's value into its row's `to`. */
typedef enum cli_option_type {
    CLI_FLAG,    /* no value: *(int *)to = 1 */
    CLI_TEXT,    /* *(const char **)to = the value (argv's own text) */
    CLI_LONG,    /* cli_parse_int("--NAME", value, min, max) into *(long *)to */
    CLI_INT,     /* the same into *(int *)to (max <= INT_MAX) */
    CLI_U64,     /* cli_parse_u64("--NAME", value) into *(unsigned long long *)to */
    CLI_DOUBLE,  /* a number in [lo, hi] into *(double *)to; else PG_ERR_USAGE
                  * "CMD: --NAME: 'VALUE' is not a number in [lo, hi]" */
    CLI_CALL,    /* parse(value, to, err); value is argv's own text */
} cli_option_type;

/* One row of a command's option table (curl's tool and Redis keep theirs
 * so); the table ends with a row whose name is NULL. */
typedef struct cli_option {
    const char *name;      /* the long name, without "--" */
    cli_option_type type;
    void *to;              /* where the value goes; CLI_CALL: parse's to */
    long min, max;         /* CLI_LONG, CLI_INT: the range */
    double lo, hi;         /* CLI_DOUBLE: the range */
    pg_status (*parse)(char *value, void *to, pg_err *err);  /* CLI_CALL; may split value */
    int *given;            /* when not NULL: set to 1 when the option appears */
    char short_name;       /* a one-letter alias ('o': -o FILE), 0 for none */
} cli_option;

/* The row of the table opts for option --name, or NULL. */
const cli_option *cli_option_find(const cli_option *opts, const char *name);

/* The usage error of an option getopt_long refused (cli_getopt_fail's contract). */
typedef pg_status (*cli_refusal)(const char *cmd, int c, const char *arg, pg_err *err);

/* Parses the options of argv[1..argc) (getopt_long, which permutes argv) by
 * the table opts into their rows' `to`, in order, stopping at the first bad
 * value (PG_ERR_USAGE worded as cli_option_type says) or the first option
 * getopt refuses (cli_getopt_fail naming cmd). With rest NULL a non-option
 * argument is PG_ERR_USAGE "CMD: unexpected argument 'ARG'"; else *rest is the
 * index of the first one. */
pg_status cli_parse_options(const char *cmd, int argc, char **argv, const cli_option *opts,
                            int *rest, pg_err *err);

/* cli_parse_options with refused wording the options getopt refuses. */
pg_status cli_parse_options_worded(const char *cmd, int argc, char **argv,
                                   const cli_option *opts, int *rest, cli_refusal refused,
                                   pg_err *err);

/* The environment: the command line reads every variable it knows in one
 * place, cli.c's cli_env table (the library gets the values as parameters
 * and reads no environment). */

/* The value of the environment variable name, NULL when it is unset (or
 * name is NULL): the one door to the environment, for cli_env's table and
 * the variable a user names (eval --api-key-env). */
const char *cli_env_value(const char *name);

/* The variable that caps the device memory a CUDA layer plans with. */
#define CLI_CUDA_MEM_LIMIT_ENV "PRECGATE_CUDA_MEM_LIMIT"

/* $PRECGATE_CUDA_MEM_LIMIT as bytes into *bytes (0 when unset or empty: no
 * cap; for attn_backend_limit_memory); PG_ERR_USAGE "PRECGATE_CUDA_MEM_LIMIT=
 * 'TEXT' is not a positive number of bytes" otherwise. */
pg_status cli_cuda_mem_limit(double *bytes, pg_err *err);

/* The database path: the --db value if given, else $PRECGATE_DB, else the default. */
const char *cli_db_path(const char *db_option);

/* The variable that sets the default thread count. */
#define CLI_THREADS_ENV "PRECGATE_THREADS"

/* Threads to use unless an option says otherwise: $PRECGATE_THREADS when it
 * is an integer in [1, PARALLEL_MAX_THREADS], else parallel_default_threads()
 * (online CPUs); another non-empty value is reported on stderr, once: the
 * variable never changes results, only speed. */
int cli_default_threads(void);

/* Whether to colour out: a terminal, and NO_COLOR unset (term_colour_wanted). */
int cli_use_colour(FILE *out);

struct pg_store;

/* How a command opens its database. */
typedef enum cli_store_mode {
    CLI_STORE_CREATE,         /* a missing file becomes a new database (store_open) */
    CLI_STORE_EXISTING_CMD,   /* a reader never creates one: no file there is PG_ERR_IO
                               * "CMD: database PATH: <strerror>" */
    CLI_STORE_EXISTING_HINT,  /* the same, worded by store_open_existing:
                               * "database 'PATH' does not exist (--db PATH or $PRECGATE_DB)" */
} cli_store_mode;

/* A command's work on its open database; db_path names it in messages. */
typedef pg_status (*cli_store_job)(struct pg_store *store, const char *db_path, void *ctx,
                                   pg_err *err);

/* Opens the database cli_db_path(db_option) for cmd as mode says, through
 * store_open_reader: an existing database that it or its directory does not
 * let this user write is opened read-only, and a note on stderr says so
 * (and what an immutable open misses); a job's write then fails (other
 * failures as store_open_reader). Runs job on it with ctx and closes it; returns 0
 * when both succeeded, else the exit status cli_report gives the first
 * failure (after printing it). */
int cli_with_store(const char *cmd, const char *db_option, cli_store_mode mode, cli_store_job job,
                   void *ctx);

/* A subcommand that parses argv into its arguments, then works on the
 * database they name (runs, history, diff, report, advise, baseline):
 * cli_run parses into args_size zeroed bytes, then runs
 * cli_with_store(NAME, the --db value, mode, job, args). */
typedef struct cli_store_command {
    cli_store_mode mode;
    size_t args_size;
    /* Parses argv into args, the --db value (if given) into *db_option. */
    pg_status (*parse)(int argc, char **argv, void *args, const char **db_option, pg_err *err);
    cli_store_job job;  /* gets args as its ctx */
} cli_store_command;

/* The usage text of each subcommand (each in its own cmd_*.c). */
extern const char cmd_run_usage[];
extern const char cmd_synth_usage[];
extern const char cmd_eval_usage[];
extern const char cmd_diverge_usage[];
extern const char cmd_convert_aime_usage[];
extern const char cmd_runs_usage[];
extern const char cmd_history_usage[];
extern const char cmd_diff_usage[];
extern const char cmd_report_usage[];
extern const char cmd_gate_usage[];
extern const char cmd_advise_usage[];
extern const char cmd_baseline_usage[];
extern const char cmd_help_usage[];
extern const char cmd_merge_usage[];
extern const char cmd_slurm_usage[];

/* Handlers of the subcommands (each in its own cmd_*.c). */
int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_diverge(int argc, char **argv);
int cmd_convert_aime(int argc, char **argv);
int cmd_gate(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_slurm(int argc, char **argv);

/* Checks argv (argv[0] = "run" or "eval", then its options) as `precgate
 * run` or `precgate eval` parses it, without running anything: PG_OK, or
 * the usage error that command would report (for slurm, which passes the
 * options on to every shard). argv is permuted and its strings may be split. */
pg_status cmd_run_check(int argc, char **argv, pg_err *err);
pg_status cmd_eval_check(int argc, char **argv, pg_err *err);

/* run's (eval's) own spelling of option --name, static text, with
 * *takes_value 1 when it takes a value, 0 for a flag; NULL when the command
 * has no such option. From the table the command parses by. */
const char *cmd_run_option(const char *name, int *takes_value);
const char *cmd_eval_option(const char *name, int *takes_value);

/* The store commands (each in its own cmd_*.c). */
extern const cli_store_command cmd_runs_store;
extern const cli_store_command cmd_history_store;
extern const cli_store_command cmd_diff_store;
extern const cli_store_command cmd_report_store;
extern const cli_store_command cmd_advise_store;
extern const cli_store_command cmd_baseline_store;
extern const cli_store_command cmd_merge_store;

#endif /* PG_CLI_H */
