/*
 * grade.c: answer extraction and grading for AIME-style problems (see grade.h).
 *
 * Both extractors work on byte ranges of the caller's text, never modify it
 * and allocate nothing; the default one normalises the box's content into a
 * small stack buffer. Every scan is linear in the text's length (the box
 * commands and wrappers being of fixed length), whatever the input.
 */
#include "grade.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* A command that marks the final answer (default extractor), with its
 * backslash; \fbox is what lm-eval's last_boxed_only_string also accepts. */
static const char *const k_box_cmds[] = {"\\boxed", "\\fbox"};
/* Font wrappers whose argument the default extractor keeps: \boxed{\text{42}}. */
static const char *const k_wrapper_cmds[] = {"\\text", "\\textbf", "\\mathrm", "\\mathbf"};
/* The two alternatives of gpt-oss's regex r"boxed{(.*?)}|framebox{(.*?)}"
 * (openai/gpt-oss gpt_oss/evals/aime_eval.py, extract_boxed_text), in the
 * order the regex tries them at each position. */
static const char *const k_gptoss_openers[] = {"boxed{", "framebox{"};
/* Digits in a thousands group after a separator (1,234). */
#define GRADE_GROUP_DIGITS 3
/* Longest normalised box content considered: a long long needs at most a
 * sign, 19 digits and 6 separators of 3 bytes ("{,}"), 38 bytes in all. */
#define GRADE_NORM_MAX 64
/* Deepest brace nesting inside a box that the default extractor follows. */
#define GRADE_DEPTH_MAX 64

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Spelling of each extractor, indexed by grade_extractor. */
static const char *const k_extractor_names[GRADE_EXTRACTOR_COUNT] = {
    [GRADE_DEFAULT] = "default",
    [GRADE_GPT_OSS] = "gpt-oss",
};

const char *grade_extractor_name(grade_extractor ex)
{
    if ((int)ex < 0 || ex >= GRADE_EXTRACTOR_COUNT) return "invalid";
    return k_extractor_names[ex];
}

pg_status grade_extractor_parse(const char *name, grade_extractor *out, pg_err *err)
{
    for (int i = 0; i < GRADE_EXTRACTOR_COUNT; i++)
        if (name != NULL && strcmp(name, k_extractor_names[i]) == 0) {
            *out = (grade_extractor)i;
            return PG_OK;
        }
    return pg_fail(err, PG_ERR_USAGE, "unknown answer extractor '%s' (expected '%s' or '%s')",
                   name ? name : "(null)", k_extractor_names[GRADE_DEFAULT],
                   k_extractor_names[GRADE_GPT_OSS]);
}

/* ------------------------------------------------------------------------ */
/* shared helpers                                                           */
/* ------------------------------------------------------------------------ */

/* True for the ASCII digits 0-9 (what the extractors read as digits). */
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* ASCII white space as Python's str.isspace sees it: \t \n \v \f \r, the
 * separators \x1c-\x1f, and the space. */
static bool is_py_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

/* True when the n bytes at s start with the NUL-terminated word. */
static bool starts_with(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    return w <= n && memcmp(s, word, w) == 0;
}

/* Appends digit d to the magnitude *mag, which may not exceed limit; false on
 * overflow. */
static bool push_digit(unsigned long long *mag, char d, unsigned long long limit)
{
    unsigned long long v = (unsigned long long)(d - '0');
    if (*mag > (limit - v) / 10) return false;
    *mag = *mag * 10 + v;
    return true;
}

/* Largest magnitude a long long of the given sign can hold. */
static unsigned long long mag_limit(bool neg)
{
    return neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
}

/* The long long of sign neg and magnitude mag (mag within mag_limit(neg)). */
static long long signed_value(bool neg, unsigned long long mag)
{
    if (!neg) return (long long)mag;
    return mag == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)mag;
}

/* ------------------------------------------------------------------------ */
/* default extractor                                                        */
/* ------------------------------------------------------------------------ */

/* Index of the '}' matching the '{' at s[open], counting every brace as
 * lm-eval does; n when it never closes or when it would close at or after
 * limit. */
static size_t match_brace(const char *s, size_t n, size_t open, size_t limit)
{
    size_t depth = 0;
    for (size_t i = open; i < n && i < limit; i++) {
        if (s[i] == '{') depth++;
        else if (s[i] == '}' && --depth == 0) return i;
    }
    return n;
}

/* If a box command starts at s[i], the index of its '{' (after optional white
 * space), else n. */
