/* note.c: handing notes to the CLI's callbacks (see note.h). */
#include "note.h"

#include <stdarg.h>
#include <stdio.h>

/* Longest warning kept. */
#define NOTE_TEXT_MAX 1024

void pg_note_warning(const pg_notes *n, const char *fmt, ...)
{
    if (n == NULL || n->warning == NULL) return;
    char text[NOTE_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    n->warning(n->ctx, text);
}

void pg_note_progress_begin(const pg_notes *n, int64_t total)
{
    if (n != NULL && n->progress_begin != NULL) n->progress_begin(n->ctx, total);
}

void pg_note_progress_step(const pg_notes *n, int64_t done, const char *what)
{
    if (n != NULL && n->progress_step != NULL) n->progress_step(n->ctx, done, what);
}

void pg_note_progress_end(const pg_notes *n)
{
    if (n != NULL && n->progress_end != NULL) n->progress_end(n->ctx);
}
