/* term.c: terminal output helpers (see term.h). */
#include "term.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/utf8.h"

/* Longest glyph: a C1 control's "\u{9f}". */
#define TERM_GLYPH_MAX 6
/* Longest printf conversion term_vprintf passes on: '%', flags, the two
 * '*', length and conversion, with room to spare. */
#define TERM_SPEC_MAX 32

int term_colour_wanted(int is_tty, const char *no_color)
{
    return is_tty != 0 && no_color == NULL;
}

/* One character of the escaped text: its bytes (not NUL-terminated) and the
 * columns it takes (a code point is one; an escape one per character). */
typedef struct term_glyph {
    char bytes[TERM_GLYPH_MAX + 1];
    unsigned char len, cols;
} term_glyph;

/* The escaped form (term.h) of the character at s into *g; returns the
 * bytes of s consumed (>= 1). */
static size_t next_glyph(const char *s, term_glyph *g)
{
    unsigned long cp = 0;
    const size_t n = utf8_decode(s, &cp);
    int w = 0;
    if (n == 0)
        w = snprintf(g->bytes, sizeof g->bytes, "\\x%02x", (unsigned)(unsigned char)s[0]);
    else if (cp == '\\')
        w = snprintf(g->bytes, sizeof g->bytes, "\\\\");
    else if (utf8_is_control(cp))
        w = cp < 0x80 ? snprintf(g->bytes, sizeof g->bytes, "\\x%02lx", cp)
                      : snprintf(g->bytes, sizeof g->bytes, "\\u{%02lx}", cp);
    if (w > 0) {
        g->len = g->cols = (unsigned char)w;
        return n == 0 ? 1 : n;
    }
    memcpy(g->bytes, s, n);
    g->len = (unsigned char)n;
    g->cols = 1;
    return n;
}

/* The columns text takes escaped (next_glyph's). */
static size_t escaped_width(const char *text)
{
    size_t w = 0;
    term_glyph g;
    for (const char *p = text; *p != '\0'; w += g.cols) p += next_glyph(p, &g);
    return w;
}

size_t term_width(const char *text)
{
    size_t w = 0;
    unsigned long cp;
    for (const char *p = text; *p != '\0'; w++) {
        const size_t n = utf8_decode(p, &cp);
        p += n == 0 ? 1 : n;
    }
    return w;
}

size_t term_put_char(FILE *out, const char *s)
{
    term_glyph g;
    const size_t n = next_glyph(s, &g);
    fwrite(g.bytes, 1, g.len, out);
    return n;
}

void term_put(FILE *out, const char *text)
{
    for (const char *p = text != NULL ? text : "(null)"; *p != '\0';) p += term_put_char(out, p);
}

/* Appends bytes[0..n) to buf (used bytes in *at, capacity len including the
 * NUL) when they fit whole; returns 0 when they did not fit. */
static int put_glyph(char *buf, size_t len, size_t *at, const char *bytes, size_t n)
{
    if (*at + n + 1 > len) return 0;
    memcpy(buf + *at, bytes, n);
    *at += n;
    buf[*at] = '\0';
    return 1;
}

void term_fit(char *buf, size_t len, const char *text, size_t width, int keep_tail)
{
    if (buf == NULL || len == 0) return;
    buf[0] = '\0';
    if (text == NULL) text = "-";
    const size_t total = escaped_width(text);
    const size_t dots = strlen(TERM_ELLIPSIS);
    size_t keep = total; /* columns kept */
    int cut = 0;
    if (width > 0 && total > width) {
        cut = 1;
        keep = width > dots ? width - dots : width;
    }
    size_t at = 0;
    int room = 1;
    term_glyph g;
    const char *p = text;
    if (cut && keep_tail && width > dots) {
        room = put_glyph(buf, len, &at, TERM_ELLIPSIS, dots);
        /* Drop whole glyphs from the start until the rest fits in keep. */
        for (size_t left = total; *p != '\0' && left > keep; left -= g.cols)
            p += next_glyph(p, &g);
        keep = total;
    }
    for (size_t used = 0; room && *p != '\0';) {
        const size_t n = next_glyph(p, &g);
        if (used + g.cols > keep) break;
        room = put_glyph(buf, len, &at, g.bytes, g.len);
        used += g.cols;
        p += n;
    }
    if (room && cut && !keep_tail && width > dots) put_glyph(buf, len, &at, TERM_ELLIPSIS, dots);
}

void term_cell(FILE *out, const char *colour, int width, const char *text)
{
    const size_t field = (size_t)(width < 0 ? -(long)width : width);
    const size_t w = term_width(text);
    const size_t pad = w < field ? field - w : 0;
    if (width > 0)
        for (size_t i = 0; i < pad; i++) fputc(' ', out);
    if (colour != NULL) fputs(colour, out);
    fputs(text, out);
    if (colour != NULL) fputs(TERM_RESET, out);
    if (width < 0)
        for (size_t i = 0; i < pad; i++) fputc(' ', out);
}

/* A "%s" of term_vprintf: text escaped (term_put), at most prec columns of
 * whole glyphs when prec >= 0, padded with spaces to width columns (on the
 * right when left is non-zero). */
