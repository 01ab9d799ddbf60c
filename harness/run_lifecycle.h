/*
 * run_lifecycle.h: a sweep run's lifecycle, the use case behind `precgate
 * run`: start the backend beside the capture's load, create the run (or
 * reopen one to resume, after checking that the capture, the options that
 * define its numbers and the build are the run's), sweep every layer not yet
 * stored into SQLite, and finish the run as complete, failed or interrupted.
 *
 * It takes a request struct and fills a result; it prints nothing but the
 * run's announcements to the request's out (the run id as soon as the run
 * row exists, so that a killed run can be resumed by number), and says its
 * warnings through the request's notes. The CLI (harness/cli/cmd_run.c)
 * parses argv into the request, calls run_lifecycle_sweep, and prints the
 * tables and the timing line from the result. Tests call it directly.
 */
#ifndef PG_RUN_LIFECYCLE_H
#define PG_RUN_LIFECYCLE_H

#include <stdint.h>
#include <stdio.h>

#include "base/note.h"
#include "base/status.h"
#include "harness/shard.h"
#include "harness/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for a backend's name ("cpu", "cuda"), its NUL included. */
#define RUN_BACKEND_NAME_MAX 16

/* A sweep run to make or continue. The fields below "defining the numbers"
 * are the run's own when resumed and not given (resume takes them from the
 * run's config_json, db/run_config.h), so run_lifecycle_sweep may rewrite them. */
typedef struct run_sweep_request {
    const char *capture;  /* safetensors file or directory of shards (required) */
    const char *db_path;  /* the database (the CLI resolves --db, $PRECGATE_DB) */
    const char *label;    /* stored with a new run; NULL for none */
    long threads;         /* CPU threads of the sweep */
    int scan_threads;     /* threads of the capture's load and validation */
    long resume;          /* the run to continue; -1 for a new run */
    int force;            /* resume a run still marked running (another host) */
    /* Defining the numbers; given_* say which were given (a resume
     * compares those with the run's and takes the others from it). */
    const char *backend;  /* "cpu", "cuda" or "auto" */
    sweep_variants variants;
    unsigned long long seed;  /* the paged cache's page scattering */
    int check_spec;
    sweep_scales scales;  /* SWEEP_SCALES_DEFAULT until given or resolved */
    int attribute;
    int given_variants, given_backend, given_seed, given_check_spec, given_scales,
        given_attribute;
    shard_spec shard;     /* count 0 for no shard (a resumed part takes the run's) */
    char backend_buf[RUN_BACKEND_NAME_MAX];  /* a resumed run's backend, when not given */
    const char *job;      /* the sharded job's key; NULL for the default */
    char job_buf[SHARD_JOB_MAX];  /* the default key, or a resumed run's */
    /* The GPU's memory limit in bytes (0: none), read only when a GPU opens;
     * NULL for no limit. The CLI reads it from the environment. */
    pg_status (*cuda_mem_limit)(double *bytes, pg_err *err);
    FILE *out;            /* the run's announcements; NULL for none */
    const pg_notes *notes;  /* warnings and progress; NULL drops them */
} run_sweep_request;

/* What a sweep run did, filled whatever the outcome. */
typedef struct run_sweep_result {
    int64_t run_id;       /* the run created or reopened; -1 when none was */
    int finished;         /* the run's row was marked complete, failed or interrupted */
    int signal;           /* the SIGINT or SIGTERM that stopped it; 0 for none */
    int n_layers;         /* the capture's layers; 0 when it did not load */
    sweep_stats stats;
    double backend_s;     /* starting the backend, beside the load */
    double load_s;        /* loading and validating the capture */
    double close_s;       /* unmapping the capture, closing the store and the GPU */
} run_sweep_result;

/* Runs the sweep of rq into rq->db_path: PG_OK when the run completed;
 * PG_ERR_USAGE for a refused resume (nothing in the store changed);
 * PG_ERR_INTERRUPTED when a signal stopped it (res->signal, the run marked
 * interrupted); any other code when it failed (res->run_id >= 0 and
 * res->finished: the run marked failed, its stored rows kept). */
pg_status run_lifecycle_sweep(run_sweep_request *rq, run_sweep_result *res, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif
