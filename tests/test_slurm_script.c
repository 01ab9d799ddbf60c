/* test_slurm_script.c: `precgate slurm`'s scripts (harness/slurm_script.h)
 * and command (harness/cmd_slurm.c), without a scheduler: the text of the
 * scripts, their quoting through a real bash, and what the array, merge and
 * resubmission scripts do when run by hand with a stub precgate and a stub
 * sbatch. tests/slurm_e2e.sh runs them on a real Slurm. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/slurm_script.h"
#include "testutil.h"

TestSuite(slurm_script, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 60);

/* A path with a space and a single quote: every script must carry it whole. */
#define ODD_NAME "my cap's.safetensors"

/* A 4-shard sweep job with fixed paths (nothing is written). */
static slurm_job sweep_job(void)
{
    slurm_job j = {.kind = SLURM_SWEEP, .shards = 4, .precgate = "/opt/pg/precgate",
                   .results = "/shared/r", .into = "/shared/p.db",
                   .array_script = "/shared/job.sbatch",
                   .merge_script = "/shared/job.merge.sbatch",
                   .resubmit_script = "/shared/job.resubmit.sh"};
    j.options[j.n_options++] = (slurm_option){"capture", "/data/" ODD_NAME};
    j.options[j.n_options++] = (slurm_option){"variants", "bf16,fp8kv"};
    j.options[j.n_options++] = (slurm_option){"check-spec", NULL};
    cr_assert_eq(slurm_job_key(&j, NULL, NULL), PG_OK);
    return j;
}

/* The text of one script of j. */
static char *script_of(pg_status (*writer)(const slurm_job *, char **, pg_err *),
                       const slurm_job *j)
{
    char *text = NULL;
    pg_err err = {0};
    cr_assert_eq(writer(j, &text, &err), PG_OK, "%s", err.msg);
    return text;
}

/* Runs cmd in sh, stdout and stderr into *out (malloc'd); its exit status. */
static int sh(const char *cmd, char **out)
{
    char *full = malloc(strlen(cmd) + 16);
    sprintf(full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p);
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) len += got;
    buf[len] = '\0';
    const int st = pclose(p);
    free(full);
    if (out != NULL) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(slurm_script, shell_quote_survives_bash)
{
    const char *words[] = {"plain/path-1.db", "a b", "it's", "'", "", "$HOME `x` \"q\"",
                           "/data/" ODD_NAME};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        char *q = slurm_shell_quote(words[i]);
        cr_assert_not_null(q);
        char cmd[512], *out = NULL;
        snprintf(cmd, sizeof cmd, "printf '%%s' %s", q);
        cr_assert_eq(sh(cmd, &out), 0);
        cr_assert_str_eq(out, words[i], "quoted as %s", q);
        free(out);
        free(q);
    }
    char *plain = slurm_shell_quote("plain/path-1.db");
    cr_assert_str_eq(plain, "plain/path-1.db", "a safe word is left as it is");
    free(plain);
    char *odd = slurm_shell_quote("a b'c");
    cr_assert_str_eq(odd, "'a b'\\''c'");
    free(odd);
}

