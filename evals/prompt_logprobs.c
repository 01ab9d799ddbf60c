/* prompt_logprobs.c: streaming parser of vLLM's prompt-logprobs reply (see prompt_logprobs.h). */
#include "prompt_logprobs.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <yajl/yajl_parse.h>

/* The nesting depths of the reply's fields (1 = the top-level object). */
enum {
    DEPTH_ROOT = 1,      /* {"choices": ...} */
    DEPTH_CHOICES = 2,   /* [choice, ...] */
    DEPTH_CHOICE = 3,    /* {"prompt_logprobs": ..., "prompt_token_ids": ...} */
    DEPTH_LIST = 4,      /* [null, position, ...] or [id, ...] */
    DEPTH_POSITION = 5,  /* {"id": entry, ...} */
    DEPTH_ENTRY = 6      /* {"logprob": x, "rank": r, "decoded_token": s} */
};

/* A key twice is caught as it arrives, in a hash set of the open
 * position's ids: open addressing with linear probing in a power-of-two
 * table at least PL_ID_LOAD times the most keys (load <= 1/2, so about 1.5
 * probes a key), each slot stamped with the position it belongs to, so
 * that nothing is cleared between positions. */
#define PL_ID_LOAD 2
/* Fibonacci hashing: 2^32 / the golden ratio, the multiplier's high bits
 * the slot (Knuth, TAOCP vol. 3, 6.4). */
#define PL_FIB_HASH 2654435769u

/* One slot of the id set: empty unless stamp is the open position's. */
typedef struct pl_slot {
    int32_t id;
    uint32_t stamp;
} pl_slot;

/* One key of the open position. */
typedef struct pl_key {
    int32_t id;
    double logprob;   /* NaN until read */
    long long rank;   /* 0 until read */
} pl_key;

/* Which list of choice 0 is open. */
typedef enum pl_list { LIST_NONE, LIST_LOGPROBS, LIST_TOKEN_IDS } pl_list;

struct pl_parser {
    yajl_handle h;
    const int32_t *ids;
    size_t n_ids, top_k;
    int64_t n_vocab;
    char what[PL_WHAT_MAX];
    pl_position_fn on_position;
    void *ctx;
    int depth;
    int key_choices;       /* the root's current key is "choices" */
    int choices_open;      /* inside the choices array */
    long choice;           /* index of the open choice (-1 before the first) */
    int choice_key;        /* the current key of choice 0: a pl_list value */
    pl_list open;          /* the list of choice 0 being read */
    int saw_logprobs, saw_token_ids;
    size_t n_entries;      /* entries of prompt_logprobs read */
    size_t n_token_ids;    /* ids of prompt_token_ids read */
    pl_key *keys;          /* the open position's keys (top_k + 1 at most) */
    size_t n_keys;
    pl_slot *slots;        /* the open position's ids (see PL_ID_LOAD) */
    uint32_t slot_mask;    /* table size - 1 */
    int slot_shift;        /* 32 - log2(table size) */
    uint32_t stamp;        /* the open position's stamp (never 0) */
    int entry_key;         /* 1: "logprob", 2: "rank", 0: another key */
    div_entry *top;        /* what the caller is handed */
    pg_status st;
    pg_err err;
};

/* Records a failure (the parser's message prefixed with its `what`) and
 * returns 0 (yajl: stop). */
__attribute__((format(printf, 3, 4)))
static int fail(pl_parser *p, pg_status code, const char *fmt, ...)
{
    char msg[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->st == PG_OK) p->st = pg_fail(&p->err, code, "%s: %s", p->what, msg);
    return 0;
}

/* In choice 0's map, i.e. where its keys and lists are. */
static int in_choice0(const pl_parser *p)
{
    return p->choices_open && p->choice == 0;
}

/* The position index entries are read at (the entry now open). */
static size_t position(const pl_parser *p)
{
    return p->n_entries;
}

/* A scalar in prompt_logprobs itself (not null): refused. */
static int scalar_in_list(pl_parser *p, const char *kind)
{
    return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu is %s, not a map of token ids or "
                "null", position(p), kind);
}

