/*
 * cli.h: the command table and the helpers every subcommand shares.
 *
 * Each subcommand is a row {name, summary, usage, handler}; main() looks the
 * name up, `precgate help NAME` and `precgate NAME --help` print its usage.
 * Handlers return a process exit status (cli_exit_code).
 */
#ifndef PG_CLI_H
#define PG_CLI_H

#include <stdio.h>

#include "base/status.h"

/* One subcommand. handler gets argv[0] = the command name. */
typedef struct cli_command {
    const char *name;
    const char *summary;                 /* one line for `precgate help` */
    const char *usage;                   /* full text for `help NAME` / `--help` */
    int (*handler)(int argc, char **argv);
} cli_command;

/* The table, terminated by a row with name NULL. */
extern const cli_command cli_commands[];

/* The row for name, or NULL. */
const cli_command *cli_find(const char *name);

/* Prints the program usage and the command list to out. */
void cli_print_overview(FILE *out);

/* Process exit status for a code: 0 for PG_OK, 2 for PG_ERR_USAGE, 128 + the
 * signal caught for PG_ERR_INTERRUPTED (interrupt_exit_code: 130 for SIGINT,
 * 143 for SIGTERM; 130 when none was caught), 1 otherwise. */
int cli_exit_code(pg_status code);

/* Prints `precgate: error: <detail>` to stderr and returns the exit status
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

/* The database path: the --db value if given, else $PRECGATE_DB, else the default. */
const char *cli_db_path(const char *db_option);

struct pg_store;
/* Opens the database at db_path for a command that only reads (cmd names it
 * in messages): PG_ERR_IO "CMD: database PATH: ..." when no file is there (a
 * reader never creates an empty database), else as store_open. */
pg_status cli_open_existing_store(const char *cmd, const char *db_path, struct pg_store **out,
                                  pg_err *err);

/* Handlers of the subcommands (each in its own cmd_*.c). */
int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_convert_aime(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_history(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_gate(int argc, char **argv);
int cmd_advise(int argc, char **argv);
int cmd_baseline(int argc, char **argv);
int cmd_help(int argc, char **argv);

#endif /* PG_CLI_H */