Test(slurm_script, array_script_runs_shard_i_of_n_on_local_disk)
{
    slurm_job j = sweep_job();
    char *s = script_of(slurm_array_script, &j);
    cr_assert(strncmp(s, "#!/bin/bash\n", 12) == 0, "%s", s);
    cr_assert(strstr(s, "\n#SBATCH --array=0-3\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\n#SBATCH --output=\"/shared/r/shard-%a.%A.out\"\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\nset -euo pipefail\n") != NULL, "%s", s);
    cr_assert(strstr(s, "--shard \"$SLURM_ARRAY_TASK_ID/4\" --job \"$job\" --db \"$db\"") != NULL,
              "%s", s);
    char line[SLURM_KEY_MAX + 16];
    snprintf(line, sizeof line, "\njob=%s\n", j.key);
    cr_assert(strstr(s, line) != NULL, "%s", s);
    cr_assert(strstr(s, "\ntmp=${TMPDIR:-/tmp}\n") != NULL, "%s", s);
    /* A merged job's array refuses to run before it touches anything. */
    cr_assert(strstr(s, "\ninto=/shared/p.db\n") != NULL, "%s", s);
    const char *merged = strstr(s, "\nif [ -e \"$results/merge.done\" ]; then\n"
                                   "  echo \"precgate slurm: job $job is already merged into $into; "
                                   "a new run needs new scripts: precgate slurm sweep … "
                                   "($results/merge.done)\" >&2\n  exit 1\nfi\n");
    cr_assert(merged != NULL && merged < strstr(s, "\nclean "), "%s", s);
    cr_assert(strstr(s, "\nif [ ! -d \"$tmp\" ] || [ ! -w \"$tmp\" ]; then\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\ndb=\"$tmp/precgate-$job-") != NULL, "%s", s);
    cr_assert(strstr(s, "\"$precgate\" run --no-progress") != NULL, "%s", s);
    cr_assert(strstr(s, "--capture '/data/my cap'\\''s.safetensors'") != NULL, "%s", s);
    cr_assert(strstr(s, "--check-spec \\\n") != NULL, "a flag has no value: %s", s);
    /* The database is copied whole (temporary name, then mv) after the run,
     * and marked done only after that. */
    const char *run = strstr(s, "\"$precgate\" run");
    const char *cp = strstr(s, "cp -- \"$db\" \"$part\"");
    const char *mv = strstr(s, "mv -f -- \"$part\" \"$results/shard-$shard.db\"");
    const char *done = strstr(s, "touch -- \"$results/shard-$shard.done\"");
    cr_assert(run != NULL && cp != NULL && mv != NULL && done != NULL, "%s", s);
    cr_assert(run < cp && cp < mv && mv < done, "run, copy, rename, mark: %s", s);
    /* An earlier attempt's marker and copy are removed before the run. */
    const char *stale = strstr(s, "\nrm -f -- \"$results/shard-$shard.done\" "
                                  "\"$results/shard-$shard.db\"\n");
    cr_assert(stale != NULL && stale < run, "%s", s);
    free(s);
    /* A 1-shard job is an array of one. */
    j.shards = 1;
    s = script_of(slurm_array_script, &j);
    cr_assert(strstr(s, "\n#SBATCH --array=0-0\n") != NULL, "%s", s);
    cr_assert(strstr(s, "--shard \"$SLURM_ARRAY_TASK_ID/1\"") != NULL, "%s", s);
    free(s);
}

Test(slurm_script, optional_directives_only_when_given)
{
    slurm_job j = sweep_job();
    char *s = script_of(slurm_array_script, &j);
    char *m = script_of(slurm_merge_script, &j);
    const char *optional[] = {"#SBATCH --partition", "#SBATCH --time", "#SBATCH --account",
                              "#SBATCH --gres"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) {
        cr_assert(strstr(s, optional[i]) == NULL, "%s given by nobody: %s", optional[i], s);
        cr_assert(strstr(m, optional[i]) == NULL, "%s given by nobody: %s", optional[i], m);
    }
    free(s);
    free(m);
    j.partition = "gpu";
    j.time = "4:00:00";
    j.account = "llm";
    j.gpus_per_shard = 2;
    s = script_of(slurm_array_script, &j);
    m = script_of(slurm_merge_script, &j);
    cr_assert(strstr(s, "\n#SBATCH --partition=gpu\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\n#SBATCH --time=4:00:00\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\n#SBATCH --account=llm\n") != NULL, "%s", s);
    cr_assert(strstr(s, "\n#SBATCH --gres=gpu:2\n") != NULL, "%s", s);
    cr_assert(strstr(m, "\n#SBATCH --partition=gpu\n") != NULL, "%s", m);
    cr_assert(strstr(m, "#SBATCH --gres") == NULL, "the merge needs no GPU: %s", m);
    /* sbatch reads directives only above the first command. */
    cr_assert(strstr(s, "#SBATCH --gres") < strstr(s, "\nset -euo"), "%s", s);
    cr_assert(strstr(m, "#SBATCH --account") < strstr(m, "\nset -euo"), "%s", m);
    free(s);
    free(m);
}

