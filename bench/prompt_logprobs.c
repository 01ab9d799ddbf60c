/*
 * prompt_logprobs.c: the client's cost of teacher-forced scoring (issue
 * #28 section 6): parsing a vLLM prompt-logprobs reply (evals/prompt_logprobs.h)
 * of an L-token sequence at K = 20 and scoring each position against a
 * reference side (evals/divergence.h), in CPU seconds per position, and the
 * process's peak memory.
 *
 * The reply has vLLM's exact shape (choices[0].prompt_logprobs: null, then
 * one object per position of the top 20 ranked tokens, each {"logprob",
 * "rank", "decoded_token"}, plus the given token when it ranks below K, as
 * it does at most positions here). It is generated, not recorded (no vLLM
 * runs here): the decoded_token strings stand in for a vocabulary's, some
 * raw UTF-8 (what vLLM's Starlette JSONResponse writes, ensure_ascii off),
 * some \u-escaped (what an ensure_ascii encoder writes), with quotes,
 * backslashes, line breaks and a surrogate pair (B_DECODED). Three modes:
 *   time      both replies are generated into memory first; the best of
 *             reps parses of the Q reply, fed in 16 KiB pieces as curl
 *             hands a body over, each position scored against the stored
 *             reference side, is timed in CPU seconds;
 *   stream    the replies are generated position by position into a 16 KiB
 *             buffer and fed as they are made: nothing holds a whole reply,
 *             so the peak memory is the parser's and the reference side's
 *             (L x 20 entries of 16 bytes plus L given logprobs);
 *   loopback  the reference side is streamed as in stream mode; a child
 *             process serves the Q reply on 127.0.0.1 (an ephemeral port)
 *             as an HTTP/1.1 body with Content-Length, and the client
 *             fetches it reps times through precgate's own HTTP client
 *             (oa_run with a reply reader, libcurl: the path `precgate
 *             diverge` takes), feeding curl's write callback's pieces to the
 *             parser. Reported: the parse and score CPU alone (this thread's
 *             CPU time, CLOCK_THREAD_CPUTIME_ID, summed around each feed and
 *             the finish), the client process's whole CPU per request
 *             (getrusage: curl's receive, polling and syscalls included; the
 *             server is another process, not counted), best and mean of the
 *             reps, and the client's peak RSS.
 *
 * The logprobs are short decimals (%.8g of -1 - 0.4 rank, "-1.4"), or with
 * "repr" float32 values printed as vLLM prints them (a float32 logprob made
 * a Python float, its repr: the shortest round-trip text, mostly 16 or 17
 * significant digits, "-1.4120000600814819").
 *
 * usage: prompt_logprobs_bench L [reps | stream | loopback [reps]] [repr]
 * (prints one line)
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "evals/divergence.h"
#include "evals/openai_client.h"
#include "evals/prompt_logprobs.h"

/* K and vocabulary of the generated replies (gpt-oss's 201,088 tokens). */
#define B_K 20
#define B_VOCAB 201088
/* The piece size curl hands a body over in (CURL_MAX_WRITE_SIZE). */
#define B_PIECE 16384
/* Requests of the loopback mode when none is given. */
#define B_LOOPBACK_REPS 5
/* The loopback client's whole-request limit: far above a 32k-token reply. */
#define B_LOOPBACK_TIMEOUT_S 300.0

/* The reference side, kept per position (what a scorer must keep of P). */
typedef struct ref_side {
    div_entry *top;   /* L x B_K */
    double *given;    /* L */
} ref_side;

/* The parse's state: 0 storing the reference, 1 scoring against it. */
typedef struct bench_ctx {
    ref_side ref;
    int scoring;
    double kld_sum;
    size_t n_scored;
} bench_ctx;

/* The parser's callback: stores position t's side (reference pass) or
 * scores it against the stored one (the KL bound summed). */
static pg_status on_pos(void *ctx, size_t t, const div_side *side, pg_err *err)
{
    bench_ctx *b = ctx;
    if (!b->scoring) {
        memcpy(&b->ref.top[t * B_K], side->top, side->n_top * sizeof *side->top);
        b->ref.given[t] = side->given_logprob;
        return PG_OK;
    }
    const div_side p = {&b->ref.top[t * B_K], B_K, side->given, b->ref.given[t]};
    div_position x;
    const pg_status st = div_position_compute(&p, side, &x, err);
    b->kld_sum += x.kld_lb;
    b->n_scored++;
    return st;
}

/* The token id of rank r at position t. */
static int32_t id_of(size_t t, size_t r)
{
    return (int32_t)((t * 7919 + r * 104729) % B_VOCAB);
}

