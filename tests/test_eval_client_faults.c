/*
 * test_eval_client_faults.c: `precgate eval` end to end against loopback
 * servers that answer 200 with something that is not an answer (issue #14
 * section 1), that stop sending mid-stream, stream slowly or queue requests
 * before their first event (section 6), and
 * the client flags that bound attempts (--timeout, --stall-timeout,
 * --max-attempts, --backoff).
 *
 * A broken 200 reply must be retried, then stored as an error (never graded
 * wrong): the run ends 'incomplete', the command exits 1, and --resume sends
 * the sample again.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_openai_server.h"
#include "testutil.h"

TestSuite(eval_client_faults, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

#define CHAT "/v1/chat/completions"
#define SSE "text/event-stream"
/* Client flags that keep each run short: 2 attempts, 10 ms backoff base. */
#define FAST_FLAGS "--max-attempts 2 --backoff 0.01 --concurrency 1 --no-progress --ready-timeout 10"

/* The integer of the sqlite3_mprintf-formatted query on the database at path. */
static long long db_int(const char *path, const char *fmt, const char *arg)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    const long long v = tu_sql_int(db, fmt, arg);
    sqlite3_close(db);
    return v;
}

/* A bf16 and an fp8kv server answering chat16[0..n16-1] and chat8[0..n8-1],
 * started, and "--endpoint bf16=URL --endpoint fp8kv=URL" into eps. */
static void start_pair(fake_server *s16, const fs_reply *chat16, int n16, fake_server *s8,
                       const fs_reply *chat8, int n8, char *eps, size_t size)
{
    char u16[64], u8[64];
    fs_init(s16);
    fs_init(s8);
    fs_route_openai(s16, chat16, n16);
    fs_route_openai(s8, chat8, n8);
    cr_assert(fs_start(s16) && fs_start(s8));
    fs_url(s16, u16, sizeof u16);
    fs_url(s8, u8, sizeof u8);
    snprintf(eps, size, "--endpoint bf16=%s --endpoint fp8kv=%s", u16, u8);
}

/* Problems in the traces: enough that one left out still leaves a design
 * that can reach significance (a sign test over 5 pairs can reach p 0.06, 6
 * pairs 0.03), so only the fault decides how a run ends. */
#define N_PROBLEMS 6

/* Writes the traces of N_PROBLEMS problems, a, b, ..., each answered 7. */
static const char *traces_all_seven(void)
{
    return tu_write_sevens(N_PROBLEMS);
}

/* A right unstreamed answer. */
static const char *const k_right =
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"so \\\\boxed{7}\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}";

/* One kind of 200 reply that carries no gradable answer. */
typedef struct broken_case {
    const char *name;
    const char *body;
    const char *content_type;  /* NULL: application/json */
    const char *reason;        /* expected in the stored error */
} broken_case;

