/*
 * note.h: how code below the CLI says what is not an error (a warning, how
 * far a long job has come) without printing: it calls a pg_notes that the
 * CLI supplies (harness/progress.h draws them on stderr). Library code
 * never writes to stdout or stderr itself.
 */
#ifndef PG_NOTE_H
#define PG_NOTE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where notes go. Any callback may be NULL (that kind of note is dropped:
 * tests, --no-progress). Progress callbacks come from one thread at a time. */
typedef struct pg_notes {
    void (*warning)(void *ctx, const char *text);   /* one line, no trailing newline */
    void (*progress_begin)(void *ctx, int64_t total);  /* a job of total steps starts */
    void (*progress_step)(void *ctx, int64_t done, const char *what);  /* done of total */
    void (*progress_end)(void *ctx);                /* the job ended (done or not) */
    void *ctx;
} pg_notes;

/* Says a warning (printf-style, one line) through n; a NULL n or warning
 * callback drops it. */
void pg_note_warning(const pg_notes *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Says a job of total steps begins through n (NULL n or callback: nothing). */
void pg_note_progress_begin(const pg_notes *n, int64_t total);

/* Says done of the job's steps are done, what running now, through n. */
void pg_note_progress_step(const pg_notes *n, int64_t done, const char *what);

/* Says the job ended through n. */
void pg_note_progress_end(const pg_notes *n);

#ifdef __cplusplus
}
#endif

#endif /* PG_NOTE_H */
