/* cmd_diverge.c: `precgate diverge`: teacher-forced divergence between the servers of precision modes. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/cli.h"
#include "db/diverge_config.h"
#include "db/eval_store.h"
#include "db/store.h"
#include "evals/diverge_run.h"
#include "evals/prompt_logprobs.h"
#include "harness/interrupt.h"
#include "harness/progress.h"
#include "reports/divergence_results.h"
#include "reports/term.h"
#include "harness/shard.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Requests in flight per server: a prompt-logprobs request materialises
 * the logits of its whole sequence (about 9 GiB at 8k tokens of gpt-oss's
 * vocabulary, vLLM PR #52054: notes-divergence.md), so a few, not eval's 64. */
#define DIVERGE_DEFAULT_CONCURRENCY 4
#define DIVERGE_MAX_CONCURRENCY 1024
/* A scoring request is one prefill, not a generation: 10 min bounds a
 * 128k-token prompt on a loaded server. */
#define DIVERGE_DEFAULT_TIMEOUT_S 600.0
#define DIVERGE_DEFAULT_READY_S 600.0
#define DIVERGE_MAX_WAIT_S 1e7
#define DIVERGE_MAX_ATTEMPTS 100
#define DIVERGE_MIN_BACKOFF_S 0.001
#define DIVERGE_HOST_MAX 256
/* Rows of diverge's option table, its end row included. */
#define DIVERGE_OPTION_ROWS 24

const char cmd_diverge_usage[] =
    "usage: precgate diverge --endpoint MODE=URL --endpoint MODE=URL ...\n"
    "                        (--sequences FILE | --from-eval RUN) [options]\n\n"
    "Teacher-forced divergence: every server scores the same token sequences (no sampling)\n"
    "and each mode's next-token distributions are compared with the reference mode's,\n"
    "position by position: KL divergence (a lower bound from the top K, never\n"
    "epsilon-imputed), same top-1, the given token's probability change and the PPL ratio,\n"
    "with SEs clustered by sequence, printed in llama-perplexity's layout.\n\n"
    "  --endpoint MODE=URL  a server of precision MODE; repeat per mode and per server\n"
    "                       (vLLM, or llama.cpp's llama-server; probed once, said on\n"
    "                       stderr). Every server must tokenize alike, else nothing is\n"
    "                       scored\n"
    "  --sequences FILE     JSONL, one object per line: {\"id\", \"tokens\": [int, ...],\n"
    "                       \"score_from\": N} (positions N.. are scored) or {\"id\",\n"
    "                       \"prompt\", \"completion\"} (tokenized once by the reference\n"
    "                       server; the completion is scored)\n"
    "  --from-eval RUN      the samples of eval run RUN (in --db), one sequence each: the\n"
    "                       prompt's and the completion's token ids that its servers\n"
    "                       returned (eval asks for them), the completion scored. A sample\n"
    "                       without stored ids, or whose ids disagree with its usage, is\n"
    "                       refused by name (a sequence rebuilt from text is not the one\n"
    "                       sampled); failed samples are left out\n"
    "  --reference MODE     the mode compared against (default bf16)\n"
    "  --top-k K            logprobs per position, one K for all servers (default 20,\n"
    "                       vLLM's default --max-logprobs)\n"
    "  --server-kind KIND   auto (default), vllm, llama-server or sglang\n"
    "  --vocab-size N       the model's vocabulary: every id sent or replied must be below\n"
    "                       it (vLLM and SGLang do not say theirs, so without it their ids\n"
    "                       are checked >= 0 only, and stderr says so; llama-server says\n"
    "                       its own, and one that differs from N is an error)\n"
    "  --no-noise-floor     do not score the reference twice (by default it scores every\n"
    "                       sequence again, in reverse order and one request at a time:\n"
    "                       batched serving is not bit-deterministic, and each mode is\n"
    "                       reported beside that floor)\n"
    "  --concurrency N      requests in flight per server (default 4)\n"
    "  --timeout S          bound on one attempt (default 600)\n"
    "  --max-attempts N     attempts per request (default 6); connection failures,\n"
    "                       timeouts, 408, 429 and 5xx are retried; a reply of the wrong\n"
    "                       shape is not (it is an error naming the server and sequence)\n"
    "  --backoff S          retry k waits a random 0..min(60, S*2^(k-1)) s (default 1)\n"
    "  --ready-timeout S    wait this long for the servers to be up (default 600)\n"
    "  --api-key-env VAR    read the API key from this environment variable\n"
    "  --output FILE.json   also write the results there (whole or not at all)\n"
    "  --resume RUN         continue run RUN: only the (mode, sequence) scorings it lacks\n"
    "                       are sent; the sequences, reference, K and modes must be the\n"
    "                       same\n"
    "  --force              with --resume: take a run still marked running\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --no-progress        never draw the progress bar\n"
    "  --shard I/N          score only part I (0 .. N-1) of N: the sequences sorted by id,\n"
    "                       in N runs of consecutive ids as equal in count as can be (the\n"
    "                       noise floor too); `precgate merge` of the parts gives the\n"
    "                       numbers of an unsharded run. A --resume of a part repeats its\n"
    "                       --shard\n"
    "  --job KEY            with --shard: the job the part belongs to (default: a digest\n"
    "                       of what defines the run, the sequences' content among it, and\n"
    "                       N)\n\n"
    "For comparable sides, start every vLLM server with --no-enable-prefix-caching\n"
    "(vLLM #42019), one --logprobs-mode and one --max-num-batched-tokens. Teacher forcing\n"
    "measures the prefill kernels (vLLM #54035: fp8 KV prefill and decode differ).\n\n"
    "exit status: 0 complete; 1 failure, or scorings that failed after every retry (the run\n"
    "is 'incomplete' and not compared; --resume retries them); 2 usage error; 130 / 143\n"
    "stopped by SIGINT / SIGTERM (what completed is stored).\n";

