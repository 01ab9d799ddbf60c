/* test_diverge_run.c: Criterion tests of teacher-forced divergence (evals/diverge_run.h)
 * against loopback servers that speak vLLM's, SGLang's and llama-server's exact reply
 * shapes, computing each reply from the request: a known model whose
 * distributions the test also computes itself, so the KL precgate reports
 * is checked against the exact one (K = the vocabulary: the bound is the
 * KL). Bad replies of each kind are refused naming the server and the
 * sequence, and never stored. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "db/divergence_store.h"
#include "db/store.h"
#include "evals/diverge_run.h"
#include "evals/divergence.h"
#include "fake_divergence_server.h"
#include "testutil.h"

/* The fake model's vocabulary; K = V makes the top-K bound exact. */
#define V FAKE_DIV_V

static char g_db[PATH_MAX + 16];
static char g_seqs[PATH_MAX + 16];

static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/precgate.db", tu_dir);
    snprintf(g_seqs, sizeof g_seqs, "%s/seqs.jsonl", tu_dir);
}

TestSuite(diverge_run, .init = setup, .fini = tu_scratch_teardown);

/* Writes the sequences file: fake_div_write_sequences' three sequences. */
static void write_sequences(void)
{
    fake_div_write_sequences(g_seqs);
}

/* The exact KL(P||Q) of the fake model over the scored positions of the
 * sequences above, and their count: what precgate must report at K = V. */
static double exact_mean_kl(double shift_q, size_t *n_out)
{
    static const int s1[] = {1, 5, 9, 13, 2, 30, 7, 7, 21, 0, 39, 4};
    static const int s2[] = {3, 3, 8, 1, 17, 25, 6, 11, 2};
    int s3[20];
    for (int i = 0; i < 20; i++) s3[i] = 10 + i;
    const struct { const int *t; size_t n, from; } seqs[] = {{s1, 12, 3}, {s2, 9, 1}, {s3, 20, 10}};
    double sum = 0;
    size_t n = 0;
    for (size_t q = 0; q < 3; q++)
        for (size_t t = seqs[q].from; t < seqs[q].n; t++) {
            double p[V], r[V];
            model_logprobs(0, seqs[q].t[t - 1], t, p);
            model_logprobs(shift_q, seqs[q].t[t - 1], t, r);
            double kl = 0;
            for (int i = 0; i < V; i++) kl += exp(p[i]) * (p[i] - r[i]);
            sum += kl;
            n++;
        }
    *n_out = n;
    return sum / (double)n;
}

static diverge_options opts_for(const char *ref_url, const char *mode_url, int top_k)
{
    diverge_options o = {.n_endpoints = 2, .reference = "bf16", .top_k = top_k,
                         .noise_floor = 1, .ready_deadline_s = 5, .sequences_path = g_seqs};
    o.modes[0] = "bf16";
    o.urls[0] = ref_url;
    o.modes[1] = "fp8kv";
    o.urls[1] = mode_url;
    o.client.max_in_flight = 2;
    o.client.max_attempts = 2;
    o.client.backoff_base_s = 0.01;
    o.client.timeout_s = 10;
    return o;
}

/* Runs prepare, score and compare; the status of the first that fails. */
static pg_status run_all(pg_store *s, int64_t run, diverge_options *o, diverge_counts *c,
                         pg_err *err)
{
    div_sequences seqs = {0};
    pg_status st = div_sequences_load(g_seqs, &seqs, err);
    diverge_session *ds = NULL;
    if (st == PG_OK) st = diverge_prepare(s, run, &seqs, o, &ds, err);
    if (st == PG_OK) st = diverge_score(ds, s, run, c, err);
    if (st == PG_OK && c->errors == 0) {
        int n = 0;
        const char *const *modes = diverge_session_modes(ds, &n);
        st = diverge_compare(s, run, o->reference, modes, n, o->top_k, err);
    }
    diverge_session_free(ds);
    div_sequences_free(&seqs);
    return st;
}

static int64_t begin_run(pg_store *s)
{
    store_run_info info = {.kind = "diverge"};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    return id;
}

static pg_store *open_ok(void)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(g_db, &s, &err), PG_OK, "%s", err.msg);
    return s;
}

