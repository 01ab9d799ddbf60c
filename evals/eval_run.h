/*
 * eval_run.h: an end-task eval run: grading recorded completions (replay) or
 * asking one or several OpenAI-compatible servers per precision mode (live:
 * openai_client.h routes and keeps each server's health), storing the
 * samples as they complete (live: in batches, on a writer thread), then scoring every (mode, effort) and every pair of
 * modes into eval_scores / eval_pairs and printing the summary.
 */
#ifndef PG_EVAL_RUN_H
#define PG_EVAL_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "db/eval_writer.h"
#include "db/store.h"
#include "base/note.h"
#include "base/status.h"
#include "grade.h"
#include "openai_client.h"
#include "traces.h"

/* Most modes and efforts one run takes. */
#define EVAL_MAX_MODES 8
#define EVAL_MAX_EFFORTS 8
/* Most servers (--endpoint) one run takes over all its modes: four per mode
 * at the most modes. Each costs up to its max_in_flight connections and a
 * readiness probe at start (one curl multi drives them all). */
#define EVAL_MAX_SERVERS (4 * EVAL_MAX_MODES)

/* How to run. Strings are borrowed. */
typedef struct eval_run_options {
    const char *eval_name;        /* eval column: e.g. the traces' file name */
    grade_extractor extractor;
    /* live only: */
    int n_endpoints;                     /* servers; a mode may repeat */
    const char *modes[EVAL_MAX_SERVERS]; /* precision mode served by ... */
    const char *urls[EVAL_MAX_SERVERS];  /* ... this base URL */
    int n_efforts;
    const char *efforts[EVAL_MAX_EFFORTS];
    int samples;                  /* K */
    const char *api_key_env;      /* name of the variable holding the key, or NULL */
    const char *api_key;          /* its value, read by the CLI (NULL: unset) */
    double ready_deadline_s;      /* wait for /health or /v1/models this long */
    oa_options client;
    oa_sampling sampling;         /* reasoning_effort and seed are set per request */
    int64_t seed_base;            /* sample s of problem id gets eval_sample_seed(seed_base, id, s) */
    const pg_notes *notes;        /* where progress goes (NULL: nowhere) */
    /* live only, may be NULL: called once by eval_live after every server
     * that has work has answered and named its model, and before any
     * request is built or sent (also when nothing is missing). models[i] is
     * the model server i serves for modes[i] (every server of a mode serves
     * the same one, eval_live checks), NULL for a mode with nothing left to
     * send (its servers are not contacted). Anything but PG_OK ends eval_live
     * with that status and nothing sent: the resume checks (cmd_eval.c). */
    pg_status (*before_send)(void *ctx, const char *const *models, pg_err *err);
    void *before_send_ctx;
    eval_writer_options writer;   /* live: how samples are batched (zero: defaults) */
} eval_run_options;

/* What happened to the samples of one call. */
typedef struct eval_run_counts {
    int64_t stored, ok, truncated, errors, skipped;  /* skipped: already stored (resume) */
} eval_run_counts;

/* The seed sent for sample `sample` of problem `id`: the same in every mode
 * (paired samples) and independent of the problem's position in the file,
 * so a resumed run with reordered traces sends the same seeds. Non-negative,
 * below 2^31 (some servers take a 32-bit seed). */
int64_t eval_sample_seed(int64_t seed_base, const char *id, int sample);

/* Grades every recorded completion of t into run_id (no server), in one
 * transaction. With o->client.stop set before or during it, nothing is
 * stored and PG_ERR_INTERRUPTED is returned. */
pg_status eval_replay(pg_store *s, int64_t run_id, const eval_traces *t,
                      const eval_run_options *o, eval_run_counts *c, pg_err *err);

/* Sends every (mode, effort, problem, sample) not yet stored ok/truncated in
 * run_id to its mode's servers (each sample records the one that answered).
 * Every server of a mode with work must be ready within ready_deadline_s
 * (one deadline shared by all) and serve the same model, else PG_ERR_HTTP /
 * PG_ERR_USAGE before anything is sent. Each finished sample goes to a writer thread
 * (db/eval_writer.h) that commits them in batches while the network thread
 * goes on, moving the run's heartbeat with each committed batch; the writer
 * is flushed before this returns, also when the run stops early, and its
 * failure (disk full, a lock not granted) fails the run. s must not be used
 * by another thread meanwhile. With o->client.stop set (interrupt_flag()), a
 * stop returns PG_ERR_INTERRUPTED: every sample received before it is
 * stored, the requests in flight are dropped unstored (a resume sends them
 * again). */
pg_status eval_live(pg_store *s, int64_t run_id, const eval_traces *t,
                    const eval_run_options *o, eval_run_counts *c, pg_err *err);

/* Scores every (mode, effort) stored for (run_id, eval) and every pair of
 * modes per effort (each mode against bf16 when present, A minus B), stores
 * them, and prints the summary to out (with the samples each server
 * answered when a mode had several servers). */
pg_status eval_score_all(pg_store *s, int64_t run_id, const char *eval, FILE *out, pg_err *err);

#endif /* PG_EVAL_RUN_H */
