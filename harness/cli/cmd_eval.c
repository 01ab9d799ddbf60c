/* cmd_eval.c: `precgate eval`: end-task accuracy per precision mode, live or from recorded completions. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "evals/eval_run.h"
#include "harness/cli/cli.h"
#include "harness/eval_lifecycle.h"
#include "harness/interrupt.h"
#include "harness/progress.h"
#include "harness/shard.h"

/* Defaults of the live client (the numbers). */
#define EVAL_DEFAULT_SAMPLES 1
#define EVAL_DEFAULT_CONCURRENCY 64
#define EVAL_DEFAULT_READY_S 600.0
#define EVAL_DEFAULT_EFFORT "medium"
/* Bounds of the client flags: a stall below 0.1 s or a backoff base below
 * 1 ms is below the client's scheduling granularity (a loop pass, a poll);
 * the base may not pass the backoff cap (OA_DEFAULT_BACKOFF_CAP_S); more than
 * 100 attempts per sample is a typo, not a policy. */
#define EVAL_MIN_STALL_S 0.1
#define EVAL_MIN_BACKOFF_S 0.001
#define EVAL_MAX_ATTEMPTS 100
/* Largest --samples, --concurrency, --max-tokens and --temperature. */
#define EVAL_MAX_SAMPLES 1000
#define EVAL_MAX_CONCURRENCY 100000
#define EVAL_MAX_TOKENS 100000000
#define EVAL_MAX_TEMPERATURE 100
/* Largest --timeout, --stall-timeout and --ready-timeout, seconds. */
#define EVAL_MAX_WAIT_S 1e7
/* Longest effort list. */
#define EVAL_LIST_MAX 256

