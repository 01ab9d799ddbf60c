/* progress.c: a progress bar on stderr when it is a terminal (see progress.h). */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

/* Characters of the bar itself. */
#define PROGRESS_WIDTH 30

void progress_start(progress *p, int64_t total)
{
    p->enabled = isatty(STDERR_FILENO);
    p->total = total > 0 ? total : 1;
    p->started = pg_clock_mono_s();
}

void progress_update(progress *p, int64_t done, const char *what)
{
    if (!p->enabled) return;
    const double frac = (double)done / (double)p->total;
    const double elapsed = pg_clock_mono_s() - p->started;
    const int fill = (int)(frac * PROGRESS_WIDTH);
    char bar[PROGRESS_WIDTH + 1];
    for (int i = 0; i < PROGRESS_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[PROGRESS_WIDTH] = '\0';
    if (done > 0)
        fprintf(stderr, "\r\033[K[%s] %lld/%lld %-24.24s %6.1fs, ETA %6.1fs", bar,
                (long long)done, (long long)p->total, what, elapsed,
                elapsed / frac - elapsed);
    else
        fprintf(stderr, "\r\033[K[%s] %lld/%lld %-24.24s", bar, (long long)done,
                (long long)p->total, what);
    fflush(stderr);
}

void progress_finish(progress *p)
{
    if (!p->enabled) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