Test(slurm_script, job_key_ignores_option_order)
{
    slurm_job a = sweep_job(), b = sweep_job();
    b.options[0] = a.options[2];
    b.options[2] = a.options[0];
    cr_assert_eq(slurm_job_key(&b, NULL, NULL), PG_OK);
    cr_assert_str_eq(a.key, b.key);
    cr_assert(a.key[0] == 'j' && strlen(a.key) == 33, "shard_job_key's form: %s", a.key);
    slurm_job c = sweep_job();
    c.shards = 3;
    cr_assert_eq(slurm_job_key(&c, NULL, NULL), PG_OK);
    cr_assert_str_neq(a.key, c.key, "another shard count is another job");
    slurm_job d = sweep_job();
    d.options[1].value = "bf16";
    cr_assert_eq(slurm_job_key(&d, NULL, NULL), PG_OK);
    cr_assert_str_neq(a.key, d.key, "other variants are another job");
    /* Each generation's nonce makes it a job of its own. */
    slurm_job e = sweep_job(), f = sweep_job();
    cr_assert_eq(slurm_job_key(&e, "2026-12-04T18:00:00.000000001Z-00", NULL), PG_OK);
    cr_assert_eq(slurm_job_key(&f, "2026-12-04T18:00:00.000000002Z-00", NULL), PG_OK);
    cr_assert_str_neq(a.key, e.key, "a nonce changes the key");
    cr_assert_str_neq(e.key, f.key, "another nonce, another job");
    cr_assert_eq(slurm_job_key(&f, "2026-12-04T18:00:00.000000001Z-00", NULL), PG_OK);
    cr_assert_str_eq(e.key, f.key);
}

Test(slurm_script, merge_script_is_guarded_and_lists_every_shard)
{
    slurm_job j = sweep_job();
    char *m = script_of(slurm_merge_script, &j);
    cr_assert(strstr(m, "\"$precgate\" merge --into \"$into\" \"${shard_dbs[@]}\"") != NULL, "%s",
              m);
    cr_assert(strstr(m, "\ninto=/shared/p.db\n") != NULL, "%s", m);
    /* The lock is beside the merged database (any job merging into it waits),
     * merge.done in the job's results. */
    cr_assert(strstr(m, "\nlock=\"$into.merge.lock\"\nif ! mkdir -- \"$lock\" 2>/dev/null; "
                        "then\n") != NULL, "%s", m);
    cr_assert(strstr(m, "\necho \"${SLURM_JOB_ID:-none} $(hostname)\" >\"$lock/holder\"\n") !=
              NULL, "%s", m);
    cr_assert(strstr(m, "\"$results/merge.done\"") != NULL, "%s", m);
    cr_assert(strstr(m, "merge.done") != NULL, "%s", m);
    cr_assert(strstr(m, "#SBATCH --array") == NULL, "%s", m);
    free(m);
    char *hint = script_of(slurm_submit_hint, &j);
    cr_assert(strstr(hint, "jid=$(sbatch --parsable /shared/job.sbatch) && "
                           "sbatch --dependency=afterok:$jid /shared/job.merge.sbatch\n") != NULL,
              "%s", hint);
    cr_assert(strstr(hint, "/shared/job.resubmit.sh") != NULL, "%s", hint);
    free(hint);
}

Test(slurm_script, results_dir_must_fit_an_sbatch_line)
{
    const char *why = NULL;
    cr_assert(slurm_results_dir_ok("/a b/c's", &why));
    cr_assert(!slurm_results_dir_ok("/a\"b", &why));
    cr_assert(!slurm_results_dir_ok("/a%jb", &why));
    cr_assert(!slurm_results_dir_ok("/a\nb", &why));
}

/* --- the command --- */

/* Writes an executable file. */
static void write_exe(const char *path, const char *text)
{
    tu_write_file(path, text, strlen(text));
    cr_assert_eq(chmod(path, 0755), 0);
}

/* A stub precgate: logs each argument on a line of its own to $STUB_LOG
 * ("--" between calls); run/eval write a database to --db; merge (--into DB
 * first) logs the holder of DB's merge lock; every command exits $STUB_RC. */
