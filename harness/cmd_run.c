/* cmd_run.c: `precgate run`: sweep a capture through every precision mode into SQLite. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../db/store.h"
#include "../kernels/attn_cuda.h"
#include "../kernels/parallel.h"
#include "../reports/sweep_table.h"
#include "capture.h"
#include "progress.h"
#include "cli.h"
#include "sweep.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Seed of the paged cache's page scattering unless --seed is given. */
#define RUN_DEFAULT_PAGE_SEED 0x5EEDull
/* Length of host and device descriptions. */
#define RUN_DESC_MAX 256

const char cmd_run_usage[] =
    "usage: precgate run --capture PATH [options]\n\n"
    "Computes every layer of the capture in the fp64 reference and in each precision\n"
    "mode, stores per-layer and per-head error metrics in SQLite, and prints the run id\n"
    "and a layer x mode table of rel_l2.\n\n"
    "  --capture PATH       safetensors capture file, or a directory of shards (required)\n"
    "  --variants LIST      comma-separated modes: bf16,fp8kv,fp8qkv (default: all three)\n"
    "  --backend NAME       cpu, cuda or auto (default auto: the GPU when one is usable,\n"
    "                       else the cpu, saying which; cuda without a GPU is an error)\n"
    "  --check-spec         GPU only: also store each mode against the CPU specification's\n"
    "                       output (variants MODE~spec) on one GQA group of heads\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --p-rounding R       fp8qkv's rounding of P before P.V: e4m3 (default), bf16, none\n"
    "  --threads N          CPU threads (default $PRECGATE_THREADS, else all CPUs)\n"
    "  --seed N             seed of the paged KV cache's page scattering\n"
    "  --no-progress        never draw the progress bar\n\n"
    "exit status: 0 on success; 1 on failure (the run is marked failed, rows already\n"
    "stored are kept); 2 on a usage error.\n";

/* Parsed command line. */
typedef struct run_args {
    const char *capture, *db, *label, *backend;
    unsigned variants;
    attn_p_rounding p_rounding;
    long threads;
    unsigned long long seed;
    int progress;
    int check_spec;
} run_args;

/* Parses argv into a; PG_ERR_USAGE on anything unknown or missing. */
static pg_status run_parse(int argc, char **argv, run_args *a, pg_err *err)
{
    enum { O_CAPTURE = 256, O_VARIANTS, O_BACKEND, O_DB, O_LABEL, O_PROUND, O_THREADS, O_SEED,
           O_NOPROG, O_CHECKSPEC };
    static const struct option opts[] = {
        {"capture", required_argument, NULL, O_CAPTURE},
        {"variants", required_argument, NULL, O_VARIANTS},
        {"backend", required_argument, NULL, O_BACKEND},
        {"db", required_argument, NULL, O_DB},
        {"label", required_argument, NULL, O_LABEL},
        {"p-rounding", required_argument, NULL, O_PROUND},
        {"threads", required_argument, NULL, O_THREADS},
        {"seed", required_argument, NULL, O_SEED},
        {"no-progress", no_argument, NULL, O_NOPROG},
        {"check-spec", no_argument, NULL, O_CHECKSPEC},
        {NULL, 0, NULL, 0},
    };
    *a = (run_args){.backend = "auto", .variants = SWEEP_ALL_VARIANTS,
                    .p_rounding = ATTN_P_E4M3, .threads = parallel_default_threads(),
                    .seed = RUN_DEFAULT_PAGE_SEED, .progress = 1};
    optind = 1;
    opterr = 0;
    int c;
    pg_status st = PG_OK;
    while (st == PG_OK && (c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case O_CAPTURE: a->capture = optarg; break;
        case O_VARIANTS: st = sweep_variants_parse(optarg, &a->variants, err); break;
        case O_BACKEND: a->backend = optarg; break;
        case O_DB: a->db = optarg; break;
        case O_LABEL: a->label = optarg; break;
        case O_PROUND: {
            pg_err local = {0};
            if (attn_p_rounding_parse(optarg, &a->p_rounding, &local) != PG_OK)
                st = pg_fail(err, PG_ERR_USAGE, "run: --p-rounding: %s", local.msg);
            break;
        }
        case O_THREADS: st = cli_parse_int("--threads", optarg, 1, 256, &a->threads, err); break;
        case O_SEED: st = cli_parse_u64("--seed", optarg, &a->seed, err); break;
        case O_NOPROG: a->progress = 0; break;
        case O_CHECKSPEC: a->check_spec = 1; break;
        case ':':
        default: return cli_getopt_fail("run", c, argv[optind - 1], err);
        }
    }
    if (st != PG_OK) return st;
    if (optind < argc)
        return pg_fail(err, PG_ERR_USAGE, "run: unexpected argument '%s'", argv[optind]);
    if (a->capture == NULL)
        return pg_fail(err, PG_ERR_USAGE, "run: --capture PATH is required");
    if (strcmp(a->backend, "cpu") != 0 && strcmp(a->backend, "auto") != 0 &&
        strcmp(a->backend, "cuda") != 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --backend '%s' is not cpu, cuda or auto",
                       a->backend);
    if (a->check_spec && strcmp(a->backend, "cpu") == 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --check-spec compares the GPU with the CPU "
                                          "specification; it needs --backend cuda or auto");
    return PG_OK;
}

