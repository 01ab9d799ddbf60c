/* progress.c: the CLI's notes on stderr (see progress.h). */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "base/clock.h"
#include "reports/term.h"

/* Characters of the bar itself. */
#define PROGRESS_WIDTH 30

/* A warning: one "precgate: " line on stderr, its text escaped
 * (reports/term.h): it may quote what a server sent (a Server header, an
 * error message), which must not reach the terminal as control codes. */
static void say_warning(void *ctx, const char *text)
{
    (void)ctx;
    fputs("precgate: ", stderr);
    term_put(stderr, text);
    fputc('\n', stderr);
}

/* Starts a bar of total steps. */
static void bar_begin(void *ctx, int64_t total)
{
    progress *p = ctx;
    p->total = total > 0 ? total : 1;
    p->started = pg_clock_mono_s();
}

/* Redraws the bar: done of total, what is running now, elapsed and ETA. */
static void bar_step(void *ctx, int64_t done, const char *what)
{
    progress *p = ctx;
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

/* Clears the bar's line. */
static void bar_end(void *ctx)
{
    progress *p = ctx;
    if (!p->enabled) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

pg_notes progress_notes(progress *p, int draw)
{
    *p = (progress){.enabled = draw && isatty(STDERR_FILENO), .total = 1};
    return (pg_notes){.warning = say_warning, .progress_begin = bar_begin,
                      .progress_step = bar_step, .progress_end = bar_end, .ctx = p};
}
