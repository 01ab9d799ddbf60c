/* test_openai_client.c: the end-task eval HTTP client against a loopback
 * fake server (tests/fake_openai_server.h): parsing, retries, timeouts,
 * concurrency, readiness polling and keeping the API key secret. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>

#include "fake_openai_server.h"
#include "evals/openai_client.h"

/* The environment variable and the key the tests send. */
#define KEY_ENV "PG_TEST_OA_API_KEY"
#define KEY "sk-test-S3cr3tK3y-7f2a9c"
/* Most responses one test collects. */
#define MAX_COLLECT 64
#define CHAT "/v1/chat/completions"

/* Options that keep every test short: 3 attempts, 10-50 ms backoff. */
static oa_options fast_opts(void)
{
    return (oa_options){.model = "test-model", .max_in_flight = 4, .max_attempts = 3,
                        .backoff_base_s = 0.01, .backoff_cap_s = 0.05, .timeout_s = 5,
                        .connect_timeout_s = 2, .stall_s = 5, .poll_s = 0.05};
}

/* Deep copies of the responses handed to on_done. */
typedef struct collected {
    int n;
    oa_response r[MAX_COLLECT];
    oa_request req[MAX_COLLECT];   /* by value; their strings are literals */
    oa_progress last;
    int stop_after;   /* > 0: fail the run after this many */
} collected;

/* strdup that passes NULL through. */
static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* on_done: copies the response into the collected (ctx). */
static pg_status collect(void *ctx, const oa_request *req, const oa_response *resp,
                         const oa_progress *p, pg_err *err)
{
    collected *c = ctx;
    cr_assert_lt(c->n, MAX_COLLECT);
    oa_response *r = &c->r[c->n];
    *r = *resp;
    r->content = dup_or_null(resp->content);
    r->reasoning = dup_or_null(resp->reasoning);
    r->finish_reason = dup_or_null(resp->finish_reason);
    r->error = dup_or_null(resp->error);
    c->req[c->n++] = *req;
    c->last = *p;
    if (c->stop_after > 0 && c->n >= c->stop_after)
        return pg_fail(err, PG_ERR_DB, "test stop after %d", c->n);
    return PG_OK;
}

/* Frees the strings collect() copied. */
static void collected_free(collected *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->r[i].content);
        free(c->r[i].reasoning);
        free(c->r[i].finish_reason);
        free(c->r[i].error);
    }
}

/* Starts s with one scripted route. */
static void serve(fake_server *s, const char *path, const fs_reply *replies, int n)
{
    fs_init(s);
    fs_route(s, path, replies, n);
    cr_assert(fs_start(s), "fake server did not start");
}

/* Opens an endpoint on s (mode "bf16", key from KEY_ENV). */
static oa_endpoint *open_on(fake_server *s, const oa_options *o)
{
    char url[64];
    pg_err err = {0};
    oa_endpoint *ep = NULL;
    fs_url(s, url, sizeof url);
    setenv(KEY_ENV, KEY, 1);
    cr_assert_eq(oa_endpoint_open("bf16", url, KEY_ENV, getenv(KEY_ENV), o, &ep, &err), PG_OK,
                 "%s", err.msg);
    return ep;
}

/* A default body for the problem "What is 2+2?" with seed, effort and
 * max_tokens set; stream as given. */
static char *test_body(int stream)
{
    oa_sampling s = oa_sampling_default();
    s.has_seed = 1;
    s.seed = 1234;
    s.reasoning_effort = "high";
    s.max_tokens = 2048;
    s.stream = stream;
    char *body = NULL;
    pg_err err = {0};
    cr_assert_eq(oa_build_chat_body("test-model", NULL, "What is 2+2?", &s, &body, &err), PG_OK,
                 "%s", err.msg);
    return body;
}

/* Runs n copies of one request against ep, collecting into c. */
static pg_status run_n(oa_endpoint *ep, int n, int stream, collected *c, pg_err *err)
{
    oa_request reqs[MAX_COLLECT];
    char *body = test_body(stream);
    for (int i = 0; i < n; i++)
        reqs[i] = (oa_request){.mode = "bf16", .effort = "high", .problem_id = "p1", .sample = i,
                               .body_json = body};
    pg_status st = oa_run(&ep, 1, reqs, n, collect, c, err);
    free(body);
    return st;
}

/* Runs one request on a fresh endpoint on s with options o. */
static void run_one(fake_server *s, const oa_options *o, int stream, collected *c)
{
    oa_endpoint *ep = open_on(s, o);
    pg_err err = {0};
    cr_assert_eq(run_n(ep, 1, stream, c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c->n, 1);
    oa_endpoint_close(ep);
}

/* Whether needle occurs in hay, ignoring ASCII case (hay may be NULL). */
static bool has_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; hay && *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return true;
    return false;
}

/* Monotonic clock in seconds. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* run_one, timed: the seconds it took. */
static double run_one_timed(fake_server *s, const oa_options *o, int stream, collected *c)
{
    const double t0 = now_s();
    run_one(s, o, stream, c);
    return now_s() - t0;
}

/* A streamed reply: reasoning_content then content deltas, finish, usage. */
static const char *const k_sse_ok =
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
    ": a comment line\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me think. \"},"
    "\"finish_reason\":null}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"2+2=4.\"},"
    "\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The answer is \"},"
    "\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\\boxed{4}\"},"
    "\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":42,\"completion_tokens\":17,"
    "\"total_tokens\":59}}\n\n"
    "data: [DONE]\n\n";

/* A non-streamed reply with message.reasoning (vLLM's newer name). */
static const char *const k_json_ok =
    "{\"id\":\"c2\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
    "{\"role\":\"assistant\",\"content\":\"\\\\boxed{4}\",\"reasoning\":\"Adding.\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":9}}";

#define SSE "text/event-stream"

/* ------------------------------------------------------------------------ */

