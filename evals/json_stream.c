/* json_stream.c: the strict streaming JSON parser (see json_stream.h). */
#include "json_stream.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- numbers ------------------------------------------------------------ */
/*
 * glibc's strtod is exact for any input, so it works in big integers: with
 * a copy of the digits, about 15% of parsing and scoring a vLLM position
 * (perf; bench/RESULTS.md, "Teacher-forced scoring on the client"). A
 * logprob as vLLM prints it (a Python float's repr, at most 17 significant
 * digits, e.g. -1.3984992504119873) is read here by one correctly rounded
 * operation where that provably gives the value strtod gives, and by
 * strtod otherwise. The number's grammar is checked in the same pass.
 */

/* Where a long double is x87's 80-bit format (64-bit significand, the low
 * 8 bytes of its storage; x86-64 System V ABI, 3.1.2), the long double
 * path runs; elsewhere only Clinger's (below) and strtod. */
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
#define JS_EXACT_DECIMAL 1
#else
#define JS_EXACT_DECIMAL 0
#endif

/* Most significant digits the exact path takes: 10^18 < 2^63, so they are
 * an int64_t and exact in a 64-bit significand (a repr has at most 17). */
#define JS_EXACT_DIGITS_MAX 18
/* Largest k with 10^k exact in a 64-bit significand: 10^k = 5^k 2^k and
 * 5^27 < 2^64 < 5^28. */
#define JS_EXACT_POW10_MAX 27
/* The bits of a 64-bit significand below a double's 53 (64 - 53 = 11), and
 * their value when the long double lies exactly halfway between two
 * doubles: a 1 followed by ten 0s. */
#define JS_X87_EXTRA_BITS 0x7FFu
#define JS_X87_HALFWAY 0x400u
/* Exponent digits are read up to this magnitude (anything past 10^27 goes
 * to strtod anyway); it keeps the int from overflowing on 1e99999999999. */
#define JS_EXPONENT_CAP 100000
/* Numbers up to this long are copied for strtod on the stack (a double's
 * repr is at most 24 characters); longer ones are copied to the heap. */
#define JS_NUMBER_COPY 64

/* Clinger's fast path (W. D. Clinger, "How to read floating point numbers
 * accurately", PLDI 1990): w <= 2^53 and 10^k for k <= 22 (5^22 < 2^53)
 * are exact doubles, so one double multiply or divide is the correctly
 * rounded value; only where double arithmetic is done in double
 * (FLT_EVAL_METHOD 0: SSE2 on x86-64, not x87's extended registers). */
#if FLT_EVAL_METHOD == 0
#define JS_CLINGER 1
#else
#define JS_CLINGER 0
#endif
#define JS_CLINGER_W_MAX (1ull << 53)
#define JS_CLINGER_POW10_MAX 22

#if JS_CLINGER
/* 10^0 .. 10^JS_CLINGER_POW10_MAX, each exact. */
static const double JS_POW10_DOUBLE[JS_CLINGER_POW10_MAX + 1] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#endif

#if JS_EXACT_DECIMAL
/* 10^0 .. 10^JS_EXACT_POW10_MAX, each exact (the literal is the value). */
static const long double JS_POW10[JS_EXACT_POW10_MAX + 1] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
    1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
#endif

/* The hot steps, inlined into the token loop (as calls each cost more
 * than the step: bench/RESULTS.md). */
#define JS_INLINE __attribute__((always_inline)) inline

/* Eight ASCII digits at a time (SWAR: one word, no loop over the bytes;
 * the constants are the bytes' patterns). */
#define JS_SWAR_ZEROS 0x3030303030303030u   /* eight '0' */
#define JS_SWAR_HIGH 0xF0F0F0F0F0F0F0F0u    /* each byte's high nibble */
#define JS_SWAR_SIX 0x0606060606060606u     /* + 6 carries a byte above '9' */
#define JS_SWAR_THREES 0x3333333333333333u  /* '0'..'9' and their + 6: 0x3_ */

/* The 8 bytes at s as a little-endian word (byte 0 lowest): one load where
 * the machine is little-endian (GCC's and Clang's __BYTE_ORDER__), else
 * byte by byte (a loop of byte loads GCC does not fold into one). */
JS_INLINE static uint64_t load8(const char *s)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, s, sizeof v);
    return v;
#else
    const unsigned char *u = (const unsigned char *)s;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | u[i];
    return v;
#endif
}

/* Whether all 8 bytes of v are ASCII digits. */
JS_INLINE static int eight_digits(uint64_t v)
{
    return ((v & JS_SWAR_HIGH) | (((v + JS_SWAR_SIX) & JS_SWAR_HIGH) >> 4)) == JS_SWAR_THREES;
}

/* The value of the 8 ASCII digits of v (byte 0 the most significant digit):
 * pairs, then quadruples, then the whole, each by one multiply. */