/* A numeric value v (integer when is_int) at the current depth. */
static int on_number(pl_parser *p, double v, long long iv, int is_int)
{
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST) {
        const size_t i = p->n_token_ids++;
        if (!is_int || i >= p->n_ids || iv != p->ids[i])
            return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is %g, but the request sent %s",
                        i, v, i < p->n_ids ? "another id" : "fewer ids");
        return 1;
    }
    if (p->open != LIST_LOGPROBS) return 1;
    if (p->depth == DEPTH_LIST) return scalar_in_list(p, "a number");
    if (p->depth == DEPTH_POSITION)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d's value is a number, "
                    "not an object", position(p), (int)p->keys[p->n_keys - 1].id);
    if (p->depth != DEPTH_ENTRY) return 1;
    pl_key *k = &p->keys[p->n_keys - 1];
    if (p->entry_key == 1) {
        if (isnan(v) || v > DIV_MASS_TOL) {
            p->st = pg_fail(&p->err, PG_ERR_NUMERIC, "%s: prompt_logprobs entry %zu: token %d "
                            "has logprob %g (not a log-probability)", p->what, position(p),
                            (int)k->id, v);
            return 0;
        }
        k->logprob = v;
    } else if (p->entry_key == 2) {
        if (!is_int || iv < 1)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has rank %g "
                        "(expected an integer >= 1)", position(p), (int)k->id, v);
        k->rank = iv;
    }
    return 1;
}

/* ---- numbers: yajl hands their text, read here -------------------------- */
/*
 * yajl reads a double with strtod: with its copy of the digits, about 15%
 * of parsing and scoring a position (perf; glibc's strtod is exact for any
 * input, so it works in big integers: bench/RESULTS.md, "Teacher-forced
 * scoring on the client"). A logprob as vLLM prints it (a Python float's
 * repr, at most 17 significant digits, e.g. -1.3984992504119873) is read
 * here by one correctly rounded operation where that provably gives the
 * value strtod gives, and by strtod otherwise.
 */

/* Where a long double is x87's 80-bit format (64-bit significand, the low
 * 8 bytes of its storage; x86-64 System V ABI, 3.1.2), the long double
 * path runs; elsewhere only Clinger's (below) and strtod. */
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
#define PL_EXACT_DECIMAL 1
#else
#define PL_EXACT_DECIMAL 0
#endif

/* Most significant digits the exact path takes: 10^18 < 2^63, so they are
 * an int64_t and exact in a 64-bit significand (a repr has at most 17). */
#define PL_EXACT_DIGITS_MAX 18
/* Largest k with 10^k exact in a 64-bit significand: 10^k = 5^k 2^k and
 * 5^27 < 2^64 < 5^28. */
#define PL_EXACT_POW10_MAX 27
/* The bits of a 64-bit significand below a double's 53 (64 - 53 = 11), and
 * their value when the long double lies exactly halfway between two
 * doubles: a 1 followed by ten 0s. */
#define PL_X87_EXTRA_BITS 0x7FFu
#define PL_X87_HALFWAY 0x400u
/* Exponent digits are read up to this magnitude (anything past 10^27 goes
 * to strtod anyway); it keeps the int from overflowing on 1e99999999999. */
#define PL_EXPONENT_CAP 100000
/* Numbers up to this long are copied for strtod on the stack (a double's
 * repr is at most 24 characters: -2.2250738585072014e-308); longer ones
 * (JSON allows any length) are copied to the heap. */
#define PL_NUMBER_COPY 64

/* Clinger's fast path (W. D. Clinger, "How to read floating point numbers
 * accurately", PLDI 1990): w <= 2^53 and 10^k for k <= 22 (5^22 < 2^53)
 * are exact doubles, so one double multiply or divide is the correctly
 * rounded value; only where double arithmetic is done in double
 * (FLT_EVAL_METHOD 0: SSE2 on x86-64, not x87's extended registers). */
#if FLT_EVAL_METHOD == 0
#define PL_CLINGER 1
#else
#define PL_CLINGER 0
#endif
#define PL_CLINGER_W_MAX (1ull << 53)
#define PL_CLINGER_POW10_MAX 22

#if PL_CLINGER
/* 10^0 .. 10^PL_CLINGER_POW10_MAX, each exact. */
static const double PL_POW10_DOUBLE[PL_CLINGER_POW10_MAX + 1] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#endif

