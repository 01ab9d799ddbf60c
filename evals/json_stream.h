/*
 * json_stream.h: a strict streaming JSON parser (RFC 8259) for servers'
 * replies too large to hold whole (issue #28: a vLLM prompt-logprobs reply
 * of a 30k-token sequence at K = 20 is about 45 MB), fed in chunks as they
 * arrive and handing each token to a callback as soon as it is whole.
 *
 * Chunks may split the reply anywhere: inside a number, a key, an escape,
 * a UTF-8 character or a literal. Its memory is fixed whatever the reply:
 * a string of any length is checked as it streams and only its first
 * JS_TEXT_MAX decoded bytes are kept; a number cut by a chunk's end is
 * carried over (at most JS_NUMBER_MAX bytes); a literal is matched as it
 * comes; a byte per open container (at most JS_DEPTH_MAX).
 *
 * Strict: one JSON value and whitespace, nothing else; every number
 * checked against JSON's grammar; strings without control characters,
 * with only JSON's escapes (\uXXXX of four hex digits), in well-formed
 * UTF-8 (RFC 3629: no overlong form, no surrogate, nothing past U+10FFFF;
 * yajl, which this replaces, validated UTF-8 too, its default). A \u escape
 * of a lone surrogate is valid JSON (RFC 8259, section 8.2) and decodes to
 * U+FFFD. Numbers are read as yajl read them: an integer (no fraction, no
 * exponent) beyond long long is refused ("integer overflow"), as is a
 * double past DBL_MAX ("numeric (floating point) overflow"); a double is
 * bit for bit strtod's reading, mostly without strtod (js_double).
 *
 * Every failure is PG_ERR_FORMAT with the message "<what>: the reply is
 * not JSON (parse error: <reason>) at byte <offset>", unless the callback
 * stopped the parse (its status and message are returned). The first
 * failure is sticky: every later feed or finish returns it again.
 */
#ifndef PG_JSON_STREAM_H
#define PG_JSON_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest prefix of the parser's messages (the caller's `what`), NUL included. */
#define JS_WHAT_MAX 256
/* Deepest nesting of objects and arrays accepted (RFC 8259, section 9,
 * lets a parser set one): cJSON's CJSON_NESTING_LIMIT. */
#define JS_DEPTH_MAX 1000
/* Longest number accepted, in bytes (RFC 8259, section 9, lets a parser
 * limit numbers): a double's shortest round-trip text is at most 24 bytes
 * (-2.2250738585072014e-308) and an integer past 19 digits overflows long
 * long anyway, so only decimals with hundreds of digits are refused. */
#define JS_NUMBER_MAX 1024
/* Decoded bytes of a string (key or value) handed to the callback: the
 * longest key either reader compares is 20 bytes ("input_token_logprobs")
 * and messages quote at most 32. */
#define JS_TEXT_MAX 64

/* A token of the reply. */
typedef enum js_type {
    JS_OBJECT_START,
    JS_OBJECT_END,
    JS_ARRAY_START,
    JS_ARRAY_END,
    JS_KEY,
    JS_STRING,
    JS_NUMBER,
    JS_TRUE,
    JS_FALSE,
    JS_NULL
} js_type;

/* One token, valid only during the callback. */
typedef struct js_token {
    js_type type;
    /* JS_KEY, JS_STRING: the first len bytes of the decoded string (UTF-8;
     * all of it unless truncated, then len is JS_TEXT_MAX); JS_NUMBER: its
     * text. Not NUL-terminated. */
    const char *text;
    size_t len;
    bool truncated;
    /* JS_NUMBER: is_int when it has no fraction and no exponent (then
     * integer is its value); value is its double (strtod's reading, or the
     * integer's). */
    bool is_int;
    long long integer;
    double value;
} js_token;

/* Called for each token in order; a status other than PG_OK (with err
 * filled) stops the parse and is returned by the feed or finish that ran. */
typedef pg_status (*js_token_fn)(void *ctx, const js_token *tok, pg_err *err);

typedef struct js_parser js_parser;

/* A parser reporting to on_token(ctx, ...), its messages prefixed with
 * what (truncated to JS_WHAT_MAX - 1 bytes). NULL when out of memory or
 * what or on_token is NULL. */
js_parser *js_parser_new(const char *what, js_token_fn on_token, void *ctx);

/* Feeds the next len bytes of the reply: PG_OK, or the failures at the top
 * of this file. */
pg_status js_parser_feed(js_parser *p, const char *data, size_t len, pg_err *err);

/* Ends the reply: PG_OK when it was one whole JSON value (the last token
 * handed over), else the failures at the top of this file. */
pg_status js_parser_finish(js_parser *p, pg_err *err);

/* Frees p; NULL is a no-op. */
void js_parser_free(js_parser *p);

/* Reads the JSON number s[0..len) (not NUL-terminated; JSON's grammar,
 * nothing before or after it) into *out, bit for bit the double strtod
 * reads (the nearest, ties to even; +-HUGE_VAL past DBL_MAX): by one
 * correctly rounded operation where that provably gives it, by strtod
 * otherwise. With s = w 10^e: a double one when w <= 2^53 and |e| <= 22
 * (Clinger); on x86-64 a long double one when w has at most 18 significant
 * digits, |e| <= 27 and the result is no tie between two doubles (nearly
 * every logprob vLLM prints). *exact (when not NULL) is 1 when the exact
 * path read it, else 0. PG_ERR_FORMAT when s is no JSON number,
 * PG_ERR_NOMEM, PG_ERR_INTERNAL for a NULL s or out. */
pg_status js_double(const char *s, size_t len, double *out, int *exact, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_JSON_STREAM_H */
