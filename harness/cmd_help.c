/* cmd_help.c: `precgate help [COMMAND]`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

const char cmd_help_usage[] =
    "usage: precgate help [COMMAND]\n\n"
    "Without COMMAND, lists the commands; with one, prints its usage.\n";

int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        cli_print_overview(stdout);
        return 0;
    }
    if (argc > 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(cmd_help_usage, argc > 2 ? stderr : stdout);
        return argc > 2 ? pg_status_exit_code(PG_ERR_USAGE) : 0;
    }
    const cli_command *c = cli_find(argv[1]);
    if (c == NULL) {
        pg_err err = {0};
        pg_fail(&err, PG_ERR_USAGE, "help: unknown command '%s' (try 'precgate help')", argv[1]);
        return cli_report(&err);
    }
    fputs(c->usage, stdout);
    return 0;
}