#if PL_EXACT_DECIMAL
/* 10^0 .. 10^PL_EXACT_POW10_MAX, each exact (the literal is the value). */
static const long double PL_POW10[PL_EXACT_POW10_MAX + 1] = {
    1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
    1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
    1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
#endif

/* The number reader's steps, inlined into the callback (a call each cost
 * more than the step: bench/RESULTS.md). */
#define PL_INLINE __attribute__((always_inline)) inline

/* Eight ASCII digits at a time (SWAR: one word, no loop over the bytes;
 * the constants are the bytes' patterns). */
#define PL_SWAR_ZEROS 0x3030303030303030u   /* eight '0' */
#define PL_SWAR_HIGH 0xF0F0F0F0F0F0F0F0u    /* each byte's high nibble */
#define PL_SWAR_SIX 0x0606060606060606u     /* + 6 carries a byte above '9' */
#define PL_SWAR_THREES 0x3333333333333333u  /* '0'..'9' and their + 6: 0x3_ */

/* The 8 bytes at s as a little-endian word (byte 0 lowest). */
static uint64_t load8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | u[i];
    return v;
}

/* Whether all 8 bytes of v are ASCII digits. */
static int eight_digits(uint64_t v)
{
    return ((v & PL_SWAR_HIGH) | (((v + PL_SWAR_SIX) & PL_SWAR_HIGH) >> 4)) == PL_SWAR_THREES;
}

/* The value of the 8 ASCII digits of v (byte 0 the most significant digit):
 * pairs, then quadruples, then the whole, each by one multiply. */
static uint64_t eight_digits_value(uint64_t v)
{
    const uint64_t pair_mask = 0x000000FF000000FFu;
    const uint64_t mul_hi = 100u + (1000000ull << 32), mul_lo = 1u + (10000ull << 32);
    v -= PL_SWAR_ZEROS;
    v = v * 10 + (v >> 8);
    return ((v & pair_mask) * mul_hi + ((v >> 16) & pair_mask) * mul_lo) >> 32;
}

/* The digits at *c (before end) appended to *w, counting them in *nd;
 * 0 when that would pass PL_EXACT_DIGITS_MAX significant digits. */
PL_INLINE static int append_digits(const char **c, const char *end, uint64_t *w, int *nd)
{
    const char *q = *c;
    for (; end - q >= 8 && eight_digits(load8(q)); q += 8) {
        if ((*nd += 8) > PL_EXACT_DIGITS_MAX) return 0;
        *w = *w * 100000000u + eight_digits_value(load8(q));
    }
    for (; q < end && *q >= '0' && *q <= '9'; q++) {
        if (++*nd > PL_EXACT_DIGITS_MAX) return 0;
        *w = *w * 10 + (uint64_t)(*q - '0');
    }
    *c = q;
    return 1;
}

/* A JSON number's text taken apart: (-1)^neg w 10^e10. */
typedef struct pl_decimal {
    uint64_t w;   /* its significant digits: at most PL_EXACT_DIGITS_MAX of them */
    int e10;
    int neg;
    int is_int;   /* no fraction, no exponent: an integer (then e10 = 0) */
} pl_decimal;

/* Takes the number s[0..len) apart into *d in one pass: 1; 0 when it has
 * more than PL_EXACT_DIGITS_MAX significant digits or is not JSON's
 * grammar (both left to the slow path). */
PL_INLINE static int scan_decimal(const char *s, size_t len, pl_decimal *d)
{
    const char *c = s, *end = s + len;
    d->neg = c < end && *c == '-';
    c += d->neg;
    d->w = 0;
    d->e10 = 0;
    int nd = 0;
    if (c == end || *c < '0' || *c > '9') return 0;  /* "-", ".5": strtod judges */
    while (c < end && *c == '0') c++;  /* JSON: at most one, "0.5" */
    if (!append_digits(&c, end, &d->w, &nd)) return 0;
    d->is_int = c == end;
    if (c < end && *c == '.') {
        const char *frac = ++c;
        if (d->w == 0)
            while (c < end && *c == '0') c++;  /* 0.000123: no significant digit yet */
        if (!append_digits(&c, end, &d->w, &nd)) return 0;
        if (c == frac) return 0;  /* "1." */
        d->e10 -= (int)(c - frac);
    }
    if (c < end && (*c == 'e' || *c == 'E')) {
        c++;
        const int eneg = c < end && *c == '-';
        if (c < end && (*c == '-' || *c == '+')) c++;
        if (c == end) return 0;  /* "1e" */
        int x = 0;
        for (; c < end && *c >= '0' && *c <= '9'; c++)
            if (x < PL_EXPONENT_CAP) x = x * 10 + (*c - '0');
        d->e10 += eneg ? -x : x;
    }
    return c == end;
}