Test(openai_client, build_body_uses_gpt_oss_template)
{
    char *body = test_body(1);
    cJSON *j = cJSON_Parse(body);
    cr_assert_not_null(j);
    cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    cr_assert_eq(cJSON_GetArraySize(msgs), 1);
    cJSON *m0 = cJSON_GetArrayItem(msgs, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(m0, "role")->valuestring, "user");
    cr_assert_str_eq(cJSON_GetObjectItem(m0, "content")->valuestring,
                     "\nWhat is 2+2?\nPlease reason step by step, and put your final answer "
                     "within \\boxed{}.\n");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "model")->valuestring, "test-model");
    cr_assert_float_eq(cJSON_GetObjectItem(j, "temperature")->valuedouble, 1.0, 0);
    cr_assert_null(cJSON_GetObjectItem(j, "top_p"));
    cr_assert(strstr(body, "\"seed\":1234") != NULL, "%s", body);
    cr_assert(strstr(body, "\"max_tokens\":2048") != NULL, "%s", body);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "stream")));
    cr_assert(cJSON_IsTrue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "stream_options"), "include_usage")));
    cJSON_Delete(j);
    free(body);

    /* Given messages are used as they are; a 64-bit seed survives exactly. */
    oa_sampling s = oa_sampling_default();
    s.has_seed = 1;
    s.seed = 9007199254740993LL;  /* 2^53 + 1: not a double */
    s.stream = 0;
    s.top_p = 0.95;
    pg_err err = {0};
    cr_assert_eq(oa_build_chat_body("m", "[{\"role\":\"system\",\"content\":\"hi\"}]", NULL, &s,
                                    &body, &err),
                 PG_OK);
    cr_assert(strstr(body, "\"seed\":9007199254740993") != NULL, "%s", body);
    cr_assert(strstr(body, "\"messages\":[{\"role\":\"system\",\"content\":\"hi\"}]") != NULL, "%s",
              body);
    cr_assert(strstr(body, "\"stream\":false") != NULL && strstr(body, "stream_options") == NULL,
              "%s", body);
    cr_assert(strstr(body, "\"top_p\":0.95") != NULL, "%s", body);
    cr_assert(strstr(body, "reasoning_effort") == NULL && strstr(body, "max_tokens") == NULL, "%s",
              body);
    free(body);
}

Test(openai_client, build_body_rejects_bad_parameters)
{
    char *body = NULL;
    pg_err err = {0};
    oa_sampling s = oa_sampling_default();
    s.reasoning_effort = "extreme";
    cr_assert_eq(oa_build_chat_body("m", NULL, "q", &s, &body, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "extreme") != NULL, "%s", err.msg);
    cr_assert_null(body);
    pg_err_clear(&err);
    s = oa_sampling_default();
    s.temperature = -0.5;
    cr_assert_eq(oa_build_chat_body("m", NULL, "q", &s, &body, &err), PG_ERR_USAGE);
    pg_err_clear(&err);
    cr_assert_eq(oa_build_chat_body("m", "{\"not\":\"an array\"}", NULL, NULL, &body, &err),
                 PG_ERR_USAGE);
    pg_err_clear(&err);
    cr_assert_eq(oa_build_chat_body("", NULL, "q", NULL, &body, &err), PG_ERR_USAGE);
}

Test(openai_client, streamed_success_parsed_and_request_checked)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 0, 0}}, 1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    oa_response *r = &c.r[0];
    cr_assert_eq(r->outcome, OA_OK, "%s", r->error ? r->error : "");
    cr_assert_eq(r->http_status, 200);
    cr_assert_eq(r->attempts, 1);
    cr_assert_str_eq(r->content, "The answer is \\boxed{4}");
    cr_assert_str_eq(r->reasoning, "Let me think. 2+2=4.");
    cr_assert_str_eq(r->finish_reason, "stop");
    cr_assert_eq(r->prompt_tokens, 42);
    cr_assert_eq(r->completion_tokens, 17);
    cr_assert_null(r->error);
    cr_assert_geq(r->latency_ms, 0.0);
    cr_assert_str_eq(c.req[0].problem_id, "p1");
    cr_assert_eq(c.last.done, 1);
    cr_assert_eq(c.last.ok, 1);

    /* What the server received. */
    const fs_logged *lg = fs_request(&s, CHAT, 0);
    cr_assert_not_null(lg);
    cr_assert_str_eq(lg->method, "POST");
    cr_assert(strstr(lg->head, "Authorization: Bearer " KEY "\r\n") != NULL, "%s", lg->head);
    cr_assert(has_ci(lg->head, "Content-Type: application/json"), "%s", lg->head);
    cJSON *j = cJSON_Parse(lg->body);
    cr_assert_not_null(j, "%s", lg->body);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "model")->valuestring, "test-model");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "reasoning_effort")->valuestring, "high");
    cr_assert_eq(cJSON_GetObjectItem(j, "seed")->valuedouble, 1234);
    cr_assert_eq(cJSON_GetObjectItem(j, "max_tokens")->valuedouble, 2048);
    cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "messages"), 0);
    cr_assert(strstr(cJSON_GetObjectItem(m0, "content")->valuestring, "What is 2+2?") != NULL);
    cJSON_Delete(j);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, plain_json_success_reads_reasoning_field)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_json_ok, NULL, NULL, 0, 0}}, 1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 0, &c);
    oa_response *r = &c.r[0];
    cr_assert_eq(r->outcome, OA_OK, "%s", r->error ? r->error : "");
    cr_assert_str_eq(r->content, "\\boxed{4}");
    cr_assert_str_eq(r->reasoning, "Adding.");
    cr_assert_eq(r->prompt_tokens, 40);
    cr_assert_eq(r->completion_tokens, 9);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, large_stream_split_across_reads)
{
    /* 400 events of 100 characters each: far more than one socket read. */
    enum { EVENTS = 400, CHUNK = 100 };
    static char body[EVENTS * 200 + 256];
    char piece[CHUNK + 1];
    size_t len = 0;
    for (int i = 0; i < EVENTS; i++) {
        memset(piece, 'a' + i % 26, CHUNK);
        piece[CHUNK] = '\0';
        len += (size_t)snprintf(
            body + len, sizeof body - len,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", piece);
    }
    snprintf(body + len, sizeof body - len,
             "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: "
             "[DONE]\n\n");
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, body, SSE, NULL, 0, 0}}, 1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(strlen(c.r[0].content), (size_t)EVENTS * CHUNK);
    for (int i = 0; i < EVENTS; i++)
        cr_assert_eq(c.r[0].content[i * CHUNK + CHUNK - 1], 'a' + i % 26);
    cr_assert_eq(c.r[0].prompt_tokens, -1, "no usage sent: -1");
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, retries_429_then_succeeds)
{
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){
              {429, "{\"error\":{\"message\":\"slow down\",\"code\":429}}", NULL, NULL, 0, 0},
              {200, k_sse_ok, SSE, NULL, 0, 0}},
          2);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(c.r[0].attempts, 2);
    cr_assert_eq(c.last.retries, 1);
    cr_assert_eq(fs_hits(&s, CHAT), 2);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, server_error_exhausts_attempts)
{
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){{500,
                        "{\"error\":{\"message\":\"engine "
                        "overloaded\",\"type\":\"InternalServerError\",\"code\":500}}",
                        NULL, NULL, 0, 0}},
          1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    oa_response *r = &c.r[0];
    cr_assert_eq(r->outcome, OA_ERROR);
    cr_assert_eq(r->attempts, 3);
    cr_assert_eq(r->http_status, 500);
    cr_assert_null(r->content);
    cr_assert(strstr(r->error, "HTTP 500") && strstr(r->error, "engine overloaded") &&
              strstr(r->error, "/v1/chat/completions") && strstr(r->error, "after 3 attempts"),
              "%s", r->error);
    cr_assert_eq(fs_hits(&s, CHAT), 3);
    cr_assert_eq(c.last.errors, 1);
    cr_assert_eq(c.last.retries, 2);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, bad_request_not_retried)
{
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){
              {400,
               "{\"error\":{\"message\":\"This model's maximum context length is 4096 tokens\","
               "\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}",
               NULL, NULL, 0, 0}},
          1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 1);
    cr_assert_eq(fs_hits(&s, CHAT), 1);
    cr_assert(strstr(c.r[0].error, "HTTP 400: This model's maximum context length is 4096 tokens"),
              "%s", c.r[0].error);
    cr_assert(strstr(c.r[0].error, "attempts") == NULL, "%s", c.r[0].error);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, flat_error_shape_message)
{
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){{404,
                        "{\"object\":\"error\",\"message\":\"The model `nope` does not exist.\","
                        "\"type\":\"NotFoundError\",\"param\":null,\"code\":404}",
                        NULL, NULL, 0, 0}},
          1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 1);
    cr_assert(strstr(c.r[0].error, "HTTP 404: The model `nope` does not exist."), "%s",
              c.r[0].error);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, connection_refused_names_url)
{
    int port = fs_dead_port();
    cr_assert_gt(port, 0);
    char url[64], chat[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/", port);
    snprintf(chat, sizeof chat, "POST http://127.0.0.1:%d/v1/chat/completions: ", port);
    oa_options o = fast_opts();
    oa_endpoint *ep = NULL;
    pg_err err = {0};
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, &o, &ep, &err), PG_OK, "%s", err.msg);
    collected c = {0};
    cr_assert_eq(run_n(ep, 1, 1, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 3);
    cr_assert_eq(c.r[0].http_status, 0);
    cr_assert(strncmp(c.r[0].error, chat, strlen(chat)) == 0, "%s", c.r[0].error);
    cr_assert(has_ci(c.r[0].error, "connect"), "%s", c.r[0].error);
    oa_endpoint_close(ep);
    collected_free(&c);
}

