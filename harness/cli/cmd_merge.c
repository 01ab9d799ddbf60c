/* cmd_merge.c: `precgate merge`: fold the shard databases of sharded jobs into one run per job. */
#include <stdio.h>

#include "db/store.h"
#include "harness/cli/cli.h"
#include "harness/merge_lifecycle.h"

const char cmd_merge_usage[] =
    "usage: precgate merge --into DB SHARD.db ...\n\n"
    "Folds the parts of sharded jobs (precgate run/eval/diverge --shard I/N, each written\n"
    "to a database of its own) into one run per job key in DB. The merged run gets a new\n"
    "id in DB; its rows are the parts' rows, and an eval's scores and paired statistics\n"
    "(a diverge run's positions and summaries) are computed again from the merged samples\n"
    "(scores), equal to those of a run that was never sharded. Its runs row: the parts'\n"
    "kind, status complete (an eval with failed samples: incomplete), the earliest start\n"
    "and the latest finish, and the parts' common config_json with \"shard\" replaced by\n"
    "{\"count\": N} (no shard_layers, shard_problems or shard_sequences). Every part\n"
    "merged is recorded in merged_shards.\n\n"
    "Refused, naming what differs, with DB left as it was (exit 2):\n"
    "  - parts of one job whose config differs (a field other than the part's own place,\n"
    "    threads, the traces' path and the servers' URLs), or whose shard count differs;\n"
    "  - a job with missing parts, or a part given twice;\n"
    "  - a part lacking a row its own layers, problems or sequences imply (its config's\n"
    "    layer_rows, plan or shard_sequences; harness/run_complete.h), naming the units\n"
    "    and the resume command;\n"
    "  - a part that did not finish (running, failed or interrupted: resume it); an\n"
    "    eval part that finished with failed samples (incomplete) is taken, and makes the\n"
    "    merged run incomplete;\n"
    "  - a job merged into DB before, unless every part given is the one merged then\n"
    "    (same rows): that merge changes nothing (adding parts to a merged job is refused).\n"
    "A shard database that cannot be read, is damaged or of another schema version is an\n"
    "error (exit 1), also with DB unchanged: the whole merge is one transaction. Damaged\n"
    "includes a value its column cannot hold (a text in a numeric column, a metric or count\n"
    "below 0, a NULL (NaN) where none may be, a name not valid UTF-8, a variant outside the\n"
    "grammar), named by file, run, table, rowid and column, and a part whose config_json is\n"
    "NULL, not a JSON object, or has \"job\" or \"shard\" missing or of the wrong type.\n\n"
    "  --into DB   the database that receives the merged runs (created if missing)\n\n"
    "Shards never write a shared database: SQLite's WAL does not work over a network\n"
    "filesystem. Each writes one on node-local disk; one merge writes the central one.\n\n"
    "exit status: 0 merged (or nothing to do); 1 failure; 2 usage error or a refused set.\n";

/* What merge parses argv into: the lifecycle's request. */
typedef struct merge_args {
    merge_request rq;
} merge_args;

/* Parses argv into the merge_args args and the --into value; PG_ERR_USAGE
 * when --into or every SHARD.db is missing. */
static pg_status merge_parse(int argc, char **argv, void *args, const char **db_option,
                             pg_err *err)
{
    merge_args *a = args;
    const cli_option opts[] = {
        {"into", CLI_TEXT, .to = db_option},
        {NULL},
    };
    int first = 0;
    if (cli_parse_options("merge", argc, argv, opts, &first, err) != PG_OK) return err->code;
    if (*db_option == NULL) return pg_fail(err, PG_ERR_USAGE, "merge: --into DB is required");
    if (first >= argc)
        return pg_fail(err, PG_ERR_USAGE, "merge: name at least one shard database");
    a->rq.files = (const char *const *)(argv + first);
    a->rq.n_files = argc - first;
    a->rq.out = stdout;
    a->rq.errs = stderr;
    return PG_OK;
}

/* cli_store_job: the merge's lifecycle on the open database (--into). */
static pg_status merge_job_run(pg_store *s, const char *db_path, void *ctx, pg_err *err)
{
    const merge_args *a = ctx;
    return merge_lifecycle_run(s, db_path, &a->rq, err);
}

/* `precgate merge`: the cli_commands row runs it. */
const cli_store_command cmd_merge_store = {CLI_STORE_CREATE, sizeof(merge_args), merge_parse,
                                           merge_job_run};