/* d's value into *out by exact arithmetic, 1; 0 when that cannot be shown
 * to equal strtod's reading (then *out is unset). Clinger's path first
 * (PL_CLINGER); else w < 10^18 and 10^|e10| <= 10^27 are exact in a long
 * double, so w * 10^e10 (or w / 10^-e10) is the exact value rounded once
 * to 64 bits; rounded again to 53 bits it is the correctly rounded double
 * unless the 64-bit result lies exactly halfway between two doubles (then
 * the first rounding may have made the tie: strtod decides). The result
 * is normal: 1e-27 <= |w 10^e10| < 1e46. */
PL_INLINE static int exact_value(const pl_decimal *d, double *out)
{
    if (d->w == 0) {
        *out = d->neg ? -0.0 : 0.0;
        return 1;
    }
#if PL_CLINGER
    if (d->w <= PL_CLINGER_W_MAX && d->e10 >= -PL_CLINGER_POW10_MAX &&
        d->e10 <= PL_CLINGER_POW10_MAX) {
        const double w = (double)d->w;
        const double v = d->e10 >= 0 ? w * PL_POW10_DOUBLE[d->e10]
                                     : w / PL_POW10_DOUBLE[-d->e10];
        *out = d->neg ? -v : v;
        return 1;
    }
#endif
#if PL_EXACT_DECIMAL
    if (d->e10 < -PL_EXACT_POW10_MAX || d->e10 > PL_EXACT_POW10_MAX) return 0;
    const long double w = (long double)(int64_t)d->w;
    const long double x = d->e10 >= 0 ? w * PL_POW10[d->e10] : w / PL_POW10[-d->e10];
    uint64_t significand;
    memcpy(&significand, &x, sizeof significand);
    if ((significand & PL_X87_EXTRA_BITS) == PL_X87_HALFWAY) return 0;
    const double v = (double)x;
    *out = d->neg ? -v : v;
    return 1;
#else
    return 0;
#endif
}

/* pl_json_double without a message (the parser's slow path): PG_OK,
 * PG_ERR_FORMAT or PG_ERR_NOMEM. */
static pg_status json_double(const char *s, size_t len, double *out, int *exact)
{
    pl_decimal d;
    const int fast = scan_decimal(s, len, &d) && exact_value(&d, out);
    if (exact != NULL) *exact = fast;
    if (fast) return PG_OK;
    char small[PL_NUMBER_COPY];
    char *copy = len < sizeof small ? small : malloc(len + 1);
    if (copy == NULL) return PG_ERR_NOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    char *stop = NULL;
    *out = strtod(copy, &stop);
    const int whole = len > 0 && stop == copy + len;
    if (copy != small) free(copy);
    return whole ? PG_OK : PG_ERR_FORMAT;
}

pg_status pl_json_double(const char *s, size_t len, double *out, int *exact, pg_err *err)
{
    if (s == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "pl_json_double: NULL argument");
    const pg_status st = json_double(s, len, out, exact);
    if (st == PG_ERR_NOMEM)
        return pg_fail(err, st, "out of memory for a %zu-byte number", len);
    if (st != PG_OK)
        return pg_fail(err, st, "\"%.*s\" is no number", (int)(len < 32 ? len : 32), s);
    return PG_OK;
}

/* The integer s[0..len) (JSON's grammar) into *v as yajl reads one: 1;
 * 0 when its magnitude is above LLONG_MAX (yajl refuses it: "integer
 * overflow"); -1 when s has a fraction or an exponent (a double). */
static int read_integer(const char *s, size_t len, long long *v)
{
    const char *c = s, *end = s + len;
    const int neg = c < end && *c == '-';
    c += neg;
    const unsigned long long max = LLONG_MAX;  /* yajl_parse_integer's bound, both signs */
    unsigned long long u = 0;
    int overflow = 0;
    for (; c < end; c++) {
        if (*c < '0' || *c > '9') return -1;
        const unsigned d = (unsigned)(*c - '0');
        overflow |= u > (max - d) / 10;
        u = u * 10 + d;
    }
    if (overflow) return 0;
    *v = neg ? -(long long)u : (long long)u;
    return 1;
}

