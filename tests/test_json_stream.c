/* test_json_stream.c: the strict streaming JSON parser (evals/json_stream.h):
 * the same tokens however a reply is cut into chunks, every refusal of
 * invalid JSON, and fixed memory for a string of any length. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "evals/json_stream.h"
#include "testutil.h"

/* The prefix of the parser's messages in these tests. */
#define T_WHAT "http://h:1 sequence 'q'"
/* Room for one document's tokens, written out. */
#define T_LOG_MAX (1 << 20)

/* The tokens a parse handed over, written out one a line (a number as its
 * text, its kind and its bits, a string as its bytes), to compare parses. */
typedef struct token_log {
    char *text;
    size_t len;
    size_t n_tokens;
    size_t stop_at;  /* > 0: the callback refuses token stop_at (1-based) */
} token_log;

/* Appends a printf'd line to the log. */
__attribute__((format(printf, 2, 3)))
static void log_put(token_log *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(l->text + l->len, T_LOG_MAX - l->len, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < T_LOG_MAX - l->len, "token log full");
    l->len += (size_t)n;
}

/* The parser's callback: logs tok (refusing token stop_at). */
static pg_status on_token(void *ctx, const js_token *tok, pg_err *err)
{
    token_log *l = ctx;
    if (++l->n_tokens == l->stop_at) return pg_fail(err, PG_ERR_DB, "stop at token %zu", l->stop_at);
    static const char *const names[] = {"{", "}", "[", "]", "key", "string", "number", "true",
                                        "false", "null"};
    log_put(l, "%s", names[tok->type]);
    if (tok->type == JS_KEY || tok->type == JS_STRING) {
        log_put(l, " %zu%s ", tok->len, tok->truncated ? "+" : "");
        for (size_t i = 0; i < tok->len; i++) log_put(l, "%02x", (unsigned char)tok->text[i]);
    } else if (tok->type == JS_NUMBER) {
        log_put(l, " %.*s %s %lld %a", (int)tok->len, tok->text, tok->is_int ? "int" : "double",
                tok->integer, tok->value);
    }
    log_put(l, "\n");
    return PG_OK;
}

/* js_parser_feed on a void *parser (tu_feed_cut). */
static pg_status feed(void *parser, const char *data, size_t len, pg_err *err)
{
    return js_parser_feed(parser, data, len, err);
}

/* Parses doc[0..n) cut at the offsets cuts[0..n_cuts) (increasing) into
 * *l (its text reset); returns the status, the message in *err. */
static pg_status parse_cut(const char *doc, size_t n, const size_t *cuts, size_t n_cuts,
                           token_log *l, pg_err *err)
{
    l->len = 0;
    l->n_tokens = 0;
    l->text[0] = '\0';
    js_parser *p = js_parser_new(T_WHAT, on_token, l);
    cr_assert_not_null(p);
    pg_status st = tu_feed_cut(feed, p, doc, n, cuts, n_cuts, err);
    if (st == PG_OK) st = js_parser_finish(p, err);
    /* A failure is sticky. */
    if (st != PG_OK) {
        pg_err again = {0};
        cr_expect_eq(js_parser_feed(p, "1", 1, &again), st);
        cr_expect_str_eq(again.msg, err->msg);
    }
    js_parser_free(p);
    return st;
}

/* Parses doc whole, then cut once at every offset, then in random pieces
 * of 1 to 7 bytes: the same status and tokens each time, and for a refusal
 * a message that starts with the parser's prefix. Returns the whole
 * parse's status (its tokens in *whole, its message in *err). */
static pg_status parse_every_way(const char *doc, size_t n, token_log *whole, pg_err *err)
{
    token_log l = {.text = malloc(T_LOG_MAX)};
    cr_assert_not_null(l.text);
    const pg_status want = parse_cut(doc, n, NULL, 0, whole, err);
    if (want != PG_OK)
        cr_expect(strstr(err->msg, T_WHAT ": ") == err->msg, "%s", err->msg);
    for (size_t cut = 0; cut <= n; cut++) {
        pg_err e = {0};
        const pg_status st = parse_cut(doc, n, &cut, 1, &l, &e);
        cr_assert_eq(st, want, "cut at %zu of %zu: %s (whole: %s)", cut, n, e.msg, err->msg);
        cr_assert_eq(l.len, whole->len, "cut at %zu: other tokens", cut);
        cr_assert(memcmp(l.text, whole->text, l.len) == 0, "cut at %zu: other tokens", cut);
    }
    uint64_t seed = 28;  /* issue #28 */
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    cr_assert_not_null(cuts);
    for (int round = 0; round < 8; round++) {
        const size_t n_cuts = tu_random_cuts(&seed, n, cuts);
        pg_err e = {0};
        const pg_status st = parse_cut(doc, n, cuts, n_cuts, &l, &e);
        cr_assert_eq(st, want, "round %d: %s (whole: %s)", round, e.msg, err->msg);
        cr_assert_eq(l.len, whole->len, "round %d: other tokens", round);
        cr_assert(memcmp(l.text, whole->text, l.len) == 0, "round %d: other tokens", round);
    }
    free(cuts);
    free(l.text);
    return want;
}

