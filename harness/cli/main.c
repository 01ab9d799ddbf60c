/* main.c: precgate's entry point: finds the subcommand and runs it. */
#include <stdio.h>
#include <string.h>

#include "harness/cli/cli.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_print_overview(stderr);
        return cli_exit_code(PG_ERR_USAGE);
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("precgate %s\n", PRECGATE_VERSION);
        return 0;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        cli_print_overview(stdout);
        return 0;
    }
    const cli_command *c = cli_find(name);
    if (c == NULL) {
        pg_err err = {0};
        pg_fail(&err, PG_ERR_USAGE, "unknown command '%s' (try 'precgate help')", name);
        return cli_report(&err);
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(c->usage, stdout);
            return 0;
        }
    }
    return cli_run(c, argc - 1, argv + 1);
}