/* A number scan_decimal or exact_value could not take (19 or more digits,
 * a tie, an exponent past 27): read as yajl would have read it, refusing
 * what it refused (an integer beyond long long, a double beyond DBL_MAX). */
static int slow_number(pl_parser *p, const char *s, size_t len)
{
    long long iv = 0;
    const int is_int = read_integer(s, len, &iv);
    if (is_int == 0)
        return fail(p, PG_ERR_FORMAT, "the reply is not JSON (parse error: integer overflow)");
    if (is_int == 1) return on_number(p, (double)iv, iv, 1);
    double v = 0;
    const pg_status st = json_double(s, len, &v, NULL);
    if (st == PG_ERR_NOMEM) return fail(p, st, "out of memory for a %zu-byte number", len);
    if (st != PG_OK)
        return fail(p, st, "the reply is not JSON (\"%.*s\" is no number)",
                    (int)(len < 32 ? len : 32), s);
    if (isinf(v))
        return fail(p, PG_ERR_FORMAT, "the reply is not JSON (parse error: numeric (floating "
                    "point) overflow)");
    return on_number(p, v, 0, 0);
}

/* yajl's number callback (set, it replaces the integer and double ones):
 * the token's text s[0..len), taken apart once; an integer of up to 18
 * digits or a double exact_value reads is handed to on_number at once,
 * anything else goes to slow_number. */
static int cb_number(void *ctx, const char *s, size_t len)
{
    pl_parser *p = ctx;
    pl_decimal d;
    if (scan_decimal(s, len, &d)) {
        if (d.is_int) {
            const long long iv = d.neg ? -(long long)d.w : (long long)d.w;
            return on_number(p, (double)iv, iv, 1);
        }
        double v;
        if (exact_value(&d, &v)) return on_number(p, v, 0, 0);
    }
    return slow_number(p, s, len);
}

static int cb_null(void *ctx)
{
    pl_parser *p = ctx;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        if (p->n_entries != 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu is null (only entry 0, the "
                        "first token, has nothing to score)", p->n_entries);
        p->n_entries++;
        return 1;
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has logprob null",
                    position(p), (int)p->keys[p->n_keys - 1].id);
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST)
        return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is null", p->n_token_ids);
    return 1;
}

static int cb_boolean(void *ctx, int v)
{
    pl_parser *p = ctx;
    (void)v;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return scalar_in_list(p, "a boolean");
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has a boolean "
                    "logprob", position(p), (int)p->keys[p->n_keys - 1].id);
    return 1;
}

static int cb_string(void *ctx, const unsigned char *s, size_t len)
{
    pl_parser *p = ctx;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return scalar_in_list(p, "a string");
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1) {
        p->st = pg_fail(&p->err, PG_ERR_NUMERIC, "%s: prompt_logprobs entry %zu: token %d has "
                        "logprob \"%.*s\" (a string: NaN or Infinity is not a log-probability)",
                        p->what, position(p), (int)p->keys[p->n_keys - 1].id,
                        (int)(len < 32 ? len : 32), (const char *)s);
        return 0;
    }
    return 1;
}

/* Starts the id set of a new position (a fresh stamp; the table is
 * cleared only when the stamps wrap around). */
static void ids_reset(pl_parser *p)
{
    if (++p->stamp == 0) {
        memset(p->slots, 0, ((size_t)p->slot_mask + 1) * sizeof *p->slots);
        p->stamp = 1;
    }
}

/* Adds id to the open position's set: 1; 0 when it is there already. */
static int ids_add(pl_parser *p, int32_t id)
{
    uint32_t i = ((uint32_t)id * PL_FIB_HASH) >> p->slot_shift;
    for (;; i = (i + 1) & p->slot_mask) {
        pl_slot *sl = &p->slots[i];
        if (sl->stamp != p->stamp) {
            *sl = (pl_slot){id, p->stamp};
            return 1;
        }
        if (sl->id == id) return 0;
    }
}