static const broken_case k_broken[] = {
    {"choices holds an empty object", "{\"choices\":[{}]}", NULL,
     "reply had no choices[0].message.content and no finish_reason"},
    {"stream of only [DONE]", "data: [DONE]\n\n", SSE, "streamed reply had no choices[0]"},
    {"content null, finish stop",
     "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
     "\"reasoning\":\"thinking\"},\"finish_reason\":\"stop\"}],"
     "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}",
     NULL, "reply had no choices[0].message.content and finish_reason 'stop'"},
    {"streamed content null, finish stop",
     "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null},"
     "\"finish_reason\":null}]}\n\n"
     "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},"
     "\"finish_reason\":\"stop\"}]}\n\n"
     "data: [DONE]\n\n",
     SSE, "streamed reply had no choices[0].delta.content and finish_reason 'stop'"},
    {"streamed empty content, finish stop",
     "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
     "\"finish_reason\":null}]}\n\n"
     "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"all of it\"},"
     "\"finish_reason\":\"stop\"}]}\n\n"
     "data: [DONE]\n\n",
     SSE, "streamed reply had an empty choices[0].delta.content and finish_reason 'stop'"},
    {"message without content",
     "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\"},\"finish_reason\":\"stop\"}]}",
     NULL, "reply had no choices[0].message.content and finish_reason 'stop'"},
    {"choices[0] not an object", "{\"choices\":[7]}", NULL, "reply had no choices[0]"},
    {"choices an object, not an array",
     "{\"choices\":{\"0\":{\"message\":{\"content\":\"\\\\boxed{7}\"},\"finish_reason\":\"stop\"}}}",
     NULL, "reply had no choices[0]"},
    {"generation aborted by the server",
     "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"so \\\\boxed{7\"},"
     "\"finish_reason\":\"abort\"}]}",
     NULL, "finish_reason 'abort'"},
};

Test(eval_client_faults, broken_200_replies_are_errors_then_resumed)
{
    for (size_t i = 0; i < sizeof k_broken / sizeof k_broken[0]; i++) {
        const broken_case *bc = &k_broken[i];
        char db[512], args[2048], eps[256];
        snprintf(db, sizeof db, "%s/e%zu.db", tu_dir, i);
        const char *traces = traces_all_seven();
        const fs_reply right = {200, k_right, NULL, NULL, 0, 0};
        const fs_reply broken = {200, bc->body, bc->content_type, NULL, 0, 0};
        /* fp8kv: problem a gets the broken reply on both attempts, the rest right ones. */
        const fs_reply script8[3] = {broken, broken, right};
        fake_server s16, s8;
        start_pair(&s16, &right, 1, &s8, script8, 3, eps, sizeof eps);
        snprintf(args, sizeof args, "eval --traces '%s' %s --db '%s' " FAST_FLAGS, traces, eps,
                 db);
        char *out = NULL;
        int rc = tu_run_precgate(args, &out);
        cr_assert_eq(rc, 1, "%s: a broken reply must fail the run (exit 1): %s", bc->name, out);
        cr_assert(strstr(out, "incomplete") != NULL, "%s: %s", bc->name, out);
        free(out);
        cr_assert_eq(fs_hits(&s8, CHAT), 2 + N_PROBLEMS - 1, "%s: problem a is retried once",
                     bc->name);
        cr_assert_eq(db_int(db, "SELECT status = %Q FROM runs WHERE id = 1", "incomplete"), 1,
                     "%s", bc->name);
        cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE status = %Q", "error"), 1,
                     "%s: only problem a of fp8kv is an error", bc->name);
        cr_assert_eq(db_int(db,
                            "SELECT count(*) FROM eval_samples WHERE mode = 'fp8kv' AND "
                            "problem_id = 'a' AND status = 'error' AND attempts = 2 AND "
                            "correct IS NULL AND instr(error, %Q) > 0",
                            bc->reason),
                     1, "%s: the stored error names what was missing ('%s')", bc->name,
                     bc->reason);
        /* Excluded, not graded wrong: fp8kv's one valid sample is right. */
        cr_assert_eq(db_int(db, "SELECT n_errors * 10 + (accuracy = 1.0) FROM eval_scores "
                                "WHERE mode = %Q",
                            "fp8kv"),
                     11, "%s", bc->name);
        cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE correct = %Q", "1"),
                     2 * N_PROBLEMS - 1, "%s", bc->name);

        /* --resume sends only the failed sample again. */
        fs_route_openai(&s8, &right, 1);
        snprintf(args + strlen(args), sizeof args - strlen(args), " --resume 1");
        rc = tu_run_precgate(args, &out);
        cr_assert_eq(rc, 0, "%s: %s", bc->name, out);
        free(out);
        cr_assert_eq(db_int(db, "SELECT status = %Q FROM runs WHERE id = 1", "complete"), 1,
                     "%s", bc->name);
        cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1 AND status = %Q",
                            "ok"),
                     2 * N_PROBLEMS, "%s", bc->name);
        fs_stop(&s16);
        fs_stop(&s8);
    }
}

/* Monotonic clock in seconds. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* tu_run_precgate, timed: the seconds it took into *took. */
static int run_precgate_timed(const char *args, char **out, double *took)
{
    const double t0 = mono_s();
    const int rc = tu_run_precgate(args, out);
    *took = mono_s() - t0;
    return rc;
}