/* The CPU model name from /proc/cpuinfo, or "unknown cpu". */
static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *colon = strchr(line, ':');
        if (colon == NULL) break;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        snprintf(buf, len, "%s", colon);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

/* The run's configuration as JSON text (caller frees). */
static char *run_config_json(const run_args *a, const capture *cap, const char *backend)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddStringToObject(o, "capture", a->capture);
    cJSON_AddStringToObject(o, "model", cap->model);
    cJSON *vars = cJSON_AddArrayToObject(o, "variants");
    const sweep_variant all[] = {SWEEP_BF16, SWEEP_FP8KV, SWEEP_FP8QKV};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (a->variants & all[i]) cJSON_AddItemToArray(vars, cJSON_CreateString(sweep_variant_name(all[i])));
    cJSON_AddStringToObject(o, "backend_requested", a->backend);
    cJSON_AddStringToObject(o, "backend", backend);
    cJSON_AddBoolToObject(o, "check_spec", a->check_spec);
    cJSON_AddStringToObject(o, "p_rounding", attn_p_rounding_name(a->p_rounding));
    cJSON_AddNumberToObject(o, "threads", (double)a->threads);
    cJSON_AddNumberToObject(o, "page_seed", (double)a->seed);
    cJSON_AddNumberToObject(o, "layers", cap->n_layers);
    cJSON_AddNumberToObject(o, "sequences", cap->n_seqs);
    cJSON_AddNumberToObject(o, "tokens_q", (double)cap->tq);
    cJSON_AddNumberToObject(o, "tokens_kv", (double)cap->tkv);
    cJSON_AddNumberToObject(o, "block_size", cap->block_size);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Opens the GPU for --backend cuda (an error when none is usable) or auto
 * (says on stderr which backend runs); *be stays NULL for the cpu. */
static pg_status open_backend(const run_args *a, cuda_backend **be, char *desc, size_t len,
                              pg_err *err)
{
    *be = NULL;
    if (strcmp(a->backend, "cpu") == 0) return PG_OK;
    pg_err probe = {0};
    if (cuda_backend_open(be, desc, len, &probe) == PG_OK) {
        if (strcmp(a->backend, "auto") == 0)
            fprintf(stderr, "precgate: backend auto: using %s\n", desc);
        return PG_OK;
    }
    if (strcmp(a->backend, "cuda") == 0)
        return pg_fail(err, PG_ERR_DEVICE, "--backend cuda: %s", probe.msg);
    fprintf(stderr, "precgate: backend auto: %s; using cpu\n", probe.msg);
    return PG_OK;
}

/* open_backend on a thread of its own: starting a CUDA context takes about
 *0.2 s, as long as loading and validating a large capture, and neither
 * needs the other. */
typedef struct backend_start {
    const run_args *a;
    cuda_backend *gpu;
    char desc[RUN_DESC_MAX];
    pg_err err;
    pg_status st;
    double seconds;
} backend_start;

static void *backend_start_run(void *arg)
{
    backend_start *b = arg;
    const double t0 = progress_now();
    b->st = open_backend(b->a, &b->gpu, b->desc, sizeof b->desc, &b->err);
    b->seconds = progress_now() - t0;
    return NULL;
}

/* Head dims the GPU attention kernels are built for (kernels/cuda_attn_*.cu). */
static const int gpu_head_dims[] = {64, 128};

/* Whether this run needs something the GPU kernels do not do; the reason in why. */
static int gpu_unsupported(const run_args *a, const capture *cap, char *why, size_t len)
{
    if ((a->variants & SWEEP_FP8QKV) && a->p_rounding != ATTN_P_E4M3) {
        snprintf(why, len, "the GPU fp8qkv kernel rounds P to e4m3 only (--p-rounding %s)",
                 attn_p_rounding_name(a->p_rounding));
        return 1;
    }
    for (int l = 0; l < cap->n_layers; l++) {
        const int d = cap->layers[l].d;
        int ok = 0;
        for (size_t i = 0; i < sizeof gpu_head_dims / sizeof gpu_head_dims[0]; i++)
            ok |= d == gpu_head_dims[i];
        if (!ok) {
            snprintf(why, len, "layer %d has head dim %d; the GPU kernels take 64 or 128", l, d);
            return 1;
        }
    }
    return 0;
}

