/*
 * progress.h: the CLI's notes (base/note.h) on stderr: warnings as
 * "precgate: TEXT" lines, and progress as a one-line bar drawn only when
 * stderr is a terminal.
 */
#ifndef PG_PROGRESS_H
#define PG_PROGRESS_H

#include <stdint.h>

#include "base/note.h"

typedef struct progress {
    int enabled;        /* draw the bar: asked for, and stderr is a terminal */
    int64_t total;
    double started;     /* monotonic seconds */
} progress;

/* Notes that print warnings on stderr and draw the bar in *p (draw 0, or
 * stderr not a terminal: no bar). p must outlive the notes' use. */
pg_notes progress_notes(progress *p, int draw);

#endif /* PG_PROGRESS_H */
