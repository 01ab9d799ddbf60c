/* cmd_run.c: `precgate run`: argv into a sweep run's request (harness/run_lifecycle.h),
 * the call, and the printing. */
#include <stdio.h>
#include <string.h>

#include "db/store.h"
#include "kernels/parallel.h"
#include "reports/sweep_table.h"
#include "harness/cli/cli.h"
#include "harness/diagnose.h"
#include "harness/interrupt.h"
#include "harness/progress.h"
#include "harness/run_lifecycle.h"
#include "harness/shard.h"
#include "base/clock.h"

/* Seed of the paged cache's page scattering unless --seed is given. */
#define RUN_DEFAULT_PAGE_SEED 0x5EEDull

const char cmd_run_usage[] =
    "usage: precgate run --capture PATH [options]\n"
    "       precgate run --resume RUN --capture PATH [options]\n\n"
    "Computes every layer of the capture in the fp64 reference and in each precision\n"
    "mode, stores per-layer and per-head error metrics in SQLite, and prints the run id\n"
    "and a layer x mode table of rel_l2.\n\n"
    "  --capture PATH       safetensors capture file, or a directory of shards (required)\n"
    "  --resume RUN         continue sweep run RUN (interrupted, killed or failed),\n"
    "                       computing only the layers it has not stored. The capture's\n"
    "                       content digest, the variants, the backend, --check-spec,\n"
    "                       --seed, --scales, --attribute and the precgate build must be\n"
    "                       the run's (options left out are taken from the run); any\n"
    "                       difference is refused with exit 2, naming the field and both\n"
    "                       values\n"
    "  --force              with --resume: take a run still marked running whose process\n"
    "                       may be alive (another host); one whose process is gone\n"
    "                       (killed -9) needs no --force\n"
    "  --variants LIST      comma-separated kernel profiles, written MODE@PROFILE: bf16,\n"
    "                       fp8kv@fixed, fp8kv@vllm-24197, fp8qkv@fa3, fp8qkv@ideal, ...\n"
    "                       (`precgate help profiles` lists them all with their rules).\n"
    "                       A mode alone is its default profile: fp8kv = fp8kv@fixed,\n"
    "                       fp8qkv = fp8qkv@fa3. Default: bf16,fp8kv,fp8qkv. Rows are\n"
    "                       stored under the full name; a profile given twice (fp8kv and\n"
    "                       fp8kv@fixed) or an unknown name is refused. A database from\n"
    "                       before profiles is migrated when opened: its fp8kv rows are\n"
    "                       fp8kv@fixed, its fp8qkv rows fp8qkv@ideal (what fp8qkv was)\n"
    "  --backend NAME       cpu, cuda or auto (default auto: the GPU when one is usable,\n"
    "                       else the cpu, saying which; cuda without a GPU is an error)\n"
    "  --check-spec         GPU only: also store each profile the GPU runs against the CPU\n"
    "                       specification's output (variants MODE@PROFILE~spec) on one GQA\n"
    "                       group of heads. The GPU runs the profiles its kernels implement\n"
    "                       as the profile states (`precgate help profiles` says where each\n"
    "                       runs); every other profile runs on the CPU specification beside\n"
    "                       it, said on stderr\n"
    "  --attribute          also run each fp8 variant with one tensor alone quantized\n"
    "                       (fp8kv: k, v; fp8qkv: q, k, v, p), with none (every tensor\n"
    "                       bf16: the profile's arithmetic alone) and all (the variant:\n"
    "                       the joint error), into the attribution table, each against\n"
    "                       the layer's one reference. On the GPU where its kernels run\n"
    "                       them, else on the CPU specification (said on stderr). The\n"
    "                       parts are not shares of the joint error: see the README\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --scales POLICY      fp8 q/k/v scales: capture (the capture's q/k/v_scale\n"
    "                       metadata; the default when it has them), amax (amax / 448 per\n"
    "                       tensor; the default otherwise), vllm-dynamic (vLLM's\n"
    "                       calc_kv_scales: amax / 200 for q and k, amax / 100 for v) or\n"
    "                       unit (1.0); an amax of 0 gives 1.0. capture on a capture\n"
    "                       without scales is an error. Stored as quant_stats.scale_source\n"
    "                       and config \"scales\"; the gate compares runs of one policy\n"
    "  --threads N          CPU threads (default $PRECGATE_THREADS, else all CPUs)\n"
    "  --seed N             seed of the paged KV cache's page scattering\n"
    "  --no-progress        never draw the progress bar\n"
    "  --shard I/N          sweep only part I (0 .. N-1) of N: whole layers, balanced by\n"
    "                       their attention FLOPs (a deterministic greedy every shard\n"
    "                       computes alike); a part with no layer stores an empty run.\n"
    "                       `precgate merge` folds the N shard databases into one run\n"
    "  --job KEY            with --shard: the job the part belongs to (default: a digest\n"
    "                       of the capture's content, --variants, --scales, --seed,\n"
    "                       --attribute, --check-spec, --backend, the build and N)\n\n"
    "SIGINT or SIGTERM stops the sweep after the layer computing and the one being\n"
    "written; the run is marked interrupted and the command prints how to resume it.\n\n"
    "exit status: 0 on success; 1 on failure (the run is marked failed, rows already\n"
    "stored are kept), a variant its kernel cannot run on a layer included (sinks on\n"
    "fp8qkv@flashinfer-fa3); 2 on a usage error or a refused --resume; 130 (SIGINT) or\n"
    "143 (SIGTERM) when interrupted.\n";