Test(openai_client, timeout_retried_then_error)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 5000, 0}}, 1);
    collected c = {0};
    oa_options o = fast_opts();
    o.timeout_s = 0.3;
    o.max_attempts = 2;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 2);
    cr_assert_eq(fs_hits(&s, CHAT), 2);
    cr_assert(has_ci(c.r[0].error, "timed out"), "%s", c.r[0].error);
    cr_assert(took > 0.55 && took < 3.0, "took %.2f s", took);
    fs_stop(&s);
    collected_free(&c);
}

/* One streamed event, then the server holds the connection open, silent: a
 * stopped (SIGSTOP) or hung server looks exactly like this on the wire. */
#define SSE_THEN_SILENCE(ms)                                                                    \
    {200, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n", SSE,  \
     NULL, 0, (ms)}

Test(openai_client, stalled_stream_found_within_stall_and_retried)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){SSE_THEN_SILENCE(12000), {200, k_sse_ok, SSE, NULL, 0, 0}}, 2);
    collected c = {0};
    oa_options o = fast_opts();
    o.stall_s = 1;
    o.timeout_s = 11;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(c.r[0].attempts, 2);
    cr_assert_eq(c.last.retries, 1, "a stall is counted as a retry");
    cr_assert_str_eq(c.r[0].content, "The answer is \\boxed{4}", "nothing of the stalled attempt");
    /* Found 1 s after the last byte, not 1 + 5 s (libcurl's LOW_SPEED
     * average) and not at the 11 s whole-attempt bound; the retry waits at
     * most 50 ms and answers at once. */
    cr_assert(took >= 1.0 && took < 1.4, "took %.3f s", took);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, stall_on_every_attempt_is_an_error)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){SSE_THEN_SILENCE(12000)}, 1);
    collected c = {0};
    oa_options o = fast_opts();
    o.stall_s = 0.4;
    o.max_attempts = 2;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 2);
    cr_assert_eq(fs_hits(&s, CHAT), 2);
    cr_assert_null(c.r[0].content, "no partial text of a failed request is reported");
    /* the measured silence is printed too, and a loaded machine may see 0.5 s */
    cr_assert(strstr(c.r[0].error, "no byte received for 0.") &&
                  strstr(c.r[0].error, " s (stall timeout 0.4 s)"),
              "%s", c.r[0].error);
    cr_assert(took >= 0.8 && took < 1.2, "took %.3f s", took);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, slow_but_live_stream_is_not_cut)
{
    /* Seven events 0.3 s apart (1.8 s in all) under a 1 s stall timeout. */
    static const char *const slow =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"slow \"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"thought\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\\boxed\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{4}\"},"
        "\"finish_reason\":\"stop\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
        "data: [DONE]\n\n";
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, slow, SSE, NULL, 0, 0}}, 1);
    fs_set_sse_gap(&s, 300);
    collected c = {0};
    oa_options o = fast_opts();
    o.stall_s = 1;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(c.r[0].attempts, 1, "a live stream is never restarted");
    cr_assert_str_eq(c.r[0].content, "\\boxed{4}");
    cr_assert_str_eq(c.r[0].reasoning, "slow thought");
    cr_assert_eq(c.r[0].completion_tokens, 4);
    /* 6 gaps of 0.3 s, timed by the server on CLOCK_REALTIME, which may run a
     * little fast against the monotonic clock here. */
    cr_assert(took >= 1.7 && took < 2.5, "the stream really was slow: %.3f s", took);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, stall_bounds_time_to_headers_of_streams_only)
{
    /* A streamed request whose server sends no headers for 1 s fails under a
     * 0.4 s stall timeout; the same silence before an unstreamed reply, which
     * is silent until complete by design, is bounded by timeout_s alone. */
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_json_ok, NULL, NULL, 1000, 0}}, 1);
    oa_options o = fast_opts();
    o.stall_s = 0.4;
    o.max_attempts = 1;
    collected streamed = {0}, whole = {0};
    run_one(&s, &o, 1, &streamed);
    cr_assert_eq(streamed.r[0].outcome, OA_ERROR);
    cr_assert(strstr(streamed.r[0].error, "no response headers 0.4 s after the request was sent "
                                          "(stall timeout 0.4 s)"),
              "%s", streamed.r[0].error);
    run_one(&s, &o, 0, &whole);
    cr_assert_eq(whole.r[0].outcome, OA_OK, "%s", whole.r[0].error ? whole.r[0].error : "");
    cr_assert_str_eq(whole.r[0].content, "\\boxed{4}");
    fs_stop(&s);
    collected_free(&streamed);
    collected_free(&whole);
}

