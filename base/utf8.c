/* utf8.c: the one UTF-8 decoder, and what text writers and checkers ask of it (see utf8.h). */
#include "utf8.h"

/* End (exclusive) of the C0 control characters U+0000-U+001F. */
#define UTF8_C0_END 0x20UL
/* DEL. */
#define UTF8_DEL 0x7fUL
/* The C1 control characters U+0080-U+009F. */
#define UTF8_C1_FIRST 0x80UL
#define UTF8_C1_LAST 0x9fUL
/* Largest code point, and the surrogates UTF-8 may not encode (RFC 3629). */
#define UTF8_MAX_CP 0x10ffffUL
#define UTF8_SURROGATE_FIRST 0xd800UL
#define UTF8_SURROGATE_LAST 0xdfffUL
/* The two noncharacters XML 1.0's Char production leaves out. */
#define UTF8_NONCHAR_FFFE 0xfffeUL
#define UTF8_NONCHAR_FFFF 0xffffUL

size_t utf8_decode(const char *str, unsigned long *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    const unsigned char c = s[0];
    size_t n;
    unsigned long v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        n = 2, v = c & 0x1fu, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, v = c & 0x0fu, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, v = c & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0u) != 0x80u) return 0; /* also stops at the NUL */
        v = (v << 6) | (s[i] & 0x3fu);
    }
    if (v < min || v > UTF8_MAX_CP || (v >= UTF8_SURROGATE_FIRST && v <= UTF8_SURROGATE_LAST))
        return 0;
    *cp = v;
    return n;
}

int utf8_is_control(unsigned long cp)
{
    return cp < UTF8_C0_END || cp == UTF8_DEL || (cp >= UTF8_C1_FIRST && cp <= UTF8_C1_LAST);
}

size_t utf8_markup_len(const char *s, size_t *span)
{
    unsigned long cp = 0;
    const size_t n = utf8_decode(s, &cp);
    *span = n == 0 ? 1 : n;
    if (n == 0 || cp == UTF8_NONCHAR_FFFE || cp == UTF8_NONCHAR_FFFF) return 0;
    if (utf8_is_control(cp) && cp != '\t' && cp != '\n' && cp != '\r') return 0;
    return n;
}

size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t at = 0;
    while (at < len) {
        unsigned long cp = 0;
        /* A sequence cut by the end of s: utf8_decode reads at most up to a
         * NUL, which s need not have; copy the tail so it is never read past. */
        unsigned char tail[UTF8_SEQ_MAX + 1] = {0};
        const unsigned char *p = s + at;
        if (len - at < UTF8_SEQ_MAX) {
            for (size_t i = 0; i < len - at; i++) tail[i] = s[at + i];
            p = tail;
        }
        const size_t n = s[at] == '\0' ? 0 : utf8_decode((const char *)p, &cp);
        if (n == 0 || n > len - at) return at;
        at += n;
    }
    return len;
}
