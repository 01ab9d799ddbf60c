/*
 * test_openai_servers.c: oa_run with several loopback servers for one mode
 * (issue #18): requests spread by least outstanding, a dead or failing
 * server taken out after OA_SERVER_FAIL_LIMIT consecutive failures while the
 * others carry the run, a retry kept off the server it failed on, a server
 * that recovers said to be back, and a mode
 * whose servers all fail ending every request OA_ERROR without hanging.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "evals/openai_client.h"
#include "fake_openai_server.h"

#define CHAT "/v1/chat/completions"
/* Servers in each test, and requests sent to them. */
#define N_SRV 3
#define N_REQ 12
/* Fixed reply latency of the servers, milliseconds. */
#define LATENCY_MS 100
/* A back-off far longer than any run here: a server taken out stays out. */
#define LONG_OUT_S 30.0
/* Bound on a run that must not hang, seconds. */
#define RUN_BOUND_S 10.0

static const char *const k_ok =
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"\\\\boxed{4}\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}";
static const char *const k_503 = "{\"error\":{\"message\":\"overloaded\"}}";

/* What the run reported: per response its outcome, server and error, the
 * highest in_flight seen, the last counters; and the warnings said. */
typedef struct seen {
    int n;
    oa_outcome outcome[N_REQ * 4];
    char server[N_REQ * 4][64];
    char error[N_REQ * 4][256];
    int max_in_flight;
    oa_progress last;
    int n_warn;
    char warn[16][512];
    fake_server *watch;        /* NULL, or a server whose chat requests ... */
    const char *watch_url;     /* ... are counted when it is taken out ... */
    int watch_hits_at_out;
    int watch_hits_at_first_ok; /* ... and when its first answer comes */
} seen;

static pg_status on_done(void *ctx, const oa_request *req, const oa_response *resp,
                         const oa_progress *p, pg_err *err)
{
    (void)req, (void)err;
    seen *s = ctx;
    s->outcome[s->n] = resp->outcome;
    snprintf(s->server[s->n], sizeof s->server[0], "%s", resp->server ? resp->server : "");
    snprintf(s->error[s->n], sizeof s->error[0], "%s", resp->error ? resp->error : "");
    s->n++;
    if (s->watch != NULL && resp->outcome == OA_OK && s->watch_hits_at_first_ok == 0 &&
        strcmp(resp->server, s->watch_url) == 0)
        s->watch_hits_at_first_ok = fs_hits(s->watch, CHAT);
    if (p->in_flight + 1 > s->max_in_flight) s->max_in_flight = p->in_flight + 1;
    s->last = *p;
    return PG_OK;
}

static void on_warning(void *ctx, const char *text)
{
    seen *s = ctx;
    if (s->n_warn < 16) snprintf(s->warn[s->n_warn++], sizeof s->warn[0], "%s", text);
    if (s->watch != NULL && strstr(text, s->watch_url) && strstr(text, "taken out"))
        s->watch_hits_at_out = fs_hits(s->watch, CHAT);
}

/* Warnings of s that contain both a and b. */
static int warnings_with(const seen *s, const char *a, const char *b)
{
    int n = 0;
    for (int i = 0; i < s->n_warn; i++) n += strstr(s->warn[i], a) && strstr(s->warn[i], b);
    return n;
}

/* Responses of s answered by url. */
static int answered_by(const seen *s, const char *url)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) n += strcmp(s->server[i], url) == 0;
    return n;
}

/* Client options of these tests: per-server in-flight cap, quick retries,
 * the given server back-off, warnings into s. */
static oa_options opts(int in_flight, double out_s, const pg_notes *notes)
{
    return (oa_options){.model = "m", .max_in_flight = in_flight, .max_attempts = 3,
                        .backoff_base_s = 0.01, .backoff_cap_s = 0.05, .timeout_s = 5,
                        .connect_timeout_s = 2, .stall_s = 5, .poll_s = 0.05,
                        .server_backoff_base_s = out_s, .server_backoff_cap_s = out_s * 4,
                        .notes = notes};
}

/* Sends n (<= N_REQ * 4) requests of mode bf16 to the servers at
 * urls[0..N_SRV-1], collecting into s; returns the run's wall time in
 * seconds. */
