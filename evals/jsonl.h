/*
 * jsonl.h: the JSON-lines reading every JSONL input of precgate shares
 * (eval traces, evals/traces.h; teacher-forcing sequences, evals/sequences.h):
 * a line reader (getline, so any line length; blank lines skipped; each
 * other line parsed whole as one JSON object), field access that refuses a
 * key given twice, messages that start "<path>:<line>: " and name the
 * field, and a duplicate-id set (open addressing, so a large file stays
 * linear).
 */
#ifndef PG_JSONL_H
#define PG_JSONL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest magnitude accepted for a JSON integer: cJSON holds numbers as
 * doubles, which represent every integer up to 2^53 - 1 exactly. */
#define JSONL_INT_MAX 9007199254740991.0

/* FNV-1a, 64-bit (http://www.isthe.com/chongo/tech/comp/fnv/): offset basis and prime. */
#define JSONL_FNV_OFFSET 14695981039346656037ULL
#define JSONL_FNV_PRIME 1099511628211ULL

/* Where a field lives: the file, its line, and the enclosing element such as
 * "completions[2]" (NULL at the top level). */
typedef struct jsonl_loc {
    const char *path;
    int line;
    const char *ctx;
} jsonl_loc;

/* Records PG_ERR_FORMAT "path:line: 'ctx.key' <detail>" (or
 * "path:line: <detail>" when key is NULL). */
pg_status jsonl_field_err(pg_err *err, const jsonl_loc *at, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A JSON value's type for messages ("a number", "null", "missing" for NULL). */
const char *jsonl_kind(const cJSON *x);

/* obj's member named key in *out (NULL when absent); PG_ERR_FORMAT when the
 * key occurs more than once. */
pg_status jsonl_member(pg_err *err, const jsonl_loc *at, const cJSON *obj, const char *key,
                       const cJSON **out);

/* True when x is a JSON integer in [lo, hi]; stores it in *out. */
bool jsonl_int(const cJSON *x, double lo, double hi, long long *out);

/* A malloc'd copy of s, or NULL with PG_ERR_NOMEM recorded. */
char *jsonl_dup(pg_err *err, const jsonl_loc *at, const char *s);

/* FNV-1a of n bytes at p, continuing from h (JSONL_FNV_OFFSET to start). */
uint64_t jsonl_fnv1a(uint64_t h, const void *p, size_t n);

/* FNV-1a of one field, continuing from h: its length (8 bytes, little
 * endian) then its bytes, so field boundaries cannot shift; NULL hashes as
 * length UINT64_MAX. */
uint64_t jsonl_digest_field(uint64_t h, const char *v);

/* One slot: an owned copy of an id and the line it was first seen on. */
typedef struct jsonl_id_slot {
    char *id;
    int line;
} jsonl_id_slot;

/* Open-addressing hash set of ids (linear probing, at most half full);
 * zero-initialised it is empty. */
typedef struct jsonl_id_set {
    jsonl_id_slot *slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
} jsonl_id_set;

/* The line id was first seen on, or 0 when it is new. */
int jsonl_id_find(const jsonl_id_set *s, const char *id);

/* Adds id (not yet present) seen on line; false when out of memory. */
bool jsonl_id_add(jsonl_id_set *s, const char *id, int line);

/* Frees the set's copies and slots and empties it. */
void jsonl_id_set_free(jsonl_id_set *s);

/* PG_ERR_FORMAT naming key when id repeats an earlier line's, else adds it
 * (PG_ERR_NOMEM when it cannot). */
pg_status jsonl_check_id(pg_err *err, const jsonl_loc *at, jsonl_id_set *ids, const char *key,
                         const char *id);

/* Reads a JSONL file line by line: {fopen(path), path, NULL, 0, 0}; free
 * buf and fclose f when done. */
typedef struct jsonl_reader {
    FILE *f;
    const char *path;
    char *buf;
    size_t cap;
    int line; /* 1-based number of the line last read */
} jsonl_reader;

/* The next non-blank line's JSON object in *obj (the caller deletes it), or
 * NULL at the end of the file. PG_ERR_IO or PG_ERR_NOMEM when it cannot be
 * read; PG_ERR_FORMAT for a NUL byte, invalid JSON (naming the column) or a
 * line that is not an object. */
pg_status jsonl_next_object(jsonl_reader *r, cJSON **obj, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_JSONL_H */
