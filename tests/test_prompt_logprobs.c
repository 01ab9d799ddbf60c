/* test_prompt_logprobs.c: the streaming parser of vLLM's prompt-logprobs
 * reply (evals/prompt_logprobs.h), on the exact reply shape fed whole and
 * in pieces, and on each bad reply it must refuse. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "evals/json_stream.h"
#include "evals/prompt_logprobs.h"
#include "testutil.h"

/* Positions, K and vocabulary of the generated reply. */
#define T_LEN 200
#define T_K 20
#define T_VOCAB 1000

/* What the callback saw. */
typedef struct seen {
    size_t n, last_t;
    double sum_given, sum_top;
    int32_t top1[T_LEN];
    size_t n_top[T_LEN];
    int fail_at;   /* > 0: fail at this position */
    uint64_t digest;  /* of every position's entries, bit for bit (digest_mix) */
} seen;

/* Mixes v into the digest h (FNV-1a's prime over 64-bit words). */
static uint64_t digest_mix(uint64_t h, uint64_t v)
{
    return (h ^ v) * 0x100000001b3ull;
}

/* A double's bits. */
static uint64_t bits_of(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static pg_status on_pos(void *ctx, size_t t, const div_side *side, pg_err *err)
{
    seen *s = ctx;
    if (s->fail_at > 0 && (int)t == s->fail_at)
        return pg_fail(err, PG_ERR_DB, "stop here");
    cr_assert_eq(t, s->n + 1, "positions out of order");
    s->n++;
    s->last_t = t;
    s->sum_given += side->given_logprob;
    s->n_top[t] = side->n_top;
    s->digest = digest_mix(digest_mix(digest_mix(s->digest, t), (uint64_t)side->given),
                           bits_of(side->given_logprob));
    double best = -INFINITY;
    for (size_t i = 0; i < side->n_top; i++) {
        s->digest = digest_mix(digest_mix(s->digest, (uint64_t)side->top[i].id),
                               bits_of(side->top[i].logprob));
        s->sum_top += side->top[i].logprob;
        if (side->top[i].logprob > best) {
            best = side->top[i].logprob;
            s->top1[t] = side->top[i].id;
        }
    }
    return PG_OK;
}

/* The logprob of rank r (1-based) at position t: decreasing in r. */
static double lp_of(size_t t, size_t r)
{
    return -0.5 - 0.25 * (double)r - 0.001 * (double)(t % 7);
}

/* The id of rank r at position t. */
static int32_t id_of(size_t t, size_t r)
{
    return (int32_t)((t * 31 + r * 17) % T_VOCAB);
}

/* A vLLM reply for ids (every third position's given token ranks below K,
 * the others are in the top K) into a malloc'd string, with
 * prompt_token_ids and unrelated fields around it. */
static char *make_reply(int32_t *ids)
{
    size_t cap = 1 << 20, len = 0;
    char *b = malloc(cap);
    cr_assert_not_null(b);
#define PUT(...) (len += (size_t)snprintf(b + len, cap - len, __VA_ARGS__))
    PUT("{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{"
        "\"index\":0,\"text\":\"x\",\"logprobs\":null,\"finish_reason\":\"length\","
        "\"prompt_logprobs\":[null");
    for (size_t t = 1; t < T_LEN; t++) {
        const int below = t % 3 == 0;
        ids[t] = id_of(t, 1 + t % T_K);
        if (below) {  /* an id outside this position's top K */
            ids[t] = (int32_t)(T_VOCAB - 1 - (t % 5));
            for (size_t r = 1; r <= T_K; r++)
                if (id_of(t, r) == ids[t]) {
                    ids[t]--;
                    r = 0;
                }
        }
        PUT(",{");
        for (size_t r = 1; r <= T_K; r++)
            PUT("%s\"%d\":{\"logprob\":%.17g,\"rank\":%zu,\"decoded_token\":\"t\\u00e9\"}",
                r > 1 ? "," : "", (int)id_of(t, r), lp_of(t, r), r);
        if (below) PUT(",\"%d\":{\"logprob\":-9999.0,\"rank\":%d,\"decoded_token\":\"\"}",
                       (int)ids[t], 500);
        PUT("}");
    }
    ids[0] = 7;
    PUT("],\"prompt_token_ids\":[");
    for (size_t t = 0; t < T_LEN; t++) PUT("%s%d", t ? "," : "", (int)ids[t]);
    PUT("]}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}", T_LEN);
#undef PUT
    cr_assert_lt(len, cap);
    return b;
}

/* Parses reply fed in pieces of chunk bytes (0: whole) into *s; returns the status. */
static pg_status parse_in(const char *reply, size_t chunk, const int32_t *ids, size_t n_ids,
                          size_t k, seen *s, pg_err *err)
{
    pl_parser *p = pl_parser_new(ids, n_ids, k, T_VOCAB, "http://h:1 sequence 'q1'", on_pos, s);
    cr_assert_not_null(p);
    const size_t n = strlen(reply);
    pg_status st = PG_OK;
    for (size_t at = 0; st == PG_OK && at < n;) {
        const size_t take = chunk == 0 || n - at < chunk ? n - at : chunk;
        st = pl_parser_feed(p, reply + at, take, err);
        at += take;
    }
    if (st == PG_OK) st = pl_parser_finish(p, err);
    pl_parser_free(p);
    return st;
}

Test(prompt_logprobs, the_exact_reply_shape_whole_and_in_pieces)
{
    int32_t ids[T_LEN];
    char *reply = make_reply(ids);
    double want_given = 0, want_top = 0;
    for (size_t t = 1; t < T_LEN; t++) {
        want_given += t % 3 == 0 ? -9999.0 : lp_of(t, 1 + t % T_K);
        for (size_t r = 1; r <= T_K; r++) want_top += lp_of(t, r);
    }
    static const size_t chunks[] = {0, 1, 7, 4096};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        seen s = {0};
        pg_err err = {0};
        cr_assert_eq(parse_in(reply, chunks[c], ids, T_LEN, T_K, &s, &err), PG_OK,
                     "chunk %zu: %s", chunks[c], err.msg);
        cr_expect_eq(s.n, T_LEN - 1, "chunk %zu", chunks[c]);
        cr_expect_float_eq(s.sum_given, want_given, 1e-9, "chunk %zu", chunks[c]);
        cr_expect_float_eq(s.sum_top, want_top, 1e-9, "chunk %zu", chunks[c]);
        for (size_t t = 1; t < T_LEN; t++) {
            cr_expect_eq(s.n_top[t], T_K, "t=%zu", t);      /* the given token below K is not top */
            cr_expect_eq(s.top1[t], id_of(t, 1), "t=%zu", t);
        }
    }
    /* A failure of the caller stops the parse with its message. */
    seen s = {.fail_at = 5};
    pg_err err = {0};
    cr_expect_eq(parse_in(reply, 0, ids, T_LEN, T_K, &s, &err), PG_ERR_DB);
    cr_expect(strstr(err.msg, "http://h:1 sequence 'q1': position 5: stop here") != NULL, "%s",
              err.msg);
    cr_expect_eq(s.n, 4);
    free(reply);
}