/* A document of every kind of token: escapes and surrogate pairs in keys
 * and strings, raw UTF-8, whitespace of each kind around everything,
 * numbers of every form JSON has, literals, nesting. */
static const char EVERY_KIND[] =
    " \t\r\n{ \"choices\" : [ { \"k\\u0065y\\n\\\"\" :\"\\u0120the\\ud83d\\ude00\\/\\\\\\b\\f\\r\\t\","
    "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\":\"\\ud83d x \\ude00 \\uDBFF\\uDFFF\\u00E9\x7f\","
    "\"n\":[0,-0,1,-1,0.5,-0.0,1e5,1E+5,1e-5,-2.5E-3,12345678901234567890e-10,"
    "9223372036854775807,-9223372036854775807,-1.3984992504119873,1.7976931348623157e308,"
    "4.9e-324,1e-400,123456789012345678901234567890.5],"
    "\"l\":[true,false,null,[],{},[[]],{\"\":{}}],\r\n\t\"\":\"\"}]  ,\"z\" :null } \n";

Test(json_stream, every_kind_of_token_the_same_however_it_is_cut)
{
    token_log whole = {.text = malloc(T_LOG_MAX)};
    cr_assert_not_null(whole.text);
    pg_err err = {0};
    cr_assert_eq(parse_every_way(EVERY_KIND, sizeof EVERY_KIND - 1, &whole, &err), PG_OK, "%s",
                 err.msg);
    /* Escapes decoded: a surrogate pair joined, a lone one U+FFFD. */
    cr_expect(strstr(whole.text, "key 5 6b65790a22\n") != NULL, "%s", whole.text);
    cr_expect(strstr(whole.text, "string 15 c4a0746865f09f98802f5c080c0d09\n") != NULL, "%s",
              whole.text);
    cr_expect(strstr(whole.text, "string 17 efbfbd207820efbfbd20f48fbfbfc3a97f\n") != NULL, "%s",
              whole.text);
    /* Numbers: integers as integers, doubles bit for bit strtod's. */
    cr_expect(strstr(whole.text, "number -0 int 0 0x0p+0\n") != NULL, "%s", whole.text);
    cr_expect(strstr(whole.text, "number -0.0 double 0 -0x0p+0\n") != NULL, "%s", whole.text);
    cr_expect(strstr(whole.text, "number 9223372036854775807 int 9223372036854775807 ") != NULL,
              "%s", whole.text);
    cr_expect(strstr(whole.text, "number 1e-400 double 0 0x0p+0\n") != NULL, "%s", whole.text);
    char want[128];
    snprintf(want, sizeof want, "number -1.3984992504119873 double 0 %a\n",
             strtod("-1.3984992504119873", NULL));
    cr_expect(strstr(whole.text, want) != NULL, "%s", whole.text);
    snprintf(want, sizeof want, "number 123456789012345678901234567890.5 double 0 %a\n",
             strtod("123456789012345678901234567890.5", NULL));
    cr_expect(strstr(whole.text, want) != NULL, "%s", whole.text);
    free(whole.text);
}

Test(json_stream, valid_documents_are_accepted)
{
    static const char *const docs[] = {
        "0", "-0", "\"\"", "[]", "{}", " \t\n\r[ ]\r\n", "true", "null", "[false]",
        "-9223372036854775807", "1.7976931348623157e308", "\"\\u0000\"", "{\"a\":{\"a\":[1]}}",
        "[1,[2,[3,[4]]],{\"x\":[]}]", "0e0", "-0.0E-0", "[ 1 , 2 ]"};
    token_log l = {.text = malloc(T_LOG_MAX)};
    cr_assert_not_null(l.text);
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        pg_err err = {0};
        cr_expect_eq(parse_every_way(docs[i], strlen(docs[i]), &l, &err), PG_OK, "'%s': %s",
                     docs[i], err.msg);
    }
    free(l.text);
}

