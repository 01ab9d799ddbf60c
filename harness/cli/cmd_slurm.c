/* cmd_slurm.c: `precgate slurm sweep|eval`: writes the Slurm scripts of one
 * sharded sweep or eval (slurm_script.h) and prints how to submit them.
 * precgate never submits, waits on or polls the scheduler itself. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness/cli/cli.h"
#include "harness/shard.h"
#include "harness/slurm_script.h"

/* Most shards one job may have (an array index above Slurm's usual
 * MaxArraySize of 1001 is refused by the scheduler anyway). */
#define SLURM_MAX_SHARDS 100000
/* Most GPUs one shard may ask for. */
#define SLURM_MAX_GPUS 64
/* File name endings of the scripts beside -o. */
#define SLURM_ARRAY_SUFFIX ".sbatch"
#define SLURM_MERGE_SUFFIX ".merge.sbatch"
#define SLURM_RESUBMIT_SUFFIX ".resubmit.sh"
#define SLURM_RESULTS_SUFFIX ".results"
/* The file in a results directory that names the job it belongs to. */
#define SLURM_JOB_FILE "job"
/* Random bytes in a generation's nonce. */
#define SLURM_NONCE_RANDOM 8
/* Mode of the written scripts and of a created results directory. */
#define SLURM_SCRIPT_MODE 0755
#define SLURM_DIR_MODE 0777

const char cmd_slurm_usage[] =
    "usage: precgate slurm sweep [run options] --shards N -o JOB.sbatch [options]\n"
    "       precgate slurm eval [eval options] --shards N -o JOB.sbatch [options]\n\n"
    "Writes the Slurm scripts of one sweep (precgate run) or eval cut into N shards,\n"
    "and prints how to submit them. precgate never submits, waits or polls itself.\n"
    "  JOB.sbatch           an array job (--array=0-(N-1)), refused (exit 1) once the\n"
    "                       job is merged: task I runs shard I/N of the\n"
    "                       run or eval with a database on node-local disk\n"
    "                       (${TMPDIR:-/tmp}: SQLite's WAL and locks do not work over\n"
    "                       NFS); only when it succeeded, the database is copied into\n"
    "                       the results directory (temporary name, then renamed) and\n"
    "                       marked done (shard-I.done)\n"
    "  JOB.merge.sbatch     the merge, to submit with --dependency=afterok:ARRAY: names\n"
    "                       the shards without a done marker (exit 1), runs once\n"
    "                       (merge.done: a second run says so and does nothing),\n"
    "                       holding DB.merge.lock (one merge into DB at a time),\n"
    "                       precgate merge --into DB of every shard database\n"
    "  JOB.resubmit.sh      resubmits the shards without a done marker and a merge after\n"
    "                       them; says so and does nothing when none is missing\n\n"
    "  --shards N           number of shards, array tasks 0 .. N-1 (required)\n"
    "  -o FILE              the array job script; the others are written beside it\n"
    "                       (FILE without .sbatch, then .merge.sbatch, .resubmit.sh)\n"
    "  --results DIR        shard databases, done markers and job logs of this job\n"
    "                       (default: FILE without .sbatch, then .results/KEY; created;\n"
    "                       DIR/job names the job, and a DIR of another job is\n"
    "                       refused). On a filesystem every node and the merge can reach\n"
    "  --into DB            the database the merge writes (default $PRECGATE_DB, else\n"
    "                       ./precgate.db)\n"
    "  --partition P        #SBATCH --partition of every job\n"
    "  --gpus-per-shard G   #SBATCH --gres=gpu:G of each shard\n"
    "  --time T             #SBATCH --time of every job (Slurm's formats: 30, 4:00:00)\n"
    "  --account A          #SBATCH --account of every job\n"
    "  --job KEY            the job key every shard stores (default: a digest of the\n"
    "                       kind, N, the run/eval options and this generation's time\n"
    "                       and random bytes: each generation is a job of its own, so\n"
    "                       run precgate slurm again for each night's run)\n"
    "  --precgate PATH      the binary the jobs run (default: this one)\n\n"
    "Every other option is the run's (sweep) or the eval's, passed to each shard and\n"
    "checked here as those commands check them; --capture or --traces is required.\n"
    "Not taken: --db (each shard has its own; --into names the merged one), --resume,\n"
    "--force, --shard (each task gets its own) and eval's --output.\n\n"
    "exit status: 0 written; 1 failure; 2 usage error (also an -o that cannot be\n"
    "written).\n";

