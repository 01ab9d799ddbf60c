/* term.c: terminal output helpers (see term.h). */
#include "term.h"

#include <string.h>

#include "base/utf8.h"

/* Lowest byte of a C0 control character range's end (exclusive): 0x00-0x1f. */
#define TERM_C0_END 0x20
/* DEL. */
#define TERM_DEL 0x7f
/* The C1 control characters U+0080-U+009F. */
#define TERM_C1_FIRST 0x80
#define TERM_C1_LAST 0x9f

int term_colour_wanted(int is_tty, const char *no_color)
{
    return is_tty != 0 && no_color == NULL;
}

/* One code point of the cleaned text: its bytes (not NUL-terminated). */
typedef struct term_glyph {
    char bytes[UTF8_SEQ_MAX];
    unsigned char len;
} term_glyph;

/* The cleaned code point at s into *g; returns the bytes of s consumed. */
static size_t next_glyph(const char *s, term_glyph *g)
{
    unsigned long cp = 0;
    const size_t n = utf8_decode((const unsigned char *)s, &cp);
    if (n == 0) {
        g->bytes[0] = '?';
        g->len = 1;
        return 1;
    }
    if (cp < TERM_C0_END || cp == TERM_DEL || (cp >= TERM_C1_FIRST && cp <= TERM_C1_LAST)) {
        g->bytes[0] = ' ';
        g->len = 1;
        return n;
    }
    memcpy(g->bytes, s, n);
    g->len = (unsigned char)n;
    return n;
}

size_t term_width(const char *text)
{
    size_t w = 0;
    term_glyph g;
    for (const char *p = text; *p != '\0'; w++) p += next_glyph(p, &g);
    return w;
}

/* Appends g to buf (used bytes in *at, capacity len including the NUL) when
 * it fits whole; returns 0 when it did not fit. */
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
    const size_t total = term_width(text);
    const size_t dots = strlen(TERM_ELLIPSIS);
    size_t skip = 0, keep = total; /* code points dropped from the start, then kept */
    int cut = 0;
    if (width > 0 && total > width) {
        cut = 1;
        keep = width > dots ? width - dots : width;
        if (keep_tail && width > dots) skip = total - keep;
    }
    size_t at = 0, i = 0;
    int room = 1;
    if (cut && keep_tail && width > dots) room = put_glyph(buf, len, &at, TERM_ELLIPSIS, dots);
    term_glyph g;
    for (const char *p = text; room && *p != '\0' && i < skip + keep; i++) {
        p += next_glyph(p, &g);
        if (i >= skip) room = put_glyph(buf, len, &at, g.bytes, g.len);
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
