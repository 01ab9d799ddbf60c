/* utf8.c: the UTF-8 decoder (see utf8.h). */
#include "utf8.h"

size_t utf8_decode(const unsigned char *s, unsigned long *cp)
{
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
    if (v < min || v > 0x10ffffUL || (v >= 0xd800UL && v <= 0xdfffUL)) return 0;
    *cp = v;
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
        const size_t n = s[at] == '\0' ? 0 : utf8_decode(p, &cp);
        if (n == 0 || n > len - at) return at;
        at += n;
    }
    return len;
}