const char cmd_eval_usage[] =
    "usage: precgate eval --traces FILE (--endpoint MODE=URL ... | --replay) [options]\n\n"
    "Runs AIME-style problems through OpenAI-compatible servers, one or more per precision\n"
    "mode\n"
    "(or grades the completions recorded in the traces), stores every sample as it\n"
    "completes (committed in batches of 256 or 100 ms: a kill loses only the samples not\n"
    "yet committed, which --resume sends again), and scores each mode and effort (avg@K,\n"
    "pass@k, clustered SE, 95% CI) and each mode against bf16 on the same problems (paired\n"
    "difference, sign test).\n\n"
    "  --traces FILE        JSONL problems (evals/demo/aime-style-demo.jsonl is shipped)\n"
    "  --endpoint MODE=URL  a server running precision MODE (bf16, fp8kv, fp8qkv, ...);\n"
    "                       repeat per mode, and per server: a mode given several\n"
    "                       servers sends each request to the one with the least\n"
    "                       outstanding requests; 3 failed attempts in a row take a\n"
    "                       server out for a back-off while the others carry on; every\n"
    "                       server of a mode must be up and serve one model.\n"
    "                       Two modes given one URL (scheme/host case, default port,\n"
    "                       trailing / and /v1 aside) are warned of at once; two whose\n"
    "                       servers report the same /v1/models list, Server header and\n"
    "                       /version (vLLM) once ready are warned of as possibly one\n"
    "                       server (distinct servers of one model and vLLM version match\n"
    "                       too). A warning only: the run goes on\n"
    "  --replay             grade the traces' recorded completions, no server\n"
    "  --samples K          samples per problem and mode (default 1)\n"
    "  --effort LIST        reasoning efforts, comma-separated (default medium)\n"
    "  --concurrency N      requests in flight per server (default 64)\n"
    "  --server-backoff S   a server taken out stays out S seconds, doubling each time\n"
    "                       it is taken out again without a success between, up to 120\n"
    "                       (default 5); back in, it gets one request until one succeeds\n"
    "  --model NAME         served model (default: the server's /v1/models)\n"
    "  --max-tokens N       completion budget per request (default: the server's)\n"
    "  --temperature T      (default 1.0)    --top-p P   (default: the server's)\n"
    "  --seed N             base seed; each (problem id, sample) gets its own seed,\n"
    "                       the same in every mode (paired samples)\n"
    "  --api-key-env VAR    read the API key from this environment variable\n"
    "  --timeout S          bound on one attempt, connection to last byte (default 14400:\n"
    "                       a 131072-token completion at 10 tokens/s)\n"
    "  --stall-timeout S    a streamed attempt fails and is retried when its response\n"
    "                       headers have not come S seconds after its request was\n"
    "                       sent (a stopped or hung server), or when, once its first\n"
    "                       body byte has come, no byte comes for S seconds (default\n"
    "                       60; vLLM streams one event per token, so a slow but live\n"
    "                       stream is never cut). The wait from the headers to the\n"
    "                       first body byte is the server's queue (vLLM sends its\n"
    "                       headers at once, the first event once the request is\n"
    "                       scheduled): only --timeout bounds it\n"
    "  --max-attempts N     attempts per sample, the first included (default 6; 1: no\n"
    "                       retry). Retried: connection failures, timeouts, stalls, 408,\n"
    "                       429, 5xx, and 200 replies without an answer (only a\n"
    "                       non-empty content or finish_reason length is graded)\n"
    "  --backoff S          retry k waits a random 0..min(60, S*2^(k-1)) seconds\n"
    "                       (default 1; Retry-After of a 429/503 is honoured up to 60)\n"
    "  --ready-timeout S    wait this long for the servers to be up (default 600)\n"
    "  --extractor NAME     answer extraction: default or gpt-oss\n"
    "  --eval NAME          name stored with the samples (default: the traces' file name)\n"
    "  --limit N            only the first N problems of the traces (smoke tests)\n"
    "  --no-token-ids       do not ask for the token ids (\"return_token_ids\": true, vLLM;\n"
    "                       stored with each sample for diverge --from-eval, and checked\n"
    "                       against usage) from a server that refuses the field\n"
    "  --output FILE.json   also write the run's scores and pairs there (like lm-eval's\n"
    "                       results file; written whole or not at all)\n"
    "  --resume RUN         continue run RUN, sending only the samples it lacks (and\n"
    "                       retrying its errors). Everything that defines the eval must\n"
    "                       be the same (traces content, eval name, modes and the models\n"
    "                       their servers serve, efforts, samples, seed, temperature,\n"
    "                       top-p, max-tokens, extractor, prompt template), else exit 2\n"
    "                       naming the field. Servers are infrastructure, not part of\n"
    "                       the eval: URLs and how many servers a mode has may change\n"
    "                       (every server of a mode must still serve the run's model).\n"
    "                       A run whose process is\n"
    "                       gone (interrupted, killed -9 on this host) is taken as is\n"
    "  --force              with --resume: take a run still marked running whose process\n"
    "                       may be alive (on another host, or its pid exists here)\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --no-progress        never draw the progress bar\n"
    "  --shard I/N          run only part I (0 .. N-1) of N: the problems (after --limit)\n"
    "                       sorted by id, in N runs of consecutive ids as equal in count\n"
    "                       as can be; every sample, mode and effort of a problem is in\n"
    "                       one part, so `precgate merge` gives the scores and pairs of\n"
    "                       an unsharded run. A --resume of a part repeats its --shard\n"
    "  --job KEY            with --shard: the job the part belongs to (default: a digest\n"
    "                       of what defines the eval, as --resume compares it, and N)\n\n"
    "SIGINT or SIGTERM stops sending: the samples received are stored, the requests in\n"
    "flight are dropped (a resume sends them again), the run is marked 'interrupted' and\n"
    "not scored; a second signal kills at once.\n\n"
    "exit status: 0 complete; 1 failure or samples that failed after every retry (the run\n"
    "is then 'incomplete': scores exclude them and say how many; --resume retries them);\n"
    "2 usage error, or a --resume that differs from its run; 130 / 143 stopped by SIGINT /\n"
    "SIGTERM.\n";

/* What eval parses argv into: the lifecycle's request, and what only the CLI reads. */
typedef struct eval_args {
    eval_lifecycle_request rq;
    const char *db;       /* --db, else $PRECGATE_DB, else ./precgate.db */
    int progress;         /* draw the progress bar (--no-progress: 0) */
    char efforts_buf[EVAL_LIST_MAX];
} eval_args;

/* --shard I/N into the shard_spec to (a cli_option parse). */
static pg_status parse_shard(char *value, void *to, pg_err *err)
{
    return shard_parse("eval", value, to, err);
}

/* Index of the first of names[0..n-1] equal to an earlier one, or -1. */
static int duplicate_name(const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) return i;
    return -1;
}

/* --endpoint MODE=URL, appended to the eval_run_options to (a cli_option
 * parse); the value is split in place. */
static pg_status parse_endpoint(char *value, void *to, pg_err *err)
{
    eval_run_options *o = to;
    return cli_split_endpoint("eval", value, o->modes, o->urls, &o->n_endpoints, EVAL_MAX_SERVERS, err);
}

/* --extractor NAME into the grade extractor to (a cli_option parse). */
static pg_status parse_extractor(char *value, void *to, pg_err *err)
{
    pg_err local = {0};
    if (grade_extractor_parse(value, to, &local) != PG_OK)
        return pg_fail(err, PG_ERR_USAGE, "eval: --extractor: %s", local.msg);
    return PG_OK;
}

/* Rows of eval's option table, its end row included. */
#define EVAL_OPTION_ROWS 31

/* eval's option table into opts, its values going into a, *effort, *seed
 * and *no_progress: what eval_parse parses by, and what
 * cmd_eval_option_arity answers from. */