/* Parsed command line: the request, and what only the CLI uses. */
typedef struct run_args {
    run_sweep_request rq;
    const char *db;  /* --db, NULL without (cli_db_path resolves it) */
    int progress;
} run_args;

/* --variants LIST into the sweep_variants to (a cli_option parse). */
static pg_status parse_variants(char *value, void *to, pg_err *err)
{
    return sweep_variants_parse(value, to, err);
}

/* --scales POLICY into the sweep_scales to (a cli_option parse). */
static pg_status parse_scales(char *value, void *to, pg_err *err)
{
    return sweep_scales_parse(value, to, err);
}

/* --shard I/N into the shard_spec to (a cli_option parse). */
static pg_status parse_shard(char *value, void *to, pg_err *err)
{
    return shard_parse("run", value, to, err);
}

/* Rows of run's option table, its end row included. */
#define RUN_OPTION_ROWS 16

/* run's option table into opts, its values going into a and *no_progress:
 * what run_parse parses by, and what cmd_run_option_arity answers from. */
static void run_option_table(run_args *a, int *no_progress, cli_option opts[RUN_OPTION_ROWS])
{
    const cli_option t[] = {
        {"capture", CLI_TEXT, .to = &a->rq.capture},
        {"variants", CLI_CALL, .to = &a->rq.variants, .parse = parse_variants,
         .given = &a->rq.given_variants},
        {"backend", CLI_TEXT, .to = &a->rq.backend, .given = &a->rq.given_backend},
        {"db", CLI_TEXT, .to = &a->db},
        {"label", CLI_TEXT, .to = &a->rq.label},
        {"threads", CLI_LONG, .to = &a->rq.threads, .min = 1, .max = PARALLEL_MAX_THREADS},
        {"seed", CLI_U64, .to = &a->rq.seed, .given = &a->rq.given_seed},
        {"no-progress", CLI_FLAG, .to = no_progress},
        {"check-spec", CLI_FLAG, .to = &a->rq.check_spec, .given = &a->rq.given_check_spec},
        {"resume", CLI_LONG, .to = &a->rq.resume, .min = 1, .max = CLI_RESUME_MAX},
        {"force", CLI_FLAG, .to = &a->rq.force},
        {"scales", CLI_CALL, .to = &a->rq.scales, .parse = parse_scales, .given = &a->rq.given_scales},
        {"attribute", CLI_FLAG, .to = &a->rq.attribute, .given = &a->rq.given_attribute},
        {"shard", CLI_CALL, .to = &a->rq.shard, .parse = parse_shard},
        {"job", CLI_TEXT, .to = &a->rq.job},
        {NULL},
    };
    _Static_assert(sizeof t / sizeof t[0] == RUN_OPTION_ROWS, "RUN_OPTION_ROWS");
    memcpy(opts, t, sizeof t);
}