/* ids (3, 4, 5) at K = 2: entries 1 and 2 score tokens 4 and 5. */
#define OK1 "{\"4\":{\"logprob\":-0.1,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}}"
#define OK2 "{\"8\":{\"logprob\":-0.2,\"rank\":1},\"5\":{\"logprob\":-2.5,\"rank\":2}}"
#define WRAP(list) "{\"choices\":[{\"prompt_logprobs\":[" list "]}]}"

Test(prompt_logprobs, bad_replies_are_refused_naming_the_server_and_sequence)
{
    static const int32_t ids[] = {3, 4, 5};
    static const struct {
        const char *reply;
        pg_status want;
        const char *msg;
    } cases[] = {
        {WRAP("null," OK1 "," OK2), PG_OK, ""},
        {"{\"choices\":[{\"prompt_logprobs\":[null,", PG_ERR_FORMAT, "the reply is not JSON"},
        {"<html>502</html>", PG_ERR_FORMAT, "the reply is not JSON"},
        {"{\"choices\":[{\"text\":\"x\",\"logprobs\":{\"token_logprobs\":[-0.1],"
         "\"top_logprobs\":[{\"a\":-0.1}]}}]}", PG_ERR_FORMAT,
         "no choices[0].prompt_logprobs (a server that scores only the generated token"},
        {"{\"choices\":[]}", PG_ERR_FORMAT, "no choices[0].prompt_logprobs"},
        {WRAP(OK1 "," OK1 "," OK2), PG_ERR_FORMAT, "entry 0 is not null"},
        {WRAP("null," OK1), PG_ERR_FORMAT, "prompt_logprobs has 2 entries for the 3 ids sent"},
        {WRAP("null," OK1 "," OK2 "," OK2), PG_ERR_FORMAT, "more entries than the 3 ids"},
        {WRAP("null,null," OK2), PG_ERR_FORMAT, "entry 1 is null"},
        {WRAP("null," OK2 "," OK2), PG_ERR_FORMAT, "entry 1 lacks the given token 4"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":1}}," OK2), PG_ERR_FORMAT,
         "entry 1 has 1 tokens ranked within the top 2 and 1 in all (expected 2"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2},"
              "\"6\":{\"logprob\":-4,\"rank\":3}}," OK2), PG_ERR_FORMAT,
         "entry 1 has 2 tokens ranked within the top 2 and 3 in all"},
        {WRAP("null,{\"4\":{\"logprob\":\"NaN\",\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_NUMERIC, "token 4 has logprob \"NaN\""},
        {WRAP("null,{\"4\":{\"logprob\":0.5,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_NUMERIC, "token 4 has logprob 0.5"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":1},\"1000\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_FORMAT, "key \"1000\" is no token id of the vocabulary"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":1},\"-9\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_FORMAT, "key \"-9\" is no token id"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":1},\"4\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_FORMAT, "lists token 4 twice"},
        {WRAP("null,{\"4\":{\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}}," OK2),
         PG_ERR_FORMAT, "token 4 has no logprob"},
        {WRAP("null,{\"4\":-0.1,\"9\":{\"logprob\":-3,\"rank\":2}}," OK2), PG_ERR_FORMAT,
         "token 4's value is a number, not an object"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":0},\"9\":{\"logprob\":-3,\"rank\":2}},"
              OK2), PG_ERR_FORMAT, "token 4 has rank 0"},
        {WRAP("null,7," OK2), PG_ERR_FORMAT, "entry 1 is a number"},
        {"{\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "],"
         "\"prompt_token_ids\":[3,4,6]}]}", PG_ERR_FORMAT,
         "prompt_token_ids[2] is 6, but the request sent another id"},
        {"{\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "],"
         "\"prompt_token_ids\":[3,4]}]}", PG_ERR_FORMAT, "prompt_token_ids has 2 ids"},
        /* choice 1 and other fields are never read */
        {"{\"x\":{\"prompt_logprobs\":[1]},\"choices\":[{\"prompt_logprobs\":[null," OK1 ","
         OK2 "]},{\"prompt_logprobs\":[7]}]}", PG_OK, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t chunk = 0; chunk <= 3; chunk += 3) {
            seen s = {0};
            pg_err err = {0};
            const pg_status st = parse_in(cases[i].reply, chunk, ids, 3, 2, &s, &err);
            cr_expect_eq(st, cases[i].want, "case %zu (chunk %zu): %s", i, chunk, err.msg);
            if (cases[i].want == PG_OK) {
                cr_expect_eq(s.n, 2, "case %zu", i);
                continue;
            }
            cr_expect(strstr(err.msg, "http://h:1 sequence 'q1': ") == err.msg, "case %zu: %s",
                      i, err.msg);
            cr_expect(strstr(err.msg, cases[i].msg) != NULL, "case %zu (chunk %zu): '%s' lacks "
                      "'%s'", i, chunk, err.msg, cases[i].msg);
        }
    }
    cr_expect_null(pl_parser_new(ids, 0, 2, 10, "x", on_pos, NULL));
    cr_expect_null(pl_parser_new(ids, 3, 0, 10, "x", on_pos, NULL));
    cr_expect_null(pl_parser_new(ids, 3, PL_MAX_TOP_K + 1, 10, "x", on_pos, NULL));
    cr_expect_null(pl_parser_new(ids, 3, 2, 10, "x", NULL, NULL));
}