static size_t box_brace_at(const char *s, size_t n, size_t i)
{
    for (size_t c = 0; c < N_ELEMS(k_box_cmds); c++) {
        if (!starts_with(s + i, n - i, k_box_cmds[c])) continue;
        size_t j = i + strlen(k_box_cmds[c]);
        while (j < n && is_py_space(s[j])) j++;
        if (j < n && s[j] == '{') return j;
    }
    return n;
}

/* Finds the box that starts last among those whose braces close; its content
 * is s[*begin, *end). Walks backwards: once a box at brace b is unclosed, no
 * earlier box can close after b (its depth there is at least 1 and only grows
 * past b), so later scans stop at b and the whole search stays linear. */
static bool last_box(const char *s, size_t n, size_t *begin, size_t *end)
{
    size_t limit = n;
    for (size_t i = n; i-- > 0;) {
        if (s[i] != '\\') continue;
        size_t open = box_brace_at(s, n, i);
        if (open == n || open >= limit) continue;
        size_t close = match_brace(s, n, open, limit);
        if (close < n) {
            *begin = open + 1;
            *end = close;
            return true;
        }
        limit = open;
    }
    return false;
}

/* The length of a font wrapper command followed directly by '{' at s[i]
 * (not counting the brace), or 0. */
static size_t wrapper_at(const char *s, size_t n, size_t i)
{
    size_t best = 0;
    for (size_t c = 0; c < N_ELEMS(k_wrapper_cmds); c++) {
        size_t w = strlen(k_wrapper_cmds[c]);
        if (starts_with(s + i, n - i, k_wrapper_cmds[c]) && i + w < n && s[i + w] == '{' &&
            w > best)
            best = w;
    }
    return best;
}

/* True when s[i] starts a spacing command that the default extractor drops:
 * \! \, \; \: and "\ " (LaTeX's thin, medium, thick, negative and
 * interword spaces). */
static bool spacing_cmd_at(const char *s, size_t n, size_t i)
{
    return s[i] == '\\' && i + 1 < n && s[i + 1] != '\0' && strchr("!,;: ", s[i + 1]) != NULL;
}

/* Copies the balanced box content s[0, n) into out (room for GRADE_NORM_MAX
 * bytes) with font wrappers unwrapped and $, white space, ~ and spacing
 * commands dropped; stack holds, per open brace, whether it is a wrapper's.
 * False when the result would not fit or braces nest deeper than
 * GRADE_DEPTH_MAX: neither can be an integer that fits in long long. */
static bool normalise(const char *s, size_t n, char *out, size_t *out_len)
{
    bool stack[GRADE_DEPTH_MAX];
    size_t len = 0, depth = 0;
    for (size_t i = 0; i < n; i++) {
        char keep = '\0';
        size_t w = wrapper_at(s, n, i);
        if (w > 0 || s[i] == '{') {
            if (depth == GRADE_DEPTH_MAX) return false;
            stack[depth++] = w > 0;
            if (w > 0) i += w; /* now at the wrapper's '{', dropped with it */
            else keep = '{';
        } else if (spacing_cmd_at(s, n, i)) {
            i++;
        } else if (s[i] == '$' || s[i] == '~' || is_py_space(s[i])) {
            /* dropped */
        } else if (s[i] == '}') {
            if (depth == 0 || !stack[--depth]) keep = '}';
        } else {
            keep = s[i];
        }
        if (keep != '\0') {
            if (len == GRADE_NORM_MAX) return false;
            out[len++] = keep;
        }
    }
    *out_len = len;
    return true;
}

/* Parses an optional sign, then digits with optional thousands separators
 * (',' or "{,}"; 1-3 digits before the first, exactly 3 between and after
 * each), and nothing else. */
static bool parse_default_int(const char *s, size_t n, long long *value)
{
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    unsigned long long mag = 0, limit = mag_limit(neg);
    size_t first = 0;
    while (i < n && is_digit(s[i])) {
        if (!push_digit(&mag, s[i++], limit)) return false;
        first++;
    }
    if (first == 0) return false;
    while (i < n) {
        if (s[i] == ',') i += 1;
        else if (starts_with(s + i, n - i, "{,}")) i += 3;
        else return false;
        if (first > GRADE_GROUP_DIGITS) return false;
        for (int g = 0; g < GRADE_GROUP_DIGITS; g++, i++)
            if (i >= n || !is_digit(s[i]) || !push_digit(&mag, s[i], limit)) return false;
    }
    *value = signed_value(neg, mag);
    return true;
}

/* The default extractor (see grade.h). */
static bool extract_default(const char *s, size_t n, long long *value)
{
    size_t begin, end, len;
    char buf[GRADE_NORM_MAX];
    if (!last_box(s, n, &begin, &end)) return false;
    if (!normalise(s + begin, end - begin, buf, &len)) return false;
    return parse_default_int(buf, len, value);
}