static const char stub_precgate[] =
    "#!/bin/bash\n"
    "printf '%s\\n' \"$@\" -- >>\"$STUB_LOG\"\n"
    "cmd=$1; into=${3:-}; db=\n"
    "while [ $# -gt 0 ]; do [ \"$1\" = --db ] && db=$2; shift; done\n"
    "if [ \"$cmd\" = merge ]; then cat -- \"$into.merge.lock/holder\" >>\"$STUB_LOG\";\n"
    "else echo rows >\"$db\"; fi\n"
    "exit \"${STUB_RC:-0}\"\n";

/* A stub sbatch: logs its arguments to $STUB_LOG and prints a job id. */
static const char stub_sbatch[] =
    "#!/bin/bash\n"
    "echo \"sbatch $*\" >>\"$STUB_LOG\"\n"
    "echo 42\n";

/* Writes a capture stand-in with ODD_NAME, and runs `precgate slurm sweep`
 * on it with --shards 4 and extra; returns its exit status, output in *out. */
static int generate(const char *extra, char **out)
{
    tu_write_file(tu_in_dir(ODD_NAME), "x", 1);
    write_exe(tu_in_dir("stub-precgate"), stub_precgate);
    write_exe(tu_in_dir("stub-sbatch"), stub_sbatch);
    return tu_run_precgatef(out,
                            "slurm sweep --capture \"%s/%s\" --variants bf16,fp8kv --shards 4 "
                            "--precgate '%s/stub-precgate' --into '%s/merged.db' -o '%s/job.sbatch' %s",
                            tu_dir, ODD_NAME, tu_dir, tu_dir, tu_dir, extra);
}

/* Runs a generated script with the stubs: STUB_LOG, TMPDIR and PATH (stub
 * sbatch first) set; env adds variables. Returns its exit status. */
static int run_script(const char *script, const char *env, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/bin' '%s/tmp' && cp '%s/stub-sbatch' '%s/bin/sbatch' && "
             "cd / && STUB_LOG='%s/log' TMPDIR='%s/tmp' PATH='%s/bin':\"$PATH\" %s '%s/%s'",
             tu_dir, tu_dir, tu_dir, tu_dir, tu_dir, tu_dir, tu_dir, env, tu_dir, script);
    return sh(cmd, out);
}

/* generate() with --results job.results, that must succeed. */
static void generate_ok(void)
{
    char *out = NULL, results[1024];
    snprintf(results, sizeof results, "--results '%s/job.results'", tu_dir);
    cr_assert_eq(generate(results, &out), 0, "%s", out);
    free(out);
}

/* Runs job.sbatch as array task env says (SLURM_* variables); asserts its
 * exit status is want. */
static void run_task(const char *env, int want)
{
    char *out = NULL;
    cr_assert_eq(run_script("job.sbatch", env, &out), want, "%s", out);
    free(out);
}

/* run_task after generate_ok. */
static void run_shard(const char *env, int want)
{
    generate_ok();
    run_task(env, want);
}

/* What the node-local disk and the results directory hold (ls -A of both),
 * malloc'd. */
static char *leftovers(void)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls -A '%s/tmp' '%s/job.results'", tu_dir, tu_dir);
    cr_assert_eq(sh(cmd, &out), 0, "%s", out);
    return out;
}