Test(openai_client, queued_request_waits_past_stall_for_its_first_event)
{
    /* A loaded vLLM sends its 200 headers at once and the first event only
     * once the request is scheduled: 3 s in its queue under a 1 s stall
     * timeout is a wait, not a stall. Answered on the first attempt, after
     * the queue's 3 s (timeout_s, 11 s, is what bounds that wait). */
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 0, 0}}, 1);
    fs_set_sse_queue(&s, 3000);
    collected c = {0};
    oa_options o = fast_opts();
    o.stall_s = 1;
    o.timeout_s = 11;
    o.max_attempts = 2;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(c.r[0].attempts, 1, "a queued request is never restarted");
    cr_assert_eq(fs_hits(&s, CHAT), 1);
    cr_assert_str_eq(c.r[0].content, "The answer is \\boxed{4}");
    /* The server times its queue on CLOCK_REALTIME (see slow_but_live_stream_is_not_cut). */
    cr_assert(took >= 2.9 && took < 3.5, "it waited the queue out: %.3f s", took);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, stream_silent_after_queue_and_first_event_stalls)
{
    /* After the queue, the first event opens the stall window again: one
     * event, then silence, fails 1 s after that event. */
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){SSE_THEN_SILENCE(12000)}, 1);
    fs_set_sse_queue(&s, 1500);
    collected c = {0};
    oa_options o = fast_opts();
    o.stall_s = 1;
    o.timeout_s = 11;
    o.max_attempts = 1;
    const double took = run_one_timed(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert(strstr(c.r[0].error, "no byte received for 1.0 s (stall timeout 1 s) mid-stream"),
              "%s", c.r[0].error);
    cr_assert(took >= 2.4 && took < 3.0, "1.5 s queue + 1 s stall: %.3f s", took);
    fs_stop(&s);
    collected_free(&c);
}

/* Runs one streamed request against 127.0.0.1:port (no fake server there)
 * with options o, collecting into c: the seconds it took. */
static double run_one_on_port(int port, const oa_options *o, collected *c)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    oa_endpoint *ep = NULL;
    pg_err err = {0};
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, o, &ep, &err), PG_OK, "%s", err.msg);
    const double t0 = now_s();
    cr_assert_eq(run_n(ep, 1, 1, c, &err), PG_OK, "%s", err.msg);
    const double took = now_s() - t0;
    cr_assert_eq(c->n, 1);
    oa_endpoint_close(ep);
    return took;
}

Test(openai_client, stopped_server_is_found_within_stall)
{
    /* SIGSTOP: the kernel accepts the connection and the request, no header
     * ever comes. Found 1 s after the request went out, not at timeout_s. */
    pid_t pid;
    const int port = fs_stopped_server(&pid);
    cr_assert(port > 0, "no stopped server");
    oa_options o = fast_opts();
    o.stall_s = 1;
    o.timeout_s = 11;
    o.max_attempts = 1;
    collected c = {0};
    const double took = run_one_on_port(port, &o, &c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].http_status, 0);
    cr_assert(strstr(c.r[0].error, "no response headers 1.0 s after the request was sent (stall "
                                   "timeout 1 s)"),
              "%s", c.r[0].error);
    cr_assert(took >= 1.0 && took < 1.3, "took %.3f s", took);
    collected_free(&c);
}

Test(openai_client, stall_waits_for_the_request_to_be_sent)
{
    /* A server whose listen queue is full: the connection never completes,
     * the request is never sent. That is connect_timeout_s's to bound (1 s
     * here), not a stall of the server (0.3 s): the error says connect. */
    int fds[FS_FULL_BACKLOG_FDS];
    const int port = fs_full_backlog_port(fds);
    cr_assert(port > 0, "no full listen queue");
    oa_options o = fast_opts();
    o.stall_s = 0.3;
    o.connect_timeout_s = 1;
    o.max_attempts = 1;
    collected c = {0};
    const double took = run_one_on_port(port, &o, &c);
    for (int i = 0; i < FS_FULL_BACKLOG_FDS; i++) close(fds[i]);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert(has_ci(c.r[0].error, "connect") && !strstr(c.r[0].error, "stall"), "%s",
              c.r[0].error);
    cr_assert(took >= 1.0 && took < 1.4, "took %.3f s", took);
    collected_free(&c);
}

/* on_done that blocks the network thread for block_s[k] on its k-th call (an
 * eval writer's full queue during a slow fsync), then collects. */
typedef struct blocking_seq {
    collected c;
    double block_s[4];
} blocking_seq;

static pg_status collect_blocking_seq(void *ctx, const oa_request *req, const oa_response *resp,
                                      const oa_progress *p, pg_err *err)
{
    blocking_seq *b = ctx;
    const double s = b->c.n < 4 ? b->block_s[b->c.n] : 0;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
    return collect(&b->c, req, resp, p, err);
}