Test(json_stream, invalid_json_is_refused_however_it_is_cut)
{
    static const struct {
        const char *doc;
        const char *why;
    } cases[] = {
        /* trailing garbage, two values */
        {"{} x", "'x' where nothing (trailing garbage after the JSON value) is due"},
        {"{}{}", "trailing garbage"},
        {"1 2", "trailing garbage"},
        {"[1]]", "trailing garbage"},
        /* literals */
        {"nul", "the reply ends inside a literal (null)"},
        {"nulx", "invalid literal (not null)"},
        {"[tru]", "invalid literal (not true)"},
        {"True", "'T' where a value is due"},
        {"[falsey]", "'y' where ',' or ']' after a value is due"},
        {"NaN", "'N' where a value is due"},
        {"-Infinity", "invalid number"},
        {"[nullnull]", "'n' where ',' or ']' after a value is due"},
        /* strings */
        {"\"abc", "the reply ends inside a string"},
        {"[\"a\nb\"]", "control character 0x0A in a string"},
        {"\"\x1f\"", "control character 0x1F"},
        {"\"\\x\"", "invalid escape '\\x' in a string"},
        {"\"\\U0041\"", "invalid escape '\\U'"},
        {"\"\\u12\"", "a \\u escape without 4 hex digits"},
        {"\"\\u12g4\"", "a \\u escape without 4 hex digits"},
        {"\"\\", "the reply ends inside a string"},
        {"'a'", "''' where a value is due"},
        /* UTF-8 (RFC 3629) */
        {"\"\xc3\"", "invalid UTF-8 (byte 0x22)"},
        {"\"\xc0\x80\"", "invalid UTF-8 (byte 0xC0)"},
        {"\"\xe0\x80\x80\"", "invalid UTF-8 (byte 0x80)"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8 (byte 0xA0)"},
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 (byte 0x90)"},
        {"\"\xf5\x80\x80\x80\"", "invalid UTF-8 (byte 0xF5)"},
        {"\"\xff\"", "invalid UTF-8 (byte 0xFF)"},
        {"\"\x80\"", "invalid UTF-8 (byte 0x80)"},
        {"\"\xe4\xb8\"", "invalid UTF-8 (byte 0x22)"},
        {"\xc3\xa9", "byte 0xC3 where a value is due"},
        /* numbers */
        {"01", "'1' where nothing"},
        {"[-]", "invalid number"},
        {"[1.]", "invalid number"},
        {"[.5]", "'.' where a value or ']' is due"},
        {"[1e]", "invalid number"},
        {"[1e+]", "invalid number"},
        {"+1", "'+' where a value is due"},
        {"[-01]", "'1' where ',' or ']' after a value is due"},
        {"[1.e5]", "invalid number"},
        {"[--1]", "invalid number"},
        {"[1.5.5]", "'.' where ',' or ']'"},
        {"[0x10]", "'x' where ',' or ']'"},
        {"-", "invalid number at the end of the reply"},
        {"1.", "invalid number at the end of the reply"},
        {"9223372036854775808", "the reply is not JSON (parse error: integer overflow)"},
        {"[-9223372036854775808]", "(parse error: integer overflow)"},
        {"1e400", "(parse error: numeric (floating point) overflow)"},
        {"[-1.8e308]", "numeric (floating point) overflow"},
        /* structure */
        {"", "no JSON value (an empty reply)"},
        {" \n ", "no JSON value"},
        {"[", "the reply ends inside its JSON value (1 containers open)"},
        {"{\"a\":1", "(1 containers open)"},
        {"{\"a\"", "(1 containers open)"},
        {"[1,]", "']' where a value is due"},
        {"{\"a\":1,}", "'}' where a key (a string) is due"},
        {"{\"a\" 1}", "'1' where ':' after a key is due"},
        {"{1:2}", "'1' where a key (a string) or '}' is due"},
        {"[1 2]", "'2' where ',' or ']' after a value is due"},
        {"{\"a\":}", "'}' where a value is due"},
        {"[}", "'}' where a value or ']' is due"},
        {"{]", "']' where a key (a string) or '}' is due"},
        {"[1}", "'}' where ',' or ']' after a value is due"},
        {"{\"a\":1]", "']' where ',' or '}' after a value is due"},
        {",", "',' where a value is due"},
        {"[,1]", "',' where a value or ']' is due"},
        {"{\"a\"::1}", "':' where a value is due"},
        {"\xef\xbb\xbf{}", "byte 0xEF where a value is due"},  /* a BOM is no JSON */
    };
    token_log l = {.text = malloc(T_LOG_MAX)};
    cr_assert_not_null(l.text);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *doc = cases[i].doc;
        pg_err err = {0};
        cr_expect_eq(parse_every_way(doc, strlen(doc), &l, &err), PG_ERR_FORMAT,
                     "case %zu '%s' accepted", i, doc);
        cr_expect(strstr(err.msg, T_WHAT ": the reply is not JSON (parse error: ") == err.msg,
                  "case %zu: %s", i, err.msg);
        cr_expect(strstr(err.msg, cases[i].why) != NULL, "case %zu '%s': '%s' lacks '%s'", i,
                  doc, err.msg, cases[i].why);
    }
    /* A NUL byte after the value. */
    pg_err err = {0};
    cr_expect_eq(parse_every_way("[1]\0", 4, &l, &err), PG_ERR_FORMAT);
    cr_expect(strstr(err.msg, "byte 0x00 where nothing") != NULL, "%s", err.msg);
    free(l.text);
}