/* Parses argv into a; PG_ERR_USAGE on anything unknown or missing. */
static pg_status run_parse(int argc, char **argv, run_args *a, pg_err *err)
{
    *a = (run_args){.rq = {.backend = "auto", .threads = cli_default_threads(),
                           .scan_threads = cli_default_threads(),
                           .seed = RUN_DEFAULT_PAGE_SEED, .resume = -1,
                           .cuda_mem_limit = cli_cuda_mem_limit, .out = stdout},
                    .progress = 1};
    pg_status st = sweep_variants_parse(SWEEP_DEFAULT_VARIANTS, &a->rq.variants, err);
    if (st != PG_OK) return st;
    int no_progress = 0;
    cli_option opts[RUN_OPTION_ROWS];
    run_option_table(a, &no_progress, opts);
    st = cli_parse_options("run", argc, argv, opts, NULL, err);
    if (st != PG_OK) return st;
    if (no_progress) a->progress = 0;
    if (a->rq.capture == NULL)
        return pg_fail(err, PG_ERR_USAGE, a->rq.resume > 0 ? "run: --resume needs --capture PATH "
                                                          "(the run's capture, checked by its "
                                                          "content digest)"
                                                        : "run: --capture PATH is required");
    if (a->rq.force && a->rq.resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --force only goes with --resume RUN");
    if (a->rq.label != NULL && a->rq.resume > 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --label with --resume: a resumed run keeps the "
                                          "label it was started with");
    if (a->rq.job != NULL && a->rq.shard.count == 0 && a->rq.resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --job KEY names the job of a part: it goes "
                                          "with --shard I/N");
    if (a->rq.job != NULL && shard_job_check("run", a->rq.job, err) != PG_OK) return err->code;
    if (strcmp(a->rq.backend, "cpu") != 0 && strcmp(a->rq.backend, "auto") != 0 &&
        strcmp(a->rq.backend, "cuda") != 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --backend '%s' is not cpu, cuda or auto",
                       a->rq.backend);
    if (a->rq.check_spec && strcmp(a->rq.backend, "cpu") == 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --check-spec compares the GPU with the CPU "
                                          "specification; it needs --backend cuda or auto");
    return PG_OK;
}


static void put_shell_word(FILE *f, const char *text)
{
    const char *safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-+=:,@%";
    if (text[0] != '\0' && strspn(text, safe) == strlen(text)) {
        fputs(text, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == '\'') fputs("'\\''", f);
        else fputc(*p, f);
    }
    fputc('\'', f);
}

/* Prints how the interrupted run_id continues (stderr): the command with the
 * capture as given and the database when --db named one. */
static void print_resume_hint(const run_sweep_result *res, const run_args *a)
{
    fprintf(stderr,
            "precgate: run %lld interrupted by %s: %d of %d layers stored; continue it with\n"
            "  precgate run --resume %lld --capture ",
            (long long)res->run_id, interrupt_signal_name(res->signal),
            res->stats.layers_stored + res->stats.layers_skipped, res->n_layers,
            (long long)res->run_id);
    put_shell_word(stderr, a->rq.capture);
    if (a->db != NULL) {
        fputs(" --db ", stderr);
        put_shell_word(stderr, a->db);
    }
    fputc('\n', stderr);
}

/* Prints a complete run's layer x mode table and diagnosis (the store
 * reopened: the lifecycle closed it) and its timing line. */
static pg_status print_complete(const run_args *a, const run_sweep_result *res, double t_start,
                                pg_err *err)
{
    pg_store *store = NULL;
    pg_status st = store_open(a->rq.db_path, &store, err);
    if (st == PG_OK) st = report_sweep_table(store, res->run_id, stdout, err);
    if (st == PG_OK) st = diag_print_run(store, res->run_id, stdout, err);
    store_close(store);
    if (st != PG_OK) return st;
    const sweep_stats *s = &res->stats;
    char lock[64] = "", resumed[96] = "", attributed[64] = "", diagnosed[80] = "";
    if (s->lock_s > 0)
        snprintf(lock, sizeof lock, " (%.2f s of it locking upload buffers)", s->lock_s);
    if (a->rq.attribute)
        snprintf(attributed, sizeof attributed, " (%.2f s of it --attribute)", s->attribute_s);
    if (s->diagnose_s > 0)
        snprintf(diagnosed, sizeof diagnosed, " (%.2f s of it diagnosing external outputs)",
                 s->diagnose_s);
    if (a->rq.resume > 0)
        snprintf(resumed, sizeof resumed, "; %d layers computed, %d were stored",
                 s->layers_stored, s->layers_skipped);
    printf("run %lld complete: %s (backend start %.2f s beside load and validate %.2f s, "
           "compute %.2f s%s%s%s, store %.2f s beside it, close %.2f s; %.2f s in all%s)\n",
           (long long)res->run_id, a->rq.db_path, res->backend_s, res->load_s, s->compute_s,
           lock, attributed, diagnosed, s->store_s, res->close_s,
           pg_clock_mono_s() - t_start, resumed);
    return PG_OK;
}

int cmd_run(int argc, char **argv)
{
    const double t_start = pg_clock_mono_s();
    pg_err err = {0};
    run_args a;
    if (run_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    /* From here on SIGINT/SIGTERM ask the sweep to stop between layers. */
    interrupt_install();
    progress bar;
    const pg_notes notes = progress_notes(&bar, a.progress);
    a.rq.notes = &notes;
    a.rq.db_path = cli_db_path(a.db);
    run_sweep_result res;
    pg_status st = run_lifecycle_sweep(&a.rq, &res, &err);
    if (st == PG_OK) st = print_complete(&a, &res, t_start, &err);
    else if (res.finished && res.signal) print_resume_hint(&res, &a);
    else if (res.finished)
        fprintf(stderr, "precgate: run %lld marked failed in %s\n", (long long)res.run_id,
                a.rq.db_path);
    if (res.signal) return interrupt_exit_code(res.signal);
    return st == PG_OK ? 0 : cli_report(&err);
}

pg_status cmd_run_check(int argc, char **argv, pg_err *err)
{
    run_args a;
    return run_parse(argc, argv, &a, err);
}

const char *cmd_run_option(const char *name, int *takes_value)
{
    run_args a = {0};
    int no_progress = 0;
    cli_option opts[RUN_OPTION_ROWS];
    run_option_table(&a, &no_progress, opts);
    const cli_option *o = cli_option_find(opts, name);
    if (o != NULL) *takes_value = o->type != CLI_FLAG;
    return o != NULL ? o->name : NULL;
}