static void put_text_field(FILE *out, const char *text, int left, size_t width, long prec)
{
    if (text == NULL) text = "(null)";
    term_glyph g;
    size_t cols = 0;
    const char *end = text;
    while (*end != '\0') {
        const size_t n = next_glyph(end, &g);
        if (prec >= 0 && cols + g.cols > (size_t)prec) break;
        cols += g.cols;
        end += n;
    }
    if (!left)
        for (size_t i = cols; i < width; i++) fputc(' ', out);
    for (const char *p = text; p < end;) {
        p += next_glyph(p, &g);
        fwrite(g.bytes, 1, g.len, out);
    }
    if (left)
        for (size_t i = cols; i < width; i++) fputc(' ', out);
}

/* The length modifiers of a printf conversion. */
typedef enum term_len { TL_NONE, TL_HH, TL_H, TL_L, TL_LL, TL_J, TL_Z, TL_T, TL_BIG_L } term_len;

/* fprintf(out, spec, [star[0]], [star[1]], v) for the n_star '*' values of a spec. */
#define TERM_PUT_CONV(out, spec, n_star, star, v)                                             \
    ((n_star) == 2   ? fprintf(out, spec, (star)[0], (star)[1], v)                             \
     : (n_star) == 1 ? fprintf(out, spec, (star)[0], v)                                        \
                     : fprintf(out, spec, v))

void term_vprintf(FILE *out, const char *fmt, va_list ap)
{
    va_list args;
    va_copy(args, ap);
    for (const char *p = fmt; *p != '\0';) {
        const char *pct = strchr(p, '%');
        if (pct == NULL) {
            fputs(p, out);
            break;
        }
        fwrite(p, 1, (size_t)(pct - p), out);
        /* Parse one conversion: flags, width, precision, length, conversion. */
        char spec[TERM_SPEC_MAX];
        size_t k = 0;
        const char *q = pct + 1;
        int left = 0, n_star = 0, star[2] = {0, 0};
        long width = 0, prec = -1;
        spec[k++] = '%';
        while (*q != '\0' && strchr("-+ #0'", *q) != NULL) {
            if (*q == '-') left = 1;
            if (k < TERM_SPEC_MAX - 8) spec[k++] = *q;
            q++;
        }
        if (*q == '*') {
            star[n_star++] = va_arg(args, int);
            width = star[n_star - 1];
            if (width < 0) left = 1, width = -width;
            spec[k++] = *q++;
        } else {
            for (; *q >= '0' && *q <= '9'; q++) {
                width = width * 10 + (*q - '0');
                if (k < TERM_SPEC_MAX - 6) spec[k++] = *q;
            }
        }
        if (*q == '.') {
            spec[k++] = *q++;
            prec = 0;
            if (*q == '*') {
                star[n_star++] = va_arg(args, int);
                prec = star[n_star - 1] < 0 ? -1 : star[n_star - 1];
                spec[k++] = *q++;
            } else {
                for (; *q >= '0' && *q <= '9'; q++) {
                    prec = prec * 10 + (*q - '0');
                    if (k < TERM_SPEC_MAX - 4) spec[k++] = *q;
                }
            }
        }
        term_len len = TL_NONE;
        if (q[0] == 'h' && q[1] == 'h') len = TL_HH, spec[k++] = *q++, spec[k++] = *q++;
        else if (q[0] == 'l' && q[1] == 'l') len = TL_LL, spec[k++] = *q++, spec[k++] = *q++;
        else if (*q == 'h') len = TL_H, spec[k++] = *q++;
        else if (*q == 'l') len = TL_L, spec[k++] = *q++;
        else if (*q == 'j') len = TL_J, spec[k++] = *q++;
        else if (*q == 'z') len = TL_Z, spec[k++] = *q++;
        else if (*q == 't') len = TL_T, spec[k++] = *q++;
        else if (*q == 'L') len = TL_BIG_L, spec[k++] = *q++;
        const char conv = *q;
        if (conv == '\0') break; /* a cut conversion: nothing to print */
        spec[k++] = conv;
        spec[k] = '\0';
        p = q + 1;
        switch (conv) {
        case '%': fputc('%', out); break;
        case 's': put_text_field(out, va_arg(args, const char *), left, (size_t)width, prec); break;
        case 'c': TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, int)); break;
        case 'p': TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, void *)); break;
        case 'd': case 'i':
            switch (len) {
            case TL_L: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, long)); break;
            case TL_LL: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, long long)); break;
            case TL_J: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, intmax_t)); break;
            case TL_Z: case TL_T:
                TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, ptrdiff_t));
                break;
            default: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, int)); break;
            }
            break;
        case 'u': case 'o': case 'x': case 'X':
            switch (len) {
            case TL_L: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, unsigned long)); break;
            case TL_LL:
                TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, unsigned long long));
                break;
            case TL_J: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, uintmax_t)); break;
            case TL_Z: case TL_T:
                TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, size_t));
                break;
            default: TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, unsigned)); break;
            }
            break;
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
            if (len == TL_BIG_L) TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, long double));
            else TERM_PUT_CONV(out, spec, n_star, star, va_arg(args, double));
            break;
        default: /* %n and unknown conversions: the format attribute refuses them */
            break;
        }
    }
    va_end(args);
}

void term_printf(FILE *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    term_vprintf(out, fmt, ap);
    va_end(ap);
}