/* ------------------------------------------------------------------------ */
/* gpt-oss extractor                                                        */
/* ------------------------------------------------------------------------ */

/* Python's int() on the n bytes at s: surrounding white space, an optional
 * sign, then digits with single '_' between digits. */
static bool py_int(const char *s, size_t n, long long *value)
{
    while (n > 0 && is_py_space(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_py_space(s[n - 1])) n--;
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i >= n || !is_digit(s[i])) return false;
    unsigned long long mag = 0, limit = mag_limit(neg);
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (i + 1 >= n || !is_digit(s[i + 1])) return false;
            continue; /* a '_' is always preceded by a digit here */
        }
        if (!is_digit(s[i]) || !push_digit(&mag, s[i], limit)) return false;
    }
    *value = signed_value(neg, mag);
    return true;
}

/* The gpt-oss extractor (see grade.h for the steps). */
static bool extract_gptoss(const char *s, size_t n, long long *value)
{
    /* Step 1: re.findall, left to right, non-overlapping; the lazy group
     * ends at the first '}' after the opener. Keep the last non-empty one. */
    const char *best = NULL;
    size_t best_len = 0;
    for (size_t pos = 0; pos < n;) {
        size_t next = pos + 1;
        for (size_t a = 0; a < N_ELEMS(k_gptoss_openers); a++) {
            if (!starts_with(s + pos, n - pos, k_gptoss_openers[a])) continue;
            size_t open_end = pos + strlen(k_gptoss_openers[a]);
            const char *close = memchr(s + open_end, '}', n - open_end);
            if (close == NULL) { /* no '}' from here on: no further match */
                next = n;
                break;
            }
            size_t close_at = (size_t)(close - s);
            if (close_at > open_end) {
                best = s + open_end;
                best_len = close_at - open_end;
            }
            next = close_at + 1;
            break;
        }
        pos = next;
    }
    if (best != NULL) {
        /* .split(",")[-1].strip(), then int(); int() strips white space too. */
        const char *comma = NULL;
        for (size_t i = 0; i < best_len; i++)
            if (best[i] == ',') comma = best + i;
        const char *part = comma ? comma + 1 : best;
        return py_int(part, best_len - (size_t)(part - best), value);
    }
    /* Step 2: the last r"\d+" anywhere in the text. */
    size_t e = n;
    while (e > 0 && !is_digit(s[e - 1])) e--;
    if (e == 0) return false; /* int("") raises: no answer */
    size_t b = e;
    while (b > 0 && is_digit(s[b - 1])) b--;
    return py_int(s + b, e - b, value);
}

/* ------------------------------------------------------------------------ */
/* public entry points                                                      */
/* ------------------------------------------------------------------------ */

bool grade_extract(const char *text, grade_extractor ex, long long *value)
{
    long long v = 0;
    size_t n = text ? strlen(text) : 0;
    bool ok = false;
    if (ex == GRADE_DEFAULT) ok = extract_default(text ? text : "", n, &v);
    else if (ex == GRADE_GPT_OSS) ok = extract_gptoss(text ? text : "", n, &v);
    *value = ok ? v : 0;
    return ok;
}

grade_result grade_completion(const char *content, const char *finish_reason, int answer,
                              grade_extractor ex)
{
    grade_result r = {0};
    r.truncated = finish_reason != NULL && strcmp(finish_reason, GRADE_FINISH_LENGTH) == 0;
    if (content != NULL && content[0] != '\0') r.extracted = grade_extract(content, ex, &r.value);
    r.correct = r.extracted && r.value == answer;
    return r;
}

/* Longest finish_reason quoted in a reason. */
#define GRADE_FINISH_SNIPPET 40

pg_status grade_gradable(const char *content, const char *finish_reason, const char *field,
                         pg_err *err)
{
    const char *f = finish_reason;
    if (f != NULL && strcmp(f, GRADE_FINISH_LENGTH) == 0) return PG_OK;
    if (f != NULL && (strcmp(f, "abort") == 0 || strcmp(f, "error") == 0))
        return pg_fail(err, PG_ERR_FORMAT, "ended with finish_reason '%.*s' (the server gave up "
                                           "on the generation)", GRADE_FINISH_SNIPPET, f);
    if (content != NULL && content[0] != '\0') return PG_OK;
    char fin[GRADE_FINISH_SNIPPET + 32] = "no finish_reason";
    if (f != NULL) snprintf(fin, sizeof fin, "finish_reason '%.*s'", GRADE_FINISH_SNIPPET, f);
    return pg_fail(err, PG_ERR_FORMAT, "had %s %s and %s", content != NULL ? "an empty" : "no",
                   field, fin);
}
