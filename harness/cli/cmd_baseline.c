/* cmd_baseline.c: `precgate baseline set|list`: named baselines for the regression gate. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/gate_store.h"
#include "db/store.h"
#include "harness/cli/cli.h"
#include "reports/term.h"

/* The name `baseline set` gives a run that has no label. */
#define BASELINE_DEFAULT_NAME "default"

const char cmd_baseline_usage[] =
    "usage: precgate baseline set RUN [--name NAME] [--db PATH]\n"
    "       precgate baseline list [--db PATH]\n\n"
    "Names a complete run as a baseline that `precgate gate --baseline NAME` compares\n"
    "with (setting a name again moves it to the new run), or lists the names.\n\n"
    "  --name NAME      the baseline's name (default: the run's label, else \"default\")\n"
    "  --db PATH        database (default $PRECGATE_DB, else ./precgate.db)\n\n"
    "exit status: 0 success; 1 failure; 2 usage error (also: the run is not complete).\n";

typedef struct baseline_args {
    const char *action, *name;
    long run;
} baseline_args;

/* Parses argv (argv[0] = "baseline") into the baseline_args args; PG_ERR_USAGE
 * on anything unknown or missing. */
static pg_status baseline_parse(int argc, char **argv, void *args, const char **db_option,
                                pg_err *err)
{
    baseline_args *a = args;
    memset(a, 0, sizeof *a);
    a->run = -1;
    if (argc < 2)
        return pg_fail(err, PG_ERR_USAGE, "baseline: say set or list (see precgate baseline --help)");
    a->action = argv[1];
    if (strcmp(a->action, "set") != 0 && strcmp(a->action, "list") != 0)
        return pg_fail(err, PG_ERR_USAGE, "baseline: unknown action '%s' (set or list)", a->action);
    /* The options of the action's arguments: argv[1] plays the program name. */
    char **av = argv + 1;
    const int ac = argc - 1;
    const cli_option opts[] = {
        {"name", CLI_TEXT, .to = &a->name},
        {"db", CLI_TEXT, .to = db_option},
        {NULL},
    };
    int first = 0;
    if (cli_parse_options("baseline", ac, av, opts, &first, err) != PG_OK) return err->code;
    if (strcmp(a->action, "list") == 0) {
        if (first < ac)
            return pg_fail(err, PG_ERR_USAGE, "baseline list: unexpected argument '%s'", av[first]);
        if (a->name != NULL)
            return pg_fail(err, PG_ERR_USAGE, "baseline list: --name is for baseline set");
        return PG_OK;
    }
    if (first >= ac) return pg_fail(err, PG_ERR_USAGE, "baseline set: RUN is required");
    if (first + 1 < ac)
        return pg_fail(err, PG_ERR_USAGE, "baseline set: unexpected argument '%s'", av[first + 1]);
    if (a->name != NULL && a->name[0] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "baseline set: --name is empty");
    return cli_parse_int("RUN", av[first], 1, LONG_MAX, &a->run, err);
}

/* `baseline set`: names run a.run. */
static pg_status do_set(pg_store *s, const baseline_args *a, pg_err *err)
{
    gate_run r;
    pg_status st = gate_store_run(s, a->run, &r, err);
    if (st != PG_OK) return st;
    const char *name = a->name != NULL ? a->name
                       : r.label != NULL && r.label[0] != '\0' ? r.label : BASELINE_DEFAULT_NAME;
    st = gate_store_baseline_set(s, name, a->run, err);
    if (st == PG_OK)
        term_printf(stdout, "baseline '%s' -> run %ld (%s%s%s)\n", name, a->run, r.kind,
               r.label != NULL ? ", label " : "", r.label != NULL ? r.label : "");
    gate_run_free(&r);
    return st;
}

/* `baseline list`: one line per name. */
static pg_status do_list(pg_store *s, pg_err *err)
{
    gate_baseline *b = NULL;
    size_t n = 0;
    pg_status st = gate_store_baseline_list(s, &b, &n, err);
    if (st == PG_OK && n == 0) term_printf(stdout, "no baselines (precgate baseline set RUN names one)\n");
    if (st == PG_OK && n > 0)
        term_printf(stdout, "%-24s %8s  %-8s %-24s %s\n", "name", "run", "kind", "set at", "label");
    for (size_t i = 0; st == PG_OK && i < n; i++)
        term_printf(stdout, "%-24s %8" PRId64 "  %-8s %-24s %s\n", b[i].name, b[i].run_id, b[i].kind,
               b[i].set_at, b[i].label != NULL ? b[i].label : "-");
    gate_baselines_free(b, n);
    return st;
}

/* cli_store_job: the action of the baseline_args ctx. */
static pg_status baseline_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    (void)db_path;
    const baseline_args *a = ctx;
    return strcmp(a->action, "set") == 0 ? do_set(store, a, err) : do_list(store, err);
}

/* `precgate baseline`: the cli_commands row runs it. */
const cli_store_command cmd_baseline_store = {CLI_STORE_CREATE, sizeof(baseline_args),
                                              baseline_parse, baseline_job};