/* llama-server's /completion reply: one position, its top K; the given
 * token's logprob only when listed. */
#define LL_ENTRY(id, lp) "{\"id\":" #id ",\"token\":\"t\",\"bytes\":[116],\"logprob\":" #lp "}"
#define LL_REPLY(list)                                                                      \
    "{\"content\":\"t\",\"tokens\":[],\"id_slot\":0,\"stop\":true,\"completion_probabilities\":" \
    "[{\"id\":5,\"token\":\"t\",\"bytes\":[116],\"logprob\":-0.1,\"top_logprobs\":[" list     \
    "]}],\"timings\":{}}"

Test(prompt_logprobs, llama_server_positions_and_their_bad_replies)
{
    div_entry top[3];
    size_t n = 0;
    double g = 0;
    pg_err err = {0};
    static const char ok[] = LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(9, -2.5) "," LL_ENTRY(2, -3));
    cr_assert_eq(pl_llama_position(ok, strlen(ok), 9, 3, 10, "http://l:1 sequence 's'", top, &n,
                                   &g, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n, 3);
    cr_expect_eq(top[1].id, 9);
    cr_expect_eq(top[2].logprob, -3.0);
    cr_expect_eq(g, -2.5);
    /* The given token not in the list: unknown, not guessed. */
    cr_assert_eq(pl_llama_position(ok, strlen(ok), 7, 3, 10, "x", top, &n, &g, &err), PG_OK,
                 "%s", err.msg);
    cr_expect(isnan(g));
    /* A vocabulary smaller than K lists every token. */
    cr_assert_eq(pl_llama_position(ok, strlen(ok), 2, 20, 3, "x", top, &n, &g, &err), PG_ERR_FORMAT);
    static const struct {
        const char *body;
        pg_status want;
        const char *msg;
    } cases[] = {
        {"<html>", PG_ERR_FORMAT, "the reply is not JSON"},
        {"{\"content\":\"t\"}", PG_ERR_FORMAT, "no completion_probabilities[0].top_logprobs (no "
                                              "n_probs support)"},
        {"{\"completion_probabilities\":[{\"content\":\"t\",\"probs\":[{\"tok_str\":\"t\","
         "\"prob\":0.5}]}]}", PG_ERR_FORMAT, "it answers \"probs\""},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(9, -2.5)), PG_ERR_FORMAT,
         "top_logprobs has 2 entries, expected 3"},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(10, -2.5) "," LL_ENTRY(2, -3)), PG_ERR_FORMAT,
         "top_logprobs[1] has no token id of the vocabulary"},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(1.5, -2.5) "," LL_ENTRY(2, -3)), PG_ERR_FORMAT,
         "top_logprobs[1] has no token id"},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(5, -2.5) "," LL_ENTRY(2, -3)), PG_ERR_FORMAT,
         "lists token 5 twice"},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(9, "x") "," LL_ENTRY(2, -3)), PG_ERR_FORMAT,
         "top_logprobs[1] (token 9) has no numeric logprob"},
        {LL_REPLY(LL_ENTRY(5, -0.1) "," LL_ENTRY(9, 0.7) "," LL_ENTRY(2, -3)), PG_ERR_NUMERIC,
         "top_logprobs[1] (token 9) has logprob 0.7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_err e = {0};
        cr_expect_eq(pl_llama_position(cases[i].body, strlen(cases[i].body), 9, 3, 10,
                                       "http://l:1 sequence 's'", top, &n, &g, &e),
                     cases[i].want, "case %zu: %s", i, e.msg);
        cr_expect(strstr(e.msg, "http://l:1 sequence 's': ") == e.msg, "case %zu: %s", i, e.msg);
        cr_expect(strstr(e.msg, cases[i].msg) != NULL, "case %zu: '%s' lacks '%s'", i, e.msg,
                  cases[i].msg);
        cr_expect_eq(n, 0, "case %zu", i);
    }
}