/* Most significant digits of a double's shortest round-trip text (a
 * Python float's repr). */
#define B_REPR_DIGITS 17
/* The "repr" logprobs' spread within a rank (below its 0.4 steps: the
 * ranks stay in order), in steps of 1e-3 over 97 values. */
#define B_REPR_STEP 1e-3
#define B_REPR_SPREAD 97

/* decoded_token texts as JSON carries them (see the top of this file):
 * GPT-2's byte-level space escaped and raw, words, a line break, a quote,
 * a backslash, accents and CJK raw, U+FFFD of a partial byte escaped, an
 * emoji as an escaped surrogate pair. */
static const char *const B_DECODED[] = {
    "\\u0120the", " the", "\\n", "\\\"", "\xc3\xa9t\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87",
    "ing", " don't", "\\ufffd", "\\\\", ",", " 2024", "\xc4\xa0of", "\\ud83d\\ude00", "'s",
    " of"};
#define B_N_DECODED (sizeof B_DECODED / sizeof B_DECODED[0])

/* x's shortest round-trip text into b[0..cap), as Python's repr. */
static void repr_of(char *b, size_t cap, double x)
{
    for (int d = 1; d <= B_REPR_DIGITS; d++) {
        snprintf(b, cap, "%.*g", d, x);
        if (strtod(b, NULL) == x) return;
    }
}

/* Position t's JSON (shift perturbs the logprobs: 0 for the reference;
 * repr: vLLM's digits, see the top of this file). */
static size_t position_json(char *b, size_t cap, size_t t, double shift, int repr, int32_t given)
{
    size_t len = (size_t)snprintf(b, cap, ",{");
    int in_top = 0;
    for (size_t r = 1; r <= B_K; r++) {
        const double lp = -1.0 - 0.4 * (double)r - shift * (double)((t + r) % 3);
        char num[32];
        if (repr)
            repr_of(num, sizeof num, (double)(float)(lp - B_REPR_STEP *
                                                     (double)((t * 31 + r * 7) % B_REPR_SPREAD)));
        else
            snprintf(num, sizeof num, "%.8g", lp);
        const int32_t id = id_of(t, r);
        len += (size_t)snprintf(b + len, cap - len, "%s\"%d\":{\"logprob\":%s,\"rank\":%zu,"
                                "\"decoded_token\":\"%s\"}", r > 1 ? "," : "", (int)id, num, r,
                                B_DECODED[(size_t)id % B_N_DECODED]);
        in_top |= id == given;
    }
    if (!in_top)
        len += (size_t)snprintf(b + len, cap - len, ",\"%d\":{\"logprob\":-14.53125,\"rank\":812,"
                                "\"decoded_token\":\"%s\"}", (int)given,
                                B_DECODED[(size_t)given % B_N_DECODED]);
    len += (size_t)snprintf(b + len, cap - len, "}");
    return len;
}

/* The reply's text before its first position and after its last. */
static const char B_REPLY_HEAD[] = "{\"id\":\"cmpl-bench\",\"object\":\"text_completion\","
                                   "\"model\":\"bench\",\"choices\":[{\"index\":0,\"text\":\"\","
                                   "\"logprobs\":null,\"finish_reason\":\"length\","
                                   "\"prompt_logprobs\":[null";
static const char B_REPLY_TAIL[] = "]}],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":1}}";

/* The reply for ids[0..n) (shift and repr as position_json) into a
 * malloc'd string (*len bytes). */
static char *make_reply(const int32_t *ids, size_t n, double shift, int repr, size_t *len)
{
    size_t cap = 4096 + n * 2048, at = 0;
    char *b = malloc(cap);
    if (b == NULL) return NULL;
    at += (size_t)snprintf(b, cap, "%s", B_REPLY_HEAD);
    for (size_t t = 1; t < n; t++) at += position_json(b + at, cap - at, t, shift, repr, ids[t]);
    at += (size_t)snprintf(b + at, cap - at, "%s", B_REPLY_TAIL);
    *len = at;
    return b;
}

/* Parses reply[0..len) for ids[0..n) in B_PIECE pieces, as curl hands a
 * body over; 0 on success. */