Test(openai_client, callback_blocked_past_stall_does_not_fail_live_streams)
{
    /* Four requests: the first reply comes whole at once, and its on_done
     * blocks 1.2 s; the other three stream an event every 0.2 s, which wait
     * in the socket buffers meanwhile. A 0.5 s stall timeout must judge
     * their silence by what the next read finds, not by the clock: all four
     * are answered on their first attempt. */
    static const char *const slow =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"slow \"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"thought\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\\boxed\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"{4}\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
        "data: [DONE]\n\n";
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_json_ok, NULL, NULL, 0, 0}, {200, slow, SSE, NULL, 0, 0}},
          2);
    fs_set_sse_gap(&s, 200);
    oa_options o = fast_opts();
    o.stall_s = 0.5;
    o.max_attempts = 2;
    oa_endpoint *ep = open_on(&s, &o);
    blocking_seq b = {.block_s = {1.2, 0, 0, 0}};
    oa_request reqs[4];
    char *body = test_body(1);
    for (int i = 0; i < 4; i++)
        reqs[i] = (oa_request){.mode = "bf16", .problem_id = "p1", .sample = i, .body_json = body};
    pg_err err = {0};
    const double t0 = now_s();
    cr_assert_eq(oa_run(&ep, 1, reqs, 4, collect_blocking_seq, &b, &err), PG_OK, "%s", err.msg);
    const double took = now_s() - t0;
    free(body);
    cr_assert_eq(b.c.n, 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(b.c.r[i].outcome, OA_OK, "%d: %s", i, b.c.r[i].error ? b.c.r[i].error : "");
        cr_assert_eq(b.c.r[i].attempts, 1, "%d: a live stream is never restarted", i);
        cr_assert_str_eq(b.c.r[i].content, "\\boxed{4}");
    }
    cr_assert_eq(b.c.last.retries, 0);
    cr_assert_eq(fs_hits(&s, CHAT), 4);
    /* The streams' 10 gaps of 0.2 s outlast the block: they were live through it. */
    cr_assert(took >= 1.9 && took < 2.8, "took %.3f s", took);
    oa_endpoint_close(ep);
    fs_stop(&s);
    collected_free(&b.c);
}

Test(openai_client, callback_blocked_before_a_new_request_is_sent_does_not_fail_it)
{
    /* Two in flight, three requests, to "localhost" (resolved on libcurl's
     * resolver thread, as a remote host takes a round trip to connect). The
     * first reply's on_done waits 0.2 s, long enough for the second reply
     * (100 ms late) to arrive; the third request starts in the next pass,
     * whose read finds the second reply complete, and its on_done blocks
     * 1.2 s under a 0.5 s stall timeout before the third request went out.
     * The server cannot be blamed for time before it had the request. */
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){{200, k_json_ok, NULL, NULL, 0, 0},
                       {200, k_json_ok, NULL, NULL, 100, 0},
                       {200, k_sse_ok, SSE, NULL, 0, 0}},
          3);
    char url[64];
    snprintf(url, sizeof url, "http://localhost:%d", s.port);
    oa_options o = fast_opts();
    o.stall_s = 0.5;
    o.max_attempts = 2;
    o.max_in_flight = 2;
    oa_endpoint *ep = NULL;
    pg_err err = {0};
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, &o, &ep, &err), PG_OK, "%s", err.msg);
    blocking_seq b = {.block_s = {0.2, 1.2, 0, 0}};
    oa_request reqs[3];
    char *body = test_body(1);
    for (int i = 0; i < 3; i++)
        reqs[i] = (oa_request){.mode = "bf16", .problem_id = "p1", .sample = i, .body_json = body};
    cr_assert_eq(oa_run(&ep, 1, reqs, 3, collect_blocking_seq, &b, &err), PG_OK, "%s", err.msg);
    free(body);
    cr_assert_eq(b.c.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(b.c.r[i].outcome, OA_OK, "%d: %s", i, b.c.r[i].error ? b.c.r[i].error : "");
        cr_assert_eq(b.c.r[i].attempts, 1, "%d", i);
    }
    cr_assert_eq(fs_hits(&s, CHAT), 3);
    oa_endpoint_close(ep);
    fs_stop(&s);
    collected_free(&b.c);
}

Test(openai_client, stream_cut_short_is_retried)
{
    /* A stream without finish_reason or [DONE] is not an answer. */
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){{200,
                        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n",
                        SSE, NULL, 0, 0},
                       {200, k_sse_ok, SSE, NULL, 0, 0}},
          2);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(c.r[0].attempts, 2);
    cr_assert_str_eq(c.r[0].content, "The answer is \\boxed{4}");
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, length_finish_is_truncated_not_retried)
{
    fake_server s;
    serve(
        &s, CHAT,
        (fs_reply[]){
            {200,
             "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"still thinking\"}}]}\n\n"
             "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
             "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2048}}\n\n"
             "data: [DONE]\n\n",
             SSE, NULL, 0, 0}},
        1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_TRUNCATED);
    cr_assert_eq(c.r[0].attempts, 1);
    cr_assert_null(c.r[0].content);
    cr_assert_str_eq(c.r[0].reasoning, "still thinking");
    cr_assert_eq(c.r[0].completion_tokens, 2048);
    cr_assert_eq(c.last.truncated, 1);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, error_event_in_stream_retried)
{
    fake_server s;
    serve(&s, CHAT,
          (fs_reply[]){
              {200,
               "data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\ndata: [DONE]\n\n",
               SSE, NULL, 0, 0}},
          1);
    collected c = {0};
    oa_options o = fast_opts();
    run_one(&s, &o, 1, &c);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert_eq(c.r[0].attempts, 3);
    cr_assert(strstr(c.r[0].error, "engine died"), "%s", c.r[0].error);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, usage_out_of_range_is_dropped_not_converted)
{
    /* Fuzzing found undefined behaviour converting 1e300: every count that is
     * not an integer in [0, 131072000] reads as absent (-1); the answer stays. */
    static const struct { const char *json; long want; } k_counts[] = {
        {"1e300", -1}, {"-1e300", -1}, {"-5", -1}, {"3.7", -1}, {"\"12\"", -1}, {"null", -1},
        {"1e19", -1}, {"131072001", -1}, {"true", -1}, {"{}", -1}, {"0", 0}, {"131072000", 131072000},
        {"42", 42}};
    for (size_t i = 0; i < sizeof k_counts / sizeof k_counts[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"\\\\boxed{4}\"},"
                 "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":%s,"
                 "\"completion_tokens\":%s}}",
                 k_counts[i].json, k_counts[i].json);
        fake_server s;
        serve(&s, CHAT, (fs_reply[]){{200, body, NULL, NULL, 0, 0}}, 1);
        collected c = {0};
        oa_options o = fast_opts();
        run_one(&s, &o, 0, &c);
        cr_assert_eq(c.r[0].outcome, OA_OK, "usage %s: %s", k_counts[i].json,
                     c.r[0].error ? c.r[0].error : "");
        cr_assert_eq(c.r[0].prompt_tokens, k_counts[i].want, "prompt_tokens %s", k_counts[i].json);
        cr_assert_eq(c.r[0].completion_tokens, k_counts[i].want, "completion_tokens %s",
                     k_counts[i].json);
        fs_stop(&s);
        collected_free(&c);
    }
}