static double run_n_over(int n, char urls[N_SRV][64], const oa_options *o, seen *s)
{
    oa_endpoint *eps[N_SRV];
    pg_err err = {0};
    for (int k = 0; k < N_SRV; k++)
        cr_assert_eq(oa_endpoint_open("bf16", urls[k], NULL, NULL, o, &eps[k], &err), PG_OK,
                     "%s", err.msg);
    char *body = NULL;
    cr_assert_eq(oa_build_chat_body("m", NULL, "2+2?", NULL, &body, &err), PG_OK, "%s", err.msg);
    oa_request reqs[N_REQ * 4];
    for (int i = 0; i < n; i++)
        reqs[i] = (oa_request){.mode = "bf16", .problem_id = "p", .sample = i, .body_json = body};
    const double t0 = pg_clock_mono_s();
    cr_assert_eq(oa_run(eps, N_SRV, reqs, n, on_done, s, &err), PG_OK, "%s", err.msg);
    const double took = pg_clock_mono_s() - t0;
    free(body);
    for (int k = 0; k < N_SRV; k++) oa_endpoint_close(eps[k]);
    cr_assert_eq(s->n, n, "every request is reported");
    return took;
}

/* run_n_over with N_REQ requests. */
static double run_over(char urls[N_SRV][64], const oa_options *o, seen *s)
{
    return run_n_over(N_REQ, urls, o, s);
}

/* Starts N_SRV servers answering ok after delay_ms; their URLs into urls. */
static void start_ok(fake_server *srv, int delay_ms, char urls[N_SRV][64])
{
    for (int k = 0; k < N_SRV; k++) {
        fs_init(&srv[k]);
        fs_route(&srv[k], CHAT, (fs_reply[]){{200, k_ok, NULL, NULL, delay_ms, 0}}, 1);
        cr_assert(fs_start(&srv[k]));
        fs_url(&srv[k], urls[k], sizeof urls[k]);
    }
}

TestSuite(openai_servers);

Test(openai_servers, one_in_flight_each_keeps_all_three_busy)
{
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, LATENCY_MS, urls);
    seen s = {0};
    const oa_options o = opts(1, LONG_OUT_S, NULL);
    const double took = run_over(urls, &o, &s);
    for (int k = 0; k < N_SRV; k++) {
        const int hits = fs_hits(&srv[k], CHAT);
        /* Each takes the next request when its own finishes: a near-equal share. */
        cr_assert(hits >= N_REQ / N_SRV - 1 && hits <= N_REQ / N_SRV + 1,
                  "server %d got %d of %d", k, hits, N_REQ);
        cr_assert_eq(answered_by(&s, urls[k]), hits, "oa_response.server names server %d", k);
        cr_assert_eq(fs_max_active(&srv[k]), 1, "max_in_flight is per server");
    }
    cr_assert_eq(s.max_in_flight, N_SRV, "all three servers were busy at once");
    /* Four rounds of one latency, not twelve. */
    cr_assert_lt(took, (N_REQ / N_SRV + 3) * LATENCY_MS / 1000.0, "took %.3f s", took);
    for (int i = 0; i < N_REQ; i++) cr_assert_eq(s.outcome[i], OA_OK);
    for (int k = 0; k < N_SRV; k++) fs_stop(&srv[k]);
}

Test(openai_servers, least_outstanding_spreads_a_burst_evenly)
{
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, LATENCY_MS, urls);
    seen s = {0};
    /* Room for all twelve on any one server: only the routing spreads them. */
    const oa_options o = opts(N_REQ, LONG_OUT_S, NULL);
    run_over(urls, &o, &s);
    for (int k = 0; k < N_SRV; k++) {
        cr_assert_eq(fs_hits(&srv[k], CHAT), N_REQ / N_SRV, "server %d", k);
        cr_assert_eq(fs_max_active(&srv[k]), N_REQ / N_SRV, "server %d", k);
    }
    cr_assert_eq(s.max_in_flight, N_REQ);
    for (int k = 0; k < N_SRV; k++) fs_stop(&srv[k]);
}

/* Servers 0 and 2 answer ok after a latency; server 1 is broken (a closed
 * port, or a server answering 503 when status503): every request still ends
 * ok through the other two, none names server 1, and server 1 was tried
 * exactly OA_SERVER_FAIL_LIMIT times before its long back-off took it out. */