static int parse_reply(const char *reply, size_t len, const int32_t *ids, size_t n,
                       bench_ctx *b)
{
    pl_parser *p = pl_parser_new(ids, n, B_K, B_VOCAB, "bench", on_pos, b);
    if (p == NULL) return 1;
    pg_err err = {0};
    pg_status st = PG_OK;
    for (size_t at = 0; st == PG_OK && at < len; at += B_PIECE)
        st = pl_parser_feed(p, reply + at, len - at < B_PIECE ? len - at : B_PIECE, &err);
    if (st == PG_OK) st = pl_parser_finish(p, &err);
    pl_parser_free(p);
    if (st != PG_OK) fprintf(stderr, "prompt_logprobs: %s\n", err.msg);
    return st != PG_OK;
}

/* Streams the reply for ids[0..n) position by position through a parser,
 * never holding it whole (the memory mode); 0 on success. */
static int stream_reply(const int32_t *ids, size_t n, double shift, int repr, bench_ctx *b)
{
    pl_parser *p = pl_parser_new(ids, n, B_K, B_VOCAB, "bench", on_pos, b);
    if (p == NULL) return 1;
    static char piece[B_PIECE + 4096];
    size_t len = (size_t)snprintf(piece, sizeof piece, "%s", B_REPLY_HEAD);
    pg_err err = {0};
    pg_status st = PG_OK;
    for (size_t t = 1; st == PG_OK && t <= n; t++) {
        if (t < n) len += position_json(piece + len, sizeof piece - len, t, shift, repr, ids[t]);
        else len += (size_t)snprintf(piece + len, sizeof piece - len, "%s", B_REPLY_TAIL);
        if (len >= B_PIECE || t == n) {
            st = pl_parser_feed(p, piece, len, &err);
            len = 0;
        }
    }
    if (st == PG_OK) st = pl_parser_finish(p, &err);
    pl_parser_free(p);
    if (st != PG_OK) fprintf(stderr, "prompt_logprobs: %s\n", err.msg);
    return st != PG_OK;
}

/* This process's CPU seconds so far (user and system, every thread). */
static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* This thread's CPU seconds so far. */
static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- loopback: a child process serves the reply over HTTP/1.1 ----------- */

/* Largest request head the server reads. */
#define B_HEAD_MAX 8192

/* Writes all of b[0..n) to fd: 0, or -1 when the peer is gone. */
static int write_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, b, n);
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads one request from fd (its head and its Content-Length body, both
 * dropped): 0, or -1 on a broken or oversized one. */
static int read_request(int fd)
{
    char head[B_HEAD_MAX + 1];
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len == B_HEAD_MAX) return -1;
        const ssize_t r = read(fd, head + len, B_HEAD_MAX - len);
        if (r <= 0) return -1;
        len += (size_t)r;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    for (char *c = head; c < end; c++) *c = (char)tolower((unsigned char)*c);
    const char *cl = strstr(head, "\r\ncontent-length:");
    size_t body = cl != NULL ? (size_t)strtoull(cl + strlen("\r\ncontent-length:"), NULL, 10) : 0;
    size_t have = len - (size_t)(end + 4 - head);
    char sink[B_HEAD_MAX];
    while (have < body) {
        const ssize_t r = read(fd, sink, sizeof sink);
        if (r <= 0) return -1;
        have += (size_t)r;
    }
    return 0;
}

/* The child: answers reps requests on listen_fd with reply[0..len), one
 * connection each; exits. */
static void serve(int listen_fd, const char *reply, size_t len, int reps)
{
    char head[256];
    const int head_len = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: "
                                  "application/json\r\nContent-Length: %zu\r\nConnection: "
                                  "close\r\n\r\n", len);
    for (int i = 0; i < reps; i++) {
        const int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) _exit(1);
        if (read_request(fd) == 0 && write_all(fd, head, (size_t)head_len) == 0)
            (void)write_all(fd, reply, len);
        close(fd);
    }
    _exit(0);
}

/* A listening socket on 127.0.0.1 at an ephemeral port (*port): its fd, or -1. */
static int listen_loopback(int *port)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The loopback client's state for one request. */
typedef struct loopback {
    bench_ctx *b;
    const int32_t *ids;
    size_t n;
    pl_parser *parser;
    double parse_cpu_s;   /* this thread's CPU inside the parser's feed and finish */
    size_t n_pieces, bytes;
    pg_err err;
    int failed;
} loopback;

/* The reader's begin: a fresh parser (a retry starts over). */
static void lb_begin(void *ctx)
{
    loopback *lb = ctx;
    pl_parser_free(lb->parser);
    lb->parser = pl_parser_new(lb->ids, lb->n, B_K, B_VOCAB, "bench", on_pos, lb->b);
    lb->parse_cpu_s = 0;
    lb->n_pieces = lb->bytes = 0;
    lb->b->kld_sum = 0;
    lb->b->n_scored = 0;
}