JS_INLINE static uint64_t eight_digits_value(uint64_t v)
{
    const uint64_t pair_mask = 0x000000FF000000FFu;
    const uint64_t mul_hi = 100u + (1000000ull << 32), mul_lo = 1u + (10000ull << 32);
    v -= JS_SWAR_ZEROS;
    v = v * 10 + (v >> 8);
    return ((v & pair_mask) * mul_hi + ((v >> 16) & pair_mask) * mul_lo) >> 32;
}

/* Whether c is an ASCII digit. */
JS_INLINE static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The digits at *c (before end), appended to *w while the count *nd of
 * significant digits stays within JS_EXACT_DIGITS_MAX, counted beyond it;
 * *c moves past them all. */
JS_INLINE static void take_digits(const char **c, const char *end, uint64_t *w, int *nd)
{
    const char *q = *c;
    for (; end - q >= 8 && eight_digits(load8(q)); q += 8) {
        if (*nd <= JS_EXACT_DIGITS_MAX - 8) *w = *w * 100000000u + eight_digits_value(load8(q));
        *nd += 8;
    }
    for (; q < end && is_digit(*q); q++) {
        if (*nd < JS_EXACT_DIGITS_MAX) *w = *w * 10 + (uint64_t)(*q - '0');
        ++*nd;
    }
    *c = q;
}

/* A JSON number's text taken apart: (-1)^neg w 10^e10. */
typedef struct js_decimal {
    uint64_t w;     /* its significant digits, unless many */
    int e10;
    bool neg;
    bool is_int;    /* no fraction, no exponent (then e10 = 0) */
    bool many;      /* more than JS_EXACT_DIGITS_MAX significant digits: w, e10 unset */
} js_decimal;

/* What scan_number found. */
typedef enum js_scan {
    SCAN_OK,    /* a number, *used bytes long */
    SCAN_BAD,   /* not JSON's grammar */
    SCAN_MORE   /* s ended inside what may still be a number (not final) */
} js_scan;

/* Scans the JSON number at the start of s[0..len) (its first byte '-' or
 * a digit) into *d: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, in one
 * pass. final: nothing follows s (else reaching its end is SCAN_MORE). */
JS_INLINE static js_scan scan_number(const char *s, size_t len, bool final, js_decimal *d,
                                     size_t *used)
{
    const char *c = s, *end = s + len;
    const js_scan at_end = final ? SCAN_BAD : SCAN_MORE;
    d->w = 0;
    d->e10 = 0;
    d->neg = c < end && *c == '-';
    d->is_int = true;
    c += d->neg;
    int nd = 0;
    if (c == end) return at_end;
    if (*c == '0') c++;  /* JSON: a lone 0 before the point, "0.5" */
    else if (is_digit(*c)) take_digits(&c, end, &d->w, &nd);
    else return SCAN_BAD;
    if (c < end && *c == '.') {
        d->is_int = false;
        const char *frac = ++c;
        if (d->w == 0)
            while (c < end && *c == '0') c++;  /* 0.000123: no significant digit yet */
        take_digits(&c, end, &d->w, &nd);
        if (c == frac) return c == end ? at_end : SCAN_BAD;  /* "1." */
        d->e10 -= (int)(c - frac);
    }
    if (c < end && (*c == 'e' || *c == 'E')) {
        d->is_int = false;
        if (++c == end) return at_end;  /* "1e" */
        const bool eneg = *c == '-';
        if ((*c == '-' || *c == '+') && ++c == end) return at_end;
        if (!is_digit(*c)) return SCAN_BAD;
        int x = 0;
        for (; c < end && is_digit(*c); c++)
            if (x < JS_EXPONENT_CAP) x = x * 10 + (*c - '0');
        d->e10 += eneg ? -x : x;
    }
    if (c == end && !final) return SCAN_MORE;
    d->many = nd > JS_EXACT_DIGITS_MAX;
    *used = (size_t)(c - s);
    return SCAN_OK;
}

/* d's value into *out by exact arithmetic, 1; 0 when that cannot be shown
 * to equal strtod's reading (then *out is unset). Clinger's path first
 * (JS_CLINGER); else w < 10^18 and 10^|e10| <= 10^27 are exact in a long
 * double, so w * 10^e10 (or w / 10^-e10) is the exact value rounded once
 * to 64 bits; rounded again to 53 bits it is the correctly rounded double
 * unless the 64-bit result lies exactly halfway between two doubles (then
 * the first rounding may have made the tie: strtod decides). The result
 * is normal: 1e-27 <= |w 10^e10| < 1e46. */