Test(slurm_script, command_writes_three_scripts_and_says_how_to_submit)
{
    char *out = NULL;
    const int rc = generate("", &out);
    cr_assert_eq(rc, 0, "%s", out);
    char line[1024];
    snprintf(line, sizeof line, "jid=$(sbatch --parsable %s/job.sbatch) && "
                                "sbatch --dependency=afterok:$jid %s/job.merge.sbatch\n",
             tu_dir, tu_dir);
    cr_assert(strstr(out, line) != NULL, "%s", out);
    cr_assert(strstr(out, "job.resubmit.sh") != NULL, "%s", out);
    free(out);
    const char *files[] = {"job.sbatch", "job.merge.sbatch", "job.resubmit.sh"};
    for (size_t i = 0; i < 3; i++) {
        struct stat st;
        cr_assert_eq(stat(tu_in_dir(files[i]), &st), 0, "%s", files[i]);
        cr_assert(st.st_mode & S_IXUSR, "%s is executable", files[i]);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "bash -n '%s/%s'", tu_dir, files[i]);
        cr_assert_eq(sh(cmd, &out), 0, "%s: %s", files[i], out);
        free(out);
    }
    struct stat st;
    cr_assert_eq(stat(tu_in_dir("job.results"), &st), 0, "the results directory is made");
    cr_assert(S_ISDIR(st.st_mode));
    /* The same options again, another generation: another job, with a
     * results directory of its own that names it. */
    char *text = tu_slurp("job.sbatch"), *again = NULL;
    cr_assert_eq(generate("", &again), 0, "%s", again);
    char *text2 = tu_slurp("job.sbatch");
    const char *k1 = strstr(text, "\njob="), *k2 = strstr(text2, "\njob=");
    cr_assert(k1 != NULL && k2 != NULL);
    char key1[SLURM_KEY_MAX], key2[SLURM_KEY_MAX];
    snprintf(key1, sizeof key1, "%.*s", (int)strcspn(k1 + 5, "\n"), k1 + 5);
    snprintf(key2, sizeof key2, "%.*s", (int)strcspn(k2 + 5, "\n"), k2 + 5);
    cr_assert_str_neq(key1, key2, "two generations are two jobs");
    const char *keys[] = {key1, key2};
    for (int i = 0; i < 2; i++) {
        char dir[1024], name[1024], want[SLURM_KEY_MAX + 1];
        snprintf(dir, sizeof dir, "%s/job.results/%s", tu_dir, keys[i]);
        snprintf(name, sizeof name, "job.results/%s/job", keys[i]);
        cr_assert_eq(stat(dir, &st), 0, "the results directory %s is made", dir);
        cr_assert(S_ISDIR(st.st_mode));
        char *held = tu_slurp(name);
        snprintf(want, sizeof want, "%s\n", keys[i]);
        cr_assert_str_eq(held, want);
        free(held);
        cr_assert(strstr(i == 0 ? text : text2, dir) != NULL, "%s", i == 0 ? text : text2);
    }
    cr_assert(strstr(again, key2) != NULL, "%s", again);
    free(text);
    free(text2);
    free(again);
}

/* Which run options take a value is run's own table's to say: a flag
 * followed by another option passes as a flag, a value as its value. */
Test(slurm_script, run_flags_and_values_pass_as_run_parses_them)
{
    char *out = NULL;
    cr_assert_eq(generate("--attribute --seed 7 --check-spec --scales=amax", &out), 0, "%s",
                 out);
    free(out);
    char *text = tu_slurp("job.sbatch");
    const char *want[] = {" --attribute", " --seed 7", " --check-spec", " --scales amax"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(text, want[i]) != NULL, "%s in:\n%s", want[i], text);
    free(text);
    cr_assert_eq(generate("--attribute=yes", &out), 2, "%s", out);
    cr_assert(strstr(out, "--attribute takes no value") != NULL, "%s", out);
    free(out);
}

Test(slurm_script, results_of_another_job_are_refused)
{
    char *out = NULL, results[1024];
    generate_ok();
    char *text = tu_slurp("job.sbatch");
    char *held = tu_slurp("job.results/job");
    held[strcspn(held, "\n")] = '\0';
    /* A new generation (a new job) into the same --results DIR. */
    snprintf(results, sizeof results, "--results '%s/job.results'", tu_dir);
    cr_assert_eq(generate(results, &out), 2, "%s", out);
    char want[2048];
    snprintf(want, sizeof want, "--results %s/job.results holds job %s (%s/job.results/job), "
                                "not this job j", tu_dir, held, tu_dir);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    free(out);
    char *text2 = tu_slurp("job.sbatch");
    cr_assert_str_eq(text, text2, "the refused job's scripts are not written");
    free(text2);
    /* The same job again (--job KEY) may rewrite its scripts. */
    snprintf(results, sizeof results, "--results '%s/job.results' --job %s", tu_dir, held);
    cr_assert_eq(generate(results, &out), 0, "%s", out);
    free(out);
    free(held);
    free(text);
}

