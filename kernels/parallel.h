/*
 * parallel.h: a parallel for-loop over independent work items on POSIX threads.
 */
#ifndef PG_PARALLEL_H
#define PG_PARALLEL_H

#include "base/status.h"

/* Most threads parallel_for starts, far above any machine precgate runs on. */
#define PARALLEL_MAX_THREADS 256

/* Work item callback: item in [0, n_items), thread in [0, n_threads). It must
 * not fail; callers allocate what it needs per thread beforehand. */
typedef void (*parallel_fn)(void *ctx, int item, int thread);

/* Runs fn on every item using n_threads threads (items handed out in order
 * through an atomic counter); the calling thread is thread 0. PG_ERR_INTERNAL
 * when a thread cannot be started. */
pg_status parallel_for(int n_items, int n_threads, parallel_fn fn, void *ctx, pg_err *err);

/* Threads to use by default: the online CPUs, in [1, PARALLEL_MAX_THREADS]
 * (a setting such as precgate's $PRECGATE_THREADS is the caller's: harness/cli.h). */
int parallel_default_threads(void);

#endif /* PG_PARALLEL_H */
