/*
 * status.h: the one way precgate reports errors.
 *
 * Every fallible function returns a pg_status and, on failure, writes a
 * one-line detail into the caller's pg_err (the first failure wins, as in
 * curl's error buffer). The command-line tool prints
 *     precgate: error: <detail>
 * on stderr and exits with cli_exit_code(code) (harness/cli.h).
 *
 * Part of base/, the foundation every folder may use (README, Layout).
 */
#ifndef PG_STATUS_H
#define PG_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pg_status {
    PG_OK = 0,        /* success */
    PG_ERR_USAGE,     /* bad command line: unknown option, missing value */
    PG_ERR_IO,        /* a file could not be opened, read, mapped or written */
    PG_ERR_FORMAT,    /* an input file is malformed (header, JSON, offsets) */
    PG_ERR_SHAPE,     /* tensor shapes or metadata are inconsistent */
    PG_ERR_NUMERIC,   /* NaN/Inf or an out-of-range value where none is allowed */
    PG_ERR_NOMEM,     /* an allocation failed */
    PG_ERR_DB,        /* SQLite reported an error */
    PG_ERR_DEVICE,    /* a GPU or driver call failed, or no GPU was usable */
    PG_ERR_HTTP,      /* a server could not be reached or answered with an error */
    PG_ERR_INTERNAL,  /* a broken invariant inside precgate (a bug) */
    PG_ERR_INTERRUPTED, /* SIGINT or SIGTERM stopped the work (harness/interrupt.h) */
    PG_ERR_UNSUPPORTED /* a kernel profile cannot run this input as the profile states (e.g.
                        * a kernel without attention sinks on a layer that has them): the
                        * input and the profile are each valid, only not together */
} pg_status;

/* Longest detail message kept, including the terminating NUL. */
#define PG_ERR_MSG_MAX 512

/* The first failure's code and detail. Zero-initialise before use. */
typedef struct pg_err {
    pg_status code;            /* PG_OK until the first failure */
    char msg[PG_ERR_MSG_MAX];  /* that failure's detail, "" until then */
} pg_err;

/* Records code and a printf-style detail in err unless err already holds a
 * failure; returns the code err now holds. err may be NULL (detail dropped). */
pg_status pg_fail(pg_err *err, pg_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Short fixed phrase for a code ("malformed input", ...); never NULL. */
const char *pg_status_str(pg_status code);

/* Clears err back to PG_OK and an empty message. */
void pg_err_clear(pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_STATUS_H */
