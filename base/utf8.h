/*
 * utf8.h: the one UTF-8 decoder (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) for everything that checks or cleans
 * text: the writers of stored text (terminal: reports/term.c, XML:
 * reports/junit.c, HTML and SVG: reports/svg.c, Markdown: reports/report_md.c)
 * and the names a shard database carries into a merge (db/merge_store.c).
 * Text from the database or a user (labels, capture paths, error messages)
 * may hold any bytes; each writer decides what to do with a byte that does
 * not start a valid sequence and with a control character, and asks here
 * what the bytes are.
 */
#ifndef PG_UTF8_H
#define PG_UTF8_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest UTF-8 sequence, in bytes. */
#define UTF8_SEQ_MAX 4

/* The length (1-4) of the valid UTF-8 sequence at s, with its code point in
 * *cp; 0 when s does not start one (a stray continuation byte, an overlong
 * form, a surrogate, a value above U+10FFFF or a sequence cut by the NUL: a
 * sequence is never read past a NUL). */
size_t utf8_decode(const char *s, unsigned long *cp);

/* 1 when cp is a control character: C0 (U+0000-U+001F), DEL (U+007F) or C1
 * (U+0080-U+009F); else 0. */
int utf8_is_control(unsigned long cp);

/* The length (1-4) of the character at s when XML and HTML character data
 * may hold it as it is: valid UTF-8, not a control character other than
 * tab, newline and carriage return, not a surrogate, U+FFFE or U+FFFF;
 * 0 otherwise (the writer puts one '?' in its place). *span is set to the
 * bytes the character spans either way (1 for a byte that is not UTF-8),
 * where the writer goes on. */
size_t utf8_markup_len(const char *s, size_t *span);

/* The offset of the first byte of s[0 .. len) that starts no valid UTF-8
 * sequence (a NUL byte included), or len when all of s is valid UTF-8. */
size_t utf8_invalid_at(const unsigned char *s, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PG_UTF8_H */
