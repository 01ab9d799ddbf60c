/* slurm_script.c: the text of the array, merge and resubmission scripts of
 * one sharded job (see slurm_script.h). Each writer prints into a memory
 * stream; every path and option value goes through slurm_shell_quote. */
#include "slurm_script.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard.h"

/* Characters a shell word may hold unquoted. */
#define SLURM_SAFE_CHARS                                                  \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-"

const char *slurm_kind_command(slurm_kind kind)
{
    return kind == SLURM_EVAL ? "eval" : "run";
}

/* "sweep" or "eval": the kind's name in the scripts' comments and messages. */
static const char *kind_name(slurm_kind kind)
{
    return kind == SLURM_EVAL ? "eval" : "sweep";
}

char *slurm_shell_quote(const char *s)
{
    const size_t n = strlen(s);
    if (n > 0 && strspn(s, SLURM_SAFE_CHARS) == n) return strdup(s);
    size_t quotes = 0;
    for (const char *p = s; *p != '\0'; p++) quotes += *p == '\'';
    /* 'x' plus three more bytes for each ' ('\''), and the NUL. */
    char *q = malloc(n + 3 * quotes + 3);
    if (q == NULL) return NULL;
    char *o = q;
    *o++ = '\'';
    for (const char *p = s; *p != '\0'; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return q;
}

/* qsort order of options: by name, then value (a flag first). */
static int option_cmp(const void *a, const void *b)
{
    const slurm_option *x = a, *y = b;
    const int c = strcmp(x->name, y->name);
    if (c != 0) return c;
    if (x->value == NULL || y->value == NULL) return (x->value != NULL) - (y->value != NULL);
    return strcmp(x->value, y->value);
}

pg_status slurm_job_key(slurm_job *j, const char *nonce, pg_err *err)
{
    slurm_option sorted[SLURM_MAX_OPTIONS];
    memcpy(sorted, j->options, (size_t)j->n_options * sizeof *sorted);
    qsort(sorted, (size_t)j->n_options, sizeof *sorted, option_cmp);
    /* The command line a shard runs, its options sorted and every value one
     * shell word: two lists give one text only when they are the same. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int nomem = f == NULL;
    if (f != NULL) fprintf(f, "precgate %s", slurm_kind_command(j->kind));
    for (int i = 0; f != NULL && i < j->n_options; i++) {
        fprintf(f, " --%s", sorted[i].name);
        if (sorted[i].value == NULL) continue;
        char *q = slurm_shell_quote(sorted[i].value);
        if (q == NULL) nomem = 1;
        else fprintf(f, " %s", q);
        free(q);
    }
    if (f != NULL && nonce != NULL) fprintf(f, "\n# generation %s", nonce);
    if (f != NULL && fclose(f) != 0) nomem = 1;
    if (!nomem) shard_job_key(text, j->shards, j->key);
    free(text);
    return nomem ? pg_fail(err, PG_ERR_NOMEM, "slurm: out of memory") : PG_OK;
}

int slurm_results_dir_ok(const char *dir, const char **why)
{
    if (strchr(dir, '"') != NULL) *why = "a '\"' cannot be written in #SBATCH --output";
    else if (strchr(dir, '%') != NULL) *why = "Slurm expands '%' in #SBATCH --output";
    else if (strchr(dir, '\n') != NULL) *why = "a newline cannot be written in #SBATCH --output";
    else return 1;
    return 0;
}

/* A memory stream a script is written into; nomem once a quote failed. */
typedef struct script {
    FILE *f;
    char *text;
    size_t len;
    int nomem;
} script;

/* Opens s and writes the script's first lines: the interpreter, then a
 * comment naming j and saying what the script does (what: comment lines,
 * each "# …\n"). PG_ERR_NOMEM. */
static pg_status script_open(script *s, const slurm_job *j, const char *what, pg_err *err)
{
    *s = (script){0};
    s->f = open_memstream(&s->text, &s->len);
    if (s->f == NULL) return pg_fail(err, PG_ERR_NOMEM, "slurm: out of memory");
    fprintf(s->f, "#!/bin/bash\n# precgate slurm %s: job %s, %d shards (written by `precgate "
                  "slurm`).\n%s", kind_name(j->kind), j->key, j->shards, what);
    return PG_OK;
}

/* Closes s and hands its text to *text, or frees it and fails PG_ERR_NOMEM. */
static pg_status script_close(script *s, char **text, pg_err *err)
{
    const int bad = fclose(s->f) != 0 || s->nomem;
    if (bad) {
        free(s->text);
        *text = NULL;
        return pg_fail(err, PG_ERR_NOMEM, "slurm: out of memory");
    }
    *text = s->text;
    return PG_OK;
}

/* Writes word to s as one shell word. */
static void put_word(script *s, const char *word)
{
    char *q = slurm_shell_quote(word);
    if (q == NULL) {
        s->nomem = 1;
        return;
    }
    fputs(q, s->f);
    free(q);
}

/* Writes `NAME=WORD\n`, a shell variable set to word. */
static void put_var(script *s, const char *name, const char *word)
{
    fprintf(s->f, "%s=", name);
    put_word(s, word);
    fputc('\n', s->f);
}

/* The #SBATCH lines every script of j shares (the array adds its own):
 * job name (precgate-PREFIXKEY), output file in the results directory,
 * partition, time, account. */
static void put_directives(script *s, const slurm_job *j, const char *prefix, const char *output)
{
    fprintf(s->f, "#SBATCH --job-name=precgate-%s%s\n", prefix, j->key);
    fprintf(s->f, "#SBATCH --output=\"%s/%s\"\n", j->results, output);
    if (j->partition != NULL) fprintf(s->f, "#SBATCH --partition=%s\n", j->partition);
    if (j->time != NULL) fprintf(s->f, "#SBATCH --time=%s\n", j->time);
    if (j->account != NULL) fprintf(s->f, "#SBATCH --account=%s\n", j->account);
}

/* The submit line: the array, then the merge after it. */
static void put_submit_line(script *s, const slurm_job *j)
{
    fputs("jid=$(sbatch --parsable ", s->f);
    put_word(s, j->array_script);
    fputs(") && sbatch --dependency=afterok:$jid ", s->f);
    put_word(s, j->merge_script);
    fputc('\n', s->f);
}

/* The variables every script of j sets first. */
static void put_common_vars(script *s, const slurm_job *j)
{
    put_var(s, "precgate", j->precgate);
    put_var(s, "results", j->results);
    fprintf(s->f, "job=%s\nshards=%d\n", j->key, j->shards);
}

pg_status slurm_array_script(const slurm_job *j, char **text, pg_err *err)
{
    script s;
    if (script_open(&s, j, "# Task I of this array job runs shard I. Submit it with the merge after "
                           "it:\n#   ", err) != PG_OK)
        return err->code;
    FILE *f = s.f;
    put_submit_line(&s, j);
    fprintf(f, "#SBATCH --array=0-%d\n", j->shards - 1);
    put_directives(&s, j, "", "shard-%a.%A.out");
    if (j->gpus_per_shard > 0) fprintf(f, "#SBATCH --gres=gpu:%d\n", j->gpus_per_shard);
    fputs("set -euo pipefail\n\n", f);
    put_common_vars(&s, j);
    put_var(&s, "into", j->into);
    fprintf(f, ": \"${SLURM_ARRAY_TASK_ID:?this is a Slurm array job: submit it with sbatch}\"\n"
               "shard=$SLURM_ARRAY_TASK_ID\n"
               "# A merged job is over: a new run under its key would never reach the\n"
               "# database (its merge finds merge.done and stops).\n"
               "if [ -e \"$results/merge.done\" ]; then\n"
               "  echo \"precgate slurm: job $job is already merged into $into; a new run needs"
               " new scripts: precgate slurm %s … ($results/merge.done)\" >&2\n"
               "  exit 1\n"
               "fi\n",
            kind_name(j->kind));
    fputs("# The shard's database is on node-local disk: SQLite's WAL and locks do not\n"
          "# work over NFS. One name per job, array and task. TMPDIR comes from the\n"
          "# submit host and may not exist here: then /tmp, for SQLite's files too.\n"
          "tmp=${TMPDIR:-/tmp}\n"
          "if [ ! -d \"$tmp\" ] || [ ! -w \"$tmp\" ]; then\n"
          "  echo \"precgate slurm: TMPDIR $tmp is not a writable directory on $(hostname);"
          " using /tmp\" >&2\n"
          "  tmp=/tmp\n"
          "  export TMPDIR=/tmp\n"
          "fi\n"
          "db=\"$tmp/precgate-$job-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}-$shard.db\"\n"
          "part=\"$results/.shard-$shard.db.part-$SLURM_JOB_ID\"\n"
          "clean() { rm -f -- \"$db\" \"$db-wal\" \"$db-shm\" \"$db-journal\" \"$part\"; }\n"
          "trap clean EXIT\n"
          "trap 'exit 143' TERM\n"
          "trap 'exit 130' INT\n"
          "clean  # a stale database of an earlier attempt\n"
          "mkdir -p -- \"$results\"\n"
          "# An earlier attempt's marker and copy go before this one starts: a shard\n"
          "# that fails now must not be taken for done.\n"
          "rm -f -- \"$results/shard-$shard.done\" \"$results/shard-$shard.db\"\n\n",
          f);
    fprintf(f, "\"$precgate\" %s --no-progress \\\n", slurm_kind_command(j->kind));
    for (int i = 0; i < j->n_options; i++) {
        fprintf(f, "  --%s", j->options[i].name);
        if (j->options[i].value != NULL) {
            fputc(' ', f);
            put_word(&s, j->options[i].value);
        }
        fputs(" \\\n", f);
    }
    fprintf(f, "  --shard \"$SLURM_ARRAY_TASK_ID/%d\" --job \"$job\" --db \"$db\"\n\n", j->shards);
    fputs("# Only a shard that succeeded gets here. Its database is copied under a\n"
          "# temporary name and renamed (the results directory never holds a partial\n"
          "# one), and only then marked done.\n"
          "cp -- \"$db\" \"$part\"\n"
          "mv -f -- \"$part\" \"$results/shard-$shard.db\"\n"
          "touch -- \"$results/shard-$shard.done\"\n"
          "echo \"precgate slurm: shard $shard of $shards of job $job done: "
          "$results/shard-$shard.db\"\n",
          f);
    return script_close(&s, text, err);
}

pg_status slurm_merge_script(const slurm_job *j, char **text, pg_err *err)
{
    script s;
    if (script_open(&s, j, "# Merges the shards into one run. Submit it after the array job:\n#   ",
                    err) != PG_OK)
        return err->code;
    FILE *f = s.f;
    put_submit_line(&s, j);
    put_directives(&s, j, "merge-", "merge.%j.out");
    fputs("set -euo pipefail\n\n", f);
    put_common_vars(&s, j);
    put_var(&s, "into", j->into);
    put_var(&s, "resubmit", j->resubmit_script);
    fputs("\n"
          "already_merged() {\n"
          "  [ -e \"$results/merge.done\" ] || return 1\n"
          "  echo \"precgate slurm: job $job is already merged into $into ($results/merge.done);"
          " nothing to do\"\n"
          "}\n"
          "already_merged && exit 0\n"
          "missing=()\n"
          "for ((i = 0; i < shards; i++)); do\n"
          "  [ -e \"$results/shard-$i.done\" ] || missing+=(\"$i\")\n"
          "done\n"
          "if [ ${#missing[@]} -gt 0 ]; then\n"
          "  echo \"precgate slurm: shards ${missing[*]} of $shards of job $job have no done"
          " marker in $results: resubmit them with $resubmit\" >&2\n"
          "  exit 1\n"
          "fi\n"
          "# One merge into $into at a time, of this job or any other: the lock is\n"
          "# beside the database. mkdir is atomic, so a second merge stops here, and one\n"
          "# that took the lock after the first finished finds merge.done.\n"
          "lock=\"$into.merge.lock\"\n"
          "if ! mkdir -- \"$lock\" 2>/dev/null; then\n"
          "  [ -d \"$lock\" ] || mkdir -- \"$lock\"  # not held: mkdir says why it cannot\n"
          "  hjob=unknown hhost=unknown\n"
          "  read -r hjob hhost 2>/dev/null <\"$lock/holder\" || true\n"
          "  echo \"precgate slurm: $lock is held by Slurm job $hjob on $hhost: another merge"
          " into $into is running. If job $hjob is no longer running (squeue -j $hjob), the"
          " lock is stale: rm -r -- '$lock', then submit this script again\" >&2\n"
          "  exit 1\n"
          "fi\n"
          "trap 'rm -f -- \"$lock/holder\"; rmdir -- \"$lock\"' EXIT\n"
          "trap 'exit 143' TERM\n"
          "trap 'exit 130' INT\n"
          "echo \"${SLURM_JOB_ID:-none} $(hostname)\" >\"$lock/holder\"\n"
          "already_merged && exit 0\n"
          "shard_dbs=()\n"
          "for ((i = 0; i < shards; i++)); do shard_dbs+=(\"$results/shard-$i.db\"); done\n"
          "\"$precgate\" merge --into \"$into\" \"${shard_dbs[@]}\"\n"
          "date -u +%FT%TZ >\"$results/merge.done.part\"\n"
          "mv -f -- \"$results/merge.done.part\" \"$results/merge.done\"\n"
          "echo \"precgate slurm: job $job merged into $into\"\n",
          f);
    return script_close(&s, text, err);
}

pg_status slurm_resubmit_script(const slurm_job *j, char **text, pg_err *err)
{
    script s;
    if (script_open(&s, j, "# Resubmits the shards that have no done marker, and a merge after them.\n"
                           "# Run it once the array job has left the queue: precgate never asks\n"
                           "# the scheduler what runs.\n", err) != PG_OK)
        return err->code;
    FILE *f = s.f;
    fputs("set -euo pipefail\n\n", f);
    put_var(&s, "results", j->results);
    fprintf(f, "job=%s\nshards=%d\n", j->key, j->shards);
    put_var(&s, "array_script", j->array_script);
    put_var(&s, "merge_script", j->merge_script);
    fputs("\n"
          "if [ -e \"$results/merge.done\" ]; then\n"
          "  echo \"precgate slurm: job $job is already merged ($results/merge.done); nothing to"
          " resubmit\"\n"
          "  exit 0\n"
          "fi\n"
          "todo=()\n"
          "for ((i = 0; i < shards; i++)); do\n"
          "  [ -e \"$results/shard-$i.done\" ] || todo+=(\"$i\")\n"
          "done\n"
          "if [ ${#todo[@]} -eq 0 ]; then\n"
          "  echo \"precgate slurm: all $shards shards of job $job are done; nothing to resubmit"
          " (the merge has not finished: sbatch $merge_script)\"\n"
          "  exit 0\n"
          "fi\n"
          "list=$(IFS=,; echo \"${todo[*]}\")\n"
          "jid=$(sbatch --parsable --array=\"$list\" \"$array_script\")\n"
          "jid=${jid%%;*}\n"
          "mid=$(sbatch --parsable --dependency=afterok:\"$jid\" \"$merge_script\")\n"
          "echo \"precgate slurm: resubmitted shards $list of $shards of job $job as array job"
          " $jid, and merge job ${mid%%;*} after it\"\n",
          f);
    return script_close(&s, text, err);
}

pg_status slurm_submit_hint(const slurm_job *j, char **text, pg_err *err)
{
    script s = {0};
    s.f = open_memstream(&s.text, &s.len);
    if (s.f == NULL) return pg_fail(err, PG_ERR_NOMEM, "slurm: out of memory");
    fprintf(s.f, "submit the %d shards and the merge after them:\n  ", j->shards);
    put_submit_line(&s, j);
    fputs("a shard that failed leaves no shard-I.done in ", s.f);
    put_word(&s, j->results);
    fputs("; once the array job has left the queue, resubmit those shards and a new merge "
          "with:\n  ",
          s.f);
    put_word(&s, j->resubmit_script);
    fputc('\n', s.f);
    return script_close(&s, text, err);
}