static void eval_option_table(eval_args *a, const char **effort, unsigned long long *seed,
                              int *no_progress, int *no_token_ids,
                              cli_option opts[EVAL_OPTION_ROWS])
{
    const cli_option t[] = {
        {"traces", CLI_TEXT, .to = &a->rq.traces},
        {"endpoint", CLI_CALL, .to = &a->rq.o, .parse = parse_endpoint},
        {"replay", CLI_FLAG, .to = &a->rq.replay},
        {"samples", CLI_INT, .to = &a->rq.o.samples, .min = 1, .max = EVAL_MAX_SAMPLES},
        {"effort", CLI_TEXT, .to = effort},
        {"concurrency", CLI_INT, .to = &a->rq.o.client.max_in_flight, .min = 1,
         .max = EVAL_MAX_CONCURRENCY},
        {"server-backoff", CLI_DOUBLE, .to = &a->rq.o.client.server_backoff_base_s,
         .lo = EVAL_MIN_BACKOFF_S, .hi = OA_DEFAULT_SERVER_BACKOFF_CAP_S},
        {"model", CLI_TEXT, .to = &a->rq.o.client.model},
        {"max-tokens", CLI_LONG, .to = &a->rq.o.sampling.max_tokens, .min = 1,
         .max = EVAL_MAX_TOKENS},
        {"temperature", CLI_DOUBLE, .to = &a->rq.o.sampling.temperature, .lo = 0,
         .hi = EVAL_MAX_TEMPERATURE},
        {"top-p", CLI_DOUBLE, .to = &a->rq.o.sampling.top_p, .lo = 0, .hi = 1},
        {"seed", CLI_U64, .to = seed},
        {"api-key-env", CLI_TEXT, .to = &a->rq.o.api_key_env},
        {"timeout", CLI_DOUBLE, .to = &a->rq.o.client.timeout_s, .lo = 1, .hi = EVAL_MAX_WAIT_S},
        {"stall-timeout", CLI_DOUBLE, .to = &a->rq.o.client.stall_s, .lo = EVAL_MIN_STALL_S,
         .hi = EVAL_MAX_WAIT_S},
        {"max-attempts", CLI_INT, .to = &a->rq.o.client.max_attempts, .min = 1,
         .max = EVAL_MAX_ATTEMPTS},
        {"backoff", CLI_DOUBLE, .to = &a->rq.o.client.backoff_base_s, .lo = EVAL_MIN_BACKOFF_S,
         .hi = OA_DEFAULT_BACKOFF_CAP_S},
        {"ready-timeout", CLI_DOUBLE, .to = &a->rq.o.ready_deadline_s, .lo = 0,
         .hi = EVAL_MAX_WAIT_S},
        {"extractor", CLI_CALL, .to = &a->rq.o.extractor, .parse = parse_extractor},
        {"eval", CLI_TEXT, .to = &a->rq.o.eval_name},
        {"resume", CLI_LONG, .to = &a->rq.resume, .min = 1, .max = CLI_RESUME_MAX},
        {"db", CLI_TEXT, .to = &a->db},
        {"label", CLI_TEXT, .to = &a->rq.label},
        {"no-progress", CLI_FLAG, .to = no_progress},
        {"force", CLI_FLAG, .to = &a->rq.force},
        {"limit", CLI_LONG, .to = &a->rq.limit, .min = 1, .max = INT_MAX},
        {"output", CLI_TEXT, .to = &a->rq.output},
        {"shard", CLI_CALL, .to = &a->rq.shard, .parse = parse_shard},
        {"job", CLI_TEXT, .to = &a->rq.job},
        {"no-token-ids", CLI_FLAG, .to = no_token_ids},
        {NULL},
    };
    _Static_assert(sizeof t / sizeof t[0] == EVAL_OPTION_ROWS, "EVAL_OPTION_ROWS");
    memcpy(opts, t, sizeof t);
}

