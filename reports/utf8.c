/* utf8.c: the UTF-8 reader of the text writers (see utf8.h). */
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
