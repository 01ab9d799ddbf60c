/* parallel.c: a parallel for-loop on POSIX threads (see parallel.h). */
#include "parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

typedef struct parallel_job {
    atomic_int next;
    int n_items;
    parallel_fn fn;
    void *ctx;
} parallel_job;

typedef struct parallel_worker {
    parallel_job *job;
    int thread;
} parallel_worker;

/* Takes items until none is left. */
static void *parallel_worker_main(void *arg)
{
    parallel_worker *w = arg;
    for (;;) {
        int item = atomic_fetch_add(&w->job->next, 1);
        if (item >= w->job->n_items) break;
        w->job->fn(w->job->ctx, item, w->thread);
    }
    return NULL;
}

pg_status parallel_for(int n_items, int n_threads, parallel_fn fn, void *ctx, pg_err *err)
{
    if (n_threads < 1) n_threads = 1;
    if (n_threads > PARALLEL_MAX_THREADS) n_threads = PARALLEL_MAX_THREADS;
    if (n_threads > n_items) n_threads = n_items > 0 ? n_items : 1;
    parallel_job job = {.n_items = n_items, .fn = fn, .ctx = ctx};
    atomic_init(&job.next, 0);
    parallel_worker workers[PARALLEL_MAX_THREADS];
    pthread_t tids[PARALLEL_MAX_THREADS];
    int started = 1;
    pg_status st = PG_OK;
    for (int t = 1; t < n_threads; t++) {
        workers[t] = (parallel_worker){&job, t};
        if (pthread_create(&tids[t], NULL, parallel_worker_main, &workers[t]) != 0) {
            st = pg_fail(err, PG_ERR_INTERNAL, "cannot start worker thread %d of %d", t,
                         n_threads);
            break;
        }
        started++;
    }
    workers[0] = (parallel_worker){&job, 0};
    parallel_worker_main(&workers[0]);
    for (int t = 1; t < started; t++) pthread_join(tids[t], NULL);
    return st;
}

int parallel_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)(n < PARALLEL_MAX_THREADS ? n : PARALLEL_MAX_THREADS) : 1;
}