int cmd_run(int argc, char **argv)
{
    const double t_start = progress_now();
    pg_err err = {0};
    run_args a;
    if (run_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    /* The backend starts while the capture loads; a backend error is
     * reported first, as if it had started alone. */
    backend_start bs = {.a = &a};
    pthread_t starter;
    const int threaded = pthread_create(&starter, NULL, backend_start_run, &bs) == 0;
    if (!threaded) backend_start_run(&bs);
    capture *cap = NULL;
    pg_err load_err = {0};
    const double t_load = progress_now();
    pg_status st = capture_open(a.capture, &cap, &load_err);
    const double load_s = progress_now() - t_load;
    /* The first layers go into the GPU sweep's upload buffers while the GPU
     * starts (its context takes 0.2-0.3 s on the H200 machine). */
    sweep_stage *stage = NULL;
    if (st == PG_OK && strcmp(a.backend, "cpu") != 0) stage = sweep_stage_open(cap);
    if (threaded) pthread_join(starter, NULL);
    cuda_backend *gpu = bs.gpu;
    const char *gpu_desc = bs.desc;
    const double gpu_s = bs.seconds;
    if (gpu == NULL) {
        sweep_stage_close(stage);
        stage = NULL;
    }
    if (bs.st != PG_OK) {
        capture_close(cap);
        return cli_report(&bs.err);
    }
    if (a.check_spec && gpu == NULL) {
        capture_close(cap);
        pg_fail(&err, PG_ERR_DEVICE, "run: --check-spec needs a GPU, and none is usable");
        return cli_report(&err);
    }
    if (st != PG_OK) err = load_err;

    const char *db_path = cli_db_path(a.db);
    pg_store *store = NULL;
    if (store_open(db_path, &store, &err) != PG_OK) {
        sweep_stage_close(stage);
        capture_close(cap);
        cuda_backend_close(gpu);
        return cli_report(&err);
    }
    sweep_stats stats = {0};
    char why[RUN_DESC_MAX];
    if (st == PG_OK && gpu != NULL && gpu_unsupported(&a, cap, why, sizeof why)) {
        if (strcmp(a.backend, "cuda") == 0 || a.check_spec) {
            st = pg_fail(&err, PG_ERR_USAGE, "--backend %s: %s", a.backend, why);
        } else {
            fprintf(stderr, "precgate: backend auto: %s; using cpu\n", why);
            sweep_stage_close(stage);
            stage = NULL;
            cuda_backend_close(gpu);
            gpu = NULL;
        }
    }
    const char *backend = gpu != NULL ? "cuda" : "cpu";
    char *config = st == PG_OK ? run_config_json(&a, cap, backend) : NULL;
    char host[RUN_DESC_MAX] = "unknown", cpu[RUN_DESC_MAX], device[RUN_DESC_MAX + 32];
    gethostname(host, sizeof host - 1);
    cpu_model(cpu, sizeof cpu);
    if (gpu != NULL) snprintf(device, sizeof device, "%s", gpu_desc);
    else snprintf(device, sizeof device, "cpu: %s, %ld threads", cpu, a.threads);
    const store_run_info info = {"sweep", a.label, PRECGATE_GIT_REV, host, device, config};
    int64_t run_id = -1;
    /* A capture that fails validation still gets a run row, marked failed. */
    pg_err run_err = {0};
    if (store_run_begin(store, &info, &run_id, &run_err) != PG_OK) {
        if (st == PG_OK) err = run_err;
        st = run_err.code;
    } else if (st == PG_OK) {
        printf("run %lld: %s, %d layers, backend %s\n", (long long)run_id, a.capture,
               cap->n_layers, backend);
        fflush(stdout);
    }
    if (st == PG_OK) {
        const sweep_options so = {a.variants, a.p_rounding, (int)a.threads, a.seed, a.progress,
                                  gpu, a.check_spec, &stats, stage};
        st = sweep_run(store, run_id, cap, a.capture, &so, &err);
    }
    sweep_stage_close(stage);
    if (run_id >= 0) {
        pg_err fin = {0};
        const pg_status fst = store_run_finish(store, run_id, st == PG_OK ? "complete" : "failed",
                                               err.msg, &fin);
        if (fst != PG_OK && st == PG_OK) {
            err = fin;
            st = fin.code;
        }
        if (fst != PG_OK)
            fprintf(stderr, "precgate: run %lld could not be marked finished: %s\n",
                    (long long)run_id, fin.msg);
        if (st == PG_OK) st = report_sweep_table(store, run_id, stdout, &err);
        else if (fst == PG_OK)
            fprintf(stderr, "precgate: run %lld marked failed in %s\n", (long long)run_id, db_path);
    }
    free(config);
    /* Unmapping the capture and closing the GPU context are timed too: with
     * the phases they account for the command's whole wall time. */
    const double t_close = progress_now();
    capture_close(cap);
    store_close(store);
    cuda_backend_close(gpu);
    if (st == PG_OK) {
        const double t_end = progress_now();
        char lock[64] = "";
        if (stats.lock_s > 0)
            snprintf(lock, sizeof lock, " (%.2f s of it locking upload buffers)", stats.lock_s);
        printf("run %lld complete: %s (backend start %.2f s beside load and validate %.2f s, "
               "compute %.2f s%s, store %.2f s beside it, close %.2f s; %.2f s in all)\n",
               (long long)run_id, db_path, gpu_s, load_s, stats.compute_s, lock, stats.store_s,
               t_end - t_close, t_end - t_start);
    }
    return st == PG_OK ? 0 : cli_report(&err);
}
