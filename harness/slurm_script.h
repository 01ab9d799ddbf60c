/*
 * slurm_script.h: the text of the Slurm scripts `precgate slurm` writes for
 * one sharded sweep or eval (issue #18), and nothing else: no files, no
 * scheduler, no output (harness/cmd_slurm.c writes and prints).
 *
 * Three scripts per job:
 *   - the array job: refuses to run (exit 1) once the job is merged
 *     (merge.done: new results need new scripts, a new job); task I of N runs `precgate run|eval … --shard I/N --job
 *     KEY --db LOCAL` with LOCAL on node-local disk (${TMPDIR:-/tmp}: SQLite's
 *     WAL and locks do not work over NFS), and only when that succeeded
 *     copies LOCAL into the results directory (a temporary name, then mv)
 *     and then writes the done marker shard-I.done;
 *   - the merge job (submitted --dependency=afterok:ARRAY): refuses, naming
 *     them, shards without a done marker; is a no-op that says so once
 *     merge.done exists; holds DB.merge.lock beside the database (mkdir,
 *     atomic; so one merge into DB at a time, of any job; the holder's job id
 *     and host inside) while it runs `precgate merge --into DB shard-0.db …
 *     shard-(N-1).db`; writes merge.done;
 *   - the resubmission script: sbatch --array=<the shards without a marker>
 *     of the array job, and a merge after them.
 */
#ifndef PG_SLURM_SCRIPT_H
#define PG_SLURM_SCRIPT_H

#include "base/status.h"
#include "shard.h"

/* Most run/eval options one job passes to each shard. */
#define SLURM_MAX_OPTIONS 128
/* Room for a job key with its NUL: any --job KEY run and eval take, and the
 * default (shard_job_key). */
#define SLURM_KEY_MAX SHARD_JOB_MAX

/* What each shard runs. */
typedef enum slurm_kind {
    SLURM_SWEEP,  /* precgate run --capture … */
    SLURM_EVAL,   /* precgate eval --traces … */
} slurm_kind;

/* One run/eval option passed to every shard: --NAME VALUE, or --NAME alone
 * when value is NULL (a flag). */
typedef struct slurm_option {
    const char *name;   /* without "--" */
    const char *value;  /* NULL for a flag */
} slurm_option;

/* One sharded job. Every path is absolute (the scripts run in another
 * directory, on another machine); none is quoted (the writers quote). */
typedef struct slurm_job {
    slurm_kind kind;
    int shards;               /* N >= 1: tasks 0 .. N-1 */
    const char *partition;    /* #SBATCH --partition, NULL: none */
    const char *time;         /* #SBATCH --time, NULL: none */
    const char *account;      /* #SBATCH --account, NULL: none */
    int gpus_per_shard;       /* #SBATCH --gres=gpu:G on the array job, 0: none */
    const char *precgate;     /* the binary the jobs run */
    const char *results;      /* results directory: shard DBs, markers, logs; one job's */
    const char *into;         /* the database the merge writes */
    const char *array_script, *merge_script, *resubmit_script;  /* the three files */
    char key[SLURM_KEY_MAX];  /* --job KEY of every shard */
    int n_options;
    slurm_option options[SLURM_MAX_OPTIONS];  /* run/eval options, in the given order */
} slurm_job;

/* The subcommand of precgate a kind runs ("run" or "eval"). */
const char *slurm_kind_command(slurm_kind kind);

/* s as one POSIX shell word: itself when it has only [A-Za-z0-9_./:=@%+,-]
 * and is not empty, else in single quotes (a ' written '\''). NULL when out
 * of memory; the caller frees. */
char *slurm_shell_quote(const char *s);

/* Sets j->key to shard_job_key of the shard count, the command line a shard
 * runs (kind, j->options sorted, values shell-quoted) and nonce, so that the
 * same options in another order give the same key, and another nonce another
 * key. `precgate slurm` gives each generation a nonce of its own (each is one
 * job: a new night's results must not be taken for an old night's, already
 * merged); NULL: none. PG_ERR_NOMEM. */
pg_status slurm_job_key(slurm_job *j, const char *nonce, pg_err *err);

/* Whether a results directory can be named in #SBATCH --output: 0, with
 * *why set, when it holds a '"', a '%' (Slurm expands %a, %j, …) or a
 * newline; else 1. */
int slurm_results_dir_ok(const char *dir, const char **why);

/* The array job script into *text (caller frees); PG_ERR_NOMEM. */
pg_status slurm_array_script(const slurm_job *j, char **text, pg_err *err);

/* The merge job script into *text (caller frees); PG_ERR_NOMEM. */
pg_status slurm_merge_script(const slurm_job *j, char **text, pg_err *err);

/* The resubmission script into *text (caller frees); PG_ERR_NOMEM. */
pg_status slurm_resubmit_script(const slurm_job *j, char **text, pg_err *err);

/* The lines that say how to submit the job and how to resubmit failed
 * shards, into *text (caller frees); PG_ERR_NOMEM. */
pg_status slurm_submit_hint(const slurm_job *j, char **text, pg_err *err);

#endif /* PG_SLURM_SCRIPT_H */
