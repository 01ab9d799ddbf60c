/* cmd_eval.c: `precgate eval`: end-task accuracy per precision mode, live or from recorded completions. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../db/store.h"
#include "../evals/eval_run.h"
#include "cli.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Defaults of the live client (the numbers). */
#define EVAL_DEFAULT_SAMPLES 1
#define EVAL_DEFAULT_CONCURRENCY 64
#define EVAL_DEFAULT_READY_S 600.0
#define EVAL_DEFAULT_EFFORT "medium"
/* Longest effort list, host description. */
#define EVAL_LIST_MAX 256
#define EVAL_HOST_MAX 256

const char cmd_eval_usage[] =
    "usage: precgate eval --traces FILE (--endpoint MODE=URL ... | --replay) [options]\n\n"
    "Runs AIME-style problems through one OpenAI-compatible server per precision mode\n"
    "(or grades the completions recorded in the traces), stores every sample as it\n"
    "completes (committed in batches of 256 or 100 ms: a kill loses only the samples not\n"
    "yet committed, which --resume sends again), and scores each mode and effort (avg@K,\n"
    "pass@k, clustered SE, 95% CI) and each mode against bf16 on the same problems (paired\n"
    "difference, sign test).\n\n"
    "  --traces FILE        JSONL problems (evals/demo/aime-style-demo.jsonl is shipped)\n"
    "  --endpoint MODE=URL  a server running precision MODE (bf16, fp8kv, fp8qkv, ...);\n"
    "                       repeat per mode\n"
    "  --replay             grade the traces' recorded completions, no server\n"
    "  --samples K          samples per problem and mode (default 1)\n"
    "  --effort LIST        reasoning efforts, comma-separated (default medium)\n"
    "  --concurrency N      requests in flight per server (default 64)\n"
    "  --model NAME         served model (default: the server's /v1/models)\n"
    "  --max-tokens N       completion budget per request (default: the server's)\n"
    "  --temperature T      (default 1.0)    --top-p P   (default: the server's)\n"
    "  --seed N             base seed; each (problem id, sample) gets its own seed,\n"
    "                       the same in every mode (paired samples)\n"
    "  --api-key-env VAR    read the API key from this environment variable\n"
    "  --timeout S          per-request timeout in seconds\n"
    "  --ready-timeout S    wait this long for the servers to be up (default 600)\n"
    "  --extractor NAME     answer extraction: default or gpt-oss\n"
    "  --eval NAME          name stored with the samples (default: the traces' file name)\n"
    "  --resume RUN         continue run RUN, sending only the samples it lacks (and\n"
    "                       retrying its errors); the same traces, modes and efforts\n"
    "  --force              with --resume: take a run still marked running (killed)\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --no-progress        never draw the progress bar\n\n"
    "exit status: 0 complete; 1 failure or samples that failed after every retry (the run\n"
    "is then 'incomplete': scores exclude them and say how many; --resume retries them);\n"
    "2 usage error.\n";

typedef struct eval_args {
    const char *traces, *db, *label, *eval_name, *model;
    int replay, force;
    long resume;
    char efforts_buf[EVAL_LIST_MAX];
    eval_run_options o;
} eval_args;

/* The traces' file name without directory and extension, into buf. */
static void default_eval_name(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(buf, len, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot != NULL && dot != buf) *dot = '\0';
}

/* Parses a floating option value; PG_ERR_USAGE naming opt. */
static pg_status parse_double(const char *opt, const char *v, double lo, double hi, double *out,
                              pg_err *err)
{
    char *end = NULL;
    const double x = strtod(v, &end);
    if (end == v || *end != '\0' || !(x >= lo && x <= hi))
        return pg_fail(err, PG_ERR_USAGE, "eval: %s: '%s' is not a number in [%g, %g]", opt, v,
                       lo, hi);
    *out = x;
    return PG_OK;
}

