/*
 * eval_lifecycle.h: an eval run's lifecycle, the use case behind `precgate
 * eval`: load the traces (keeping the first --limit problems and a shard's
 * part), create the run or reopen one to resume (after checking that what
 * defines the eval is the run's), send the problems to each mode's servers
 * or grade the recorded completions, score every mode and effort, finish the
 * run as complete, incomplete, failed or interrupted, and write the results
 * file.
 *
 * It takes a request struct and fills a result. It writes the run's
 * narrative (the run id as soon as the run row exists, the score tables, how
 * the run ended) to the request's out and errs; the CLI
 * (harness/cli/cmd_eval.c) parses argv into the request, installs the signal
 * handlers and the progress bar, calls eval_lifecycle_run, and turns its
 * status into the exit status. Tests call it directly.
 */
#ifndef PG_EVAL_LIFECYCLE_H
#define PG_EVAL_LIFECYCLE_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "evals/eval_run.h"
#include "harness/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for the default eval name (the traces' file name), its NUL included. */
#define EVAL_LIFECYCLE_NAME_MAX 256

/* An eval run to make or continue. */
typedef struct eval_lifecycle_request {
    const char *traces;   /* JSONL problems (required) */
    const char *db_path;  /* the database (the CLI resolves --db, $PRECGATE_DB) */
    const char *label;    /* stored with a new run; NULL for none */
    const char *output;   /* the results file (JSON) to write once finished; NULL for none */
    int replay;           /* grade the recorded completions (no server) */
    int force;            /* resume a run still marked running (another host) */
    long resume;          /* the run to continue; -1 for a new run */
    long limit;           /* only the first limit problems; 0 for every one */
    /* The client, the grid and the sampling. o.eval_name NULL: the traces'
     * file name without directory and extension. o.client.stop and o.notes
     * are the caller's (the CLI: the signal flag, the progress bar);
     * o.before_send is the lifecycle's own. */
    eval_run_options o;
    shard_spec shard;     /* count 0 for no shard */
    const char *job;      /* the sharded job's key; NULL for the default */
    char job_buf[SHARD_JOB_MAX];             /* the default key */
    char name_buf[EVAL_LIFECYCLE_NAME_MAX];  /* the default eval name */
    FILE *out;            /* the run's narrative and scores; required */
    FILE *errs;           /* how a stopped or failed run was left; required */
} eval_lifecycle_request;

/* What an eval run did, filled whatever the outcome. */
typedef struct eval_lifecycle_result {
    int64_t run_id;        /* the run created or reopened; -1 when none was */
    const char *status;    /* how the run was marked ("complete", "incomplete",
                            * "failed", "interrupted"); NULL when it was not */
    eval_run_counts counts;
    int64_t stored_errors; /* the run's samples without a graded answer */
} eval_lifecycle_result;

/* Runs the eval of rq into rq->db_path: PG_OK when the run finished, with
 * res->stored_errors > 0 when it is incomplete (samples that failed after
 * every retry, or recorded completions with no answer); PG_ERR_USAGE for a
 * refused resume (the run left as it was, nothing sent); PG_ERR_INTERRUPTED
 * when a signal stopped it (marked interrupted, not scored); any other code
 * when it failed (a new run marked failed, a resumed one incomplete) or the
 * results file could not be written (the stored run stays as finished). */
pg_status eval_lifecycle_run(eval_lifecycle_request *rq, eval_lifecycle_result *res, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_EVAL_LIFECYCLE_H */