/* A run or eval option `slurm` does not pass to the shards, and why. */
typedef struct refused_option {
    const char *name;
    const char *why;
} refused_option;

#define PASS_DB_REFUSED "each shard writes a database of its own on node-local disk; --into DB " \
                        "names the merged one"
#define PASS_RESUME_REFUSED "a sharded job is resumed by resubmitting its failed shards " \
                            "(JOB.resubmit.sh)"
#define PASS_SHARD_REFUSED "each array task is given its own --shard I/N"
static const refused_option refused_options[] = {
    {"db", PASS_DB_REFUSED},        {"resume", PASS_RESUME_REFUSED},
    {"force", PASS_RESUME_REFUSED}, {"shard", PASS_SHARD_REFUSED},
    {NULL, NULL},
};
static const refused_option refused_eval_options[] = {
    {"output", "it would write one shard's scores; write them from the merged run"},
    {NULL, NULL},
};

/* Why name is not passed to the shards of kind, or NULL when it is. */
static const char *refused_why(slurm_kind kind, const char *name)
{
    for (const refused_option *r = refused_options; r->name != NULL; r++)
        if (strcmp(r->name, name) == 0) return r->why;
    for (const refused_option *r = refused_eval_options; kind == SLURM_EVAL && r->name != NULL;
         r++)
        if (strcmp(r->name, name) == 0) return r->why;
    return NULL;
}

/* slurm's own options, all taking a value (take_own). */
static const char *const own_options[] = {
    "shards", "gpus-per-shard", "partition", "time", "account", "job", "results", "into",
    "precgate", NULL,
};

/* Whether name is one of slurm's own options. */
static int is_own(const char *name)
{
    for (int i = 0; own_options[i] != NULL; i++)
        if (strcmp(own_options[i], name) == 0) return 1;
    return 0;
}

/* slurm's own options, with where their values go. */
typedef struct slurm_args {
    slurm_job job;
    const char *out, *results, *into, *precgate, *key;
    const char *cmd;  /* "slurm sweep" or "slurm eval", for messages */
} slurm_args;

/* A value of slurm's own that goes into an #SBATCH line as is: not empty,
 * no whitespace or quote. PG_ERR_USAGE naming opt. */
static pg_status directive_value(const char *cmd, const char *opt, const char *value,
                                 pg_err *err)
{
    if (value[0] == '\0' || strpbrk(value, " \t\r\n\"'") != NULL)
        return pg_fail(err, PG_ERR_USAGE, "%s: --%s '%s' must be one word without quotes", cmd,
                       opt, value);
    return PG_OK;
}

/* Takes slurm's own option name with value into a; 0 when name is not one
 * of slurm's (then nothing happens), 1 when taken, -1 on a usage error. */
static int take_own(slurm_args *a, const char *name, const char *value, pg_err *err)
{
    const char *cmd = a->cmd;
    long v = 0;
    pg_err local = {0};
    if (strcmp(name, "shards") == 0) {
        if (cli_parse_int("--shards", value, 1, SLURM_MAX_SHARDS, &v, &local) != PG_OK) {
            pg_fail(err, local.code, "%s: %s", cmd, local.msg);
            return -1;
        }
        a->job.shards = (int)v;
    } else if (strcmp(name, "gpus-per-shard") == 0) {
        if (cli_parse_int("--gpus-per-shard", value, 1, SLURM_MAX_GPUS, &v, &local) != PG_OK) {
            pg_fail(err, local.code, "%s: %s", cmd, local.msg);
            return -1;
        }
        a->job.gpus_per_shard = (int)v;
    } else if (strcmp(name, "partition") == 0 || strcmp(name, "time") == 0 ||
               strcmp(name, "account") == 0) {
        if (directive_value(cmd, name, value, err) != PG_OK) return -1;
        const char **to = name[0] == 'p' ? &a->job.partition
                          : name[0] == 't' ? &a->job.time : &a->job.account;
        *to = value;
    } else if (strcmp(name, "job") == 0) {
        if (shard_job_check(cmd, value, err) != PG_OK) return -1;
        a->key = value;
    } else if (strcmp(name, "results") == 0) a->results = value;
    else if (strcmp(name, "into") == 0) a->into = value;
    else if (strcmp(name, "precgate") == 0) a->precgate = value;
    else return 0;
    return 1;
}