typedef struct diverge_args {
    const char *sequences, *db, *label, *output, *kind;
    int force, no_floor, no_progress;
    long resume, from_eval, vocab_size;
    shard_spec shard;                /* --shard I/N; count 0 without */
    const char *job;                 /* --job KEY, or job_buf's default */
    char job_buf[SHARD_JOB_MAX];
    diverge_options o;
} diverge_args;

/* --shard I/N into the shard_spec to (a cli_option parse). */
static pg_status parse_shard(char *value, void *to, pg_err *err)
{
    return shard_parse("diverge", value, to, err);
}

/* --endpoint MODE=URL into the diverge_options to (split in place). */
static pg_status parse_endpoint(char *value, void *to, pg_err *err)
{
    diverge_options *o = to;
    return cli_split_endpoint("diverge", value, o->modes, o->urls, &o->n_endpoints, DIV_MAX_SERVERS, err);
}

static pg_status diverge_parse(int argc, char **argv, diverge_args *a, pg_err *err)
{
    memset(a, 0, sizeof *a);
    a->resume = -1;
    a->from_eval = -1;
    a->o.reference = DIV_DEFAULT_REFERENCE;
    a->o.top_k = DIV_DEFAULT_TOP_K;
    a->o.ready_deadline_s = DIVERGE_DEFAULT_READY_S;
    a->o.client.max_in_flight = DIVERGE_DEFAULT_CONCURRENCY;
    a->o.client.timeout_s = DIVERGE_DEFAULT_TIMEOUT_S;
    const cli_option opts[] = {
        {"endpoint", CLI_CALL, .to = &a->o, .parse = parse_endpoint},
        {"sequences", CLI_TEXT, .to = &a->sequences},
        {"from-eval", CLI_LONG, .to = &a->from_eval, .min = 1, .max = CLI_RESUME_MAX},
        {"reference", CLI_TEXT, .to = &a->o.reference},
        {"top-k", CLI_INT, .to = &a->o.top_k, .min = 1, .max = PL_MAX_TOP_K},
        {"server-kind", CLI_TEXT, .to = &a->kind},
        {"vocab-size", CLI_LONG, .to = &a->vocab_size, .min = 1, .max = SEQ_TOKEN_MAX},
        {"no-noise-floor", CLI_FLAG, .to = &a->no_floor},
        {"concurrency", CLI_INT, .to = &a->o.client.max_in_flight, .min = 1,
         .max = DIVERGE_MAX_CONCURRENCY},
        {"timeout", CLI_DOUBLE, .to = &a->o.client.timeout_s, .lo = 1, .hi = DIVERGE_MAX_WAIT_S},
        {"max-attempts", CLI_INT, .to = &a->o.client.max_attempts, .min = 1,
         .max = DIVERGE_MAX_ATTEMPTS},
        {"backoff", CLI_DOUBLE, .to = &a->o.client.backoff_base_s, .lo = DIVERGE_MIN_BACKOFF_S,
         .hi = OA_DEFAULT_BACKOFF_CAP_S},
        {"ready-timeout", CLI_DOUBLE, .to = &a->o.ready_deadline_s, .lo = 0,
         .hi = DIVERGE_MAX_WAIT_S},
        {"api-key-env", CLI_TEXT, .to = &a->o.api_key_env},
        {"output", CLI_TEXT, .to = &a->output},
        {"resume", CLI_LONG, .to = &a->resume, .min = 1, .max = CLI_RESUME_MAX},
        {"force", CLI_FLAG, .to = &a->force},
        {"db", CLI_TEXT, .to = &a->db},
        {"label", CLI_TEXT, .to = &a->label},
        {"no-progress", CLI_FLAG, .to = &a->no_progress},
        {"shard", CLI_CALL, .to = &a->shard, .parse = parse_shard},
        {"job", CLI_TEXT, .to = &a->job},
        {NULL},
    };
    _Static_assert(sizeof opts / sizeof opts[0] <= DIVERGE_OPTION_ROWS, "DIVERGE_OPTION_ROWS");
    if (cli_parse_options("diverge", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    a->o.api_key = cli_env_value(a->o.api_key_env);
    a->o.noise_floor = !a->no_floor;
    a->o.sequences_path = a->sequences;
    a->o.vocab_size = a->vocab_size;
    if (a->kind != NULL && div_server_kind_parse(a->kind, &a->o.kind, err) != PG_OK)
        return pg_fail(err, PG_ERR_USAGE, "diverge: --server-kind: %s", err->msg);
    if ((a->sequences == NULL) == (a->from_eval < 0))
        return pg_fail(err, PG_ERR_USAGE, "diverge: give either --sequences FILE or --from-eval "
                                          "RUN");
    if (a->o.n_endpoints < 2)
        return pg_fail(err, PG_ERR_USAGE, "diverge: give at least two --endpoint MODE=URL (the "
                                          "reference %s and a mode to compare)", a->o.reference);
    if (a->job != NULL && a->shard.count == 0)
        return pg_fail(err, PG_ERR_USAGE, "diverge: --job KEY only goes with --shard I/N");
    if (a->job != NULL && shard_job_check("diverge", a->job, err) != PG_OK) return err->code;
    if (a->force && a->resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "diverge: --force only goes with --resume RUN");
    for (int i = 0; i < a->o.n_endpoints; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(a->o.modes[i], a->o.modes[j]) == 0 &&
                strcmp(a->o.urls[i], a->o.urls[j]) == 0)
                return pg_fail(err, PG_ERR_USAGE, "diverge: --endpoint %s=%s is given twice",
                               a->o.modes[i], a->o.urls[i]);
    return PG_OK;
}

/* The sequences of eval run id (in s) into *seqs: its samples' stored token ids. */
static pg_status load_from_eval(pg_store *s, long id, div_sequences *seqs, int64_t *left_out,
                                pg_err *err)
{
    store_run_state rs;
    pg_status st = store_run_read(s, id, &rs, err);
    if (st != PG_OK) return st;
    if (strcmp(rs.kind, "eval") != 0)
        st = pg_fail(err, PG_ERR_USAGE, "diverge: --from-eval %ld is a %s run, not an eval", id,
                     rs.kind);
    store_run_state_free(&rs);
    eval_token_ids *rows = NULL;
    size_t n = 0;
    if (st == PG_OK) st = eval_store_read_token_ids(s, id, &rows, &n, err);
    if (st == PG_OK) st = div_sequences_from_eval(rows, n, id, seqs, left_out, err);
    eval_store_token_ids_free(rows, n);
    return st;
}

/* What defines the run, as its config_json (db/diverge_config.h):
 * reference, K, modes, the noise floor and the sequences' digest (before
 * any --shard). A resume must match it. */
static diverge_run_config diverge_config(const diverge_args *a, const char *sequences_digest)
{
    return (diverge_run_config){.reference = a->o.reference,
                                .top_k = a->o.top_k,
                                .noise_floor = a->o.noise_floor,
                                .sequences_digest = sequences_digest,
                                .modes = a->o.modes,
                                .n_modes = a->o.n_endpoints};
}

/* Makes seqs the sequences of part a->shard (shard_problems over their
 * ids) and records the part in c: "job" (a->job, else the default key
 * over *config's defining fields), "shard" and "shard_sequences", the ids
 * it owns; *config is then written again from c. */
static pg_status diverge_shard(diverge_args *a, div_sequences *seqs, diverge_run_config *c,
                               cJSON **config, pg_err *err)
{
    if (a->job == NULL) {
        if (shard_default_job(*config, a->shard.count, a->job_buf, err) != PG_OK) return err->code;
        a->job = a->job_buf;
    }
    const char **ids = calloc(seqs->n + 1, sizeof *ids);
    unsigned char *keep = calloc(seqs->n + 1, 1);
    pg_status st = ids != NULL && keep != NULL && seqs->n <= INT_MAX
                       ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    for (size_t i = 0; st == PG_OK && i < seqs->n; i++) ids[i] = seqs->v[i].id;
    if (st == PG_OK) st = shard_problems(ids, (int)seqs->n, a->shard, keep, err);
    if (st == PG_OK) {
        int owned = 0;
        for (size_t i = 0; i < seqs->n; i++)
            if (keep[i]) ids[owned++] = ids[i];
        c->part = (run_config_part){.job = a->job, .index = a->shard.index,
                                    .count = a->shard.count};
        c->shard_sequences = ids;
        c->n_shard_sequences = owned;
        cJSON_Delete(*config);
        *config = diverge_config_write(c);
        c->shard_sequences = NULL;  /* ids go below */
        if (*config == NULL) st = pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    }
    if (st == PG_OK) div_sequences_keep(seqs, keep);
    free(ids);
    free(keep);
    return st;
}

/* A resumed run's config must be now's (diverge_config_write's). */
static pg_status check_resume(pg_store *s, int64_t run_id, const cJSON *now, int force,
                              pg_err *err)
{
    store_run_state rs;
    pg_status st = store_run_read(s, run_id, &rs, err);
    if (st != PG_OK) return st;
    diverge_config_doc had;
    pg_err unread = {0};
    const pg_status rst = diverge_config_read(rs.config_json, &had, &unread);
    if (rst == PG_ERR_NOMEM) st = pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    else if (rst != PG_OK || strcmp(rs.kind, "diverge") != 0)
        st = pg_fail(err, PG_ERR_USAGE, "diverge: run %lld is no divergence run", (long long)run_id);
    /* What defines the run, and the part's place in a sharded job. A run
     * stored before the sequences had a digest is held to its stored
     * sequences alone (diverge_prepare compares them). */
    static const char *const fields[] = {RUN_CONFIG_REFERENCE, RUN_CONFIG_TOP_K,
                                         RUN_CONFIG_NOISE_FLOOR, RUN_CONFIG_MODES,
                                         RUN_CONFIG_SEQUENCES_DIGEST, RUN_CONFIG_JOB,
                                         RUN_CONFIG_SHARD};
    for (size_t i = 0; st == PG_OK && i < sizeof fields / sizeof fields[0]; i++)
        if (!(strcmp(fields[i], RUN_CONFIG_SEQUENCES_DIGEST) == 0 &&
              !cJSON_HasObjectItem(had.tree, fields[i])) &&
            (cJSON_HasObjectItem(had.tree, fields[i]) || cJSON_HasObjectItem(now, fields[i])) &&
            !cJSON_Compare(cJSON_GetObjectItemCaseSensitive(had.tree, fields[i]),
                           cJSON_GetObjectItemCaseSensitive(now, fields[i]), 1))
            st = pg_fail(err, PG_ERR_USAGE, "diverge: --resume %lld: '%s' differs from the run's "
                         "(a resume scores what defines the run the same way)",
                         (long long)run_id, fields[i]);
    diverge_config_doc_free(&had);
    store_run_state_free(&rs);
    if (st == PG_OK) st = store_run_reopen(s, run_id, "diverge", force, err);
    return st;
}

int cmd_diverge(int argc, char **argv)
{
    pg_err err = {0};
    diverge_args a;
    if (diverge_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    div_sequences seqs = {0};
    pg_status st = a.sequences != NULL ? div_sequences_load(a.sequences, &seqs, &err) : PG_OK;
    char from[64] = "";
    if (a.from_eval > 0) snprintf(from, sizeof from, "eval run %ld", a.from_eval);
    interrupt_install();
    a.o.client.stop = interrupt_flag();
    progress bar;
    const pg_notes notes = progress_notes(&bar, !a.no_progress);
    a.o.notes = &notes;
    const char *db_path = cli_db_path(a.db);
    pg_store *s = NULL;
    int64_t run_id = -1;
    int taken = 0;
    if (st == PG_OK) st = store_open(db_path, &s, &err);
    int64_t left_out = 0;
    if (st == PG_OK && a.from_eval > 0) st = load_from_eval(s, a.from_eval, &seqs, &left_out, &err);
    char digest[SEQ_DIGEST_MAX];
    if (st == PG_OK) st = div_sequences_digest(&seqs, digest, sizeof digest, &err);
    const size_t n_all = seqs.n;
    diverge_run_config c_now = diverge_config(&a, digest);
    cJSON *cfg = st == PG_OK ? diverge_config_write(&c_now) : NULL;
    if (st == PG_OK && cfg == NULL) st = pg_fail(&err, PG_ERR_NOMEM, "diverge: out of memory");
    if (st == PG_OK && a.shard.count > 0) st = diverge_shard(&a, &seqs, &c_now, &cfg, &err);
    char *config = st == PG_OK ? cJSON_PrintUnformatted(cfg) : NULL;
    if (st == PG_OK && config == NULL) st = pg_fail(&err, PG_ERR_NOMEM, "diverge: out of memory");
    if (st == PG_OK && a.resume > 0) {
        run_id = a.resume;
        st = check_resume(s, run_id, cfg, a.force, &err);
    } else if (st == PG_OK) {
        char host[DIVERGE_HOST_MAX];
        store_this_host(host, sizeof host);
        const store_run_info info = {"diverge", a.label, PRECGATE_GIT_REV, host,
                                     "openai-compatible servers", config};
        st = store_run_begin(s, &info, &run_id, &err);
    }
    taken = st == PG_OK;
    diverge_session *ds = NULL;
    diverge_counts c = {0};
    if (st == PG_OK) {
        term_printf(stdout, "run %lld: diverge, %zu sequences from %s, reference %s, K = %d\n",
                    (long long)run_id, seqs.n, a.sequences ? a.sequences : from, a.o.reference,
                    a.o.top_k);
        if (left_out > 0)
            term_printf(stdout, "run %lld: %lld failed samples of %s left out (no completion)\n",
                        (long long)run_id, (long long)left_out, from);
        if (a.shard.count > 0)
            term_printf(stdout, "run %lld: shard %d/%d of job %s: %zu of the %zu sequences\n",
                        (long long)run_id, a.shard.index, a.shard.count, a.job, seqs.n, n_all);
        fflush(stdout);
    }
    /* A part that owns no sequence (more parts than sequences) is complete
     * as it is: it scores nothing and contacts no server. */
    const int empty_part = a.shard.count > 0 && seqs.n == 0;
    if (st == PG_OK && !empty_part) st = diverge_prepare(s, run_id, &seqs, &a.o, &ds, &err);
    if (st == PG_OK && !empty_part) st = diverge_score(ds, s, run_id, &c, &err);
    if (st == PG_OK && !empty_part && c.errors == 0) {
        int n_modes = 0;
        const char *const *modes = diverge_session_modes(ds, &n_modes);
        st = diverge_compare(s, run_id, a.o.reference, modes, n_modes, a.o.top_k, &err);
    }
    if (st == PG_OK && !empty_part && c.errors == 0)
        st = divergence_results_print(s, run_id, stdout, &err);
    if (taken) {
        const char *status = st == PG_ERR_INTERRUPTED ? "interrupted"
                             : st != PG_OK            ? (a.resume > 0 ? "incomplete" : "failed")
                             : c.errors > 0           ? "incomplete"
                                                      : "complete";
        char why[PG_ERR_MSG_MAX];
        snprintf(why, sizeof why, "interrupted by %s", interrupt_signal_name(interrupt_signal()));
        pg_err fin = {0};
        const pg_status fst =
            store_run_finish(s, run_id, status,
                             st == PG_ERR_INTERRUPTED ? why : st != PG_OK ? err.msg : NULL, &fin);
        if (fst != PG_OK && st == PG_OK) {
            err = fin;
            st = fin.code;
        }
        if (st == PG_OK && c.errors > 0)
            term_printf(stdout, "run %lld incomplete: %lld scorings failed after every retry (not "
                        "compared); precgate diverge --resume %lld retries them\n",
                        (long long)run_id, (long long)c.errors, (long long)run_id);
        else if (st == PG_OK)
            term_printf(stdout, "run %lld complete: %s (%lld scorings stored, %lld already "
                        "there)\n", (long long)run_id, db_path, (long long)c.scored,
                        (long long)c.skipped);
        else if (st == PG_ERR_INTERRUPTED)
            term_printf(stderr, "precgate: run %lld %s: %lld scorings stored; precgate diverge "
                        "--resume %lld continues it\n", (long long)run_id, why,
                        (long long)c.scored, (long long)run_id);
        else
            term_printf(stderr, "precgate: run %lld marked %s in %s\n", (long long)run_id, status,
                        db_path);
        if (st == PG_OK && empty_part && a.output != NULL)
            term_printf(stdout, "results: %s not written: shard %d/%d owns no sequence\n",
                        a.output, a.shard.index, a.shard.count);
        else if (st == PG_OK && c.errors == 0 && a.output != NULL) {
            st = divergence_results_write_json(s, run_id, a.output, &err);
            if (st == PG_OK) term_printf(stdout, "results: wrote %s (run %lld)\n", a.output,
                                         (long long)run_id);
        }
    }
    diverge_session_free(ds);
    store_close(s);
    cJSON_Delete(cfg);
    free(config);
    div_sequences_free(&seqs);
    if (st != PG_OK) return cli_report(&err);
    return c.errors > 0 ? cli_exit_code(PG_ERR_HTTP) : 0;
}