/* The summary of (mode, role) in run. */
static div_summary summary_of(pg_store *s, int64_t run, const char *mode, const char *role)
{
    div_summary_stored *rows = NULL;
    size_t n = 0;
    pg_err err = {0};
    cr_assert_eq(divergence_store_read_summaries(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    div_summary out = {0};
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].mode, mode) == 0 && strcmp(rows[i].role, role) == 0) {
            out = rows[i].s;
            found = 1;
        }
    divergence_store_summaries_free(rows, n);
    cr_assert(found, "no %s summary of %s", role, mode);
    return out;
}

/* Both kinds of server, K = V: the bound is the exact KL the test computes. */
static void exact_kl_case(speaks llama)
{
    write_sequences();
    fake_model ref = {.shift = 0, .llama = llama}, mode = {.shift = 0.8, .llama = llama};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, V);
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.errors, 0);
    cr_assert_eq(c.scored, 9, "3 sequences x (bf16, fp8kv, floor): %lld", (long long)c.scored);
    size_t n = 0;
    const double want = exact_mean_kl(0.8, &n);
    const div_summary m = summary_of(s, run, "fp8kv", "mode");
    cr_assert_eq(m.n_positions, n);
    cr_assert_eq(m.n_sequences, 3);
    cr_assert(want > 0.05, "the shift makes a real divergence: %g", want);
    cr_assert(fabs(m.kld_mean - want) < 1e-9 * want, "KLD %.12g, exact %.12g", m.kld_mean, want);
    cr_assert(m.tail_mass_median < 1e-12, "K = V leaves no tail: %g", m.tail_mass_median);
    /* The reference against itself: exactly 0, every top the same. */
    const div_summary f = summary_of(s, run, "bf16", "floor");
    cr_assert_eq(f.kld_mean, 0.0);
    cr_assert_eq(f.same_top, 1.0);
    /* llama-server: the given token is in a top-V list, so dp is known too. */
    cr_assert_eq(m.n_given, n);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

Test(diverge_run, vllm_prompt_logprobs_give_the_exact_kl_at_k_equal_vocab)
{
    exact_kl_case(0);
}

Test(diverge_run, llama_server_positions_give_the_exact_kl_at_k_equal_vocab)
{
    exact_kl_case(SPEAKS_LLAMA);
}

Test(diverge_run, sglang_input_logprobs_give_the_exact_kl_at_k_equal_vocab)
{
    exact_kl_case(SPEAKS_SGLANG);
}

/* A mode server whose tokenizer differs: the run is an error naming both
 * servers before anything is scored, and nothing is stored. */
static void tokenizer_case(speaks llama, fault f, const char *needle)
{
    write_sequences();
    fake_model ref = {.shift = 0, .llama = llama}, mode = {.shift = 0.5, .fault = f, .llama = llama};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, 5);
    diverge_counts c = {0};
    pg_err err = {0};
    const pg_status st = run_all(s, run, &o, &c, &err);
    cr_assert_eq(st, PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, needle) && strstr(err.msg, ua) && strstr(err.msg, ub), "%s",
              err.msg);
    cr_assert_eq(c.scored, 0);
    sqlite3 *db = tu_db_open("precgate.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores WHERE mode = 'fp8kv'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_summaries"), 0);
    sqlite3_close(db);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

/* The notes of a run, collected. */
typedef struct collected_notes {
    char text[8192];
} collected_notes;

static void collect_warning(void *ctx, const char *text)
{
    collected_notes *c = ctx;
    const size_t at = strlen(c->text);
    snprintf(c->text + at, sizeof c->text - at, "%s\n", text);
}

/* fault_case, and the failure said for each sequence names the mode, the
 * sequence and what was wrong. */
static void fault_said(speaks llama, fault f, const char *needle)
{
    write_sequences();
    fake_model ref = {.shift = 0, .llama = llama}, mode = {.shift = 0.5, .fault = f, .llama = llama};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, 5);
    collected_notes cn = {{0}};
    pg_notes notes = {.warning = collect_warning, .ctx = &cn};
    o.notes = &notes;
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.errors, 3, "%s", cn.text);
    cr_assert(strstr(cn.text, "mode fp8kv, sequence 's1' not scored") != NULL, "%s", cn.text);
    cr_assert(strstr(cn.text, needle) != NULL, "want '%s' in: %s", needle, cn.text);
    cr_assert(strstr(cn.text, ub) != NULL, "names the server: %s", cn.text);
    /* Retried? A shape error is not worth a second attempt. */
    cr_assert(strstr(cn.text, "after 2 attempts") == NULL, "%s", cn.text);
    sqlite3 *db = tu_db_open("precgate.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores WHERE mode = 'fp8kv'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores WHERE mode = 'bf16'"), 6);
    sqlite3_close(db);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