Test(openai_client, error_code_out_of_range_is_unknown_and_retried)
{
    /* Only an integral HTTP status in a reply's error decides the retry;
     * anything else (1e300, a string, a fraction) is an unknown code: retried. */
    static const struct { const char *code; int attempts; } k_codes[] = {
        {"1e300", 3}, {"-1e300", 3}, {"\"400\"", 3}, {"400.5", 3}, {"-400", 3},
        {"\"context_length_exceeded\"", 3}, {"99", 3}, {"600", 3}, {"400", 1}, {"503", 3}};
    for (size_t i = 0; i < sizeof k_codes / sizeof k_codes[0]; i++) {
        for (int stream = 0; stream <= 1; stream++) {
            char body[256];
            snprintf(body, sizeof body, "%s{\"error\":{\"message\":\"boom\",\"code\":%s}}%s",
                     stream ? "data: " : "", k_codes[i].code, stream ? "\n\ndata: [DONE]\n\n" : "");
            fake_server s;
            serve(&s, CHAT, (fs_reply[]){{200, body, stream ? SSE : NULL, NULL, 0, 0}}, 1);
            collected c = {0};
            oa_options o = fast_opts();
            run_one(&s, &o, stream, &c);
            cr_assert_eq(c.r[0].outcome, OA_ERROR);
            cr_assert_eq(c.r[0].attempts, k_codes[i].attempts, "code %s, %s", k_codes[i].code,
                         stream ? "streamed" : "unstreamed");
            cr_assert(strstr(c.r[0].error, "boom"), "%s", c.r[0].error);
            fs_stop(&s);
            collected_free(&c);
        }
    }
}

Test(openai_client, only_an_answer_or_a_truncation_is_gradable)
{
    /* Unit view of the rule test_eval_client_faults.c checks end to end. */
    static const struct { const char *body, *ct; oa_outcome want; int attempts; } k_replies[] = {
        /* a real answer, whatever other finish a server uses */
        {"{\"choices\":[{\"message\":{\"content\":\"7\"},\"finish_reason\":\"repetition\"}]}",
         NULL, OA_OK, 1},
        {"{\"choices\":[{\"message\":{\"content\":\" \"},\"finish_reason\":\"stop\"}]}", NULL,
         OA_OK, 1},
        /* truncated: content may be null, empty or absent */
        {"{\"choices\":[{\"message\":{\"content\":null},\"finish_reason\":\"length\"}]}", NULL,
         OA_TRUNCATED, 1},
        {"{\"choices\":[{\"message\":{\"content\":\"\"},\"finish_reason\":\"length\"}]}", NULL,
         OA_TRUNCATED, 1},
        /* no answer: retried, then an error */
        {"{\"choices\":[{\"message\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}", NULL,
         OA_ERROR, 3},
        {"{\"choices\":[{\"message\":{\"content\":7},\"finish_reason\":\"stop\"}]}", NULL,
         OA_ERROR, 3},
        {"{\"choices\":[{\"message\":{\"content\":\"7\"},\"finish_reason\":\"error\"}]}", NULL,
         OA_ERROR, 3},
        {"{\"choices\":[{}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}", NULL,
         OA_ERROR, 3},
        {"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":0}}\n\n"
         "data: [DONE]\n\n",
         SSE, OA_ERROR, 3},
    };
    for (size_t i = 0; i < sizeof k_replies / sizeof k_replies[0]; i++) {
        fake_server s;
        serve(&s, CHAT, (fs_reply[]){{200, k_replies[i].body, k_replies[i].ct, NULL, 0, 0}}, 1);
        collected c = {0};
        oa_options o = fast_opts();
        run_one(&s, &o, k_replies[i].ct != NULL, &c);
        cr_assert_eq(c.r[0].outcome, k_replies[i].want, "%s: %s", k_replies[i].body,
                     c.r[0].error ? c.r[0].error : "");
        cr_assert_eq(c.r[0].attempts, k_replies[i].attempts, "%s", k_replies[i].body);
        cr_assert_eq(c.last.retries, k_replies[i].attempts - 1, "%s", k_replies[i].body);
        if (k_replies[i].want == OA_ERROR)
            cr_assert(strstr(c.r[0].error, "choices[0]") || strstr(c.r[0].error, "finish_reason"),
                      "%s", c.r[0].error);
        fs_stop(&s);
        collected_free(&c);
    }
}

