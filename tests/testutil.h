/* testutil.h: helpers shared by the Criterion tests. */
#ifndef PG_TESTUTIL_H
#define PG_TESTUTIL_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/attn.h"
#include "base/rng.h"
#include "base/status.h"

/* The current test's scratch directory (made by tu_scratch_setup). */
extern char tu_dir[];

/* A fresh empty directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_tempdir(void);

/* A malloc'd "dir/name"; aborts the test when out of memory. */
char *tu_join(const char *dir, const char *name);

/* Removes dir and everything below it (no links followed); a failure is
 * logged as a warning, since it cannot change a test's verdict. */
void tu_rmtree(const char *dir);

/* Suite .init: makes a fresh tu_dir under $TMPDIR (or /tmp). */
void tu_scratch_setup(void);

/* Suite .fini: removes tu_dir and everything the test left in it. */
void tu_scratch_teardown(void);

/* "tu_dir/name" in a static buffer, one of 4 used in turn. */
const char *tu_in_dir(const char *name);

/* Writes len bytes to path; aborts the test on failure. */
void tu_write_file(const char *path, const void *data, size_t len);

/* Writes eval traces of n (1..26) problems a, b, ..., each "i+(7-i)?"
 * answered 7, to t.jsonl in the scratch directory; returns its path (kept
 * until the next call, unlike tu_in_dir's). */
const char *tu_write_sevens(int n);

/* Runs the precgate binary with args (a shell-quoted string) and captures
 * stdout+stderr into a malloc'd string *output; returns the exit status. */
int tu_run_precgate(const char *args, char **output);

/* tu_run_precgate with the command prefix in front of the binary (a
 * program that runs it, e.g. tu_unprivileged_prefix's; "" for none). */
int tu_run_precgate_as(const char *prefix, const char *args, char **output);

/* A prefix for tu_run_precgate_as under which file permissions bind: ""
 * when the test is not root; as root, setpriv as the user nobody (uid and
 * gid 65534, no groups); NULL when root and setpriv is missing. */
const char *tu_unprivileged_prefix(void);

/* Starts the precgate binary with args (a shell-quoted string) in the
 * background, stdout to out and stderr to err (err NULL: to out as well);
 * exec'd by the shell, so the pid returned is precgate's own. */
int tu_spawn_precgate(const char *args, const char *out, const char *err);

/* tu_run_precgate with args given printf-style (up to 2047 characters). */
int tu_run_precgatef(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Flips the lowest bit of the byte at offset `at` of tensor name's data in
 * the safetensors file at path (a bf16 or f32 value's lowest mantissa bit:
 * a finite value stays finite and changes); aborts the test on failure. */
void tu_flip_tensor_bit(const char *path, const char *name, size_t at);

/* Runs constant SQL (one or more statements) on db; aborts the test on failure. */
void tu_sql_exec(sqlite3 *db, const char *sql);

/* Prepares the sqlite3_vmprintf-formatted query; aborts the test on failure. */
sqlite3_stmt *tu_sql_vprepare(sqlite3 *db, const char *fmt, va_list ap);

/* The integer in the first column of the sqlite3_mprintf-formatted query's
 * first row (a NULL reads 0); aborts the test when there is no row. */
long long tu_sql_int(sqlite3 *db, const char *fmt, ...);

/* The text in the first column of the sqlite3_mprintf-formatted query's
 * first row, malloc'd; NULL when the value is NULL (aborts the test when
 * there is no row). */
char *tu_sql_text(sqlite3 *db, const char *fmt, ...);

/* The first column of the sqlite3_mprintf-formatted query's first row as a
 * double (a NULL reads 0.0); aborts the test when there is no row. */
double tu_sql_double(sqlite3 *db, const char *fmt, ...);

/* Opens database name in the scratch directory (tu_in_dir) with a 5 s busy
 * timeout; aborts the test on failure. */
sqlite3 *tu_db_open(const char *name);

/* The whole content of file name in the scratch directory, malloc'd and
 * NUL-terminated; aborts the test on failure. */
char *tu_slurp(const char *name);

/* A streaming parser's feed (js_parser_feed, pl_parser_feed, ...) on a
 * parser passed as void *. */
typedef pg_status (*tu_feed_fn)(void *parser, const char *data, size_t len, pg_err *err);

/* Feeds data[0..n) to feed(parser, ...) in the pieces that the increasing
 * offsets cuts[0..n_cuts) cut it into (cuts NULL: whole), stopping at the
 * first failure: PG_OK or its status. */
pg_status tu_feed_cut(tu_feed_fn feed, void *parser, const char *data, size_t n,
                      const size_t *cuts, size_t n_cuts, pg_err *err);

/* Offsets that cut n bytes into random pieces of 1 to 7 bytes, into
 * cuts[0..) (room for n); returns their count. */
size_t tu_random_cuts(uint64_t *seed, size_t n, size_t *cuts);

/* A roughly gaussian draw of unit spread (the sum of four uniforms, centred). */
double tu_gauss(rng_xoshiro256 *r);

/* A random attention layer: 2 sequences (40 new tokens; 24 new after 46 of
 * context), 4 query heads over 2 kv heads of dim TU_LAYER_D, sm_scale 1/8,
 * a sink per head, gaussian bf16 q/k/v of spread `spread`. */
#define TU_LAYER_D 64
typedef struct tu_layer {
    attn_batch b;
    int32_t sq[2], skv[2];
    float sinks[4];
    uint16_t *q, *k, *v;
    size_t nq, nkv;
} tu_layer;

/* Fills L from seed (tu_layer_free it). */
void tu_layer_init(tu_layer *L, uint64_t seed, double spread);

/* Frees L's arrays. */
void tu_layer_free(tu_layer *L);

#endif
