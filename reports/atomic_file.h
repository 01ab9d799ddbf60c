/*
 * atomic_file.h: writing an output file so that a reader sees the old file
 * or the whole new one, never a part (reports, JUnit, eval results): a
 * temporary file beside the target, flushed and synced, renamed over it.
 */
#ifndef PG_ATOMIC_FILE_H
#define PG_ATOMIC_FILE_H

#include <stdio.h>

#include "base/status.h"

/* Writes the file's content to out; returns PG_OK or its failure (err filled). */
typedef pg_status (*atomic_file_writer)(void *ctx, FILE *out, pg_err *err);

/* Writes path through write(ctx, out): a temporary file path.tmp.XXXXXX with
 * mode (less the umask), flushed and synced, then renamed over path. On any
 * failure the temporary file is removed and path is untouched: PG_ERR_IO
 * naming path (and the temporary file) for a file system failure; a writer's
 * own failure keeps its code, prefixed with path. */
pg_status atomic_file_write(const char *path, unsigned mode, atomic_file_writer write, void *ctx,
                            pg_err *err);

#endif /* PG_ATOMIC_FILE_H */