Test(diverge_run, vllm_shorter_list_is_refused_by_name)
{
    fault_said(0, FAULT_SHORT, "entries");
}

Test(diverge_run, vllm_generated_token_logprobs_only_is_refused)
{
    fault_said(0, FAULT_GENERATED, "prompt_logprobs");
}

Test(diverge_run, vllm_nan_logprob_is_refused)
{
    fault_said(0, FAULT_NAN, "sequence 's1'");
}

Test(diverge_run, vllm_key_that_is_no_token_id_is_refused)
{
    fault_said(0, FAULT_NEG_ID, "sequence 's1'");
}

Test(diverge_run, llama_id_outside_the_vocabulary_is_refused)
{
    fault_said(1, FAULT_BIG_ID, "vocabulary");
}

Test(diverge_run, sglang_shorter_list_is_refused_by_name)
{
    fault_said(SPEAKS_SGLANG, FAULT_SHORT, "entries and input_top_logprobs");
}

Test(diverge_run, sglang_without_input_top_logprobs_is_refused)
{
    fault_said(SPEAKS_SGLANG, FAULT_GENERATED, "no meta_info.input_top_logprobs");
}

Test(diverge_run, sglang_nan_logprob_is_refused)
{
    fault_said(SPEAKS_SGLANG, FAULT_NAN, "not JSON");
}

Test(diverge_run, sglang_id_outside_the_vocabulary_is_refused)
{
    fault_said(SPEAKS_SGLANG, FAULT_NEG_ID, "not a token id of the vocabulary");
}

Test(diverge_run, different_tokenizers_score_nothing)
{
    tokenizer_case(0, FAULT_TOKENIZER, "tokenize the probe string differently");
}

Test(diverge_run, a_resume_sends_only_what_is_missing)
{
    write_sequences();
    fake_model ref = {.shift = 0}, mode = {.shift = 0.8};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, V);
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    size_t n = 0;
    const double want = exact_mean_kl(0.8, &n);
    /* Lose two scorings, as a kill would; the resume sends those two only. */
    sqlite3 *db = tu_db_open("precgate.db");
    tu_sql_exec(db, "DELETE FROM div_scores WHERE (mode = 'fp8kv' AND seq_id = 's2') OR "
                    "(mode = 'bf16' AND pass = 1 AND seq_id = 's3')");
    tu_sql_exec(db, "DELETE FROM div_summaries");
    sqlite3_close(db);
    const int hits_a = a.routes[3].hits, hits_b = b.routes[3].hits;
    diverge_counts c2 = {0};
    cr_assert_eq(run_all(s, run, &o, &c2, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c2.scored, 2);
    cr_assert_eq(c2.skipped, 7);
    cr_assert_eq(a.routes[3].hits - hits_a, 1, "one reference request (the floor of s3)");
    cr_assert_eq(b.routes[3].hits - hits_b, 1, "one fp8kv request (s2)");
    const div_summary m = summary_of(s, run, "fp8kv", "mode");
    cr_assert(fabs(m.kld_mean - want) < 1e-9 * want, "KLD %.12g, exact %.12g", m.kld_mean, want);
    db = tu_db_open("precgate.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores"), 9);
    sqlite3_close(db);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

Test(diverge_run, a_mode_without_a_sequence_cannot_be_compared)
{
    write_sequences();
    fake_model ref = {.shift = 0}, mode = {.shift = 0.8};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, V);
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    sqlite3 *db = tu_db_open("precgate.db");
    tu_sql_exec(db, "DELETE FROM div_scores WHERE mode = 'fp8kv' AND seq_id = 's2'");
    sqlite3_close(db);
    const char *modes[] = {"bf16", "fp8kv"};
    cr_assert_eq(diverge_compare(s, run, "bf16", modes, 2, V, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "mode fp8kv has no scores of sequence 's2'"), "%s", err.msg);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