/* Parses argv into a; PG_ERR_USAGE on anything unknown, missing or inconsistent. */
static pg_status eval_parse(int argc, char **argv, eval_args *a, pg_err *err)
{
    memset(a, 0, sizeof *a);
    a->rq.resume = -1;
    a->rq.o.samples = EVAL_DEFAULT_SAMPLES;
    a->rq.o.ready_deadline_s = EVAL_DEFAULT_READY_S;
    a->rq.o.client.max_in_flight = EVAL_DEFAULT_CONCURRENCY;
    a->rq.o.sampling = oa_sampling_default();
    /* The ids a teacher-forced divergence of the samples needs (diverge --from-eval). */
    a->rq.o.sampling.return_token_ids = 1;
    a->progress = 1;
    a->rq.o.extractor = GRADE_DEFAULT;
    const char *effort = EVAL_DEFAULT_EFFORT;
    unsigned long long seed = 0;
    int no_progress = 0, no_token_ids = 0;
    cli_option opts[EVAL_OPTION_ROWS];
    eval_option_table(a, &effort, &seed, &no_progress, &no_token_ids, opts);
    if (cli_parse_options("eval", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (no_token_ids) a->rq.o.sampling.return_token_ids = 0;
    a->rq.o.api_key = cli_env_value(a->rq.o.api_key_env);
    snprintf(a->efforts_buf, sizeof a->efforts_buf, "%s", effort);
    a->rq.o.seed_base = (int64_t)seed;
    if (no_progress) a->progress = 0;
    if (a->rq.traces == NULL) return pg_fail(err, PG_ERR_USAGE, "eval: --traces FILE is required");
    if (a->rq.job != NULL && a->rq.shard.count == 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --job KEY names the job of a part: it goes "
                                          "with --shard I/N");
    if (a->rq.job != NULL && shard_job_check("eval", a->rq.job, err) != PG_OK) return err->code;
    if (a->rq.replay && a->rq.resume > 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --resume continues a live run; a replay has "
                                          "nothing to resume (run it again instead)");
    if (a->rq.force && a->rq.resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --force only goes with --resume RUN");
    if (a->rq.replay == (a->rq.o.n_endpoints > 0))
        return pg_fail(err, PG_ERR_USAGE, "eval: give either --replay or at least one "
                                          "--endpoint MODE=URL");
    /* Several servers per mode, but never one server twice for a mode, and
     * at most EVAL_MAX_MODES modes. */
    int n_modes = 0;
    for (int i = 0; i < a->rq.o.n_endpoints; i++) {
        int j = 0;
        while (j < i && strcmp(a->rq.o.modes[j], a->rq.o.modes[i]) != 0) j++;
        n_modes += j == i;
        for (j = 0; j < i; j++)
            if (strcmp(a->rq.o.modes[j], a->rq.o.modes[i]) == 0 && strcmp(a->rq.o.urls[j], a->rq.o.urls[i]) == 0)
                return pg_fail(err, PG_ERR_USAGE, "eval: --endpoint %s=%s is given twice",
                               a->rq.o.modes[i], a->rq.o.urls[i]);
    }
    if (n_modes > EVAL_MAX_MODES)
        return pg_fail(err, PG_ERR_USAGE, "eval: more than %d modes", EVAL_MAX_MODES);
    /* Efforts: a comma-separated list split in place. */
    for (char *p = a->efforts_buf; *p != '\0';) {
        char *comma = strchr(p, ',');
        if (comma != NULL) *comma = '\0';
        if (*p == '\0' || a->rq.o.n_efforts == EVAL_MAX_EFFORTS)
            return pg_fail(err, PG_ERR_USAGE, "eval: --effort: empty entry or more than %d",
                           EVAL_MAX_EFFORTS);
        a->rq.o.efforts[a->rq.o.n_efforts++] = p;
        if (comma == NULL) break;
        p = comma + 1;
    }
    const int dup_effort = duplicate_name(a->rq.o.efforts, a->rq.o.n_efforts);
    if (dup_effort >= 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --effort: '%s' is given twice",
                       a->rq.o.efforts[dup_effort]);
    return PG_OK;
}

int cmd_eval(int argc, char **argv)
{
    pg_err err = {0};
    eval_args a;
    if (eval_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    /* From here on the first SIGINT/SIGTERM asks for a clean stop. */
    interrupt_install();
    a.rq.o.client.stop = interrupt_flag();
    progress bar;
    const pg_notes notes = progress_notes(&bar, a.progress);
    a.rq.o.notes = &notes;
    a.rq.db_path = cli_db_path(a.db);
    a.rq.out = stdout;
    a.rq.errs = stderr;
    eval_lifecycle_result res;
    if (eval_lifecycle_run(&a.rq, &res, &err) != PG_OK) return cli_report(&err);
    return res.stored_errors > 0 ? cli_exit_code(PG_ERR_HTTP) : 0;
}

pg_status cmd_eval_check(int argc, char **argv, pg_err *err)
{
    eval_args a;
    return eval_parse(argc, argv, &a, err);
}

const char *cmd_eval_option(const char *name, int *takes_value)
{
    eval_args a = {0};
    const char *effort = NULL;
    unsigned long long seed = 0;
    int no_progress = 0, no_token_ids = 0;
    cli_option opts[EVAL_OPTION_ROWS];
    eval_option_table(&a, &effort, &seed, &no_progress, &no_token_ids, opts);
    const cli_option *o = cli_option_find(opts, name);
    if (o != NULL) *takes_value = o->type != CLI_FLAG;
    return o != NULL ? o->name : NULL;
}