Test(openai_client, concurrency_bound_respected)
{
    enum { N = 24, LIMIT = 3 };
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 60, 0}}, 1);
    oa_options o = fast_opts();
    o.max_in_flight = LIMIT;
    oa_endpoint *ep = open_on(&s, &o);
    collected c = {0};
    pg_err err = {0};
    cr_assert_eq(run_n(ep, N, 1, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.n, N);
    cr_assert_eq(c.last.done, N);
    cr_assert_eq(c.last.ok, N);
    cr_assert_eq(c.last.total, N);
    cr_assert_eq(c.last.in_flight, 0);
    cr_assert_eq(fs_hits(&s, CHAT), N);
    int peak = fs_max_active(&s);
    cr_assert_leq(peak, LIMIT, "peak %d > limit %d", peak, LIMIT);
    cr_assert_geq(peak, 2, "requests never overlapped (peak %d)", peak);
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) seen[c.req[i].sample] = true;
    for (int i = 0; i < N; i++) cr_assert(seen[i], "sample %d never reported", i);
    oa_endpoint_close(ep);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, requests_routed_by_mode)
{
    fake_server a, b;
    serve(&a, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 0, 0}}, 1);
    serve(&b, CHAT, (fs_reply[]){{200, k_json_ok, NULL, NULL, 0, 0}}, 1);
    oa_options o = fast_opts();
    char ua[64], ub[64];
    fs_url(&a, ua, sizeof ua);
    fs_url(&b, ub, sizeof ub);
    oa_endpoint *eps[2];
    pg_err err = {0};
    cr_assert_eq(oa_endpoint_open("bf16", ua, NULL, NULL, &o, &eps[0], &err), PG_OK);
    cr_assert_eq(oa_endpoint_open("fp8", ub, NULL, NULL, &o, &eps[1], &err), PG_OK);
    char *body = test_body(1);
    oa_request reqs[5];
    for (int i = 0; i < 5; i++)
        reqs[i] = (oa_request){
            .mode = i % 2 ? "fp8" : "bf16", .problem_id = "p", .sample = i, .body_json = body};
    collected c = {0};
    cr_assert_eq(oa_run(eps, 2, reqs, 5, collect, &c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(c.n, 5);
    cr_assert_eq(fs_hits(&a, CHAT), 3);
    cr_assert_eq(fs_hits(&b, CHAT), 2);
    for (int i = 0; i < 5; i++)
        cr_assert_str_eq(c.r[i].content, strcmp(c.req[i].mode, "fp8") == 0
                                             ? "\\boxed{4}"
                                             : "The answer is \\boxed{4}");
    free(body);
    oa_endpoint_close(eps[0]);
    oa_endpoint_close(eps[1]);
    fs_stop(&a);
    fs_stop(&b);
    collected_free(&c);
}

static const char *const k_models =
    "{\"object\":\"list\",\"data\":[{\"id\":\"openai/"
    "gpt-oss-120b\",\"object\":\"model\",\"created\":1,"
    "\"owned_by\":\"vllm\",\"root\":\"openai/gpt-oss-120b\",\"max_model_len\":131072},"
    "{\"id\":\"lora-a\",\"object\":\"model\"}]}";

Test(openai_client, wait_ready_after_503s)
{
    fake_server s;
    fs_init(&s);
    fs_route(&s, "/health",
             (fs_reply[]){{503, "", NULL, NULL, 0, 0}, {503, "", NULL, NULL, 0, 0},
                          {503, "", NULL, NULL, 0, 0}, {200, "", NULL, NULL, 0, 0}},
             4);
    fs_route(&s, "/v1/models", (fs_reply[]){{200, k_models, NULL, NULL, 0, 0}}, 1);
    cr_assert(fs_start(&s));
    oa_options o = fast_opts();
    o.model = NULL;
    oa_endpoint *ep = open_on(&s, &o);
    pg_err err = {0};
    cr_assert_eq(oa_wait_ready(ep, 5.0, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(fs_hits(&s, "/health"), 4);
    cr_assert_eq(fs_hits(&s, "/v1/models"), 1);
    char *model = NULL;
    cr_assert_eq(oa_model_name(ep, &model, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(model, "openai/gpt-oss-120b");
    cr_assert_eq(fs_hits(&s, "/v1/models"), 1, "the name is remembered");
    const fs_logged *lg = fs_request(&s, "/health", 0);
    cr_assert(strstr(lg->head, "Authorization: Bearer " KEY), "%s", lg->head);
    free(model);
    oa_endpoint_close(ep);
    fs_stop(&s);
}

Test(openai_client, wait_ready_fails_at_deadline)
{
    fake_server s;
    serve(&s, "/health",
          (fs_reply[]){{503, "{\"error\":{\"message\":\"engine dead\"}}", NULL, NULL, 0, 0}}, 1);
    oa_options o = fast_opts();
    oa_endpoint *ep = open_on(&s, &o);
    pg_err err = {0};
    double t0 = now_s();
    cr_assert_eq(oa_wait_ready(ep, 0.4, &err), PG_ERR_HTTP);
    double took = now_s() - t0;
    char url[96];
    fs_url(&s, url, sizeof url);
    strcat(url, "/health");
    cr_assert(strstr(err.msg, url) && strstr(err.msg, "HTTP 503") && strstr(err.msg, "engine dead"),
              "%s", err.msg);
    cr_assert(took >= 0.35 && took < 2.0, "took %.2f s", took);
    cr_assert_geq(fs_hits(&s, "/health"), 3);
    oa_endpoint_close(ep);
    fs_stop(&s);

    /* Nothing listening: the last failure is the refused connection. */
    int port = fs_dead_port();
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", port);
    cr_assert_eq(oa_endpoint_open("bf16", dead, NULL, NULL, &o, &ep, &err), PG_OK);
    pg_err_clear(&err);
    cr_assert_eq(oa_wait_ready(ep, 0.2, &err), PG_ERR_HTTP);
    cr_assert(strstr(err.msg, dead) && has_ci(err.msg, "connect"), "%s", err.msg);
    oa_endpoint_close(ep);
}

Test(openai_client, models_parsing)
{
    fake_server s;
    serve(&s, "/v1/models", (fs_reply[]){{200, k_models, NULL, NULL, 0, 0}}, 1);
    fs_route(&s, "/health", (fs_reply[]){{200, "", NULL, NULL, 0, 0}}, 1);
    pg_err err = {0};
    char *model = NULL;

    /* A configured name is used without asking. */
    oa_options o = fast_opts();
    oa_endpoint *ep = open_on(&s, &o);
    cr_assert_eq(oa_model_name(ep, &model, &err), PG_OK);
    cr_assert_str_eq(model, "test-model");
    free(model);
    cr_assert_eq(fs_hits(&s, "/v1/models"), 0);
    /* ... but wait_ready fails at once when the server does not list it. */
    double t0 = now_s();
    cr_assert_eq(oa_wait_ready(ep, 5.0, &err), PG_ERR_HTTP);
    cr_assert_lt(now_s() - t0, 1.0);
    cr_assert(strstr(err.msg, "'test-model' is not served") &&
                  strstr(err.msg, "openai/gpt-oss-120b"),
              "%s", err.msg);
    oa_endpoint_close(ep);

    /* A listed configured name passes. */
    o.model = "lora-a";
    ep = open_on(&s, &o);
    pg_err_clear(&err);
    cr_assert_eq(oa_wait_ready(ep, 5.0, &err), PG_OK, "%s", err.msg);
    oa_endpoint_close(ep);

    /* A malformed list is an error naming the URL. */
    fs_route(&s, "/v1/models", (fs_reply[]){{200, "{\"data\":[]}", NULL, NULL, 0, 0}}, 1);
    o.model = NULL;
    ep = open_on(&s, &o);
    cr_assert_eq(oa_model_name(ep, &model, &err), PG_ERR_HTTP);
    cr_assert(strstr(err.msg, "/v1/models") && strstr(err.msg, "no model listed"), "%s", err.msg);
    cr_assert_null(model);
    oa_endpoint_close(ep);
    fs_stop(&s);
}

Test(openai_client, api_key_sent_but_never_leaked)
{
    /* The server echoes the key in its error body and its health reply. */
    static const char *const echo = "{\"error\":{\"message\":\"bad key " KEY " for you\"}}";
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{401, echo, NULL, NULL, 0, 0}}, 1);
    fs_route(&s, "/health", (fs_reply[]){{500, echo, NULL, NULL, 0, 0}}, 1);
    fs_route(&s, "/v1/models", (fs_reply[]){{403, echo, NULL, NULL, 0, 0}}, 1);
    oa_options o = fast_opts();
    collected c = {0};
    run_one(&s, &o, 1, &c);
    const fs_logged *lg = fs_request(&s, CHAT, 0);
    cr_assert(strstr(lg->head, "Authorization: Bearer " KEY "\r\n"), "%s", lg->head);
    cr_assert_eq(c.r[0].outcome, OA_ERROR);
    cr_assert(strstr(c.r[0].error, "HTTP 401: bad key"), "%s", c.r[0].error);
    cr_assert_null(strstr(c.r[0].error, KEY), "%s", c.r[0].error);
    cr_assert_null(strstr(c.r[0].error, "S3cr3t"), "%s", c.r[0].error);

    o.model = NULL;
    oa_endpoint *ep = open_on(&s, &o);
    pg_err err = {0};
    cr_assert_eq(oa_wait_ready(ep, 0.1, &err), PG_ERR_HTTP);
    cr_assert(strstr(err.msg, "HTTP 500") && !strstr(err.msg, "S3cr3t"), "%s", err.msg);
    pg_err_clear(&err);
    char *model = NULL;
    cr_assert_eq(oa_model_name(ep, &model, &err), PG_ERR_HTTP);
    cr_assert(strstr(err.msg, "HTTP 403") && !strstr(err.msg, "S3cr3t"), "%s", err.msg);
    oa_endpoint_close(ep);

    /* A named variable that is unset is an error naming the variable only. */
    unsetenv(KEY_ENV);
    char url[64];
    fs_url(&s, url, sizeof url);
    pg_err_clear(&err);
    cr_assert_eq(oa_endpoint_open("bf16", url, KEY_ENV, getenv(KEY_ENV), &o, &ep, &err),
                 PG_ERR_USAGE);
    cr_assert(strstr(err.msg, KEY_ENV), "%s", err.msg);
    cr_assert_null(ep);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, callback_can_stop_the_run)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 30, 0}}, 1);
    oa_options o = fast_opts();
    o.max_in_flight = 2;
    oa_endpoint *ep = open_on(&s, &o);
    collected c = {.stop_after = 1};
    pg_err err = {0};
    cr_assert_eq(run_n(ep, 20, 1, &c, &err), PG_ERR_DB);
    cr_assert_str_eq(err.msg, "test stop after 1");
    cr_assert_eq(c.n, 1);
    cr_assert_lt(fs_hits(&s, CHAT), 20);
    oa_endpoint_close(ep);
    fs_stop(&s);
    collected_free(&c);
}