JS_INLINE static int exact_value(const js_decimal *d, double *out)
{
    if (d->many) return 0;
    if (d->w == 0) {
        *out = d->neg ? -0.0 : 0.0;
        return 1;
    }
#if JS_CLINGER
    if (d->w <= JS_CLINGER_W_MAX && d->e10 >= -JS_CLINGER_POW10_MAX &&
        d->e10 <= JS_CLINGER_POW10_MAX) {
        const double w = (double)d->w;
        const double v = d->e10 >= 0 ? w * JS_POW10_DOUBLE[d->e10]
                                     : w / JS_POW10_DOUBLE[-d->e10];
        *out = d->neg ? -v : v;
        return 1;
    }
#endif
#if JS_EXACT_DECIMAL
    if (d->e10 < -JS_EXACT_POW10_MAX || d->e10 > JS_EXACT_POW10_MAX) return 0;
    const long double w = (long double)(int64_t)d->w;
    const long double x = d->e10 >= 0 ? w * JS_POW10[d->e10] : w / JS_POW10[-d->e10];
    uint64_t significand;
    memcpy(&significand, &x, sizeof significand);
    if ((significand & JS_X87_EXTRA_BITS) == JS_X87_HALFWAY) return 0;
    const double v = (double)x;
    *out = d->neg ? -v : v;
    return 1;
#else
    return 0;
#endif
}

/* strtod's reading of the number s[0..len) (JSON's grammar, checked) into
 * *out: PG_OK, or PG_ERR_NOMEM for the copy of a long one. */
static pg_status strtod_text(const char *s, size_t len, double *out)
{
    char small[JS_NUMBER_COPY];
    char *copy = len < sizeof small ? small : malloc(len + 1);
    if (copy == NULL) return PG_ERR_NOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    *out = strtod(copy, NULL);
    if (copy != small) free(copy);
    return PG_OK;
}

pg_status js_double(const char *s, size_t len, double *out, int *exact, pg_err *err)
{
    if (s == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "js_double: NULL argument");
    js_decimal d;
    size_t used = 0;
    if (len == 0 || (*s != '-' && !is_digit(*s)) ||
        scan_number(s, len, true, &d, &used) != SCAN_OK || used != len)
        return pg_fail(err, PG_ERR_FORMAT, "\"%.*s\" is no JSON number",
                       (int)(len < 32 ? len : 32), s);
    const int fast = exact_value(&d, out);
    if (exact != NULL) *exact = fast;
    if (!fast && strtod_text(s, len, out) != PG_OK)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory for a %zu-byte number", len);
    return PG_OK;
}

/* The integer s[0..len) (JSON's grammar: digits after an optional '-')
 * into *v as yajl read one: 1; 0 when its magnitude is above LLONG_MAX
 * (yajl refused it: "integer overflow"). */
static int read_integer(const char *s, size_t len, long long *v)
{
    const char *c = s, *end = s + len;
    const int neg = *c == '-';
    c += neg;
    const unsigned long long max = LLONG_MAX;  /* yajl_parse_integer's bound, both signs */
    unsigned long long u = 0;
    for (; c < end; c++) {
        const unsigned digit = (unsigned)(*c - '0');
        if (u > (max - digit) / 10) return 0;
        u = u * 10 + digit;
    }
    *v = neg ? -(long long)u : (long long)u;
    return 1;
}

/* ---- strings ------------------------------------------------------------ */

/* Bytes that stand for themselves in a JSON string: 0x20 .. 0x7F but the
 * quote and the backslash (RFC 8259, section 7: "unescaped"; bytes from
 * 0x80 are UTF-8, checked apart). */
static const unsigned char JS_PLAIN[256] = {
    /* 0x00 .. 0x1F: control characters */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  /* 0x22: '"' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,  /* 0x5C: '\\' */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    /* 0x80 .. 0xFF: UTF-8, zero */
};

/* The first byte of a well-formed UTF-8 sequence of more than one byte,
 * the bytes that follow it, and the range of the second (the others are
 * 0x80 .. 0xBF): RFC 3629, section 4, UTF8-2 .. UTF8-4. */
typedef struct js_utf8_lead {
    unsigned char lo, hi;               /* the lead bytes */
    unsigned char n_follow;
    unsigned char second_lo, second_hi;
} js_utf8_lead;
static const js_utf8_lead JS_UTF8_LEADS[] = {
    {0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF}, {0xE1, 0xEC, 2, 0x80, 0xBF},
    {0xED, 0xED, 2, 0x80, 0x9F}, {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
    {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F}};
/* The range of a UTF-8 continuation byte. */
#define JS_UTF8_FOLLOW_LO 0x80
#define JS_UTF8_FOLLOW_HI 0xBF

/* Eight string bytes at a time (SWAR): a byte below 0x20, at or above 0x80,
 * a quote or a backslash ends a plain run. x - 0x20.. & ~x & 0x80.. marks
 * the bytes below 0x20 (Warren, Hacker's Delight, 6-1; a borrow can mark
 * a byte above a marked one, never below it, so the lowest mark is exact);
 * a quote or a backslash is a zero byte of x ^ 0x22.. or x ^ 0x5C... */
#define JS_SWAR_ONES 0x0101010101010101u
#define JS_SWAR_HIGH_BITS 0x8080808080808080u
#define JS_SWAR_SPACES 0x2020202020202020u
#define JS_SWAR_QUOTES 0x2222222222222222u
#define JS_SWAR_BACKSLASHES 0x5C5C5C5C5C5C5C5Cu

/* The marks of v's bytes that end a plain run (each byte's high bit). */
JS_INLINE static uint64_t unplain_marks(uint64_t v)
{
    const uint64_t q = v ^ JS_SWAR_QUOTES, bs = v ^ JS_SWAR_BACKSLASHES;
    return (((v - JS_SWAR_SPACES) & ~v) | ((q - JS_SWAR_ONES) & ~q) |
            ((bs - JS_SWAR_ONES) & ~bs) | v) & JS_SWAR_HIGH_BITS;
}

/* The end of the plain run at c (before end): its first byte that is no
 * plain one, or end. */
JS_INLINE static const unsigned char *plain_run(const unsigned char *c, const unsigned char *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; end - c >= 8; c += 8) {
        const uint64_t m = unplain_marks(load8((const char *)c));
        if (m != 0) return c + (__builtin_ctzll(m) >> 3);
    }
#endif
    while (c < end && JS_PLAIN[*c]) c++;
    return c;
}