Test(slurm_script, a_shard_that_succeeds_is_copied_then_marked)
{
    run_shard("SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_JOB_ID=7 SLURM_JOB_ID=9", 0);
    char *db = tu_slurp("job.results/shard-2.db");
    cr_assert_str_eq(db, "rows\n");
    free(db);
    cr_assert_eq(access(tu_in_dir("job.results/shard-2.done"), F_OK), 0);
    /* The node-local database is gone, and so is every temporary copy. */
    char *out = leftovers();
    cr_assert(strstr(out, "precgate-") == NULL, "no local database left: %s", out);
    cr_assert(strstr(out, ".part") == NULL, "%s", out);
    free(out);
    /* The capture reached precgate as one argument, with the shard and job. */
    char *log = tu_slurp("log");
    char want[1024];
    snprintf(want, sizeof want, "\n--capture\n%s/%s\n", tu_dir, ODD_NAME);
    cr_assert(strstr(log, want) != NULL, "%s", log);
    cr_assert(strncmp(log, "run\n--no-progress\n", 18) == 0, "%s", log);
    cr_assert(strstr(log, "\n--shard\n2/4\n--job\nj") != NULL, "%s", log);
    free(log);
}

Test(slurm_script, a_shard_that_fails_leaves_no_marker_and_no_database)
{
    run_shard("STUB_RC=3 SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_JOB_ID=7 SLURM_JOB_ID=8", 3);
    char *out = leftovers();
    cr_assert(strstr(out, "shard-1") == NULL, "no marker, no copy: %s", out);
    cr_assert(strstr(out, "precgate-") == NULL, "no local database left: %s", out);
    free(out);
}

Test(slurm_script, a_rerun_that_fails_removes_the_old_marker)
{
    /* Shard 1 succeeded once; a rerun of it (the same array task submitted
     * again) fails: its old marker and copy must not outlive the failure. */
    run_shard("SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_JOB_ID=7 SLURM_JOB_ID=8", 0);
    cr_assert_eq(access(tu_in_dir("job.results/shard-1.done"), F_OK), 0);
    run_task("STUB_RC=3 SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_JOB_ID=11 SLURM_JOB_ID=12", 3);
    char *out = leftovers();
    cr_assert(strstr(out, "shard-1") == NULL, "no old marker, no old copy: %s", out);
    free(out);
}

Test(slurm_script, a_tmpdir_missing_on_the_node_falls_back_to_tmp)
{
    /* The submit host's TMPDIR does not exist on the node. */
    char *out = NULL;
    generate_ok();
    cr_assert_eq(run_script("job.sbatch", "TMPDIR=/nonexistent/pg-tmp SLURM_ARRAY_TASK_ID=0 "
                                          "SLURM_ARRAY_JOB_ID=7 SLURM_JOB_ID=13", &out),
                 0, "%s", out);
    cr_assert(strstr(out, "TMPDIR /nonexistent/pg-tmp is not a writable directory") != NULL,
              "%s", out);
    cr_assert(strstr(out, "using /tmp") != NULL, "%s", out);
    free(out);
    char *log = tu_slurp("log");
    cr_assert(strstr(log, "\n--db\n/tmp/precgate-") != NULL, "%s", log);
    free(log);
    cr_assert_eq(access(tu_in_dir("job.results/shard-0.done"), F_OK), 0);
}

