/*
 * parallel.h: a parallel for-loop over independent work items on POSIX threads.
 */
#ifndef PG_PARALLEL_H
#define PG_PARALLEL_H

#include "base/status.h"

/* Work item callback: item in [0, n_items), thread in [0, n_threads). It must
 * not fail; callers allocate what it needs per thread beforehand. */
typedef void (*parallel_fn)(void *ctx, int item, int thread);

/* Runs fn on every item using n_threads threads (items handed out in order
 * through an atomic counter); the calling thread is thread 0. PG_ERR_INTERNAL
 * when a thread cannot be started. */
pg_status parallel_for(int n_items, int n_threads, parallel_fn fn, void *ctx, pg_err *err);

/* Threads to use by default: $PRECGATE_THREADS when set, else online CPUs.
 * A value that is not an integer in [1, 256] is reported on stderr once and
 * the online CPU count is used: the variable never changes results, only speed. */
int parallel_default_threads(void);

#endif /* PG_PARALLEL_H */