static void one_broken_server(bool status503)
{
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, LATENCY_MS / 5, urls);
    if (status503) {
        fs_route(&srv[1], CHAT, (fs_reply[]){{503, k_503, NULL, NULL, 0, 0}}, 1);
    } else {
        fs_stop(&srv[1]);
        snprintf(urls[1], sizeof urls[1], "http://127.0.0.1:%d", fs_dead_port());
    }
    seen s = {0};
    const pg_notes notes = {.warning = on_warning, .ctx = &s};
    const oa_options o = opts(1, LONG_OUT_S, &notes);
    run_over(urls, &o, &s);
    for (int i = 0; i < N_REQ; i++) {
        cr_assert_eq(s.outcome[i], OA_OK, "request %d: %s", i, s.error[i]);
        cr_assert_str_neq(s.server[i], urls[1], "request %d answered by the broken server", i);
    }
    /* Every failed attempt was one on server 1 (one retry each). */
    cr_assert_eq(s.last.retries, OA_SERVER_FAIL_LIMIT);
    if (status503) cr_assert_eq(fs_hits(&srv[1], CHAT), OA_SERVER_FAIL_LIMIT);
    cr_assert_eq(warnings_with(&s, urls[1], "taken out"), 1, "%d warnings: %s", s.n_warn,
                 s.warn[0]);
    cr_assert_eq(s.n_warn, 1, "only server 1 was taken out");
    cr_assert_eq(s.last.servers_out, 1);
    for (int k = 0; k < N_SRV; k++)
        if (status503 || k != 1) fs_stop(&srv[k]);
}

Test(openai_servers, a_closed_port_is_taken_out_and_the_others_answer)
{
    one_broken_server(false);
}

Test(openai_servers, a_503_server_is_taken_out_and_the_others_answer)
{
    one_broken_server(true);
}

Test(openai_servers, a_server_that_recovers_is_back_after_its_back_off)
{
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, LATENCY_MS / 2, urls);
    const fs_reply down3[] = {{503, k_503, NULL, NULL, 0, 0},
                              {503, k_503, NULL, NULL, 0, 0},
                              {503, k_503, NULL, NULL, 0, 0},
                              {200, k_ok, NULL, NULL, LATENCY_MS / 2, 0}};
    fs_route(&srv[1], CHAT, down3, 4);
    seen s = {0};
    const pg_notes notes = {.warning = on_warning, .ctx = &s};
    /* Out for 60 ms: back well before the 300 ms the others need for the rest. */
    const oa_options o = opts(1, 0.06, &notes);
    run_over(urls, &o, &s);
    for (int i = 0; i < N_REQ; i++) cr_assert_eq(s.outcome[i], OA_OK, "%s", s.error[i]);
    cr_assert_eq(warnings_with(&s, urls[1], "taken out"), 1);
    cr_assert_eq(warnings_with(&s, urls[1], "answers again"), 1, "%d warnings", s.n_warn);
    cr_assert_gt(answered_by(&s, urls[1]), 0, "the recovered server took requests again");
    cr_assert_eq(s.last.servers_out, 0);
    for (int k = 0; k < N_SRV; k++) fs_stop(&srv[k]);
}

Test(openai_servers, a_server_back_from_its_back_off_takes_one_request_until_it_answers)
{
    /* Four in flight per server, more requests than the two live servers
     * finish before server 1 is back. Server 1 answers 503 to its first
     * eight requests, then slowly. Each time it comes back on probation
     * while the others are healthy it gets one request, and no other until
     * that one has failed or answered: one request after its last
     * taking-out by its first answer, not four. */
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, LATENCY_MS, urls);
    fs_reply down[9];
    for (int i = 0; i < 8; i++) down[i] = (fs_reply){503, k_503, NULL, NULL, 0, 0};
    down[8] = (fs_reply){200, k_ok, NULL, NULL, 3 * LATENCY_MS / 2, 0};
    fs_route(&srv[1], CHAT, down, 9);
    seen s = {.watch = &srv[1], .watch_url = urls[1]};
    const pg_notes notes = {.warning = on_warning, .ctx = &s};
    const oa_options o = opts(4, 0.02, &notes);
    run_n_over(4 * N_REQ, urls, &o, &s);
    for (int i = 0; i < 4 * N_REQ; i++) cr_assert_eq(s.outcome[i], OA_OK, "%s", s.error[i]);
    cr_assert_geq(s.watch_hits_at_out, OA_SERVER_FAIL_LIMIT);
    cr_assert_eq(s.watch_hits_at_first_ok, s.watch_hits_at_out + 1,
                 "one probe after the last taking-out (%d requests then), %d by its answer",
                 s.watch_hits_at_out, s.watch_hits_at_first_ok);
    cr_assert_eq(warnings_with(&s, urls[1], "answers again"), 1);
    for (int k = 0; k < N_SRV; k++) fs_stop(&srv[k]);
}