/* The reader's feed: curl's piece to the parser, its CPU time summed. */
static bool lb_feed(void *ctx, const char *p, size_t n)
{
    loopback *lb = ctx;
    if (lb->parser == NULL) return false;
    const double c0 = thread_cpu_seconds();
    const pg_status st = pl_parser_feed(lb->parser, p, n, &lb->err);
    lb->parse_cpu_s += thread_cpu_seconds() - c0;
    lb->n_pieces++;
    lb->bytes += n;
    return st == PG_OK;
}

/* The reader's finish: the parser's end, timed as the feeds are. */
static oa_read_verdict lb_finish(void *ctx, bool whole, char *why, size_t size)
{
    loopback *lb = ctx;
    const double c0 = thread_cpu_seconds();
    const pg_status st = whole && lb->parser != NULL ? pl_parser_finish(lb->parser, &lb->err)
                                                     : PG_ERR_FORMAT;
    lb->parse_cpu_s += thread_cpu_seconds() - c0;
    if (st == PG_OK) return OA_READ_OK;
    snprintf(why, size, "%s", lb->err.msg[0] ? lb->err.msg : "the reply broke off");
    return OA_READ_FAIL;
}

static const oa_reply_reader LB_READER = {"/v1/completions", lb_begin, lb_feed, lb_finish};

/* oa_run's report: a request that did not come back whole fails the bench. */
static pg_status lb_done(void *ctx, const oa_request *req, const oa_response *resp,
                         const oa_progress *progress, pg_err *err)
{
    (void)req;
    (void)progress;
    loopback *lb = ctx;
    if (resp->outcome != OA_OK) {
        lb->failed = 1;
        return pg_fail(err, PG_ERR_HTTP, "%s", resp->error ? resp->error : "request failed");
    }
    return PG_OK;
}

/* The request body vLLM is sent for ids[0..n) (malloc'd). */
static char *request_body(const int32_t *ids, size_t n)
{
    size_t cap = 256 + n * 12, at = 0;
    char *b = malloc(cap);
    if (b == NULL) return NULL;
    at += (size_t)snprintf(b, cap, "{\"model\":\"bench\",\"max_tokens\":1,\"prompt_logprobs\":%d,"
                           "\"prompt\":[", B_K);
    for (size_t t = 0; t < n; t++)
        at += (size_t)snprintf(b + at, cap - at, "%s%d", t ? "," : "", (int)ids[t]);
    snprintf(b + at, cap - at, "]}");
    return b;
}