/* ---- js_double: bit for bit strtod's reading ---------------------------- */

/* Random strings per kind of the bit-identity test (a few seconds in all). */
#define T_NUM_REPRS 40000
#define T_NUM_DIGITS 400000
/* Longest number text the tests make. */
#define T_NUM_MAX 64
/* A Python float's repr has at most 17 significant digits (shortest
 * round-trip; Python's float_repr_style 'short'). */
#define T_REPR_DIGITS 17

/* Checks that js_double reads s as strtod does, bit for bit; returns
 * whether the exact path read it (the test fails on any difference). */
static int same_as_strtod(const char *s)
{
    double got = 0;
    int exact = -1;
    pg_err err = {0};
    cr_assert_eq(js_double(s, strlen(s), &got, &exact, &err), PG_OK, "%s: %s", s, err.msg);
    const double want = strtod(s, NULL);
    uint64_t gb, wb;
    memcpy(&gb, &got, sizeof gb);
    memcpy(&wb, &want, sizeof wb);
    cr_assert_eq(gb, wb, "\"%s\": %a (exact path: %d), strtod %a", s, got, exact, want);
    return exact;
}

/* x's shortest round-trip text into b, as Python's repr writes it (a "%g"
 * form; ".0" appended to an integer). */
static void python_repr(char *b, size_t cap, double x)
{
    for (int d = 1; d <= T_REPR_DIGITS; d++) {
        snprintf(b, cap, "%.*g", d, x);
        if (strtod(b, NULL) == x) break;
    }
    if (strpbrk(b, ".e") == NULL) strncat(b, ".0", cap - strlen(b) - 1);
}

/* Drops the zeros JSON allows no number to begin with ("007.5" -> "7.5",
 * "-00e3" -> "-0e3"), in place. */
static void drop_leading_zeros(char *s)
{
    char *c = s + (*s == '-');
    size_t n = 0;
    while (c[n] == '0' && c[n + 1] >= '0' && c[n + 1] <= '9') n++;
    memmove(c, c + n, strlen(c + n) + 1);
}