Test(openai_servers, a_retry_waits_for_another_server_rather_than_the_one_it_failed_on)
{
    /* Server 0 answers slowly, server 1 always 503. Request 1 fails on
     * server 1; when its retry is due, server 0 is still busy and server 1
     * free. It must wait for server 0: going back would spend its three
     * attempts on server 1 and end it OA_ERROR. */
    fake_server srv[2];
    char urls[2][64];
    for (int k = 0; k < 2; k++) {
        fs_init(&srv[k]);
        fs_route(&srv[k], CHAT, (fs_reply[]){{200, k_ok, NULL, NULL, 2 * LATENCY_MS, 0}}, 1);
        cr_assert(fs_start(&srv[k]));
        fs_url(&srv[k], urls[k], sizeof urls[k]);
    }
    fs_route(&srv[1], CHAT, (fs_reply[]){{503, k_503, NULL, NULL, 0, 0}}, 1);
    seen s = {0};
    const oa_options o = opts(1, LONG_OUT_S, NULL);
    oa_endpoint *eps[2];
    pg_err err = {0};
    for (int k = 0; k < 2; k++)
        cr_assert_eq(oa_endpoint_open("bf16", urls[k], NULL, NULL, &o, &eps[k], &err), PG_OK);
    char *body = NULL;
    cr_assert_eq(oa_build_chat_body("m", NULL, "2+2?", NULL, &body, &err), PG_OK);
    oa_request reqs[2];
    for (int i = 0; i < 2; i++)
        reqs[i] = (oa_request){.mode = "bf16", .problem_id = "p", .sample = i, .body_json = body};
    cr_assert_eq(oa_run(eps, 2, reqs, 2, on_done, &s, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(s.outcome[i], OA_OK, "%s", s.error[i]);
        cr_assert_str_eq(s.server[i], urls[0]);
    }
    cr_assert_eq(fs_hits(&srv[1], CHAT), 1, "the retry did not go back to the failing server");
    free(body);
    for (int k = 0; k < 2; k++) {
        oa_endpoint_close(eps[k]);
        fs_stop(&srv[k]);
    }
}

Test(openai_servers, every_server_of_a_mode_failing_ends_each_request_with_its_reason)
{
    fake_server srv[N_SRV];
    char urls[N_SRV][64];
    start_ok(srv, 0, urls);
    for (int k = 0; k < N_SRV; k++)
        fs_route(&srv[k], CHAT, (fs_reply[]){{503, k_503, NULL, NULL, 0, 0}}, 1);
    seen s = {0};
    const pg_notes notes = {.warning = on_warning, .ctx = &s};
    const oa_options o = opts(2, 0.02, &notes);
    const double took = run_over(urls, &o, &s);
    cr_assert_lt(took, RUN_BOUND_S, "took %.1f s", took);
    for (int i = 0; i < N_REQ; i++) {
        cr_assert_eq(s.outcome[i], OA_ERROR);
        cr_assert(strstr(s.error[i], "HTTP 503: overloaded") &&
                      strstr(s.error[i], "after 3 attempts"),
                  "%s", s.error[i]);
    }
    int hits = 0;
    for (int k = 0; k < N_SRV; k++) hits += fs_hits(&srv[k], CHAT);
    cr_assert_eq(hits, N_REQ * 3, "max_attempts bounds every request, waits spend none");
    for (int k = 0; k < N_SRV; k++)
        cr_assert_geq(warnings_with(&s, urls[k], "taken out"), 1, "server %d", k);
    for (int k = 0; k < N_SRV; k++) fs_stop(&srv[k]);
}

Test(openai_servers, the_same_url_twice_for_a_mode_is_refused)
{
    oa_endpoint *eps[2];
    pg_err err = {0};
    const oa_options o = opts(1, 1, NULL);
    cr_assert_eq(oa_endpoint_open("bf16", "http://127.0.0.1:9", NULL, NULL, &o, &eps[0], &err),
                 PG_OK);
    cr_assert_eq(oa_endpoint_open("bf16", "http://127.0.0.1:9", NULL, NULL, &o, &eps[1], &err),
                 PG_OK);
    oa_request req = {.mode = "bf16", .problem_id = "p", .body_json = "{}"};
    cr_assert_eq(oa_run(eps, 2, &req, 1, on_done, &(seen){0}, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "two endpoints for mode bf16 at http://127.0.0.1:9"), "%s",
              err.msg);
    oa_endpoint_close(eps[0]);
    oa_endpoint_close(eps[1]);
}
