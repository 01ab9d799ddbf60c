/*
 * prompt_logprobs.c: the client's cost of teacher-forced scoring (issue
 * #28 section 6): parsing a vLLM prompt-logprobs reply (evals/prompt_logprobs.h)
 * of an L-token sequence at K = 20 and scoring each position against a
 * reference side (evals/divergence.h), in CPU seconds per position, and the
 * process's peak memory.
 *
 * The reply has vLLM's exact shape (one object of 20 ranked tokens per
 * position, about 1.2 KB of JSON each, the given token ranked below K at
 * most positions). Two modes:
 *   time    both replies are generated into memory first; the best of reps
 *           parses of the Q reply, fed in 16 KiB pieces as curl hands a body
 *           over, each position scored against the stored reference side,
 *           is timed in CPU seconds;
 *   stream  the replies are generated position by position into a 16 KiB
 *           buffer and fed as they are made: nothing holds a whole reply,
 *           so the peak memory is the parser's and the reference side's (L
 *           x 20 entries of 16 bytes plus L given logprobs, kept for scoring).
 *
 * The logprobs are short decimals (%.8g of -1 - 0.4 rank, "-1.4"), or with
 * "repr" float32 values printed as vLLM prints them (a float32 logprob made
 * a Python float, its repr: the shortest round-trip text, mostly 16 or 17
 * significant digits, "-1.4120000600814819"), 1,466 bytes a position.
 *
 * usage: prompt_logprobs_bench L [reps | stream] [repr]   (prints one line)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "evals/divergence.h"
#include "evals/prompt_logprobs.h"

/* K and vocabulary of the generated replies (gpt-oss's 201,088 tokens). */
#define B_K 20
#define B_VOCAB 201088
/* The piece size curl hands a body over in (CURL_MAX_WRITE_SIZE). */
#define B_PIECE 16384

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
        len += (size_t)snprintf(b + len, cap - len, "%s\"%d\":{\"logprob\":%s,\"rank\":%zu,"
                                "\"decoded_token\":\"tok\"}", r > 1 ? "," : "",
                                (int)id_of(t, r), num, r);
        in_top |= id_of(t, r) == given;
    }
    if (!in_top)
        len += (size_t)snprintf(b + len, cap - len, ",\"%d\":{\"logprob\":-14.5,\"rank\":812,"
                                "\"decoded_token\":\"x\"}", (int)given);
    len += (size_t)snprintf(b + len, cap - len, "}");
    return len;
}

/* The reply for ids[0..n) (shift and repr as position_json) into a
 * malloc'd string (*len bytes). */
static char *make_reply(const int32_t *ids, size_t n, double shift, int repr, size_t *len)
{
    size_t cap = 4096 + n * 2048, at = 0;
    char *b = malloc(cap);
    if (b == NULL) return NULL;
    at += (size_t)snprintf(b, cap, "{\"id\":\"cmpl\",\"choices\":[{\"index\":0,\"text\":\"\","
                           "\"prompt_logprobs\":[null");
    for (size_t t = 1; t < n; t++) at += position_json(b + at, cap - at, t, shift, repr, ids[t]);
    at += (size_t)snprintf(b + at, cap - at, "]}]}");
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
    size_t len = (size_t)snprintf(piece, sizeof piece,
                                  "{\"id\":\"cmpl\",\"choices\":[{\"index\":0,\"text\":\"\","
                                  "\"prompt_logprobs\":[null");
    pg_err err = {0};
    pg_status st = PG_OK;
    for (size_t t = 1; st == PG_OK && t <= n; t++) {
        if (t < n) len += position_json(piece + len, sizeof piece - len, t, shift, repr, ids[t]);
        else len += (size_t)snprintf(piece + len, sizeof piece - len, "]}]}");
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

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prompt_logprobs_bench L [reps | stream] [repr]\n");
        return 2;
    }
    const size_t n = (size_t)strtoull(argv[1], NULL, 10);
    const int stream = argc > 2 && strcmp(argv[2], "stream") == 0;
    const int reps = argc > 2 && !stream ? atoi(argv[2]) : 3;
    const int repr = argc > 3 && strcmp(argv[3], "repr") == 0;
    if (n < 2 || reps < 1) return 2;
    int32_t *ids = malloc(n * sizeof *ids);
    bench_ctx b = {0};
    b.ref.top = malloc(n * B_K * sizeof *b.ref.top);
    b.ref.given = malloc(n * sizeof *b.ref.given);
    if (ids == NULL || b.ref.top == NULL || b.ref.given == NULL) return 1;
    for (size_t t = 0; t < n; t++)
        ids[t] = t % 4 == 0 ? id_of(t, 1 + t % B_K) : (int32_t)(t % B_VOCAB);
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