/* UTF-16 surrogates (a \u escape's code unit) and what a lone one decodes to. */
#define JS_HIGH_SURROGATE_LO 0xD800u
#define JS_HIGH_SURROGATE_HI 0xDBFFu
#define JS_LOW_SURROGATE_LO 0xDC00u
#define JS_LOW_SURROGATE_HI 0xDFFFu
#define JS_SUPPLEMENTARY_BASE 0x10000u
#define JS_REPLACEMENT_CHAR 0xFFFDu
/* Hex digits of a \u escape. */
#define JS_U_ESCAPE_DIGITS 4

/* Where a string being read stands after its last byte. */
typedef enum js_escape {
    ESC_NONE,       /* a plain byte or the closing quote is next */
    ESC_BACKSLASH,  /* after a backslash */
    ESC_HEX         /* inside \uXXXX */
} js_escape;

/* ---- the parser --------------------------------------------------------- */

/* What the grammar takes next. */
typedef enum js_expect {
    EX_VALUE,           /* a value: at the top, after ':' or an array's ',' */
    EX_VALUE_OR_CLOSE,  /* after '[': a value or ']' */
    EX_KEY,             /* after an object's ',' */
    EX_KEY_OR_CLOSE,    /* after '{': a key or '}' */
    EX_COLON,           /* after a key */
    EX_COMMA_OR_CLOSE,  /* after a value inside a container */
    EX_DONE             /* after the top-level value: whitespace only */
} js_expect;

/* A token cut by the end of a chunk, finished by the next. */
typedef enum js_partial { PART_NONE, PART_STRING, PART_NUMBER, PART_LITERAL } js_partial;

/* An open container, on the stack. */
enum { OPEN_ARRAY = 0, OPEN_OBJECT = 1 };

struct js_parser {
    js_token_fn on_token;
    void *ctx;
    char what[JS_WHAT_MAX];
    unsigned long long offset;  /* bytes of the reply before the chunk being fed */
    js_expect expect;
    int depth;
    unsigned char open[JS_DEPTH_MAX];  /* OPEN_ARRAY or OPEN_OBJECT, per depth */
    js_partial partial;
    /* the string being read (PART_STRING) */
    bool str_key;
    js_escape esc;
    int hex_left;          /* ESC_HEX: digits still to come */
    unsigned hex_unit;     /* ESC_HEX: the code unit so far */
    unsigned high;         /* a high surrogate waiting for its low one; 0: none */
    int utf8_left;         /* continuation bytes still due */
    unsigned char utf8_lo, utf8_hi;  /* the next one's range */
    char text[JS_TEXT_MAX];
    size_t text_len;
    bool truncated;
    /* the number being read (PART_NUMBER) */
    char carry[JS_NUMBER_MAX + 1];
    size_t carry_len;
    /* the literal being read (PART_LITERAL) */
    const char *literal;   /* "true", "false" or "null" */
    size_t literal_at;     /* its bytes matched */
    js_type literal_type;
    bool finished;
    pg_status st;
    pg_err err;
};

js_parser *js_parser_new(const char *what, js_token_fn on_token, void *ctx)
{
    if (what == NULL || on_token == NULL) return NULL;
    js_parser *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->on_token = on_token;
    p->ctx = ctx;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->expect = EX_VALUE;
    return p;
}

void js_parser_free(js_parser *p)
{
    free(p);
}

/* Records the parse error reason at byte at of the chunk that begins at
 * base (NULL: the end of the reply) and returns NULL (the loop's stop). */