/* Checks the closed position t and hands it to the caller. */
static int finish_position(pl_parser *p)
{
    const size_t t = position(p);
    const int32_t given = p->ids[t];
    const pl_key *g = NULL;
    size_t n_top = 0;
    for (size_t i = 0; i < p->n_keys; i++) {  /* no key twice: cb_map_key checked */
        const pl_key *k = &p->keys[i];
        if (k->rank == 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no rank", t,
                        (int)k->id);
        if (isnan(k->logprob))
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no logprob",
                        t, (int)k->id);
        if (k->id == given) g = k;
        if ((size_t)k->rank <= p->top_k) p->top[n_top++] = (div_entry){k->id, k->logprob};
    }
    if (g == NULL)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu lacks the given token %d (not "
                    "a prompt-logprobs reply for these ids)", t, (int)given);
    const size_t want = p->n_vocab > 0 && (uint64_t)p->n_vocab < p->top_k ? (size_t)p->n_vocab
                                                                            : p->top_k;
    if (n_top != want || p->n_keys > n_top + 1 || (p->n_keys == n_top + 1 &&
                                                    (size_t)g->rank <= p->top_k))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu has %zu tokens ranked within "
                    "the top %zu and %zu in all (expected %zu, plus the given token when it "
                    "ranks below)", t, n_top, p->top_k, p->n_keys, want);
    const div_side side = {p->top, n_top, given, g->logprob};
    pg_err why;
    pg_err_clear(&why);  /* not = {0}: that writes all PG_ERR_MSG_MAX bytes, per position */
    const pg_status st = p->on_position(p->ctx, t, &side, &why);
    if (st != PG_OK) {
        p->st = pg_fail(&p->err, st, "%s: position %zu: %s", p->what, t, why.msg);
        return 0;
    }
    p->n_entries++;
    return 1;
}

static int cb_start_map(void *ctx)
{
    pl_parser *p = ctx;
    if (p->choices_open && p->depth == DEPTH_CHOICES) p->choice++;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        if (p->n_entries == 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry 0 is not null (the first "
                        "token has nothing before it to be scored on)");
        if (p->n_entries >= p->n_ids)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs has more entries than the %zu ids "
                        "sent", p->n_ids);
        p->n_keys = 0;
        ids_reset(p);
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) p->entry_key = 0;
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST)
        return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is an object", p->n_token_ids);
    p->depth++;
    return 1;
}

static int cb_end_map(void *ctx)
{
    pl_parser *p = ctx;
    p->depth--;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) {
        const pl_key *k = &p->keys[p->n_keys - 1];
        if (isnan(k->logprob))
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no logprob",
                        position(p), (int)k->id);
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return finish_position(p);
    if (p->choices_open && p->depth == DEPTH_CHOICES) p->choice_key = LIST_NONE;
    return 1;
}

/* Parses a token id key (a decimal string) into *id; 0 when it is none. */
static int parse_id(const unsigned char *s, size_t len, int64_t n_vocab, int32_t *id)
{
    if (len == 0 || len > 10) return 0;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX || (n_vocab > 0 && v >= n_vocab)) return 0;
    *id = (int32_t)v;
    return 1;
}

/* key == literal (len bytes). */
static int key_is(const unsigned char *key, size_t len, const char *literal)
{
    return strlen(literal) == len && memcmp(key, literal, len) == 0;
}

/* A key of the open position: a token id, new in the position and one
 * more than it may hold at most. */
static int position_key(pl_parser *p, const unsigned char *key, size_t len)
{
    int32_t id = 0;
    if (!parse_id(key, len, p->n_vocab, &id))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: key \"%.*s\" is no token "
                    "id of the vocabulary (0 <= id < %lld)", position(p),
                    (int)(len < 32 ? len : 32), (const char *)key, (long long)p->n_vocab);
    if (p->n_keys == p->top_k + 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu has more than %zu tokens "
                    "(top %zu plus the given one)", position(p), p->top_k + 1, p->top_k);
    if (!ids_add(p, id))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu lists token %d twice",
                    position(p), (int)id);
    p->keys[p->n_keys++] = (pl_key){id, NAN, 0};
    return 1;
}

/* yajl's map key callback: in prompt_logprobs (the keys of positions and
 * their entries, nearly every key of a reply: tested first), else the
 * keys that lead there. */