/* The integer sql gives on the database (-1 when it cannot be read yet). */
static long long db_count(const char *sql)
{
    sqlite3 *db = NULL;
    long long v = -1;
    if (sqlite3_open_v2(g_db, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* Sequences of the kill test: more than a second of slow scoring. */
#define KILL_SEQUENCES 24
/* Scorings of the kill test: every sequence by bf16, fp8kv and the floor. */
#define KILL_SCORINGS (3 * KILL_SEQUENCES)

/* How long the scoring count must stand still to count as settled, and how
 * many naps settled_scoring_hits waits at most. */
#define SETTLE_NAP_MS 200
#define SETTLE_TRIES 25

/* The scoring requests (route 3) servers a and b have received, read under
 * their locks. */
static int scoring_hits(fake_server *a, fake_server *b)
{
    int n = 0;
    fake_server *s[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        pthread_mutex_lock(&s[j]->mu);
        n += s[j]->routes[3].hits;
        pthread_mutex_unlock(&s[j]->mu);
    }
    return n;
}

/* scoring_hits once it has not moved for SETTLE_NAP_MS: a request in
 * flight when its sender died is counted by then, not after. */
static int settled_scoring_hits(fake_server *a, fake_server *b)
{
    const struct timespec nap = {0, SETTLE_NAP_MS * 1000 * 1000};
    int now = scoring_hits(a, b);
    for (int k = 0; k < SETTLE_TRIES; k++) {
        nanosleep(&nap, NULL);
        const int later = scoring_hits(a, b);
        if (later == now) break;
        now = later;
    }
    return now;
}

Test(diverge_run, kill_9_during_scoring_then_resume_loses_nothing_and_scores_nothing_twice)
{
    FILE *f = fopen(g_seqs, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < KILL_SEQUENCES; i++)
        fprintf(f, "{\"id\":\"k%02d\",\"tokens\":[%d,%d,%d,%d,%d,%d]}\n", i, i % V, (i + 3) % V,
                (i * 7) % V, 5, (i + 11) % V, 2);
    fclose(f);
    fake_model ref = {.shift = 0, .delay_ms = 40}, mode = {.shift = 0.8, .delay_ms = 40};
    fake_server a, b;
    serve(&a, &ref);
    serve(&b, &mode);
    char args[3 * PATH_MAX];
    snprintf(args, sizeof args, "diverge --endpoint bf16=http://127.0.0.1:%d --endpoint "
             "fp8kv=http://127.0.0.1:%d --sequences '%s' --db '%s' --no-progress --top-k %d "
             "--concurrency 1 --ready-timeout 5", a.port, b.port, g_seqs, g_db, V);
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/diverge.log", tu_dir);
    const int pid = tu_spawn_precgate(args, log, NULL);
    cr_assert(pid > 0);
    /* Kill -9 once some, not all, scorings are stored. */
    struct timespec nap = {0, 20 * 1000 * 1000};
    long long stored = -1;
    for (int k = 0; k < 500 && (stored = db_count("SELECT count(*) FROM div_scores")) < 10; k++)
        nanosleep(&nap, NULL);
    cr_assert_geq(stored, 10, "scoring did not start");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    stored = db_count("SELECT count(*) FROM div_scores");
    cr_assert(stored >= 10 && stored < KILL_SCORINGS, "stored %lld of %d at the kill", stored,
              KILL_SCORINGS);
    /* A request the killed process had sent may still reach a server after
     * the kill: count the scoring requests once they stop changing. */
    const int hits = settled_scoring_hits(&a, &b);
    char *out = NULL;
    char resume[3 * PATH_MAX + 32];
    snprintf(resume, sizeof resume, "%s --resume 1", args);
    const int rc = tu_run_precgate(resume, &out);
    cr_assert_eq(rc, 0, "%s", out);
    /* The resume sent exactly what was missing: nothing lost, nothing twice. */
    const int sent = a.routes[3].hits + b.routes[3].hits - hits;
    cr_assert_eq(sent, KILL_SCORINGS - stored, "resume sent %d, %lld were missing: %s", sent,
                 KILL_SCORINGS - stored, out);
    cr_assert_eq(db_count("SELECT count(*) FROM div_scores"), KILL_SCORINGS);
    cr_assert_eq(db_count("SELECT count(*) FROM div_summaries"), 2);
    cr_assert(strstr(out, "run 1 complete") != NULL, "%s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
}

/* A vLLM chat reply streamed with return_token_ids: the prompt's ids in the
 * first event, the completion's in each delta, usage at the end
 * (PROMPT_TOKENS_SAID: the usage's prompt count, to make it disagree). */
/* The same reply from a server that returns no token ids. */
#define CHAT_STREAM_NO_IDS                                                                      \
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","        \
    "\"content\":\"so \\\\boxed{3}\"},\"finish_reason\":\"stop\"}]}\n\n"                        \
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":5}}\n\n" \
    "data: [DONE]\n\n"

#define CHAT_STREAM(PROMPT_TOKENS_SAID)                                                         \
    "data: {\"id\":\"c\",\"prompt_token_ids\":[1,5,9,13],\"choices\":[{\"index\":0,"           \
    "\"delta\":{\"role\":\"assistant\",\"content\":\"so \"},\"token_ids\":[7,2]}]}\n\n"          \
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\\boxed{3}\"},"    \
    "\"token_ids\":[30,4,11],\"finish_reason\":\"stop\"}]}\n\n"                                 \
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":" #PROMPT_TOKENS_SAID     \
    ",\"completion_tokens\":5}}\n\n"                                                           \
    "data: [DONE]\n\n"

/* Runs an eval of two problems against a (with the chat reply given) and
 * then diverge --from-eval 1 against a and b; returns diverge's exit status
 * and its output in *out. */
static int eval_then_diverge(const char *chat, const char *eval_flags, char **out)
{
    const char *traces = "{\"id\":\"p1\",\"problem\":\"1+2?\",\"answer\":3}\n"
                         "{\"id\":\"p2\",\"problem\":\"2+1?\",\"answer\":3}\n";
    char tpath[PATH_MAX + 16];
    snprintf(tpath, sizeof tpath, "%s/t.jsonl", tu_dir);
    tu_write_file(tpath, traces, strlen(traces));
    static fake_model ref = {.shift = 0}, mode = {.shift = 0.8};
    static fake_server a, b;
    serve(&a, &ref);
    serve(&b, &mode);
    fs_route(&a, "/v1/chat/completions",
             (fs_reply[]){{200, chat, "text/event-stream", NULL, 0, 0}}, 1);
    char *eout = NULL;
    int rc = tu_run_precgatef(&eout, "eval --traces '%s' --endpoint bf16=http://127.0.0.1:%d "
                              "--db '%s' --no-progress --ready-timeout 5 %s", tpath, a.port, g_db,
                              eval_flags);
    cr_assert_eq(rc, 0, "%s", eout);
    free(eout);
    rc = tu_run_precgatef(out, "diverge --from-eval 1 --endpoint bf16=http://127.0.0.1:%d "
                          "--endpoint fp8kv=http://127.0.0.1:%d --db '%s' --no-progress "
                          "--top-k %d --ready-timeout 5", a.port, b.port, g_db, V);
    /* The chat request asked for the ids unless told not to. */
    int asked = 0;
    for (int i = 0; i < a.n_log; i++)
        if (strcmp(a.log[i].path, "/v1/chat/completions") == 0)
            asked += strstr(a.log[i].body, "\"return_token_ids\":true") != NULL;
    cr_assert_eq(asked, strstr(eval_flags, "--no-token-ids") ? 0 : 2);
    fs_stop(&a);
    fs_stop(&b);
    return rc;
}

Test(diverge_run, from_eval_scores_the_samples_by_their_recorded_ids)
{
    char *out = NULL;
    const int rc = eval_then_diverge(CHAT_STREAM(4), "", &out);
    cr_assert_eq(rc, 0, "%s", out);
    sqlite3 *db = tu_db_open("precgate.db");
    /* Two samples, each prompt [1,5,9,13] then completion [7,2,30,4,11], scored from 4. */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_sequences WHERE run_id = 2"), 2);
    char *seq = tu_sql_text(db, "SELECT seq_id || ' ' || n_tokens || ' ' || score_from || ' ' || "
                                "hex(tokens) FROM div_sequences WHERE run_id = 2 ORDER BY seq_id "
                                "LIMIT 1");
    cr_assert_str_eq(seq, "t/bf16/medium/p1#0 9 4 "
                          "010000000500000009000000"
                          "0D000000070000000200000"
                          "01E000000040000000B000000");
    free(seq);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores WHERE run_id = 2"), 6);
    sqlite3_close(db);
    cr_assert(strstr(out, "2 sequences from eval run 1") != NULL, "%s", out);
    free(out);
}

Test(diverge_run, from_eval_refuses_ids_that_disagree_with_usage_by_name)
{
    char *out = NULL;
    const int rc = eval_then_diverge(CHAT_STREAM(6), "", &out);
    cr_assert_neq(rc, 0, "%s", out);
    cr_assert(strstr(out, "eval run 1, sample t/bf16/medium/p1#0: its token ids are unusable "
                          "(prompt_token_ids has 4 ids, usage.prompt_tokens says 6)") != NULL,
              "%s", out);
    sqlite3 *db = tu_db_open("precgate.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM div_scores"), 0);
    sqlite3_close(db);
    free(out);
}

Test(diverge_run, from_eval_refuses_samples_without_ids_by_name)
{
    char *out = NULL;
    const int rc = eval_then_diverge(CHAT_STREAM_NO_IDS, "--no-token-ids", &out);
    cr_assert_neq(rc, 0, "%s", out);
    cr_assert(strstr(out, "sample t/bf16/medium/p1#0: no token ids were stored") != NULL, "%s",
              out);
    free(out);
}

/* Every row of sql on the database at path, one line per row, each value
 * exact (a REAL as %a, a BLOB in hex): what two databases must hold alike
 * (malloc'd). */
static char *db_rows(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    cat(&buf, &len, &cap, "%s", "");
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            switch (sqlite3_column_type(st, c)) {
            case SQLITE_INTEGER: cat(&buf, &len, &cap, "%lld|", sqlite3_column_int64(st, c)); break;
            case SQLITE_FLOAT: cat(&buf, &len, &cap, "%a|", sqlite3_column_double(st, c)); break;
            case SQLITE_TEXT: cat(&buf, &len, &cap, "'%s'|", sqlite3_column_text(st, c)); break;
            case SQLITE_BLOB: {
                const unsigned char *b = sqlite3_column_blob(st, c);
                for (int i = 0; i < sqlite3_column_bytes(st, c); i++)
                    cat(&buf, &len, &cap, "%02x", b[i]);
                cat(&buf, &len, &cap, "|");
                break;
            }
            default: cat(&buf, &len, &cap, "NULL|");
            }
        }
        cat(&buf, &len, &cap, "\n");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return buf;
}

/* What a diverge run computed, run id aside: its summaries and positions. */
#define DIVERGE_SUMMARY_ROWS                                                                    \
    "SELECT mode, role, reference, top_k, n_sequences, n_positions, n_given, kld_mean, "        \
    "kld_mean_se, kld_ci_low, kld_ci_high, kld_p50, kld_p90, kld_p95, kld_p99, kld_p999, "     \
    "kld_max, same_top, same_top_se, mean_dp, rms_dp, mean_dlogprob, ppl_ratio, "              \
    "tail_mass_median FROM div_summaries WHERE run_id = %d ORDER BY mode, role"
#define DIVERGE_POSITION_ROWS                                                                   \
    "SELECT mode, role, seq_id, n_positions, packed FROM div_positions WHERE run_id = %d "    \
    "ORDER BY mode, role, seq_id"

/* The summaries and positions of run run_id in path, as db_rows gives them. */
static char *diverge_computed(const char *path, int run_id)
{
    char sql[1024];
    snprintf(sql, sizeof sql, DIVERGE_SUMMARY_ROWS, run_id);
    char *sums = db_rows(path, sql);
    snprintf(sql, sizeof sql, DIVERGE_POSITION_ROWS, run_id);
    char *pos = db_rows(path, sql);
    char *both = NULL;
    size_t len = 0, cap = 0;
    cat(&both, &len, &cap, "%s--\n%s", sums, pos);
    free(sums);
    free(pos);
    return both;
}

/* Scores the sequences file in n_parts parts (a database each), merges
 * them into a fresh database, and checks the merged run computed exactly
 * what the unsharded run `whole` (run 1 of g_db) did. */
static void shards_merge_to(const char *servers, const char *whole, int n_parts)
{
    char into[PATH_MAX + 32], parts[8 * (PATH_MAX + 32)] = "";
    snprintf(into, sizeof into, "%s/merged%d.db", tu_dir, n_parts);
    for (int i = 0; i < n_parts; i++) {
        char part[PATH_MAX + 32];
        snprintf(part, sizeof part, "%s/part%d_of_%d.db", tu_dir, i, n_parts);
        char *out = NULL;
        const int rc = tu_run_precgatef(&out, "diverge %s --sequences '%s' --db '%s' --shard %d/%d",
                                        servers, g_seqs, part, i, n_parts);
        cr_assert_eq(rc, 0, "part %d/%d: %s", i, n_parts, out);
        cr_assert(strstr(out, "complete") != NULL, "%s", out);
        free(out);
        strcat(parts, " '");
        strcat(parts, part);
        strcat(parts, "'");
    }
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "merge --into '%s'%s", into, parts);
    cr_assert_eq(rc, 0, "merge: %s", out);
    cr_assert(strstr(out, "shards merged (diverge") != NULL, "%s", out);
    free(out);
    char *merged = diverge_computed(into, 1);
    cr_assert_str_eq(merged, whole, "%d shards merged differ from the unsharded run", n_parts);
    free(merged);
}

Test(diverge_run, shards_merged_equal_an_unsharded_run)
{
    write_sequences();
    fake_model ref = {.shift = 0}, mode = {.shift = 0.8};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    char servers[512];
    snprintf(servers, sizeof servers, "--endpoint bf16=%s --endpoint fp8kv=%s --no-progress "
             "--top-k 8 --ready-timeout 5", ua, ub);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "diverge %s --sequences '%s' --db '%s'", servers, g_seqs, g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *whole = diverge_computed(g_db, 1);
    cr_assert(strstr(whole, "'fp8kv'|'mode'|'bf16'|8|3|") != NULL, "%s", whole);
    cr_assert(strstr(whole, "'bf16'|'floor'|'bf16'|8|3|") != NULL, "%s", whole);
    /* 2 parts of 2 and 1 sequences; 4 parts, one owning none. */
    shards_merge_to(servers, whole, 2);
    shards_merge_to(servers, whole, 4);
    free(whole);
    fs_stop(&a);
    fs_stop(&b);
}

Test(diverge_run, a_part_that_lacks_an_owned_sequence_is_refused_by_merge)
{
    write_sequences();
    fake_model ref = {.shift = 0}, mode = {.shift = 0.8};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    char p0[PATH_MAX + 32], p1[PATH_MAX + 32], into[PATH_MAX + 32];
    snprintf(p0, sizeof p0, "%s/p0.db", tu_dir);
    snprintf(p1, sizeof p1, "%s/p1.db", tu_dir);
    snprintf(into, sizeof into, "%s/into.db", tu_dir);
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        const int rc = tu_run_precgatef(&out, "diverge --endpoint bf16=%s --endpoint fp8kv=%s "
                                        "--no-progress --top-k 8 --ready-timeout 5 --sequences "
                                        "'%s' --db '%s' --shard %d/2", ua, ub, g_seqs,
                                        i ? p1 : p0, i);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
    }
    /* Part 0 owns s1 (ids sorted, the first run of them): lose its scores and sequence. */
    sqlite3 *db = tu_db_open("p0.db");
    tu_sql_exec(db, "DELETE FROM div_scores WHERE seq_id = 's1'");
    tu_sql_exec(db, "DELETE FROM div_positions WHERE seq_id = 's1'");
    tu_sql_exec(db, "DELETE FROM div_sequences WHERE seq_id = 's1'");
    sqlite3_close(db);
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "merge --into '%s' '%s' '%s'", into, p0, p1);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "owned sequence 's1' not stored") != NULL, "%s", out);
    cr_assert(strstr(out, "precgate diverge --resume 1") != NULL, "%s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
}