__attribute__((format(printf, 4, 5)))
static const unsigned char *bad(js_parser *p, const unsigned char *base,
                                const unsigned char *at, const char *fmt, ...)
{
    char reason[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    const unsigned long long where = p->offset + (base != NULL ? (unsigned long long)(at - base) : 0);
    if (p->st == PG_OK)
        p->st = pg_fail(&p->err, PG_ERR_FORMAT, "%s: the reply is not JSON (parse error: %s) at "
                        "byte %llu", p->what, reason, where);
    return NULL;
}

/* Hands tok to the callback: true to go on, false when it stopped the parse. */
JS_INLINE static bool emit(js_parser *p, const js_token *tok)
{
    const pg_status st = p->on_token(p->ctx, tok, &p->err);
    if (st == PG_OK) return true;
    p->st = st;
    return false;
}

/* What follows a value: a ',' or the container's close, or the end. */
JS_INLINE static js_expect after_value(const js_parser *p)
{
    return p->depth > 0 ? EX_COMMA_OR_CLOSE : EX_DONE;
}

/* Whether a value may begin now. */
JS_INLINE static bool value_due(js_expect e)
{
    return e == EX_VALUE || e == EX_VALUE_OR_CLOSE;
}

/* The byte at c, which the grammar does not take now: refused, saying
 * what was due. */
static const unsigned char *unexpected(js_parser *p, const unsigned char *base,
                                       const unsigned char *c)
{
    static const char *const due[] = {
        [EX_VALUE] = "a value", [EX_VALUE_OR_CLOSE] = "a value or ']'",
        [EX_KEY] = "a key (a string)", [EX_KEY_OR_CLOSE] = "a key (a string) or '}'",
        [EX_COLON] = "':' after a key", [EX_COMMA_OR_CLOSE] = "",
        [EX_DONE] = "nothing (trailing garbage after the JSON value)"};
    const char *what = p->expect != EX_COMMA_OR_CLOSE ? due[p->expect]
                       : p->open[p->depth - 1] == OPEN_OBJECT ? "',' or '}' after a value"
                                                              : "',' or ']' after a value";
    if (*c >= 0x21 && *c < 0x7F) return bad(p, base, c, "'%c' where %s is due", *c, what);
    return bad(p, base, c, "byte 0x%02X where %s is due", *c, what);
}

/* The number s[0..len) (its grammar checked, taken apart into d) handed
 * over, read as yajl read it; false when refused or stopped. */
JS_INLINE static bool number_token(js_parser *p, const unsigned char *base, const unsigned char *at,
                         const char *s, size_t len, const js_decimal *d)
{
    js_token tok = {.type = JS_NUMBER, .text = s, .len = len, .is_int = d->is_int};
    if (len > JS_NUMBER_MAX)
        return bad(p, base, at, "a number longer than %d bytes", JS_NUMBER_MAX) != NULL;
    if (d->is_int) {
        if (!d->many) tok.integer = d->neg ? -(long long)d->w : (long long)d->w;
        else if (!read_integer(s, len, &tok.integer))
            return bad(p, base, at, "integer overflow") != NULL;
        tok.value = (double)tok.integer;
    } else if (!exact_value(d, &tok.value)) {
        if (strtod_text(s, len, &tok.value) != PG_OK) {
            p->st = pg_fail(&p->err, PG_ERR_NOMEM, "%s: out of memory for a %zu-byte number",
                            p->what, len);
            return false;
        }
        if (isinf(tok.value)) return bad(p, base, at, "numeric (floating point) overflow") != NULL;
    }
    p->expect = after_value(p);
    return emit(p, &tok);
}

/* Appends the decoded byte b to the string's kept text. */
JS_INLINE static void put(js_parser *p, unsigned char b)
{
    if (p->text_len < JS_TEXT_MAX) p->text[p->text_len++] = (char)b;
    else p->truncated = true;
}

/* Appends code point cp (<= 0x10FFFF, no surrogate) as UTF-8. */
static void put_code_point(js_parser *p, unsigned cp)
{
    if (cp < 0x80) {
        put(p, (unsigned char)cp);
    } else if (cp < 0x800) {
        put(p, (unsigned char)(0xC0 | cp >> 6));
        put(p, (unsigned char)(0x80 | (cp & 0x3F)));
    } else if (cp < JS_SUPPLEMENTARY_BASE) {
        put(p, (unsigned char)(0xE0 | cp >> 12));
        put(p, (unsigned char)(0x80 | (cp >> 6 & 0x3F)));
        put(p, (unsigned char)(0x80 | (cp & 0x3F)));
    } else {
        put(p, (unsigned char)(0xF0 | cp >> 18));
        put(p, (unsigned char)(0x80 | (cp >> 12 & 0x3F)));
        put(p, (unsigned char)(0x80 | (cp >> 6 & 0x3F)));
        put(p, (unsigned char)(0x80 | (cp & 0x3F)));
    }
}

/* A high surrogate not followed by its low one decodes to U+FFFD. */
JS_INLINE static void flush_high(js_parser *p)
{
    if (p->high != 0) {
        put_code_point(p, JS_REPLACEMENT_CHAR);
        p->high = 0;
    }
}

/* The code unit u of a \u escape, decoded (a surrogate pair joined). */
static void code_unit(js_parser *p, unsigned u)
{
    if (p->high != 0 && u >= JS_LOW_SURROGATE_LO && u <= JS_LOW_SURROGATE_HI) {
        put_code_point(p, JS_SUPPLEMENTARY_BASE + ((p->high - JS_HIGH_SURROGATE_LO) << 10) +
                              (u - JS_LOW_SURROGATE_LO));
        p->high = 0;
        return;
    }
    flush_high(p);
    if (u >= JS_HIGH_SURROGATE_LO && u <= JS_HIGH_SURROGATE_HI) p->high = u;
    else if (u >= JS_LOW_SURROGATE_LO && u <= JS_LOW_SURROGATE_HI)
        put_code_point(p, JS_REPLACEMENT_CHAR);
    else put_code_point(p, u);
}

/* The value of hex digit b, or -1. */
static int hex_value(unsigned char b)
{
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

/* The byte after a backslash. */
static const unsigned char *escape_byte(js_parser *p, const unsigned char *base,
                                        const unsigned char *c)
{
    unsigned char out;
    switch (*c) {
    case '"': case '\\': case '/': out = *c; break;
    case 'b': out = '\b'; break;
    case 'f': out = '\f'; break;
    case 'n': out = '\n'; break;
    case 'r': out = '\r'; break;
    case 't': out = '\t'; break;
    case 'u':
        p->esc = ESC_HEX;
        p->hex_left = JS_U_ESCAPE_DIGITS;
        p->hex_unit = 0;
        return c + 1;
    default:
        if (*c >= 0x21 && *c < 0x7F) return bad(p, base, c, "invalid escape '\\%c' in a string", *c);
        return bad(p, base, c, "invalid escape (byte 0x%02X after '\\') in a string", *c);
    }
    flush_high(p);
    put(p, out);
    p->esc = ESC_NONE;
    return c + 1;
}

/* A byte of 0x80 or more where a character begins: the lead of a UTF-8
 * sequence, or refused. */
static const unsigned char *utf8_lead(js_parser *p, const unsigned char *base,
                                      const unsigned char *c)
{
    for (size_t i = 0; i < sizeof JS_UTF8_LEADS / sizeof JS_UTF8_LEADS[0]; i++) {
        const js_utf8_lead *l = &JS_UTF8_LEADS[i];
        if (*c >= l->lo && *c <= l->hi) {
            flush_high(p);
            put(p, *c);
            p->utf8_left = l->n_follow;
            p->utf8_lo = l->second_lo;
            p->utf8_hi = l->second_hi;
            return c + 1;
        }
    }
    return bad(p, base, c, "invalid UTF-8 (byte 0x%02X) in a string", *c);
}

/* Reads the string whose state p holds on from c (before end), byte by
 * byte: past its closing quote (p->partial PART_NONE), or end when the
 * chunk ends inside it (PART_STRING); NULL when refused. */
static const unsigned char *string_rest(js_parser *p, const unsigned char *base,
                                        const unsigned char *c, const unsigned char *end)
{
    while (c < end) {
        const unsigned char b = *c;
        if (p->utf8_left > 0) {
            if (b < p->utf8_lo || b > p->utf8_hi)
                return bad(p, base, c, "invalid UTF-8 (byte 0x%02X) in a string", b);
            put(p, b);
            p->utf8_left--;
            p->utf8_lo = JS_UTF8_FOLLOW_LO;
            p->utf8_hi = JS_UTF8_FOLLOW_HI;
            c++;
        } else if (p->esc == ESC_HEX) {
            const int v = hex_value(b);
            if (v < 0) return bad(p, base, c, "a \\u escape without %d hex digits",
                                  JS_U_ESCAPE_DIGITS);
            p->hex_unit = p->hex_unit << 4 | (unsigned)v;
            if (--p->hex_left == 0) {
                p->esc = ESC_NONE;
                code_unit(p, p->hex_unit);
            }
            c++;
        } else if (p->esc == ESC_BACKSLASH) {
            if ((c = escape_byte(p, base, c)) == NULL) return NULL;
        } else if (JS_PLAIN[b]) {
            flush_high(p);
            const unsigned char *run = plain_run(c, end);
            const size_t n = (size_t)(run - c), room = JS_TEXT_MAX - p->text_len;
            memcpy(p->text + p->text_len, c, n < room ? n : room);
            p->text_len += n < room ? n : room;
            p->truncated |= n > room;
            c = run;
        } else if (b == '"') {
            flush_high(p);
            p->partial = PART_NONE;
            return c + 1;
        } else if (b == '\\') {
            p->esc = ESC_BACKSLASH;
            c++;
        } else if (b < 0x20) {
            return bad(p, base, c, "control character 0x%02X in a string (it must be escaped)",
                       b);
        } else if ((c = utf8_lead(p, base, c)) == NULL) {
            return NULL;
        }
    }
    p->partial = PART_STRING;
    return end;
}

/* The string read into p's text is whole: handed over. */
static bool string_token(js_parser *p)
{
    const js_token tok = {.type = p->str_key ? JS_KEY : JS_STRING, .text = p->text,
                          .len = p->text_len, .truncated = p->truncated};
    p->expect = p->str_key ? EX_COLON : after_value(p);
    return emit(p, &tok);
}

/* A string from its opening quote's next byte s: whole in the chunk and
 * plain (no escape, no byte past 0x7F), handed over from the chunk itself;
 * else read on by string_rest. Past it, end (cut by the chunk), or NULL. */
JS_INLINE static const unsigned char *string_from(js_parser *p, const unsigned char *base,
                                                  const unsigned char *s,
                                                  const unsigned char *end, bool key)
{
    const unsigned char *c = plain_run(s, end);
    const size_t n = (size_t)(c - s);
    if (c < end && *c == '"') {
        const js_token tok = {.type = key ? JS_KEY : JS_STRING, .text = (const char *)s,
                              .len = n < JS_TEXT_MAX ? n : JS_TEXT_MAX,
                              .truncated = n > JS_TEXT_MAX};
        p->expect = key ? EX_COLON : after_value(p);
        return emit(p, &tok) ? c + 1 : NULL;
    }
    p->str_key = key;
    p->esc = ESC_NONE;
    p->high = 0;
    p->utf8_left = 0;
    p->text_len = n < JS_TEXT_MAX ? n : JS_TEXT_MAX;
    p->truncated = n > JS_TEXT_MAX;
    memcpy(p->text, s, p->text_len);
    c = string_rest(p, base, c, end);
    if (c == NULL || p->partial == PART_STRING) return c;
    return string_token(p) ? c : NULL;
}

/* The literal lit (of type t) from c: whole, its token handed over; cut
 * by the chunk's end (PART_LITERAL, end); NULL when refused or stopped. */
static const unsigned char *literal_from(js_parser *p, const unsigned char *base,
                                         const unsigned char *c, const unsigned char *end,
                                         const char *lit, js_type t)
{
    const size_t n = strlen(lit);
    size_t i = 0;
    for (; i < n && c + i < end; i++)
        if (c[i] != (unsigned char)lit[i])
            return bad(p, base, c + i, "invalid literal (not %s)", lit);
    if (i < n) {
        p->partial = PART_LITERAL;
        p->literal = lit;
        p->literal_at = i;
        p->literal_type = t;
        return end;
    }
    const js_token tok = {.type = t};
    p->expect = after_value(p);
    return emit(p, &tok) ? c + n : NULL;
}

/* Finishes the token the last chunk cut, from the chunk [c, end): past
 * it (p->partial PART_NONE), end when this chunk ends inside it too, or
 * NULL. */
static const unsigned char *resume(js_parser *p, const unsigned char *base,
                                   const unsigned char *c, const unsigned char *end)
{
    if (p->partial == PART_STRING) {
        c = string_rest(p, base, c, end);
        if (c == NULL || p->partial == PART_STRING) return c;
        return string_token(p) ? c : NULL;
    }
    if (p->partial == PART_LITERAL) {
        const char *lit = p->literal;
        const size_t n = strlen(lit);
        for (; p->literal_at < n && c < end; p->literal_at++, c++)
            if (*c != (unsigned char)lit[p->literal_at])
                return bad(p, base, c, "invalid literal (not %s)", lit);
        if (p->literal_at < n) return end;
        p->partial = PART_NONE;
        const js_token tok = {.type = p->literal_type};
        p->expect = after_value(p);
        return emit(p, &tok) ? c : NULL;
    }
    /* PART_NUMBER: carry[0..carry_len) is a number's beginning; the chunk
     * is appended (up to one byte past the longest number) and scanned. */
    const size_t had = p->carry_len;
    const size_t take = (size_t)(end - c) < sizeof p->carry - had ? (size_t)(end - c)
                                                                  : sizeof p->carry - had;
    memcpy(p->carry + had, c, take);
    js_decimal d;
    size_t used = 0;
    const js_scan r = scan_number(p->carry, had + take, false, &d, &used);
    if (r == SCAN_BAD) return bad(p, base, c, "invalid number");
    if (r == SCAN_MORE) {
        if (had + take > JS_NUMBER_MAX)
            return bad(p, base, c, "a number longer than %d bytes", JS_NUMBER_MAX);
        p->carry_len = had + take;
        return end;
    }
    p->partial = PART_NONE;
    p->carry_len = 0;
    return number_token(p, base, c, p->carry, used, &d) ? c + (used - had) : NULL;
}

/* Reads the chunk [c, end) of base on, token by token: PG_OK or the
 * failure recorded in p. */
static pg_status lex(js_parser *p, const unsigned char *base, const unsigned char *c,
                     const unsigned char *end)
{
    if (p->partial != PART_NONE && (c = resume(p, base, c, end)) == NULL) return p->st;
    while (c < end) {
        const unsigned char b = *c;
        switch (b) {
        case ' ': case '\t': case '\n': case '\r':
            c++;
            continue;
        case '"':
            if (p->expect == EX_KEY || p->expect == EX_KEY_OR_CLOSE)
                c = string_from(p, base, c + 1, end, true);
            else if (value_due(p->expect))
                c = string_from(p, base, c + 1, end, false);
            else
                c = unexpected(p, base, c);
            break;
        case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6':
        case '7': case '8': case '9': {
            if (!value_due(p->expect)) {
                c = unexpected(p, base, c);
                break;
            }
            js_decimal d;
            size_t used = 0;
            const js_scan r = scan_number((const char *)c, (size_t)(end - c), false, &d, &used);
            if (r == SCAN_OK) {
                c = number_token(p, base, c, (const char *)c, used, &d) ? c + used : NULL;
            } else if (r == SCAN_BAD) {
                c = bad(p, base, c, "invalid number");
            } else if ((size_t)(end - c) > JS_NUMBER_MAX) {
                c = bad(p, base, c, "a number longer than %d bytes", JS_NUMBER_MAX);
            } else {
                p->carry_len = (size_t)(end - c);
                memcpy(p->carry, c, p->carry_len);
                p->partial = PART_NUMBER;
                c = end;
            }
            break;
        }
        case '{':
        case '[': {
            if (!value_due(p->expect)) {
                c = unexpected(p, base, c);
                break;
            }
            if (p->depth == JS_DEPTH_MAX) {
                c = bad(p, base, c, "nesting deeper than %d", JS_DEPTH_MAX);
                break;
            }
            const bool object = b == '{';
            p->open[p->depth++] = object ? OPEN_OBJECT : OPEN_ARRAY;
            p->expect = object ? EX_KEY_OR_CLOSE : EX_VALUE_OR_CLOSE;
            const js_token tok = {.type = object ? JS_OBJECT_START : JS_ARRAY_START};
            c = emit(p, &tok) ? c + 1 : NULL;
            break;
        }
        case '}':
        case ']': {
            const bool object = b == '}';
            const bool empty = p->expect == (object ? EX_KEY_OR_CLOSE : EX_VALUE_OR_CLOSE);
            if (!empty && !(p->expect == EX_COMMA_OR_CLOSE &&
                            p->open[p->depth - 1] == (object ? OPEN_OBJECT : OPEN_ARRAY))) {
                c = unexpected(p, base, c);
                break;
            }
            p->depth--;
            p->expect = after_value(p);
            const js_token tok = {.type = object ? JS_OBJECT_END : JS_ARRAY_END};
            c = emit(p, &tok) ? c + 1 : NULL;
            break;
        }
        case ',':
            if (p->expect != EX_COMMA_OR_CLOSE) {
                c = unexpected(p, base, c);
                break;
            }
            p->expect = p->open[p->depth - 1] == OPEN_OBJECT ? EX_KEY : EX_VALUE;
            c++;
            break;
        case ':':
            if (p->expect != EX_COLON) {
                c = unexpected(p, base, c);
                break;
            }
            p->expect = EX_VALUE;
            c++;
            break;
        case 't': case 'f': case 'n':
            if (!value_due(p->expect)) {
                c = unexpected(p, base, c);
                break;
            }
            c = literal_from(p, base, c, end, b == 't' ? "true" : b == 'f' ? "false" : "null",
                             b == 't' ? JS_TRUE : b == 'f' ? JS_FALSE : JS_NULL);
            break;
        default:
            c = unexpected(p, base, c);
            break;
        }
        if (c == NULL) return p->st;
    }
    return PG_OK;
}

pg_status js_parser_feed(js_parser *p, const char *data, size_t len, pg_err *err)
{
    if (p == NULL || (data == NULL && len > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "js_parser_feed: NULL argument");
    if (p->st == PG_OK && p->finished)
        p->st = pg_fail(&p->err, PG_ERR_INTERNAL, "%s: js_parser_feed after the end", p->what);
    if (p->st == PG_OK && len > 0) {
        const unsigned char *base = (const unsigned char *)data;
        lex(p, base, base, base + len);
        p->offset += len;
    }
    return p->st == PG_OK ? PG_OK : pg_fail(err, p->st, "%s", p->err.msg);
}

pg_status js_parser_finish(js_parser *p, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "js_parser_finish: NULL argument");
    if (p->st == PG_OK && !p->finished) {
        p->finished = true;
        if (p->partial == PART_NUMBER) {
            js_decimal d;
            size_t used = 0;
            if (scan_number(p->carry, p->carry_len, true, &d, &used) != SCAN_OK ||
                used != p->carry_len)
                bad(p, NULL, NULL, "invalid number at the end of the reply");
            else if (number_token(p, NULL, NULL, p->carry, used, &d))
                p->partial = PART_NONE;
        } else if (p->partial == PART_STRING) {
            bad(p, NULL, NULL, "the reply ends inside a string");
        } else if (p->partial == PART_LITERAL) {
            bad(p, NULL, NULL, "the reply ends inside a literal (%s)", p->literal);
        }
        if (p->st == PG_OK && p->expect == EX_VALUE && p->depth == 0)
            bad(p, NULL, NULL, "no JSON value (an empty reply)");
        else if (p->st == PG_OK && p->expect != EX_DONE)
            bad(p, NULL, NULL, "the reply ends inside its JSON value (%d containers open)",
                p->depth);
    }
    return p->st == PG_OK ? PG_OK : pg_fail(err, p->st, "%s", p->err.msg);
}