static int cb_map_key(void *ctx, const unsigned char *key, size_t len)
{
    pl_parser *p = ctx;
    if (p->open == LIST_LOGPROBS) {  /* depth >= DEPTH_LIST: none of the keys below */
        if (p->depth == DEPTH_ENTRY)
            p->entry_key = key_is(key, len, "logprob") ? 1 : key_is(key, len, "rank") ? 2 : 0;
        else if (p->depth == DEPTH_POSITION)
            return position_key(p, key, len);
        return 1;
    }
    if (p->depth == DEPTH_ROOT) p->key_choices = key_is(key, len, "choices");
    if (in_choice0(p) && p->depth == DEPTH_CHOICE)
        p->choice_key = key_is(key, len, "prompt_logprobs")    ? LIST_LOGPROBS
                        : key_is(key, len, "prompt_token_ids") ? LIST_TOKEN_IDS
                                                               : LIST_NONE;
    return 1;
}

static int cb_start_array(void *ctx)
{
    pl_parser *p = ctx;
    if (p->depth == DEPTH_ROOT && p->key_choices) {
        p->choices_open = 1;
        p->choice = -1;
    }
    if (in_choice0(p) && p->depth == DEPTH_CHOICE && p->choice_key != LIST_NONE) {
        p->open = (pl_list)p->choice_key;
        if (p->open == LIST_LOGPROBS) p->saw_logprobs = 1;
        else p->saw_token_ids = 1;
    } else if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        return scalar_in_list(p, "an array");
    } else if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) {
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d's value is an array, "
                    "not an object", position(p), (int)p->keys[p->n_keys - 1].id);
    }
    p->depth++;
    return 1;
}

static int cb_end_array(void *ctx)
{
    pl_parser *p = ctx;
    p->depth--;
    if (p->open != LIST_NONE && p->depth == DEPTH_CHOICE) p->open = LIST_NONE;
    if (p->choices_open && p->depth == DEPTH_ROOT) p->choices_open = 0;
    return 1;
}

static const yajl_callbacks PL_CALLBACKS = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_boolean,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_map_key,
    .yajl_end_map = cb_end_map,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end_array,
};

pl_parser *pl_parser_new(const int32_t *ids, size_t n_ids, size_t top_k, int64_t n_vocab,
                         const char *what, pl_position_fn on_position, void *ctx)
{
    if (ids == NULL || n_ids < 1 || top_k < 1 || top_k > PL_MAX_TOP_K || what == NULL ||
        on_position == NULL)
        return NULL;
    pl_parser *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->ids = ids;
    p->n_ids = n_ids;
    p->top_k = top_k;
    p->n_vocab = n_vocab;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->on_position = on_position;
    p->ctx = ctx;
    p->choice = -1;
    p->keys = malloc((top_k + 1) * sizeof *p->keys);
    p->top = malloc((top_k + 1) * sizeof *p->top);
    size_t n_slots = 1;
    for (p->slot_shift = 32; n_slots < PL_ID_LOAD * (top_k + 1); n_slots *= 2) p->slot_shift--;
    p->slot_mask = (uint32_t)(n_slots - 1);
    p->slots = calloc(n_slots, sizeof *p->slots);
    p->h = yajl_alloc(&PL_CALLBACKS, NULL, p);
    if (p->keys == NULL || p->top == NULL || p->slots == NULL || p->h == NULL) {
        pl_parser_free(p);
        return NULL;
    }
    return p;
}