/* Runs diverge of the sequences file against ua (bf16) and ub (fp8kv) into g_db. */
static void diverge_into_db(const char *ua, const char *ub)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "diverge --endpoint bf16=%s --endpoint fp8kv=%s "
                                    "--no-progress --top-k %d --ready-timeout 5 --sequences '%s' "
                                    "--db '%s'", ua, ub, V, g_seqs, g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

Test(diverge_run, the_gate_judges_a_run_against_a_baseline_run_of_the_same_sequences)
{
    write_sequences();
    fake_model ref = {.shift = 0}, mode = {.shift = 0.8}, worse = {.shift = 1.6};
    fake_server a, b, w;
    char ua[64], ub[64], uw[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    serve(&w, &worse);
    snprintf(uw, sizeof uw, "http://127.0.0.1:%d", w.port);
    diverge_into_db(ua, ub);  /* run 1 */
    diverge_into_db(ua, uw);  /* run 2: the mode's KLD grew */
    diverge_into_db(ua, ub);  /* run 3: run 1 again */
    /* No budget is configured: the baseline run alone judges. Run 2 against run 1 (automatic). */
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 2 --db '%s'", g_db);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "baseline: run 1 (automatic") != NULL, "%s", out);
    cr_assert(strstr(out, "fp8kv against baseline run 1: mean KLD") != NULL, "%s", out);
    cr_assert(strstr(out, "paired over 3 sequences") != NULL, "%s", out);
    free(out);
    cr_assert_eq(db_count("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = "
                          "'kld_mean_vs_baseline' AND verdict = 'regression' AND "
                          "baseline_run_id = 1"), 1);
    /* Run 3 against run 1: the same servers, an exact rerun: no change. */
    rc = tu_run_precgatef(&out, "gate --run 3 --baseline 1 --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_eq(db_count("SELECT count(*) FROM flags WHERE run_id = 3 AND metric LIKE "
                          "'%_vs_baseline' AND verdict = 'no change'"), 2);
    free(out);
    /* Other sequences: nothing is compared, an error. */
    const char *other = "{\"id\":\"s1\",\"tokens\":[1,5,9,13,2,30,7,7,21,0,39,4],"
                        "\"score_from\":3}\n{\"id\":\"s9\",\"tokens\":[3,3,8,1,17,25,6,11,2]}\n";
    tu_write_file(g_seqs, other, strlen(other));
    diverge_into_db(ua, ub);  /* run 4 */
    rc = tu_run_precgatef(&out, "gate --run 4 --baseline 1 --db '%s'", g_db);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "sequences_digest") != NULL, "%s", out);
    free(out);
    /* runs lists them by their kind. */
    rc = tu_run_precgatef(&out, "runs --kind diverge --json --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    cJSON *list = cJSON_Parse(out);
    cr_assert_eq(cJSON_GetArraySize(list), 4, "%s", out);
    cJSON_Delete(list);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
    fs_stop(&w);
}