/* Splits argv[0..argc) (after the kind) into slurm's own options and the
 * run/eval options, which go to a->job.options in order. Which of those
 * take a value is the run's or eval's own option table's to say
 * (cmd_run_option_arity, cmd_eval_option_arity), so an option's value is
 * never read as an option of slurm's; their values are checked by those
 * commands' parsers (check_options). */
static pg_status split_args(slurm_args *a, int argc, char **argv, pg_err *err)
{
    const char *cmd = a->cmd;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "-o", 2) == 0) {
            if (arg[2] != '\0') a->out = arg + 2;
            else if (i + 1 < argc) a->out = argv[++i];
            else return pg_fail(err, PG_ERR_USAGE, "%s: -o requires a value", cmd);
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return pg_fail(err, PG_ERR_USAGE, "%s: unexpected argument '%s'", cmd, arg);
        /* --NAME VALUE or --NAME=VALUE; name is cut out of a copy. */
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        const size_t len = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name)
            return pg_fail(err, PG_ERR_USAGE, "%s: unknown option '%s' (see precgate slurm "
                           "--help)", cmd, arg);
        memcpy(name, arg + 2, len);
        name[len] = '\0';
        const int own = is_own(name);
        int arity = 1;
        const char *passed = own ? NULL
                             : a->job.kind == SLURM_EVAL ? cmd_eval_option(name, &arity)
                                                         : cmd_run_option(name, &arity);
        if (!own && passed == NULL)
            return pg_fail(err, PG_ERR_USAGE, "%s: unknown option '%s' (see precgate slurm "
                           "--help)", cmd, arg);
        const char *value = eq != NULL ? eq + 1 : NULL;
        if (arity == 0 && value != NULL)
            return pg_fail(err, PG_ERR_USAGE, "%s: --%s takes no value", cmd, name);
        if (arity == 1 && value == NULL) {
            if (i + 1 == argc)
                return pg_fail(err, PG_ERR_USAGE, "%s: --%s requires a value", cmd, name);
            value = argv[++i];
        }
        if (own) {
            if (take_own(a, name, value, err) < 0) return err->code;
            continue;
        }
        const char *why = refused_why(a->job.kind, name);
        if (why != NULL) return pg_fail(err, PG_ERR_USAGE, "%s: --%s is not taken: %s", cmd, name, why);
        if (strcmp(name, "no-progress") == 0) continue;  /* every shard has it */
        if (a->job.n_options == SLURM_MAX_OPTIONS)
            return pg_fail(err, PG_ERR_USAGE, "%s: more than %d run/eval options", cmd,
                           SLURM_MAX_OPTIONS);
        a->job.options[a->job.n_options++] = (slurm_option){passed, value};
    }
    return PG_OK;
}

/* Checks the shards' options with run's or eval's own parser (on copies:
 * it permutes argv and may split values); its message behind a->cmd. */