/* Strings are scanned eight bytes at a time: each byte that ends a plain
 * run is found at every position of a long string, and the plain bytes
 * next to them in value pass at every position. */
Test(json_stream, every_byte_class_at_every_position_of_a_long_string)
{
    enum { LEN = 24 };
    static const struct {
        unsigned char byte;
        const char *why;   /* NULL: valid */
    } bytes[] = {
        {0x01, "control character 0x01"}, {0x1F, "control character 0x1F"},
        {'"', "where nothing (trailing garbage"}, {'\\', "invalid escape '\\a'"},
        {0x80, "invalid UTF-8 (byte 0x80)"}, {0xFF, "invalid UTF-8 (byte 0xFF)"},
        {0x20, NULL}, {0x21, NULL}, {0x23, NULL}, {0x5B, NULL}, {0x5D, NULL}, {0x7F, NULL}};
    token_log l = {.text = malloc(T_LOG_MAX)};
    cr_assert_not_null(l.text);
    for (size_t b = 0; b < sizeof bytes / sizeof bytes[0]; b++)
        for (size_t at = 0; at < LEN; at++) {
            char doc[LEN + 3];
            doc[0] = '"';
            memset(doc + 1, 'a', LEN);
            doc[1 + at] = (char)bytes[b].byte;
            doc[LEN + 1] = '"';
            doc[LEN + 2] = '\0';
            pg_err err = {0};
            const pg_status st = parse_cut(doc, LEN + 2, NULL, 0, &l, &err);
            if (bytes[b].why == NULL) {
                cr_expect_eq(st, PG_OK, "byte 0x%02X at %zu: %s", bytes[b].byte, at, err.msg);
                char want[16];
                snprintf(want, sizeof want, "%02x", bytes[b].byte);
                cr_expect(strncmp(l.text + strlen("string 24 ") + 2 * at, want, 2) == 0,
                          "byte 0x%02X at %zu: %s", bytes[b].byte, at, l.text);
            } else {
                /* (a backslash last escapes the closing quote) */
                const char *why = bytes[b].byte == '\\' && at == LEN - 1
                                      ? "the reply ends inside a string" : bytes[b].why;
                cr_expect_eq(st, PG_ERR_FORMAT, "byte 0x%02X at %zu accepted", bytes[b].byte, at);
                cr_expect(strstr(err.msg, why) != NULL, "byte 0x%02X at %zu: %s", bytes[b].byte,
                          at, err.msg);
            }
        }
    free(l.text);
}

/* Nesting: JS_DEPTH_MAX levels are read, one more is refused. */
Test(json_stream, nesting_up_to_the_depth_limit)
{
    for (int extra = 0; extra <= 1; extra++) {
        const size_t depth = JS_DEPTH_MAX + (size_t)extra;
        char *doc = malloc(2 * depth + 1);
        cr_assert_not_null(doc);
        memset(doc, '[', depth);
        memset(doc + depth, ']', depth);
        doc[2 * depth] = '\0';
        token_log l = {.text = malloc(T_LOG_MAX)};
        cr_assert_not_null(l.text);
        pg_err err = {0};
        const pg_status st = parse_cut(doc, 2 * depth, NULL, 0, &l, &err);
        if (extra) {
            cr_expect_eq(st, PG_ERR_FORMAT);
            cr_expect(strstr(err.msg, "nesting deeper than 1000") != NULL, "%s", err.msg);
        } else {
            cr_expect_eq(st, PG_OK, "%s", err.msg);
        }
        free(l.text);
        free(doc);
    }
}