static pg_status eval_parse(int argc, char **argv, eval_args *a, pg_err *err)
{
    enum { O_TRACES = 256, O_ENDPOINT, O_REPLAY, O_SAMPLES, O_EFFORT, O_CONC, O_MODEL, O_MAXTOK,
           O_TEMP, O_TOPP, O_SEED, O_KEYENV, O_TIMEOUT, O_READY, O_EXTRACTOR, O_EVAL, O_RESUME,
           O_DB, O_LABEL, O_NOPROG, O_FORCE };
    static const struct option opts[] = {
        {"traces", required_argument, NULL, O_TRACES},
        {"endpoint", required_argument, NULL, O_ENDPOINT},
        {"replay", no_argument, NULL, O_REPLAY},
        {"samples", required_argument, NULL, O_SAMPLES},
        {"effort", required_argument, NULL, O_EFFORT},
        {"concurrency", required_argument, NULL, O_CONC},
        {"model", required_argument, NULL, O_MODEL},
        {"max-tokens", required_argument, NULL, O_MAXTOK},
        {"temperature", required_argument, NULL, O_TEMP},
        {"top-p", required_argument, NULL, O_TOPP},
        {"seed", required_argument, NULL, O_SEED},
        {"api-key-env", required_argument, NULL, O_KEYENV},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"ready-timeout", required_argument, NULL, O_READY},
        {"extractor", required_argument, NULL, O_EXTRACTOR},
        {"eval", required_argument, NULL, O_EVAL},
        {"resume", required_argument, NULL, O_RESUME},
        {"db", required_argument, NULL, O_DB},
        {"label", required_argument, NULL, O_LABEL},
        {"no-progress", no_argument, NULL, O_NOPROG},
        {"force", no_argument, NULL, O_FORCE},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->resume = -1;
    a->o.samples = EVAL_DEFAULT_SAMPLES;
    a->o.ready_deadline_s = EVAL_DEFAULT_READY_S;
    a->o.client.max_in_flight = EVAL_DEFAULT_CONCURRENCY;
    a->o.sampling = oa_sampling_default();
    a->o.progress = 1;
    a->o.extractor = GRADE_DEFAULT;
    snprintf(a->efforts_buf, sizeof a->efforts_buf, "%s", EVAL_DEFAULT_EFFORT);
    optind = 1;
    opterr = 0;
    pg_status st = PG_OK;
    long v;
    double x = 0;  /* set by parse_double; read only after it succeeds */
    unsigned long long u;
    int c;
    while (st == PG_OK && (c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case O_TRACES: a->traces = optarg; break;
        case O_ENDPOINT: {
            char *eq = strchr(optarg, '=');
            if (eq == NULL || eq == optarg || eq[1] == '\0') {
                st = pg_fail(err, PG_ERR_USAGE, "eval: --endpoint '%s' is not MODE=URL", optarg);
                break;
            }
            if (a->o.n_endpoints == EVAL_MAX_MODES) {
                st = pg_fail(err, PG_ERR_USAGE, "eval: more than %d --endpoint", EVAL_MAX_MODES);
                break;
            }
            *eq = '\0';
            a->o.modes[a->o.n_endpoints] = optarg;
            a->o.urls[a->o.n_endpoints++] = eq + 1;
            break;
        }
        case O_REPLAY: a->replay = 1; break;
        case O_SAMPLES:
            st = cli_parse_int("--samples", optarg, 1, 1000, &v, err);
            a->o.samples = (int)v;
            break;
        case O_EFFORT: snprintf(a->efforts_buf, sizeof a->efforts_buf, "%s", optarg); break;
        case O_CONC:
            st = cli_parse_int("--concurrency", optarg, 1, 100000, &v, err);
            a->o.client.max_in_flight = (int)v;
            break;
        case O_MODEL: a->o.client.model = optarg; break;
        case O_MAXTOK:
            st = cli_parse_int("--max-tokens", optarg, 1, 100000000, &v, err);
            a->o.sampling.max_tokens = v;
            break;
        case O_TEMP: st = parse_double("--temperature", optarg, 0, 100, &a->o.sampling.temperature, err); break;
        case O_TOPP: st = parse_double("--top-p", optarg, 0, 1, &a->o.sampling.top_p, err); break;
        case O_SEED:
            st = cli_parse_u64("--seed", optarg, &u, err);
            a->o.seed_base = (int64_t)u;
            break;
        case O_KEYENV: a->o.api_key_env = optarg; break;
        case O_TIMEOUT: st = parse_double("--timeout", optarg, 1, 1e7, &a->o.client.timeout_s, err); break;
        case O_READY:
            st = parse_double("--ready-timeout", optarg, 0, 1e7, &x, err);
            a->o.ready_deadline_s = x;
            break;
        case O_EXTRACTOR: {
            pg_err local = {0};
            if (grade_extractor_parse(optarg, &a->o.extractor, &local) != PG_OK)
                st = pg_fail(err, PG_ERR_USAGE, "eval: --extractor: %s", local.msg);
            break;
        }
        case O_EVAL: a->eval_name = optarg; break;
        case O_RESUME: st = cli_parse_int("--resume", optarg, 1, 1L << 62, &a->resume, err); break;
        case O_DB: a->db = optarg; break;
        case O_LABEL: a->label = optarg; break;
        case O_NOPROG: a->o.progress = 0; break;
        case O_FORCE: a->force = 1; break;
        case ':':
        default: return cli_getopt_fail("eval", c, argv[optind - 1], err);
        }
    }
    if (st != PG_OK) return st;
    if (optind < argc) return pg_fail(err, PG_ERR_USAGE, "eval: unexpected argument '%s'", argv[optind]);
    if (a->traces == NULL) return pg_fail(err, PG_ERR_USAGE, "eval: --traces FILE is required");
    if (a->replay && a->resume > 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --resume continues a live run; a replay has "
                                          "nothing to resume (run it again instead)");
    if (a->force && a->resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --force only goes with --resume RUN");
    if (a->replay == (a->o.n_endpoints > 0))
        return pg_fail(err, PG_ERR_USAGE, "eval: give either --replay or at least one "
                                          "--endpoint MODE=URL");
    for (int i = 0; i < a->o.n_endpoints; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(a->o.modes[i], a->o.modes[j]) == 0)
                return pg_fail(err, PG_ERR_USAGE, "eval: mode '%s' has two --endpoint",
                               a->o.modes[i]);
    /* Efforts: a comma-separated list split in place. */
    for (char *p = a->efforts_buf; *p != '\0';) {
        char *comma = strchr(p, ',');
        if (comma != NULL) *comma = '\0';
        if (*p == '\0' || a->o.n_efforts == EVAL_MAX_EFFORTS)
            return pg_fail(err, PG_ERR_USAGE, "eval: --effort: empty entry or more than %d",
                           EVAL_MAX_EFFORTS);
        a->o.efforts[a->o.n_efforts++] = p;
        if (comma == NULL) break;
        p = comma + 1;
    }
    return PG_OK;
}

/* The run's configuration as JSON text (never the API key itself). */
static char *eval_config_json(const eval_args *a)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddStringToObject(o, "traces", a->traces);
    cJSON_AddStringToObject(o, "eval", a->o.eval_name);
    cJSON_AddStringToObject(o, "source", a->replay ? "replay" : "live");
    cJSON_AddStringToObject(o, "extractor", grade_extractor_name(a->o.extractor));
    if (!a->replay) {
        cJSON *eps = cJSON_AddObjectToObject(o, "endpoints");
        for (int i = 0; i < a->o.n_endpoints; i++)
            cJSON_AddStringToObject(eps, a->o.modes[i], a->o.urls[i]);
        cJSON *ef = cJSON_AddArrayToObject(o, "efforts");
        for (int i = 0; i < a->o.n_efforts; i++)
            cJSON_AddItemToArray(ef, cJSON_CreateString(a->o.efforts[i]));
        cJSON_AddNumberToObject(o, "samples", a->o.samples);
        cJSON_AddNumberToObject(o, "temperature", a->o.sampling.temperature);
        cJSON_AddNumberToObject(o, "seed", (double)a->o.seed_base);
        if (a->o.sampling.max_tokens > 0)
            cJSON_AddNumberToObject(o, "max_tokens", (double)a->o.sampling.max_tokens);
        if (a->o.client.model) cJSON_AddStringToObject(o, "model", a->o.client.model);
        if (a->o.api_key_env) cJSON_AddStringToObject(o, "api_key_env", a->o.api_key_env);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

int cmd_eval(int argc, char **argv)
{
    pg_err err = {0};
    eval_args a;
    if (eval_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    char name[EVAL_LIST_MAX];
    if (a.eval_name == NULL) default_eval_name(a.traces, name, sizeof name);
    a.o.eval_name = a.eval_name ? a.eval_name : name;

    eval_traces *t = NULL;
    if (traces_load(a.traces, &t, &err) != PG_OK) return cli_report(&err);
    const char *db_path = cli_db_path(a.db);
    pg_store *store = NULL;
    pg_status st = store_open(db_path, &store, &err);
    int64_t run_id = -1;
    char *config = NULL;
    if (st == PG_OK && a.resume > 0) {
        st = store_run_reopen(store, a.resume, "eval", a.force, &err);
        if (st == PG_OK) run_id = a.resume;
    } else if (st == PG_OK) {
        config = eval_config_json(&a);
        char host[EVAL_HOST_MAX] = "unknown";
        gethostname(host, sizeof host - 1);
        const store_run_info info = {"eval", a.label, PRECGATE_GIT_REV, host,
                                     a.replay ? "replay" : "openai-compatible servers", config};
        st = store_run_begin(store, &info, &run_id, &err);
    }
    eval_run_counts c = {0};
    if (st == PG_OK) {
        printf("run %lld: eval %s, %d problems, %s\n", (long long)run_id, a.o.eval_name, t->n,
               a.replay ? "replay of recorded completions" : "live");
        fflush(stdout);
        st = a.replay ? eval_replay(store, run_id, t, &a.o, &c, &err)
                      : eval_live(store, run_id, t, &a.o, &c, &err);
    }
    if (st == PG_OK) st = eval_score_all(store, run_id, a.o.eval_name, stdout, &err);
    /* The run's state comes from what is stored, not from this invocation:
     * a resume that skipped a mode still leaves that mode's errors. */
    int64_t stored_errors = 0;
    if (st == PG_OK) st = eval_count_errors(store, run_id, a.o.eval_name, &stored_errors, &err);
    if (run_id > 0) {
        /* A resumed run that fails keeps what it had: incomplete, not failed. */
        const char *status = st != PG_OK ? (a.resume > 0 ? "incomplete" : "failed")
                             : stored_errors > 0 ? "incomplete"
                                                 : "complete";
        pg_err fin = {0};
        const pg_status fst = store_run_finish(store, run_id, status, st != PG_OK ? err.msg : NULL,
                                               &fin);
        if (fst != PG_OK && st == PG_OK) {
            err = fin;
            st = fin.code;
        }
        if (fst != PG_OK) {
            fprintf(stderr, "precgate: run %lld could not be marked %s: %s\n", (long long)run_id,
                    status, fin.msg);
        } else if (st == PG_OK && stored_errors > 0) {
            printf("run %lld incomplete: %lld samples failed after every retry (excluded from the "
                   "scores); precgate eval --resume %lld retries them\n",
                   (long long)run_id, (long long)stored_errors, (long long)run_id);
        } else if (st == PG_OK) {
            printf("run %lld complete: %s (%lld samples stored, %lld already there)\n",
                   (long long)run_id, db_path, (long long)c.stored, (long long)c.skipped);
        } else {
            fprintf(stderr, "precgate: run %lld marked %s in %s\n", (long long)run_id, status,
                    db_path);
        }
    }
    free(config);
    store_close(store);
    traces_free(t);
    if (st != PG_OK) return cli_report(&err);
    return stored_errors > 0 ? pg_status_exit_code(PG_ERR_HTTP) : 0;
}