static pg_status check_options(const slurm_args *a, pg_err *err)
{
    const int max = 1 + 2 * SLURM_MAX_OPTIONS;
    char **argv = calloc((size_t)max + 1, sizeof *argv);
    if (argv == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", a->cmd);
    int argc = 0;
    pg_status st = PG_OK;
    argv[argc++] = strdup(slurm_kind_command(a->job.kind));
    for (int i = 0; i < a->job.n_options; i++) {
        const slurm_option *o = &a->job.options[i];
        char *name = malloc(strlen(o->name) + 3);
        if (name != NULL) sprintf(name, "--%s", o->name);
        argv[argc++] = name;
        if (o->value != NULL) argv[argc++] = strdup(o->value);
    }
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", a->cmd);
    if (st == PG_OK) {
        pg_err inner = {0};
        st = a->job.kind == SLURM_EVAL ? cmd_eval_check(argc, argv, &inner)
                                       : cmd_run_check(argc, argv, &inner);
        if (st != PG_OK) pg_fail(err, st, "%s: %s", a->cmd, inner.msg);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
    return st;
}

/* path made absolute against the working directory, into a new string
 * (NULL when out of memory or the directory cannot be read). */
static char *absolute(const char *path)
{
    if (path[0] == '/') return strdup(path);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL) return NULL;
    const char *rel = strncmp(path, "./", 2) == 0 ? path + 2 : path;
    char *abs = malloc(strlen(cwd) + strlen(rel) + 2);
    if (abs != NULL) sprintf(abs, "%s/%s", cwd, rel);
    return abs;
}

/* The strings this command allocates, freed together. */
typedef struct slurm_owned {
    char *strings[SLURM_MAX_OPTIONS + 8];
    int n;
} slurm_owned;

/* Keeps s in owned and returns it (NULL stays NULL). */
static char *own(slurm_owned *owned, char *s)
{
    if (s != NULL) owned->strings[owned->n++] = s;
    return s;
}

/* stem + suffix, kept in owned. */
static char *stem_with(slurm_owned *owned, const char *stem, const char *suffix)
{
    char *s = malloc(strlen(stem) + strlen(suffix) + 1);
    if (s != NULL) sprintf(s, "%s%s", stem, suffix);
    return own(owned, s);
}

/* This generation's nonce into out: the UTC time to the nanosecond and
 * SLURM_NONCE_RANDOM bytes of getrandom(2), in hex; PG_ERR_IO. */
static pg_status generation_nonce(const char *cmd, char *out, size_t size, pg_err *err)
{
    struct timespec now;
    unsigned char rnd[SLURM_NONCE_RANDOM];
    if (clock_gettime(CLOCK_REALTIME, &now) != 0 ||
        getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return pg_fail(err, PG_ERR_IO, "%s: no job key: %s (give --job KEY)", cmd,
                       strerror(errno));
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(out + n, size - n, ".%09ldZ-", now.tv_nsec);
    for (size_t i = 0; i < sizeof rnd && n + 3 <= size; i++)
        n += (size_t)snprintf(out + n, size - n, "%02x", rnd[i]);
    return PG_OK;
}

/* Sets a->job.key: --job KEY, else slurm_job_key with a nonce of this
 * generation. */
static pg_status set_key(slurm_args *a, pg_err *err)
{
    if (a->key != NULL) {
        snprintf(a->job.key, sizeof a->job.key, "%s", a->key);
        return PG_OK;
    }
    char nonce[64];
    if (generation_nonce(a->cmd, nonce, sizeof nonce, err) != PG_OK) return err->code;
    return slurm_job_key(&a->job, nonce, err);
}

/* Makes every path of a->job absolute (the jobs run elsewhere): the
 * capture or traces (which must exist), the scripts, the results directory
 * (by default named by the job key, which is set here), the merged database
 * and the binary. */
static pg_status resolve_paths(slurm_args *a, slurm_owned *owned, pg_err *err)
{
    const char *cmd = a->cmd;
    for (int i = 0; i < a->job.n_options; i++) {
        slurm_option *o = &a->job.options[i];
        if (strcmp(o->name, "capture") != 0 && strcmp(o->name, "traces") != 0) continue;
        if (access(o->value, R_OK) != 0)
            return pg_fail(err, PG_ERR_USAGE, "%s: --%s '%s': %s", cmd, o->name, o->value,
                           strerror(errno));
        if ((o->value = own(owned, absolute(o->value))) == NULL)
            return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", cmd);
    }
    char *out = own(owned, absolute(a->out));
    if (out == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", cmd);
    /* The stem: -o without .sbatch. */
    char *stem = own(owned, strdup(out));
    if (stem == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", cmd);
    const size_t n = strlen(stem), ns = strlen(SLURM_ARRAY_SUFFIX);
    if (n > ns && strcmp(stem + n - ns, SLURM_ARRAY_SUFFIX) == 0) stem[n - ns] = '\0';
    a->job.array_script = out;
    a->job.merge_script = stem_with(owned, stem, SLURM_MERGE_SUFFIX);
    a->job.resubmit_script = stem_with(owned, stem, SLURM_RESUBMIT_SUFFIX);
    if (set_key(a, err) != PG_OK) return err->code;
    char *results_base = stem_with(owned, stem, SLURM_RESULTS_SUFFIX "/");
    a->job.results = a->results != NULL ? own(owned, absolute(a->results))
                     : results_base != NULL ? stem_with(owned, results_base, a->job.key) : NULL;
    a->job.into = own(owned, absolute(cli_db_path(a->into)));
    if (a->precgate != NULL) {
        a->job.precgate = own(owned, absolute(a->precgate));
    } else {
        char self[PATH_MAX];
        const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0) return pg_fail(err, PG_ERR_IO, "%s: /proc/self/exe: %s (give --precgate "
                                     "PATH)", cmd, strerror(errno));
        self[len] = '\0';
        a->job.precgate = own(owned, strdup(self));
    }
    if (a->job.merge_script == NULL || a->job.resubmit_script == NULL ||
        a->job.results == NULL || a->job.into == NULL || a->job.precgate == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", cmd);
    const char *why = NULL;
    if (!slurm_results_dir_ok(a->job.results, &why))
        return pg_fail(err, PG_ERR_USAGE, "%s: --results '%s': %s", cmd, a->job.results, why);
    return PG_OK;
}

/* Parses argv (argv[0] "slurm", argv[1] the kind) into a. */
static pg_status slurm_parse(int argc, char **argv, slurm_args *a, pg_err *err)
{
    memset(a, 0, sizeof *a);
    if (argc < 2)
        return pg_fail(err, PG_ERR_USAGE, "slurm: say what to shard: precgate slurm sweep|eval "
                                          "… (see precgate slurm --help)");
    if (strcmp(argv[1], "sweep") == 0) {
        a->job.kind = SLURM_SWEEP;
        a->cmd = "slurm sweep";
    } else if (strcmp(argv[1], "eval") == 0) {
        a->job.kind = SLURM_EVAL;
        a->cmd = "slurm eval";
    } else {
        return pg_fail(err, PG_ERR_USAGE, "slurm: '%s' is not sweep or eval (see precgate slurm "
                                          "--help)", argv[1]);
    }
    if (split_args(a, argc - 2, argv + 2, err) != PG_OK) return err->code;
    if (a->job.shards == 0)
        return pg_fail(err, PG_ERR_USAGE, "%s: --shards N is required", a->cmd);
    if (a->out == NULL || a->out[0] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "%s: -o FILE (the array job script) is required",
                       a->cmd);
    return check_options(a, err);
}

/* mkdir -p dir; PG_ERR_IO naming it. */
static pg_status make_dirs(const char *cmd, const char *dir, pg_err *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return pg_fail(err, PG_ERR_USAGE, "%s: --results '%s' is too long", cmd, dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        const char c = *p;
        *p = '\0';
        if (mkdir(path, SLURM_DIR_MODE) != 0 && errno != EEXIST)
            return pg_fail(err, PG_ERR_IO, "%s: results directory %s: %s", cmd, path,
                           strerror(errno));
        *p = c;
        if (c == '\0') break;
    }
    return PG_OK;
}

/* DIR/job, the file naming the job a results directory belongs to, into
 * path; PG_ERR_USAGE when too long. */
static pg_status job_file(const char *cmd, const char *dir, char path[PATH_MAX], pg_err *err)
{
    if (snprintf(path, PATH_MAX, "%s/%s", dir, SLURM_JOB_FILE) >= PATH_MAX)
        return pg_fail(err, PG_ERR_USAGE, "%s: --results '%s' is too long", cmd, dir);
    return PG_OK;
}

/* Refuses (PG_ERR_USAGE naming both keys) a results directory whose job
 * file names another job than key: two jobs must not mix their shards and
 * markers. */
static pg_status check_results(const char *cmd, const char *dir, const char *key, pg_err *err)
{
    char path[PATH_MAX], held[SLURM_KEY_MAX + 2] = "";
    if (job_file(cmd, dir, path, err) != PG_OK) return err->code;
    FILE *f = fopen(path, "r");
    if (f == NULL) return PG_OK;
    if (fgets(held, sizeof held, f) == NULL) held[0] = '\0';
    fclose(f);
    held[strcspn(held, "\n")] = '\0';
    if (held[0] != '\0' && strcmp(held, key) != 0)
        return pg_fail(err, PG_ERR_USAGE, "%s: --results %s holds job %s (%s), not this job "
                       "%s: give each job a results directory of its own", cmd, dir, held,
                       path, key);
    return PG_OK;
}

/* Writes key into dir's job file; PG_ERR_IO. */
static pg_status claim_results(const char *cmd, const char *dir, const char *key, pg_err *err)
{
    char path[PATH_MAX];
    if (job_file(cmd, dir, path, err) != PG_OK) return err->code;
    FILE *f = fopen(path, "w");
    const int wrote = f != NULL && fprintf(f, "%s\n", key) > 0;
    if (f == NULL || fclose(f) != 0 || !wrote)
        return pg_fail(err, PG_ERR_IO, "%s: writing %s: %s", cmd, path, strerror(errno));
    return PG_OK;
}

/* Writes text to path whole (a temporary name beside it, then renamed),
 * executable. An -o that cannot be written is a usage error naming it. */
static pg_status write_script(const char *cmd, const char *path, const char *text, pg_err *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return pg_fail(err, PG_ERR_USAGE, "%s: -o: '%s' is too long", cmd, path);
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, SLURM_SCRIPT_MODE);
    if (fd < 0)
        return pg_fail(err, PG_ERR_USAGE, "%s: -o: cannot write %s: %s", cmd, path,
                       strerror(errno));
    const size_t len = strlen(text);
    const int ok = write(fd, text, len) == (ssize_t)len && fchmod(fd, SLURM_SCRIPT_MODE) == 0;
    const int saved = errno;
    if (close(fd) != 0 || !ok || rename(tmp, path) != 0) {
        const int e = ok ? errno : saved;
        unlink(tmp);
        return pg_fail(err, PG_ERR_IO, "%s: writing %s: %s", cmd, path, strerror(e));
    }
    return PG_OK;
}

/* Writes the three scripts of a->job and prints what was written and how to
 * submit it. */
static pg_status slurm_write(const slurm_args *a, pg_err *err)
{
    const slurm_job *j = &a->job;
    pg_status (*const writers[])(const slurm_job *, char **, pg_err *) = {
        slurm_array_script, slurm_merge_script, slurm_resubmit_script};
    const char *paths[] = {j->array_script, j->merge_script, j->resubmit_script};
    if (check_results(a->cmd, j->results, j->key, err) != PG_OK) return err->code;
    for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
        char *text = NULL;
        if (writers[i](j, &text, err) != PG_OK) return err->code;
        const pg_status st = write_script(a->cmd, paths[i], text, err);
        free(text);
        if (st != PG_OK) return st;
    }
    if (make_dirs(a->cmd, j->results, err) != PG_OK ||
        claim_results(a->cmd, j->results, j->key, err) != PG_OK)
        return err->code;
    char *hint = NULL;
    if (slurm_submit_hint(j, &hint, err) != PG_OK) return err->code;
    printf("wrote %s (%d shards of %s job %s), %s and %s\nshard databases and done markers go "
           "to %s; the merge writes %s\n%s",
           j->array_script, j->shards, a->job.kind == SLURM_EVAL ? "eval" : "sweep", j->key,
           j->merge_script, j->resubmit_script, j->results, j->into, hint);
    free(hint);
    return PG_OK;
}

int cmd_slurm(int argc, char **argv)
{
    pg_err err = {0};
    slurm_args *a = calloc(1, sizeof *a);
    slurm_owned owned = {0};
    pg_status st = a != NULL ? slurm_parse(argc, argv, a, &err)
                             : pg_fail(&err, PG_ERR_NOMEM, "slurm: out of memory");
    if (st == PG_OK) st = resolve_paths(a, &owned, &err);
    if (st == PG_OK) st = slurm_write(a, &err);
    for (int i = 0; i < owned.n; i++) free(owned.strings[i]);
    free(a);
    return st == PG_OK ? 0 : cli_report(&err);
}