/* A number carried over a chunk's end: up to JS_NUMBER_MAX bytes, whole or
 * cut; one byte more is refused either way. */
Test(json_stream, numbers_up_to_the_length_limit)
{
    for (int extra = 0; extra <= 1; extra++) {
        const size_t n = JS_NUMBER_MAX + (size_t)extra;
        char *doc = malloc(n + 3);
        cr_assert_not_null(doc);
        doc[0] = '[';
        doc[1] = '0';
        doc[2] = '.';
        memset(doc + 3, '5', n - 2);
        doc[n + 1] = ']';
        doc[n + 2] = '\0';
        token_log l = {.text = malloc(T_LOG_MAX)};
        cr_assert_not_null(l.text);
        for (size_t cut = 0; cut <= n + 2; cut += 97) {
            pg_err err = {0};
            const pg_status st = parse_cut(doc, n + 2, &cut, 1, &l, &err);
            if (extra) {
                cr_expect_eq(st, PG_ERR_FORMAT, "cut %zu", cut);
                cr_expect(strstr(err.msg, "a number longer than 1024 bytes") != NULL, "%s",
                          err.msg);
            } else {
                cr_expect_eq(st, PG_OK, "cut %zu: %s", cut, err.msg);
            }
        }
        free(l.text);
        free(doc);
    }
}

/* Heap in use now: glibc's arena blocks and its mmap'd ones (0 where a
 * sanitizer replaces malloc). */
static size_t heap_in_use(void)
{
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* A string of 1 MB (plain, or with an escape every few bytes) is checked
 * as it streams, its first JS_TEXT_MAX bytes kept: the parser allocates
 * nothing while reading it, whatever the chunks. */
Test(json_stream, a_huge_string_in_fixed_memory)
{
    enum { N = 1 << 20, CHUNK = 16384 };
    char *doc = malloc(N + 64);
    cr_assert_not_null(doc);
    for (int escaped = 0; escaped <= 1; escaped++) {
        size_t n = (size_t)sprintf(doc, "{\"skip\":\"");
        while (n < N) {
            if (escaped && n % 16 == 0) n += (size_t)sprintf(doc + n, "\\u00e9\\n");
            else {
                doc[n] = (char)('a' + n % 26);
                n++;
            }
        }
        n += (size_t)sprintf(doc + n, "\",\"k\":1}");
        token_log l = {.text = malloc(T_LOG_MAX)};
        cr_assert_not_null(l.text);
        js_parser *p = js_parser_new(T_WHAT, on_token, &l);
        cr_assert_not_null(p);
        const size_t before = heap_in_use();
        pg_err err = {0};
        for (size_t at = 0; at < n; at += CHUNK)
            cr_assert_eq(js_parser_feed(p, doc + at, n - at < CHUNK ? n - at : CHUNK, &err), PG_OK,
                         "%s", err.msg);
        cr_expect_eq(heap_in_use(), before, "the parser allocated while reading a string");
        cr_assert_eq(js_parser_finish(p, &err), PG_OK, "%s", err.msg);
        js_parser_free(p);
        /* The value's token: its first 64 bytes, marked truncated. */
        cr_expect(strstr(l.text, "string 64+ ") != NULL, "%s", l.text);
        cr_expect(strstr(l.text, "key 1 6b\nnumber 1 int 1") != NULL, "%s", l.text);
        free(l.text);
    }
    free(doc);
}

/* The callback's refusal stops the parse with its status and message. */
Test(json_stream, the_callback_stops_the_parse)
{
    token_log l = {.text = malloc(T_LOG_MAX), .stop_at = 3};
    cr_assert_not_null(l.text);
    js_parser *p = js_parser_new(T_WHAT, on_token, &l);
    cr_assert_not_null(p);
    pg_err err = {0};
    cr_expect_eq(js_parser_feed(p, "[1,2,3]", 7, &err), PG_ERR_DB);
    cr_expect_str_eq(err.msg, "stop at token 3");
    pg_err again = {0};
    cr_expect_eq(js_parser_finish(p, &again), PG_ERR_DB);
    js_parser_free(p);
    free(l.text);
    cr_expect_null(js_parser_new(NULL, on_token, NULL));
    cr_expect_null(js_parser_new("x", NULL, NULL));
}