/* The loopback mode (the top of this file): prints its line; 0 on success. */
static int run_loopback(const int32_t *ids, size_t n, int repr, int reps, bench_ctx *b)
{
    if (stream_reply(ids, n, 0, repr, b)) return 1;  /* the reference side, never whole */
    b->scoring = 1;
    int port = 0;
    const int listen_fd = listen_loopback(&port);
    if (listen_fd < 0) {
        perror("loopback listen");
        return 1;
    }
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {  /* the server: the Q reply is generated in its memory only */
        size_t len = 0;
        char *reply = make_reply(ids, n, 0.01, repr, &len);
        if (reply == NULL) _exit(1);
        serve(listen_fd, reply, len, reps);
    }
    close(listen_fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    oa_options opt = {.model = "bench", .max_in_flight = 1, .max_attempts = 1,
                      .timeout_s = B_LOOPBACK_TIMEOUT_S};
    oa_endpoint *ep = NULL;
    pg_err err = {0};
    char *body = request_body(ids, n);
    if (body == NULL || oa_endpoint_open("bench", url, NULL, NULL, &opt, &ep, &err) != PG_OK) {
        fprintf(stderr, "prompt_logprobs: %s\n", err.msg);
        return 1;
    }
    loopback lb = {.b = b, .ids = ids, .n = n};
    double best_parse = INFINITY, best_client = INFINITY, sum_parse = 0, sum_client = 0;
    double best_wall = INFINITY;
    for (int r = 0; r < reps; r++) {
        oa_request req = {.mode = "bench", .problem_id = "loopback", .body_json = body,
                          .reader = &LB_READER, .reader_ctx = &lb};
        const double c0 = cpu_seconds();
        struct timespec w0, w1;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        const pg_status st = oa_run(&ep, 1, &req, 1, lb_done, &lb, &err);
        clock_gettime(CLOCK_MONOTONIC, &w1);
        const double client = cpu_seconds() - c0;
        if (st != PG_OK || lb.failed || lb.b->n_scored != n - 1) {
            fprintf(stderr, "prompt_logprobs: loopback request %d: %s\n", r, err.msg);
            return 1;
        }
        const double wall = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
        best_parse = fmin(best_parse, lb.parse_cpu_s);
        best_client = fmin(best_client, client);
        best_wall = fmin(best_wall, wall);
        sum_parse += lb.parse_cpu_s;
        sum_client += client;
    }
    oa_endpoint_close(ep);
    free(body);
    pl_parser_free(lb.parser);
    int status = 0;
    waitpid(child, &status, 0);
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    const double pos = (double)(n - 1);
    printf("L=%zu K=%d mode=loopback digits=%s positions=%zu reply_bytes_per_position=%.0f "
           "reps=%d pieces=%zu mean_piece_bytes=%.0f parse_score_cpu_s=%.4f "
           "parse_score_positions_per_s=%.0f (mean %.0f) parse_score_us_per_position=%.3f "
           "client_cpu_s=%.4f client_positions_per_s=%.0f (mean %.0f) "
           "client_us_per_position=%.3f wall_s=%.4f mean_kld=%.6g peak_rss_kib=%ld\n",
           n, B_K, repr ? "repr" : "short", b->n_scored, (double)lb.bytes / pos, reps,
           lb.n_pieces, (double)lb.bytes / (double)lb.n_pieces, best_parse, pos / best_parse,
           pos * reps / sum_parse, 1e6 * best_parse / pos, best_client, pos / best_client,
           pos * reps / sum_client, 1e6 * best_client / pos, best_wall, b->kld_sum / pos,
           u.ru_maxrss);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prompt_logprobs_bench L [reps | stream | loopback [reps]] "
                "[repr]\n");
        return 2;
    }
    const size_t n = (size_t)strtoull(argv[1], NULL, 10);
    int stream = 0, loop = 0, repr = 0, reps = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "stream") == 0) stream = 1;
        else if (strcmp(argv[i], "loopback") == 0) loop = 1;
        else if (strcmp(argv[i], "repr") == 0) repr = 1;
        else reps = atoi(argv[i]);
    }
    if (reps == 0) reps = loop ? B_LOOPBACK_REPS : 3;
    if (n < 2 || reps < 1) return 2;
    int32_t *ids = malloc(n * sizeof *ids);
    bench_ctx b = {0};
    b.ref.top = malloc(n * B_K * sizeof *b.ref.top);
    b.ref.given = malloc(n * sizeof *b.ref.given);
    if (ids == NULL || b.ref.top == NULL || b.ref.given == NULL) return 1;
    for (size_t t = 0; t < n; t++)
        ids[t] = t % 4 == 0 ? id_of(t, 1 + t % B_K) : (int32_t)(t % B_VOCAB);
    if (loop) {
        const int rc = run_loopback(ids, n, repr, reps, &b);
        free(ids);
        free(b.ref.top);
        free(b.ref.given);
        return rc;
    }
    double best = NAN;
    size_t bytes = 0;
    if (stream) {  /* memory: nothing holds a whole reply */
        if (stream_reply(ids, n, 0, repr, &b)) return 1;
        b.scoring = 1;
        if (stream_reply(ids, n, 0.01, repr, &b)) return 1;
    } else {  /* time: parse and score a reply held in memory */
        size_t ref_bytes = 0;
        char *ref = make_reply(ids, n, 0, repr, &ref_bytes),
             *q = make_reply(ids, n, 0.01, repr, &bytes);
        if (ref == NULL || q == NULL || parse_reply(ref, ref_bytes, ids, n, &b)) return 1;
        b.scoring = 1;
        best = INFINITY;
        for (int r = 0; r < reps; r++) {
            b.kld_sum = 0;
            b.n_scored = 0;
            const double c0 = cpu_seconds();
            if (parse_reply(q, bytes, ids, n, &b)) return 1;
            const double c = cpu_seconds() - c0;
            if (c < best) best = c;
        }
        free(ref);
        free(q);
    }
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    printf("L=%zu K=%d mode=%s digits=%s positions=%zu reply_bytes_per_position=%.0f "
           "cpu_s=%.4f positions_per_s=%.0f us_per_position=%.3f mean_kld=%.6g "
           "peak_rss_kib=%ld\n", n, B_K, stream ? "stream" : "time", repr ? "repr" : "short",
           b.n_scored, (double)bytes / (double)(n - 1), best,
           (double)b.n_scored / best, 1e6 * best / (double)b.n_scored,
           b.kld_sum / (double)b.n_scored, u.ru_maxrss);
    free(ids);
    free(b.ref.top);
    free(b.ref.given);
    return 0;
}