Test(eval_client_faults, stalled_server_is_found_per_stall_timeout_and_retried)
{
    /* For problem a, fp8kv sends one event and then nothing, on every attempt
     * (a SIGSTOPped server looks the same on the wire): each attempt fails
     * 0.5 s after its last byte, 3 attempts, no backoff to speak of. */
    char db[512], args[2048], eps[256];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *traces = traces_all_seven();
    const fs_reply right = {200, k_right, NULL, NULL, 0, 0};
    const fs_reply silent = {
        200, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"so \"}}]}\n\n", SSE, NULL,
        0, 20000};
    const fs_reply script8[4] = {silent, silent, silent, right};
    fake_server s16, s8;
    start_pair(&s16, &right, 1, &s8, script8, 4, eps, sizeof eps);
    snprintf(args, sizeof args,
             "eval --traces '%s' %s --db '%s' --no-progress --stall-timeout 0.5 --max-attempts 3 "
             "--backoff 0.001 --timeout 30 --concurrency 1",
             traces, eps, db);
    char *out = NULL;
    double took;
    const int rc = run_precgate_timed(args, &out, &took);
    cr_assert_eq(rc, 1, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&s8, CHAT), 3 + N_PROBLEMS - 1);
    cr_assert_eq(db_int(db,
                        "SELECT count(*) FROM eval_samples WHERE mode = 'fp8kv' AND "
                        "status = 'error' AND attempts = 3 AND instr(error, %Q) > 0",
                        "(stall timeout 0.5 s)"),
                 1);
    /* 3 x 0.5 s of silence plus start-up; the 60 s default or 6 attempts
     * would each take far longer. The upper bound leaves room for a
     * sanitizer build (2.2 s under ASan/UBSan on 2 cores). */
    cr_assert(took >= 1.5 && took < 3.0, "took %.3f s", took);
    fs_stop(&s16);
    fs_stop(&s8);
}

Test(eval_client_faults, queued_requests_are_waited_for_not_stalled)
{
    /* A loaded vLLM: the 200 headers come at once, the first event 3 s later
     * (the request waits to be scheduled). Under --stall-timeout 1 every
     * sample is answered on its first attempt and the run is complete. */
    char db[512], args[2048], eps[256];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *traces = traces_all_seven();
    const fs_reply right = {
        200,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"so \"}}]}"
        "\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\\boxed{7}\"},"
        "\"finish_reason\":\"stop\"}]}\n\n"
        "data: [DONE]\n\n",
        SSE, NULL, 0, 0};
    fake_server s16, s8;
    start_pair(&s16, &right, 1, &s8, &right, 1, eps, sizeof eps);
    fs_set_sse_queue(&s16, 3000);
    fs_set_sse_queue(&s8, 3000);
    snprintf(args, sizeof args,
             "eval --traces '%s' %s --db '%s' --no-progress --stall-timeout 1 --max-attempts 2 "
             "--backoff 0.001 --timeout 30",
             traces, eps, db);
    char *out = NULL;
    double took;
    const int rc = run_precgate_timed(args, &out, &took);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&s16, CHAT), N_PROBLEMS, "no sample is sent twice");
    cr_assert_eq(fs_hits(&s8, CHAT), N_PROBLEMS);
    cr_assert_eq(db_int(db, "SELECT status = %Q FROM runs WHERE id = 1", "complete"), 1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE status = %Q AND attempts = 1",
                        "ok"),
                 2 * N_PROBLEMS);
    /* All in flight at once: one 3 s queue wait plus start-up. */
    cr_assert(took >= 2.9 && took < 4.5, "took %.3f s", took);
    fs_stop(&s16);
    fs_stop(&s8);
}

Test(eval_client_faults, client_flags_reject_bad_values)
{
    static const char *const bad[] = {
        "--stall-timeout 0", "--stall-timeout -1", "--stall-timeout 0.05", "--stall-timeout x",
        "--stall-timeout nan", "--max-attempts 0", "--max-attempts 101", "--max-attempts 2.5",
        "--backoff 0", "--backoff 61", "--backoff inf", "--timeout 0", "--timeout 1e9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        const int rc =
            tu_run_precgatef(&out, "eval --traces x.jsonl --endpoint bf16=http://127.0.0.1:1 %s",
                             bad[i]);
        cr_assert_eq(rc, 2, "'%s' gave %d: %s", bad[i], rc, out);
        const char *flag = bad[i];
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(flag, " "), flag);
        cr_assert(strstr(out, "precgate: error:") != NULL && strstr(out, name) != NULL,
                  "the error names %s: %s", name, out);
        free(out);
    }
    char *help = NULL;
    cr_assert_eq(tu_run_precgate("eval --help", &help), 0);
    for (const char *const *f = (const char *const[]){"--stall-timeout S", "--max-attempts N",
                                                      "--backoff S", "--timeout S", NULL};
         *f; f++)
        cr_assert(strstr(help, *f) != NULL, "--help lists %s", *f);
    free(help);
}