Test(openai_client, bad_setup_sends_nothing)
{
    fake_server s;
    serve(&s, CHAT, (fs_reply[]){{200, k_sse_ok, SSE, NULL, 0, 0}}, 1);
    oa_options o = fast_opts();
    oa_endpoint *ep = open_on(&s, &o);
    char *body = test_body(1);
    oa_request reqs[2] = {{.mode = "bf16", .problem_id = "p", .body_json = body},
                          {.mode = "int4", .problem_id = "q", .sample = 3, .body_json = body}};
    collected c = {0};
    pg_err err = {0};
    cr_assert_eq(oa_run(&ep, 1, reqs, 2, collect, &c, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "q#3") && strstr(err.msg, "int4"), "%s", err.msg);
    reqs[1] = (oa_request){.mode = "bf16", .problem_id = "r", .body_json = "not json"};
    pg_err_clear(&err);
    cr_assert_eq(oa_run(&ep, 1, reqs, 2, collect, &c, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "not a JSON object"), "%s", err.msg);
    cr_assert_eq(fs_hits(&s, CHAT), 0);
    cr_assert_eq(c.n, 0);
    free(body);
    oa_endpoint_close(ep);

    /* Credentials in the URL are refused without echoing them. */
    pg_err_clear(&err);
    cr_assert_eq(oa_endpoint_open("bf16", "http://user:hunter2@127.0.0.1:1", NULL, NULL, NULL,
                                  &ep, &err),
                 PG_ERR_USAGE);
    cr_assert_null(strstr(err.msg, "hunter2"), "%s", err.msg);
    pg_err_clear(&err);
    cr_assert_eq(oa_endpoint_open("bf16", "ftp://127.0.0.1:1", NULL, NULL, NULL, &ep, &err),
                 PG_ERR_USAGE);
    pg_err_clear(&err);
    o.backoff_base_s = 2;
    o.backoff_cap_s = 1;
    cr_assert_eq(oa_endpoint_open("bf16", "http://127.0.0.1:1", NULL, NULL, &o, &ep, &err),
                 PG_ERR_USAGE);

    /* A base URL ending in /v1/ reaches /v1/chat/completions, not /v1/v1/... */
    char url[80];
    fs_url(&s, url, sizeof url);
    strcat(url, "/v1/");
    o = fast_opts();
    pg_err_clear(&err);
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, &o, &ep, &err), PG_OK);
    cr_assert_eq(run_n(ep, 1, 1, &c, &err), PG_OK);
    cr_assert_eq(c.r[0].outcome, OA_OK, "%s", c.r[0].error ? c.r[0].error : "");
    cr_assert_eq(fs_hits(&s, CHAT), 1);
    oa_endpoint_close(ep);
    fs_stop(&s);
    collected_free(&c);
}