Test(prompt_logprobs, numbers_are_read_bit_for_bit_as_strtod_reads_them)
{
    /* vLLM's logprobs as its JSON prints them, and edges of the exact path. */
    static const char *const exact[] = {
        "-0.0001234567890123", "-9999.0", "-1e-05", "-1.3984992504119873", "-0.0", "0.0",
        "0e-7", "-0.693147182464599", "-8.158935546875", "1E+5", "-123456789012345678e-27",
        "999999999999999999e27", "-1e27", "0.5", "-0.000000000000000000000000001",
        "-6.103515625e-05", "-3.4028234663852886e+38", "-12.3456789012345678", "25e21"};
    /* Where it must leave the number to strtod: more than 18 significant
     * digits, a decimal exponent past 27, ties. */
    static const char *const to_strtod[] = {
        "-12.34567890123456789", "-1e-30", "1e28", "4503599627370497.5e0",
        "3.14159265358979323846264338327950288", "1e308", "-2.2250738585072014e-308",
        "4.9406564584124654e-324", "1e-400", "1e400", "-1e99999999999999999999",
        "9007199254740993.0", "4503599627370496.5", "-9223372036854775807.0",
        "0.1000000000000000000000000001", "1234567890123456789e-5"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        cr_expect(same_as_strtod(exact[i]), "\"%s\" went to strtod", exact[i]);
    for (size_t i = 0; i < sizeof to_strtod / sizeof to_strtod[0]; i++)
        cr_expect(!same_as_strtod(to_strtod[i]), "\"%s\" took the exact path", to_strtod[i]);

    /* Text that is no JSON number is refused, not guessed at. */
    static const char *const no_number[] = {"", "-", "1e", "-1e+", "1x", "0.5.5", ".e1",
                                            /* strtod reads these; JSON does not */
                                            "01", "-00.5", "+1", "1.", ".5", "0x10", "inf",
                                            "NaN", " 1", "1 ", "1.e5", "1e+-5"};
    for (size_t i = 0; i < sizeof no_number / sizeof no_number[0]; i++) {
        double v = 0;
        pg_err err = {0};
        cr_expect_eq(js_double(no_number[i], strlen(no_number[i]), &v, NULL, &err),
                     PG_ERR_FORMAT, "\"%s\" read as %g", no_number[i], v);
    }

    uint64_t seed = 28;  /* issue #28 */
    char s[T_NUM_MAX];
    size_t n_exact = 0;
    /* float32 logprobs (vLLM's dtype) and doubles of every magnitude, as reprs. */
    for (int i = 0; i < T_NUM_REPRS; i++) {
        const float f = -(float)((double)rng_below(&seed, 1ull << 53) * 0x1p-53 * 30.0);
        python_repr(s, sizeof s, (double)f);
        n_exact += (size_t)same_as_strtod(s);
        uint64_t bits = rng_splitmix64(&seed) & ~(1ull << 63);  /* a finite double */
        double x;
        memcpy(&x, &bits, sizeof x);
        if (isfinite(x)) {
            python_repr(s, sizeof s, -x);
            same_as_strtod(s);
        }
    }
    cr_expect_gt(n_exact, T_NUM_REPRS * 9 / 10, "float32 reprs read exactly: %zu of %d",
                 n_exact, T_NUM_REPRS);
    /* Random digit strings: 1 to 20 digits (leading zeros and all, but JSON
     * allows none before the point: dropped there) with the point anywhere
     * or an exponent. Of the quotients w / 10^k past
     * Clinger's range (w > 2^53) the exact path takes, about 1 in 2,048 is
     * a tie it must hand to strtod (the 64-bit quotient's 11 extra bits are
     * 0x400); products are ties more often (an exact odd 54-bit one is:
     * 9007199254740993e0 = 2^53 + 1). */
    size_t n_quotients = 0, n_ties = 0;
    for (int i = 0; i < T_NUM_DIGITS; i++) {
        const int nd = 1 + (int)rng_below(&seed, 20);
        char digits[24];
        for (int d = 0; d < nd; d++) digits[d] = (char)('0' + rng_below(&seed, 10));
        digits[nd] = '\0';
        const int point = (int)rng_below(&seed, (uint64_t)nd + 1);  /* nd: none */
        const int e = (int)rng_below(&seed, 81) - 40;
        const char *sign = rng_below(&seed, 2) ? "-" : "";
        if (rng_below(&seed, 2))
            snprintf(s, sizeof s, "%s%.*s.%s%s", sign, point > 0 ? point : 1,
                     point > 0 ? digits : "0", digits + point, point == nd ? "0" : "");
        else
            snprintf(s, sizeof s, "%s%se%d", sign, digits, e);
        drop_leading_zeros(s);
        const int exact_path = same_as_strtod(s);
        /* w 10^e10 with at most 18 significant digits and -27 <= e10 < 0:
         * only a tie leaves the exact path. */
        const char *first = strpbrk(s, "123456789"), *stop = strchr(s, 'e');
        size_t sig = 0;
        for (const char *c = first; c != NULL && *c != '\0' && c != stop; c++)
            sig += *c >= '0' && *c <= '9';
        const char *dot = strchr(s, '.');
        /* (the strings have a point or an exponent, never both) */
        const int e10 = stop != NULL ? atoi(stop + 1) : dot != NULL ? -(int)strlen(dot + 1) : 0;
        if (first != NULL && sig <= 18 && e10 >= -27 && e10 < 0) {
            n_quotients++;
            n_ties += !exact_path;
        }
    }
    cr_expect_gt(n_ties, 0, "no tie among %zu quotients", n_quotients);
    cr_expect_lt(n_ties, n_quotients / 1000, "%zu ties among %zu quotients", n_ties, n_quotients);
}

/* The largest integer yajl read is still read, and a tiny logprob
 * underflows to 0 (the numbers beyond range are refused as yajl refused
 * them: invalid_json_anywhere_is_refused). */
Test(prompt_logprobs, numbers_at_the_edge_of_range_are_read)
{
    static const int32_t ids[] = {3, 4, 5};
    seen s = {0};
    pg_err err = {0};
    cr_expect_eq(parse_in("{\"created\":-9223372036854775807,\"choices\":[{\"prompt_logprobs\":"
                          "[null," OK1 ",{\"8\":{\"logprob\":-1e-400,\"rank\":1},\"5\":"
                          "{\"logprob\":-2.5,\"rank\":2}}]}]}", 0, ids, 3, 2, &s, &err),
                 PG_OK, "%s", err.msg);
}

/* A key twice is caught in a position of many keys (no pairwise check),
 * and the same ids at the next position are no repeat. */
Test(prompt_logprobs, a_key_twice_in_a_long_position)
{
    enum { K = 40, N = 4 };
    const int32_t ids[N] = {1, 2, 3, 4};
    for (int dup = 0; dup <= 1; dup++) {
        char *b = malloc(1 << 16);
        cr_assert_not_null(b);
        size_t len = (size_t)sprintf(b, "{\"choices\":[{\"prompt_logprobs\":[null");
        for (int t = 1; t < N; t++) {
            len += (size_t)sprintf(b + len, ",{");
            for (int r = 1; r <= K; r++) {
                const int id = dup && t == 2 && r == K ? 7 : (r + t) % K;  /* 7: seen at r 7 - t */
                len += (size_t)sprintf(b + len, "%s\"%d\":{\"logprob\":-%d.5,\"rank\":%d}",
                                       r > 1 ? "," : "", id, r, r);
            }
            len += (size_t)sprintf(b + len, "}");
        }
        sprintf(b + len, "]}]}");
        seen s = {0};
        pg_err err = {0};
        const pg_status st = parse_in(b, 0, ids, N, K, &s, &err);
        if (dup) {
            cr_expect_eq(st, PG_ERR_FORMAT);
            cr_expect(strstr(err.msg, "prompt_logprobs entry 2 lists token 7 twice") != NULL,
                      "%s", err.msg);
        } else {
            cr_expect_eq(st, PG_OK, "%s", err.msg);
            cr_expect_eq(s.n, N - 1);
        }
        free(b);
    }
}

/* ---- a real JSON parser: any valid reply, cut anywhere ------------------ */

/* Positions and K of the reply cut at every byte (a few KB, so that every
 * cut is parsed). */
#define T_CUT_LEN 4
#define T_CUT_K 5
/* Levels of the unknown value the reply carries (skipped whole). */
#define T_NEST 64

/* Tokens' texts as a vocabulary decodes them, JSON-escaped as servers
 * write them: a \u escape (GPT-2's byte-level space), a line break, a
 * quote, a backslash, raw UTF-8, a surrogate pair, U+FFFD of a partial byte. */
static const char *const T_DECODED[] = {
    "\\u0120the", "\\n", "\\\"", "\\\\", "caf\xc3\xa9", "\xe4\xb8\xad", "\\ud83d\\ude00",
    "\\ufffd", " don't", "\\t\\r"};

/* A vLLM reply for ids[0..n) at K = k with all a JSON text may hold
 * around the fields read: whitespace of each kind (pretty) or none,
 * unknown keys before and after (one of T_NEST levels, strings with
 * escapes, numbers of every form, literals), keys spelt with escapes
 * ("\u0070rompt_logprobs" is "prompt_logprobs", "\u00348" token 48). */
static char *make_any_reply(int32_t *ids, size_t n, size_t k, int pretty)
{
    size_t cap = 1 << 20, len = 0;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    const char *sp = pretty ? " \r\n\t" : "";
#define PUT(...) (len += (size_t)snprintf(b + len, cap - len, __VA_ARGS__))
    PUT("%s{%s\"id\"%s:%s\"cmpl-\\u00e9\\\"x\\\\\"%s,\"nest\":", sp, sp, sp, sp, sp);
    for (int d = 0; d < T_NEST; d++) PUT(d % 2 ? "[" : "{\"k%d\":", d);
    PUT("[1.5e-3,-0,true,false,null,\"\\ud83d\\ude00\",{}]");
    for (int d = T_NEST - 1; d >= 0; d--) PUT(d % 2 ? "]" : "}");
    PUT(",\"created\":1751234567,\"ch\\u006fices\"%s:%s[%s{\"index\":0,\"text\":\"\\n\","
        "\"logprobs\":null,\"\\u0070rompt_logprobs\"%s:%s[%snull", sp, sp, sp, sp, sp, sp);
    ids[0] = 7;
    for (size_t t = 1; t < n; t++) {
        ids[t] = t % 2 ? id_of(t, 1 + t % k) : (int32_t)(T_VOCAB - 1 - t);
        for (size_t r = 1; t % 2 == 0 && r <= k; r++)  /* below K: none of the top K */
            if (id_of(t, r) == ids[t]) {
                ids[t]--;
                r = 0;
            }
        PUT(",%s{", sp);
        for (size_t r = 1; r <= k + (t % 2 == 0); r++) {
            const int32_t id = r <= k ? id_of(t, r) : ids[t];
            const double lp = r <= k ? lp_of(t, r) : -9999.0;
            char key[16];
            snprintf(key, sizeof key, "%d", (int)id);
            if (r == 2) PUT(",\"\\u003%c%s\"", key[0], key + 1);  /* its first digit escaped */
            else PUT("%s\"%s\"", r > 1 ? "," : "", key);
            PUT("%s:%s{\"decoded_token\":\"%s\",%s\"logprob\"%s:%s%.17g%s,\"rank\":%zu,"
                "\"x\":[{\"y\":\"\\u0000\"}]}", sp, sp, T_DECODED[(t + r) % 10], sp, sp, sp, lp,
                sp, r <= k ? r : (size_t)900);
        }
        PUT("%s}", sp);
    }
    PUT("%s],\"prompt_token_ids\":[", sp);
    for (size_t t = 0; t < n; t++) PUT("%s%s%d", t ? "," : "", sp, (int)ids[t]);
    PUT("]}%s]%s,\"usage\":{\"prompt_tokens\":%zu,\"x\":-1.0E+2}}%s", sp, sp, n, sp);
#undef PUT
    cr_assert_lt(len, cap);
    return b;
}

/* pl_parser_feed on a void *parser (tu_feed_cut). */
static pg_status feed(void *parser, const char *data, size_t len, pg_err *err)
{
    return pl_parser_feed(parser, data, len, err);
}

/* Parses reply[0..n) cut at cuts[0..n_cuts) into *s; the status. */
static pg_status parse_cuts(const char *reply, size_t n, const size_t *cuts, size_t n_cuts,
                            const int32_t *ids, size_t n_ids, size_t k, seen *s, pg_err *err)
{
    pl_parser *p = pl_parser_new(ids, n_ids, k, T_VOCAB, "http://h:1 sequence 'q1'", on_pos, s);
    cr_assert_not_null(p);
    pg_status st = tu_feed_cut(feed, p, reply, n, cuts, n_cuts, err);
    if (st == PG_OK) st = pl_parser_finish(p, err);
    pl_parser_free(p);
    return st;
}

Test(prompt_logprobs, any_valid_reply_cut_at_every_byte)
{
    int32_t ids[T_CUT_LEN];
    for (int pretty = 0; pretty <= 1; pretty++) {
        char *reply = make_any_reply(ids, T_CUT_LEN, T_CUT_K, pretty);
        const size_t n = strlen(reply);
        seen whole = {0};
        pg_err err = {0};
        cr_assert_eq(parse_cuts(reply, n, NULL, 0, ids, T_CUT_LEN, T_CUT_K, &whole, &err), PG_OK,
                     "%s", err.msg);
        cr_assert_eq(whole.n, T_CUT_LEN - 1);
        for (size_t t = 1; t < T_CUT_LEN; t++) cr_expect_eq(whole.top1[t], id_of(t, 1));
        for (size_t cut = 0; cut <= n; cut++) {
            seen s = {0};
            cr_assert_eq(parse_cuts(reply, n, &cut, 1, ids, T_CUT_LEN, T_CUT_K, &s, &err), PG_OK,
                         "pretty %d, cut at %zu of %zu: %s", pretty, cut, n, err.msg);
            cr_assert_eq(s.n, whole.n, "cut at %zu", cut);
            cr_assert_eq(s.digest, whole.digest, "cut at %zu: other positions", cut);
        }
        free(reply);
    }
}

Test(prompt_logprobs, the_full_reply_in_random_pieces_of_1_to_7_bytes)
{
    int32_t ids[T_LEN];
    char *replies[] = {make_reply(ids), NULL};
    int32_t any_ids[T_LEN];
    replies[1] = make_any_reply(any_ids, T_LEN, T_K, 1);
    const int32_t *const id_sets[] = {ids, any_ids};
    uint64_t seed = 28;
    for (int r = 0; r < 2; r++) {
        const size_t n = strlen(replies[r]);
        seen whole = {0};
        pg_err err = {0};
        cr_assert_eq(parse_cuts(replies[r], n, NULL, 0, id_sets[r], T_LEN, T_K, &whole, &err),
                     PG_OK, "%s", err.msg);
        size_t *cuts = malloc(n * sizeof *cuts);
        cr_assert_not_null(cuts);
        for (int round = 0; round < 4; round++) {
            const size_t n_cuts = tu_random_cuts(&seed, n, cuts);
            seen s = {0};
            cr_assert_eq(parse_cuts(replies[r], n, cuts, n_cuts, id_sets[r], T_LEN, T_K, &s,
                                    &err), PG_OK, "reply %d round %d: %s", r, round, err.msg);
            cr_assert_eq(s.n, T_LEN - 1);
            cr_assert_eq(s.digest, whole.digest, "reply %d round %d: other positions", r, round);
        }
        free(cuts);
        free(replies[r]);
    }
}

/* Invalid JSON anywhere in a reply (in the fields read or skipped) is
 * refused as not JSON, whatever the chunks, naming the server. */
Test(prompt_logprobs, invalid_json_anywhere_is_refused)
{
    static const int32_t ids[] = {3, 4, 5};
    static const struct {
        const char *reply;
        const char *why;
    } cases[] = {
        {WRAP("null," OK1 "," OK2) " x", "trailing garbage"},
        {WRAP("null," OK1 "," OK2) "{}", "trailing garbage"},
        {"{\"x\":nul,\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}]}",
         "invalid literal (not null)"},
        {"{\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}],\"x\":\"abc",
         "the reply ends inside a string"},
        {"{\"x\":\"a\tb\",\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}]}",
         "control character 0x09"},
        {"{\"x\":\"\\q\",\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}]}",
         "invalid escape"},
        {"{\"x\":01,\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}]}",
         "'1' where ',' or '}' after a value is due"},
        {WRAP("null,{\"4\":{\"logprob\":-.1,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}}," OK2),
         "invalid number"},
        {WRAP("null,{\"4\":{\"logprob\":NaN,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}}," OK2),
         "'N' where a value is due"},
        {WRAP("null," OK1 "," OK2 ","), "']' where a value is due"},
        {"{\"x\":\"\xc0\xaf\",\"choices\":[{\"prompt_logprobs\":[null," OK1 "," OK2 "]}]}",
         "invalid UTF-8"},
        /* numbers beyond range, refused as yajl refused them */
        {WRAP("null,{\"4\":{\"logprob\":-1e400,\"rank\":1},\"9\":{\"logprob\":-3,\"rank\":2}},"
              OK2), "the reply is not JSON (parse error: numeric (floating point) overflow)"},
        {WRAP("null,{\"4\":{\"logprob\":-0.1,\"rank\":9223372036854775808},\"9\":{\"logprob\":"
              "-3,\"rank\":2}}," OK2), "the reply is not JSON (parse error: integer overflow)"},
        {"{\"created\":-9223372036854775809,\"choices\":[{\"prompt_logprobs\":[null," OK1 ","
         OK2 "]}]}", "integer overflow"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t n = strlen(cases[i].reply);
        for (size_t cut = 0; cut <= n; cut++) {
            seen s = {0};
            pg_err err = {0};
            cr_expect_eq(parse_cuts(cases[i].reply, n, &cut, 1, ids, 3, 2, &s, &err),
                         PG_ERR_FORMAT, "case %zu cut %zu: %s", i, cut, err.msg);
            cr_expect(strstr(err.msg, "http://h:1 sequence 'q1': the reply is not JSON (parse "
                             "error: ") == err.msg, "case %zu: %s", i, err.msg);
            cr_expect(strstr(err.msg, cases[i].why) != NULL, "case %zu cut %zu: '%s' lacks '%s'",
                      i, cut, err.msg, cases[i].why);
        }
    }
}
