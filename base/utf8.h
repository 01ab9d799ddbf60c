/*
 * utf8.h: the one UTF-8 decoder (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), for everything that checks or cleans
 * text: the terminal's output (reports/term.c) and the names a shard
 * database carries into a merge (db/merge_store.c).
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
 * form, a surrogate, a value above U+10FFFF or a cut sequence; a NUL ends
 * s, so a sequence is never read past it). */
size_t utf8_decode(const unsigned char *s, unsigned long *cp);

/* The offset of the first byte of s[0 .. len) that starts no valid UTF-8
 * sequence (a NUL byte included), or len when all of s is valid UTF-8. */
size_t utf8_invalid_at(const unsigned char *s, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PG_UTF8_H */
