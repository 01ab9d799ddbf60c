/*
 * progress.h: a one-line progress bar on stderr, drawn only when stderr is a terminal.
 */
#ifndef PG_PROGRESS_H
#define PG_PROGRESS_H

#include <stdint.h>

typedef struct progress {
    int enabled;        /* stderr is a terminal */
    int64_t total;
    double started;     /* monotonic seconds */
} progress;

/* Starts a bar of total steps (drawn only on a terminal). */
void progress_start(progress *p, int64_t total);

/* Redraws the bar: done of total, what is running now, elapsed and ETA. */
void progress_update(progress *p, int64_t done, const char *what);

/* Clears the bar's line. */
void progress_finish(progress *p);

#endif /* PG_PROGRESS_H */