/* The parser's failure into err, or yajl's own (not JSON) when it has none. */
static pg_status parse_failure(pl_parser *p, const char *data, size_t len, pg_err *err)
{
    if (p->st == PG_OK) {
        unsigned char *why = yajl_get_error(p->h, 0, (const unsigned char *)data, len);
        char msg[PG_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", why != NULL ? (const char *)why : "parse error");
        if (why != NULL) yajl_free_error(p->h, why);
        msg[strcspn(msg, "\n")] = '\0';
        p->st = pg_fail(&p->err, PG_ERR_FORMAT, "%s: the reply is not JSON (%s)", p->what, msg);
    }
    return pg_fail(err, p->st, "%s", p->err.msg);
}

pg_status pl_parser_feed(pl_parser *p, const char *data, size_t len, pg_err *err)
{
    if (p == NULL || (data == NULL && len > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "pl_parser_feed: NULL argument");
    if (p->st != PG_OK) return pg_fail(err, p->st, "%s", p->err.msg);
    if (yajl_parse(p->h, (const unsigned char *)data, len) != yajl_status_ok)
        return parse_failure(p, data, len, err);
    return PG_OK;
}

pg_status pl_parser_finish(pl_parser *p, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "pl_parser_finish: NULL argument");
    if (p->st != PG_OK) return pg_fail(err, p->st, "%s", p->err.msg);
    if (yajl_complete_parse(p->h) != yajl_status_ok) return parse_failure(p, NULL, 0, err);
    if (!p->saw_logprobs)
        return pg_fail(err, PG_ERR_FORMAT, "%s: the reply has no choices[0].prompt_logprobs (a "
                       "server that scores only the generated token, or no prompt-logprobs "
                       "support)", p->what);
    if (p->n_entries != p->n_ids)
        return pg_fail(err, PG_ERR_FORMAT, "%s: prompt_logprobs has %zu entries for the %zu ids "
                       "sent", p->what, p->n_entries, p->n_ids);
    if (p->saw_token_ids && p->n_token_ids != p->n_ids)
        return pg_fail(err, PG_ERR_FORMAT, "%s: prompt_token_ids has %zu ids, the request sent "
                       "%zu", p->what, p->n_token_ids, p->n_ids);
    return PG_OK;
}

void pl_parser_free(pl_parser *p)
{
    if (p == NULL) return;
    if (p->h != NULL) yajl_free(p->h);
    free(p->keys);
    free(p->slots);
    free(p->top);
    free(p);
}

pg_status pl_llama_position(const char *body, size_t len, int32_t given, size_t top_k,
                            int64_t n_vocab, const char *what, div_entry *top, size_t *n_top,
                            double *given_lp, pg_err *err)
{
    if (body == NULL || what == NULL || top == NULL || n_top == NULL || given_lp == NULL ||
        top_k < 1 || top_k > PL_MAX_TOP_K)
        return pg_fail(err, PG_ERR_INTERNAL, "pl_llama_position: bad argument");
    *n_top = 0;
    *given_lp = NAN;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL) return pg_fail(err, PG_ERR_FORMAT, "%s: the reply is not JSON", what);
    const cJSON *probs = cJSON_GetObjectItemCaseSensitive(root, "completion_probabilities");
    const cJSON *first = cJSON_IsArray(probs) ? cJSON_GetArrayItem(probs, 0) : NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(first, "top_logprobs");
    pg_status st = PG_OK;
    const size_t want = n_vocab > 0 && (uint64_t)n_vocab < top_k ? (size_t)n_vocab : top_k;
    if (!cJSON_IsArray(list))
        st = pg_fail(err, PG_ERR_FORMAT, "%s: the reply has no completion_probabilities[0]."
                     "top_logprobs%s", what,
                     cJSON_GetObjectItemCaseSensitive(first, "probs") != NULL
                         ? " (it answers \"probs\": a llama-server older than the logprob "
                           "API, not supported)"
                         : " (no n_probs support)");
    else if ((size_t)cJSON_GetArraySize(list) != want)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs has %d entries, expected %zu (n_probs "
                     "%zu)", what, cJSON_GetArraySize(list), want, top_k);
    int i = 0;
    for (const cJSON *e = st == PG_OK ? list->child : NULL; e != NULL && st == PG_OK;
         e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(e, "logprob");
        const double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!cJSON_IsNumber(id) || v < 0 || v > INT32_MAX || v != floor(v) ||
            (n_vocab > 0 && v >= (double)n_vocab)) {
            st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs[%d] has no token id of the "
                         "vocabulary (0 <= id < %lld)", what, i, (long long)n_vocab);
            break;
        }
        if (!cJSON_IsNumber(lp)) {
            st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs[%d] (token %d) has no numeric "
                         "logprob", what, i, (int)v);
            break;
        }
        if (isnan(lp->valuedouble) || lp->valuedouble > DIV_MASS_TOL) {
            st = pg_fail(err, PG_ERR_NUMERIC, "%s: top_logprobs[%d] (token %d) has logprob %g "
                         "(not a log-probability)", what, i, (int)v, lp->valuedouble);
            break;
        }
        for (size_t j = 0; j < *n_top; j++)
            if (top[j].id == (int32_t)v)
                st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs lists token %d twice", what,
                             (int)v);
        top[(*n_top)++] = (div_entry){(int32_t)v, lp->valuedouble};
        if ((int32_t)v == given) *given_lp = lp->valuedouble;
    }
    cJSON_Delete(root);
    if (st != PG_OK) {
        *n_top = 0;
        *given_lp = NAN;
    }
    return st;
}