Test(slurm_script, a_copy_that_fails_leaves_no_marker)
{
    char *out = NULL;
    generate_ok();
    /* The shard's run succeeds, then the copy into the results directory
     * fails (a full or unreachable shared filesystem): a cp that fails. */
    mkdir(tu_in_dir("bin"), 0755);
    write_exe(tu_in_dir("bin/cp"), "#!/bin/sh\necho 'cp: No space left on device' >&2\nexit 1\n");
    cr_assert_neq(run_script("job.sbatch", "SLURM_ARRAY_TASK_ID=3 SLURM_ARRAY_JOB_ID=7 "
                                           "SLURM_JOB_ID=10", &out), 0, "%s", out);
    free(out);
    cr_assert_neq(access(tu_in_dir("job.results/shard-3.done"), F_OK), 0,
                  "a shard whose database was not copied is not done");
    cr_assert_neq(access(tu_in_dir("job.results/shard-3.db"), F_OK), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -A '%s/tmp'", tu_dir);
    cr_assert_eq(sh(cmd, &out), 0);
    cr_assert_str_eq(out, "", "no local database left: %s", out);
    free(out);
}

/* Writes the done marker of shard i, as a shard that succeeded does. */
static void mark_done(int i)
{
    char name[64];
    snprintf(name, sizeof name, "job.results/shard-%d.done", i);
    tu_write_file(tu_in_dir(name), "", 0);
}

/* Runs a generated script with no extra variables; asserts its exit status
 * is want and that its output holds needle. */
static void expect_script(const char *script, int want, const char *needle)
{
    char *out = NULL;
    cr_assert_eq(run_script(script, "", &out), want, "%s", out);
    cr_assert(strstr(out, needle) != NULL, "%s: wanted '%s' in: %s", script, needle, out);
    free(out);
}

Test(slurm_script, merge_names_missing_shards_and_runs_once)
{
    char *out = NULL;
    generate_ok();
    /* Shards 0 and 2 done, 1 and 3 missing. */
    mark_done(0);
    mark_done(2);
    expect_script("job.merge.sbatch", 1, "shards 1 3 of 4");
    cr_assert_neq(access(tu_in_dir("log"), F_OK), 0, "no merge ran");
    mark_done(1);
    mark_done(3);
    cr_assert_eq(run_script("job.merge.sbatch", "SLURM_JOB_ID=55", &out), 0, "%s", out);
    free(out);
    char *log = tu_slurp("log");
    char want[2048], host[256] = "";
    cr_assert_eq(gethostname(host, sizeof host - 1), 0);
    /* precgate merge ran holding the lock beside merged.db, which names it. */
    snprintf(want, sizeof want, "merge\n--into\n%s/merged.db\n%s/job.results/shard-0.db\n"
                                "%s/job.results/shard-1.db\n%s/job.results/shard-2.db\n"
                                "%s/job.results/shard-3.db\n--\n55 %s\n",
             tu_dir, tu_dir, tu_dir, tu_dir, tu_dir, host);
    cr_assert_str_eq(log, want);
    free(log);
    cr_assert_eq(access(tu_in_dir("job.results/merge.done"), F_OK), 0);
    cr_assert_neq(access(tu_in_dir("merged.db.merge.lock"), F_OK), 0, "the lock is let go");
    /* A second merge says so and merges nothing. */
    expect_script("job.merge.sbatch", 0, "already merged");
    log = tu_slurp("log");
    cr_assert_str_eq(log, want, "merge ran once");
    free(log);
}

Test(slurm_script, a_merged_jobs_array_refuses_to_run)
{
    /* The array script submitted again after its job was merged (last
     * night's scripts): it fails loudly, touching nothing. */
    generate_ok();
    for (int i = 0; i < 4; i++) mark_done(i);
    tu_write_file(tu_in_dir("job.results/merge.done"), "", 0);
    char *out = NULL;
    cr_assert_eq(run_script("job.sbatch", "SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_JOB_ID=7 "
                                          "SLURM_JOB_ID=9", &out), 1, "%s", out);
    char want[1024];
    snprintf(want, sizeof want, "is already merged into %s/merged.db; a new run needs new "
                                "scripts: precgate slurm sweep …", tu_dir);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    free(out);
    cr_assert_neq(access(tu_in_dir("log"), F_OK), 0, "no shard ran");
    cr_assert_eq(access(tu_in_dir("job.results/shard-2.done"), F_OK), 0, "markers kept");
}

Test(slurm_script, merge_under_a_held_lock_does_nothing)
{
    /* A merge of another job (its own results directory) into the same
     * merged.db holds the lock: this job's merge must not run beside it. */
    generate_ok();
    for (int i = 0; i < 4; i++) mark_done(i);
    cr_assert_eq(mkdir(tu_in_dir("merged.db.merge.lock"), 0755), 0);
    tu_write_file(tu_in_dir("merged.db.merge.lock/holder"), "77 node-a\n", 10);
    expect_script("job.merge.sbatch", 1, "merged.db.merge.lock is held by Slurm job 77 on node-a");
    expect_script("job.merge.sbatch", 1, "If job 77 is no longer running (squeue -j 77), the "
                                         "lock is stale: rm -r -- '");
    cr_assert_neq(access(tu_in_dir("log"), F_OK), 0, "no merge ran");
    cr_assert_eq(access(tu_in_dir("merged.db.merge.lock/holder"), F_OK), 0,
                 "another's lock is kept");
}

Test(slurm_script, resubmit_sends_only_the_missing_shards)
{
    generate_ok();
    mark_done(0);
    mark_done(2);
    expect_script("job.resubmit.sh", 0, "resubmitted shards 1,3 of 4");
    char *log = tu_slurp("log");
    char want[2048];
    snprintf(want, sizeof want, "sbatch --parsable --array=1,3 %s/job.sbatch\n"
                                "sbatch --parsable --dependency=afterok:42 %s/job.merge.sbatch\n",
             tu_dir, tu_dir);
    cr_assert_str_eq(log, want);
    free(log);
    /* Every shard done: nothing is submitted, and it says so. */
    unlink(tu_in_dir("log"));
    mark_done(1);
    mark_done(3);
    expect_script("job.resubmit.sh", 0, "nothing to resubmit");
    cr_assert_neq(access(tu_in_dir("log"), F_OK), 0, "nothing submitted");
}

/* Runs `precgate slurm ARGS` (in tu_dir); asserts exit 2 and a message
 * holding want. */
static void usage_error(const char *args, const char *want)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "slurm %s", args);
    cr_assert_eq(rc, 2, "slurm %s: %s", args, out);
    cr_assert(strstr(out, want) != NULL, "slurm %s: wanted '%s' in: %s", args, want, out);
    free(out);
}