Test(diverge_run, a_stated_vocabulary_bounds_every_id_sent_and_replied)
{
    write_sequences();
    /* Their tokenizer's ids stay below 10, inside the vocabularies stated below. */
    fake_model ref = {.shift = 0, .tok_mod = 10}, mode = {.shift = 0.8, .tok_mod = 10};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    /* A sequence token outside it: nothing is scored. */
    int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, 5);
    o.vocab_size = 30;
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "sequence 's1': token 5 is 30, outside the 30-token vocabulary"),
              "%s", err.msg);
    cr_assert_eq(c.scored, 0);
    /* Sequences inside it, but the servers reply with ids past it: refused by name. */
    const char *low = "{\"id\":\"q1\",\"tokens\":[1,2,3,4,5,6]}\n{\"id\":\"q2\",\"tokens\":[7,8,9]}\n";
    tu_write_file(g_seqs, low, strlen(low));
    run = begin_run(s);
    o = opts_for(ua, ub, 5);
    o.vocab_size = 30;
    collected_notes cn = {{0}};
    pg_notes notes = {.warning = collect_warning, .ctx = &cn};
    o.notes = &notes;
    c = (diverge_counts){0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.scored, 0, "%s", cn.text);
    cr_assert(c.errors >= 2, "%s", cn.text);
    cr_assert(strstr(cn.text, "sequence 'q1' not scored") != NULL, "%s", cn.text);
    cr_assert(strstr(cn.text, "does not say its vocabulary") == NULL, "stated: %s", cn.text);
    /* Without it, stderr says the ids are checked >= 0 only. */
    run = begin_run(s);
    o = opts_for(ua, ub, 5);
    cn = (collected_notes){{0}};
    o.notes = &notes;
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_OK, "%s", err.msg);
    cr_assert(strstr(cn.text, "does not say its vocabulary size") != NULL, "%s", cn.text);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}

Test(diverge_run, a_llama_server_of_another_vocabulary_than_stated_is_refused)
{
    write_sequences();
    fake_model ref = {.shift = 0, .llama = SPEAKS_LLAMA}, mode = {.shift = 0.8, .llama = SPEAKS_LLAMA};
    fake_server a, b;
    char ua[64], ub[64];
    serve_pair(&a, &ref, ua, &b, &mode, ub);
    pg_store *s = open_ok();
    const int64_t run = begin_run(s);
    diverge_options o = opts_for(ua, ub, 5);
    o.vocab_size = V + 1;
    diverge_counts c = {0};
    pg_err err = {0};
    cr_assert_eq(run_all(s, run, &o, &c, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "--vocab-size 41") && strstr(err.msg, "40 tokens"), "%s", err.msg);
    store_close(s);
    fs_stop(&a);
    fs_stop(&b);
}
