/*
 * lifecycle_util.h: the use cases called directly (harness/run_lifecycle.h,
 * eval_lifecycle.h, gate_lifecycle.h) and the synthetic capture written
 * without the binary, for tests whose point is what a sweep, an eval or a
 * gate decides and stores, not the CLI that parses argv into the request:
 * one helper per use case, filling the request as the CLI does by default.
 */
#ifndef PG_LIFECYCLE_UTIL_H
#define PG_LIFECYCLE_UTIL_H

#include <stdint.h>

#include "base/status.h"
#include "harness/eval_lifecycle.h"
#include "harness/gate_lifecycle.h"
#include "harness/regress.h"  /* GATE_EXIT_*, what lu_gate_exit returns */
#include "harness/run_lifecycle.h"

/* The synthetic capture to write (`precgate synth`'s options); 0 or NULL
 * leaves the preset's value (context: 0). */
typedef struct lu_synth_opts {
    const char *preset;  /* NULL: gpt-oss-120b, the CLI's default */
    int layers, seqs, seq_len, context;
    int scales;          /* write calibrated q/k/v_scale metadata */
} lu_synth_opts;

/* Writes the capture o describes to path; aborts the test on failure. */
void lu_synth(const char *path, lu_synth_opts o);

/* What a sweep is given beyond the capture and the database (`precgate
 * run`'s options); zero or NULL: not given. */
typedef struct lu_sweep_opts {
    const char *label;
    const char *variants;    /* --variants LIST */
    const char *scales;      /* --scales POLICY */
    const char *backend;     /* --backend NAME; NULL: cpu for a new run, the run's on resume */
    long resume;             /* --resume RUN; 0: a new run */
    int force;               /* --force */
    long threads;            /* --threads N; 0: every CPU */
    unsigned long long seed; /* --seed N, when given_seed */
    int given_seed;
    int attribute;           /* --attribute */
} lu_sweep_opts;

/* The sweep lifecycle on the capture cap into db_path (o NULL: no option given):
 * its status, *res, and what it announced and warned ("warning: " lines)
 * into *said (malloc'd; said NULL: dropped). */
pg_status lu_sweep(const char *cap, const char *db_path, const lu_sweep_opts *o,
                   run_sweep_result *res, char **said, pg_err *err);

/* lu_sweep that must complete (what exit status 0 of `precgate run` says);
 * returns the run's id. */
int64_t lu_sweep_ok(const char *cap, const char *db_path, const lu_sweep_opts *o);

/* Fills rq as `precgate eval` does before reading its options: a new run
 * of traces into db_path with the CLI's defaults (one sample, effort
 * medium, 64 requests in flight a server, a 600 s ready deadline, the
 * default sampling with token ids, the default extractor), no endpoint
 * and no replay yet: the test adds them and changes what it gives. */
void lu_eval_request(eval_lifecycle_request *rq, const char *traces, const char *db_path);

/* The eval lifecycle on rq (its out and errs set here): its status, *res,
 * and the run's narrative and score tables, then what errs got, into *said
 * (malloc'd; said NULL: dropped). */
pg_status lu_eval(eval_lifecycle_request *rq, eval_lifecycle_result *res, char **said,
                  pg_err *err);

/* What a replay is given beyond the traces and the database (`precgate
 * eval --replay`'s options); zero or NULL: not given. */
typedef struct lu_eval_opts {
    const char *label;
    long limit;    /* --limit N */
    long resume;   /* the run to continue (the CLI refuses it with --replay); 0: a new run */
} lu_eval_opts;

/* The eval lifecycle replaying the recorded completions of traces into
 * db_path (o NULL: no option given): its status, *res, and the run's
 * narrative and score tables, then what errs got, into *said (malloc'd;
 * said NULL: dropped). */
pg_status lu_replay(const char *traces, const char *db_path, const lu_eval_opts *o,
                    eval_lifecycle_result *res, char **said, pg_err *err);

/* lu_replay that must complete with every sample graded (what exit status
 * 0 of `precgate eval` says); returns the run's id. */
int64_t lu_replay_ok(const char *traces, const char *db_path, const lu_eval_opts *o, char **said);

/* What a gate is given beyond the run and the database (`precgate gate`'s
 * options); zero or NULL: not given. */
typedef struct lu_gate_opts {
    const char *baseline;  /* --baseline B */
    const char *config;    /* --config FILE (loaded as the CLI loads it) */
    const char *junit;     /* --junit FILE */
    int require_baseline;  /* --require-baseline */
} lu_gate_opts;

/* The gate lifecycle on run in db_path (o NULL: no option given): its
 * status and *res, its report into *report (malloc'd; report NULL:
 * dropped). A config that does not load is its status, nothing gated. */
pg_status lu_gate(const char *db_path, long run, const lu_gate_opts *o, gate_result *res,
                  char **report, pg_err *err);

/* lu_gate that must reach its verdicts (PG_OK); returns res.exit_status
 * (GATE_EXIT_PASS, _REGRESSION or _ERROR), the report into *report. */
int lu_gate_exit(const char *db_path, long run, const lu_gate_opts *o, char **report);

#endif