Test(slurm_script, usage_errors_name_the_option)
{
    tu_write_file(tu_in_dir("cap.safetensors"), "x", 1);
    char cap[1024], o[1024], args[3072];
    snprintf(cap, sizeof cap, "--capture '%s/cap.safetensors'", tu_dir);
    snprintf(o, sizeof o, "-o '%s/j.sbatch'", tu_dir);
    usage_error("", "sweep|eval");
    usage_error("train --shards 2", "'train' is not sweep or eval");
    snprintf(args, sizeof args, "sweep %s %s", cap, o);
    usage_error(args, "--shards N is required");
    snprintf(args, sizeof args, "sweep %s --shards 0 %s", cap, o);
    usage_error(args, "--shards");
    snprintf(args, sizeof args, "sweep %s --shards 2", cap);
    usage_error(args, "-o FILE");
    snprintf(args, sizeof args, "sweep --shards 2 %s", o);
    usage_error(args, "--capture PATH is required");
    snprintf(args, sizeof args, "eval --replay --shards 2 %s", o);
    usage_error(args, "--traces FILE is required");
    snprintf(args, sizeof args, "sweep %s --shards 2 -o '%s/no/such/dir/j.sbatch'", cap, tu_dir);
    usage_error(args, "-o: cannot write");
    snprintf(args, sizeof args, "sweep %s --shards 2 %s --db x.db", cap, o);
    usage_error(args, "--db is not taken");
    snprintf(args, sizeof args, "sweep %s --shards 2 %s --variants nope", cap, o);
    usage_error(args, "'nope' is not a kernel profile");
    snprintf(args, sizeof args, "sweep %s --shards 2 %s --frobnicate 1", cap, o);
    usage_error(args, "unknown option '--frobnicate'");
    snprintf(args, sizeof args, "sweep %s --shards 2 %s --label", cap, o);
    usage_error(args, "--label requires a value");
    snprintf(args, sizeof args, "sweep --capture '%s/none.safetensors' --shards 2 %s", tu_dir, o);
    usage_error(args, "--capture");
    cr_assert_neq(access(tu_in_dir("j.sbatch"), F_OK), 0, "nothing written on a usage error");
}
