/* cmd_run.c: `precgate run`: sweep a capture through every precision mode into SQLite. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/run_config.h"
#include "db/store.h"
#include "kernels/attn_backend.h"
#include "kernels/parallel.h"
#include "reports/sweep_table.h"
#include "harness/capture.h"
#include "harness/cli/cli.h"
#include "harness/diagnose.h"
#include "harness/eval_resume.h"
#include "harness/interrupt.h"
#include "harness/progress.h"
#include "harness/run_complete.h"
#include "harness/shard.h"
#include "harness/sweep.h"
#include "base/variant.h"
#include "base/clock.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Seed of the paged cache's page scattering unless --seed is given. */
#define RUN_DEFAULT_PAGE_SEED 0x5EEDull
/* Length of host and device descriptions. */
#define RUN_DESC_MAX 256

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
    "                       as the profile states (bf16, fp8kv@fixed, fp8kv@vllm-24197,\n"
    "                       fp8qkv@fa3 at head dims 64, 128); every other profile runs on the CPU\n"
    "                       specification beside it, said on stderr\n"
    "  --attribute          also run each fp8 variant with one tensor alone quantized\n"
    "                       (fp8kv: k, v; fp8qkv: q, k, v, p), with none (every tensor\n"
    "                       bf16: the profile's arithmetic alone) and all (the variant:\n"
    "                       the joint error), into the attribution table. On the CPU\n"
    "                       specification whatever the backend (said on stderr). The\n"
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

/* Parsed command line. */
typedef struct run_args {
    const char *capture, *db, *label, *backend;
    sweep_variants variants;
    long threads;
    unsigned long long seed;
    int progress;
    int check_spec;
    long resume;          /* --resume RUN; -1 without */
    int force;
    /* Which of the options that define a run's numbers were given (a
     * resume takes the others from the run). */
    int given_variants, given_backend, given_seed, given_check_spec;
    int given_scales;
    int attribute, given_attribute;   /* --attribute */
    sweep_scales scales;  /* DEFAULT until given, taken from a resumed run or resolved */
    shard_spec shard;     /* --shard I/N; count 0 without (a resume takes the run's) */
    const char *job;      /* --job KEY, NULL without */
    char job_buf[SHARD_JOB_MAX];  /* the default key, or a resumed run's */
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
        {"capture", CLI_TEXT, .to = &a->capture},
        {"variants", CLI_CALL, .to = &a->variants, .parse = parse_variants,
         .given = &a->given_variants},
        {"backend", CLI_TEXT, .to = &a->backend, .given = &a->given_backend},
        {"db", CLI_TEXT, .to = &a->db},
        {"label", CLI_TEXT, .to = &a->label},
        {"threads", CLI_LONG, .to = &a->threads, .min = 1, .max = PARALLEL_MAX_THREADS},
        {"seed", CLI_U64, .to = &a->seed, .given = &a->given_seed},
        {"no-progress", CLI_FLAG, .to = no_progress},
        {"check-spec", CLI_FLAG, .to = &a->check_spec, .given = &a->given_check_spec},
        {"resume", CLI_LONG, .to = &a->resume, .min = 1, .max = CLI_RESUME_MAX},
        {"force", CLI_FLAG, .to = &a->force},
        {"scales", CLI_CALL, .to = &a->scales, .parse = parse_scales, .given = &a->given_scales},
        {"attribute", CLI_FLAG, .to = &a->attribute, .given = &a->given_attribute},
        {"shard", CLI_CALL, .to = &a->shard, .parse = parse_shard},
        {"job", CLI_TEXT, .to = &a->job},
        {NULL},
    };
    _Static_assert(sizeof t / sizeof t[0] == RUN_OPTION_ROWS, "RUN_OPTION_ROWS");
    memcpy(opts, t, sizeof t);
}

/* Parses argv into a; PG_ERR_USAGE on anything unknown or missing. */
static pg_status run_parse(int argc, char **argv, run_args *a, pg_err *err)
{
    *a = (run_args){.backend = "auto", .threads = cli_default_threads(),
                    .seed = RUN_DEFAULT_PAGE_SEED, .progress = 1, .resume = -1};
    pg_status st = sweep_variants_parse(SWEEP_DEFAULT_VARIANTS, &a->variants, err);
    if (st != PG_OK) return st;
    int no_progress = 0;
    cli_option opts[RUN_OPTION_ROWS];
    run_option_table(a, &no_progress, opts);
    st = cli_parse_options("run", argc, argv, opts, NULL, err);
    if (st != PG_OK) return st;
    if (no_progress) a->progress = 0;
    if (a->capture == NULL)
        return pg_fail(err, PG_ERR_USAGE, a->resume > 0 ? "run: --resume needs --capture PATH "
                                                          "(the run's capture, checked by its "
                                                          "content digest)"
                                                        : "run: --capture PATH is required");
    if (a->force && a->resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --force only goes with --resume RUN");
    if (a->label != NULL && a->resume > 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --label with --resume: a resumed run keeps the "
                                          "label it was started with");
    if (a->job != NULL && a->shard.count == 0 && a->resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --job KEY names the job of a part: it goes "
                                          "with --shard I/N");
    if (a->job != NULL && shard_job_check("run", a->job, err) != PG_OK) return err->code;
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

/* Room for a 64-bit number in decimal and its NUL. */
#define RUN_U64_TEXT_MAX 24

/* The profiles as config_json's "variants": their full names in the
 * table's order, so that runs of one set of profiles record one list (the
 * gate's automatic baseline compares it, db/gate_store.h). */
static cJSON *variants_json(const sweep_variants *v)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list != NULL && i < v->n; i++)
        cJSON_AddItemToArray(list, cJSON_CreateString(attn_profile_variant(v->p[i])));
    return list;
}

/* The run's configuration as JSON text (caller frees), written by
 * run_config_write (db/run_config.h): everything that defines its numbers,
 * for --resume to compare, with the layers a part owns (those not marked in
 * skip[]) and what each layer of cap holds when whole under so. NULL when
 * out of memory. */
static char *run_config_json(const run_args *a, const capture *cap, const char *backend,
                             const sweep_options *so, const unsigned char *skip)
{
    const char *names[SWEEP_MAX_VARIANTS];
    for (int i = 0; i < a->variants.n; i++) names[i] = attn_profile_variant(a->variants.p[i]);
    store_layer_rows *rows = NULL;
    int *owned = calloc((size_t)cap->n_layers, sizeof *owned);
    pg_err ignored = {0};  /* out of memory: NULL below */
    char *text = NULL;
    if (owned != NULL && run_complete_layer_rows(cap, so, &rows, &ignored) == PG_OK) {
        int n_owned = 0;
        for (int l = 0; a->shard.count > 0 && l < cap->n_layers; l++)
            if (!skip[l]) owned[n_owned++] = l;
        const run_config c = {
            .capture = a->capture, .capture_digest = cap->digest, .model = cap->model,
            .variants = names, .n_variants = a->variants.n, .backend_requested = a->backend,
            .backend = backend, .check_spec = a->check_spec,
            .scales = sweep_scales_name(a->scales), .attribute = a->attribute,
            .threads = a->threads, .page_seed = a->seed, .git_rev = PRECGATE_GIT_REV,
            .layers = cap->n_layers, .sequences = cap->n_seqs, .tokens_q = (long long)cap->tq,
            .tokens_kv = (long long)cap->tkv, .block_size = cap->block_size,
            .layer_rows = rows, .job = a->job, .shard_index = a->shard.index,
            .shard_count = a->shard.count, .shard_layers = owned, .n_shard_layers = n_owned};
        cJSON *o = run_config_write(&c);
        text = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
    }
    free(rows);
    free(owned);
    return text;
}

/* The default job key of a sweep part (shard_job_key): the capture's
 * content digest and the options that define the numbers as given (the
 * backend requested, not the one a node resolved: a part that fell back to
 * the cpu is then refused by merge naming "backend", not taken for another
 * job), the build and the shard count. */
static pg_status run_default_job(const run_args *a, const capture *cap, char out[SHARD_JOB_MAX],
                                 pg_err *err)
{
    cJSON *o = cJSON_CreateObject();
    char seed[RUN_U64_TEXT_MAX];
    snprintf(seed, sizeof seed, "%llu", a->seed);
    if (o != NULL) {
        cJSON_AddStringToObject(o, RUN_CONFIG_CAPTURE_DIGEST, cap->digest);
        cJSON_AddItemToObject(o, RUN_CONFIG_VARIANTS, variants_json(&a->variants));
        cJSON_AddStringToObject(o, RUN_CONFIG_BACKEND_REQUESTED, a->backend);
        cJSON_AddBoolToObject(o, RUN_CONFIG_CHECK_SPEC, a->check_spec);
        cJSON_AddStringToObject(o, RUN_CONFIG_SCALES, sweep_scales_name(a->scales));
        cJSON_AddBoolToObject(o, RUN_CONFIG_ATTRIBUTE, a->attribute);
        cJSON_AddStringToObject(o, RUN_CONFIG_PAGE_SEED_DECIMAL, seed);
        cJSON_AddStringToObject(o, RUN_CONFIG_GIT_REV, PRECGATE_GIT_REV);
    }
    char *text = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (text == NULL) return pg_fail(err, PG_ERR_NOMEM, "run: out of memory");
    shard_job_key(text, a->shard.count, out);
    free(text);
    return PG_OK;
}

/* Opens the GPU for --backend cuda (an error when none is usable) or auto
 * (says on stderr which backend runs); *be stays NULL for the cpu. */
static pg_status open_backend(const run_args *a, attn_backend **be, char *desc, size_t len,
                              pg_err *err)
{
    *be = NULL;
    if (strcmp(a->backend, "cpu") == 0) return PG_OK;
    pg_err probe = {0};
    if (attn_backend_open("cuda", (int)a->threads, be, desc, len, &probe) == PG_OK) {
        double mem_limit = 0;
        if (cli_cuda_mem_limit(&mem_limit, err) != PG_OK) {
            attn_backend_close(*be);
            *be = NULL;
            return err->code;
        }
        attn_backend_limit_memory(*be, mem_limit);
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
    attn_backend *gpu;
    char desc[RUN_DESC_MAX];
    pg_err err;
    pg_status st;
    double seconds;
} backend_start;

static void *backend_start_run(void *arg)
{
    backend_start *b = arg;
    const double t0 = pg_clock_mono_s();
    b->st = open_backend(b->a, &b->gpu, b->desc, sizeof b->desc, &b->err);
    b->seconds = pg_clock_mono_s() - t0;
    return NULL;
}

/* A sweep run being continued (--resume) and what it recorded. */
typedef struct resume_ctx {
    int64_t run_id;
    run_config_doc cfg;       /* its config_json (db/run_config.h) */
    const char *capture_name; /* its "capture": the capture name of its rows */
    const char *digest;       /* its "capture_digest" */
    const char *backend;      /* its "backend": the one that ran */
} resume_ctx;

/* The run's stored "variants" (full profile names; db/schema.c migration
 * 10 renamed older runs' modes) into *out; PG_ERR_USAGE naming the run when
 * the list is missing, empty, or names no profile of this precgate (the
 * message of sweep_variants_parse). */
static pg_status cfg_variants(const run_config *cfg, int64_t run_id, sweep_variants *out,
                              pg_err *err)
{
    char joined[SWEEP_MAX_VARIANTS * VARIANT_NAME_MAX] = "";
    size_t at = 0;
    int ok = cfg->n_variants > 0;
    for (int i = 0; ok && i < cfg->n_variants; i++) {
        if (at >= sizeof joined) ok = 0;
        else at += (size_t)snprintf(joined + at, sizeof joined - at, "%s%s", at ? "," : "",
                                    cfg->variants[i]);
    }
    if (!ok || at >= sizeof joined)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run's config_json has no "
                       "list of variants: start a new run", (long long)run_id);
    pg_err why = {0};
    if (sweep_variants_parse(joined, out, &why) != PG_OK)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run's variants [%s] are not "
                       "profiles this precgate runs (%s): start a new run", (long long)run_id,
                       joined, why.msg);
    return PG_OK;
}

/* The fp8qkv P rounding that runs before profiles recorded ("p_rounding";
 * absent in later runs): only e4m3, whose fp8qkv is fp8qkv@ideal (migration
 * 10), is resumable; one with bf16 or none and an fp8qkv profile is
 * PG_ERR_USAGE, since no profile rounds P that way. */
#define RUN_OLD_P_ROUNDING "e4m3"

/* Sets o[key] to v (a new item, or NULL: out of memory, left for the
 * comparison to report as a difference). */
static void json_set(cJSON *o, const char *key, cJSON *v)
{
    if (v == NULL) return;
    if (cJSON_HasObjectItem(o, key)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else cJSON_AddItemToObject(o, key, v);
}

/* The options that define a sweep's numbers and can be given on the command
 * line, with config_json's keys (resume_check_fields). */
static const resume_field run_option_fields[] = {
    {RUN_CONFIG_GIT_REV, "the precgate build that computed the run"},
    {RUN_CONFIG_VARIANTS, "--variants"},
    {RUN_CONFIG_BACKEND, "--backend"},
    {RUN_CONFIG_CHECK_SPEC, "--check-spec"},
    {RUN_CONFIG_PAGE_SEED_DECIMAL, "--seed"},
    {RUN_CONFIG_SCALES, "--scales"},
    {RUN_CONFIG_ATTRIBUTE, "--attribute"},
};
/* What is compared once the capture is loaded and the backend started. */
static const resume_field run_capture_fields[] = {
    {RUN_CONFIG_CAPTURE_DIGEST, "--capture's content digest"},
    {RUN_CONFIG_BACKEND, "the backend that would run"},
};

/* A resumed run's place in a sharded job: a part resumes as the part it is
 * (its "job" and "shard" are taken into a); a --shard or --job given must
 * equal the run's (PG_ERR_USAGE naming both values), and either on a run
 * that is no part is refused. */
static pg_status resume_shard(run_args *a, const resume_ctx *r, pg_err *err)
{
    const run_config *c = &r->cfg.c;
    if (!c->shard_known) {
        if (a->shard.count > 0 || a->job != NULL)
            return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run is no part of a "
                           "sharded job: --shard and --job do not go with its resume",
                           (long long)r->run_id);
        return PG_OK;
    }
    if (!c->shard_readable)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run's config_json has no "
                       "readable job, shard and shard_layers: start a new run",
                       (long long)r->run_id);
    const shard_spec run = {.index = c->shard_index, .count = c->shard_count};
    if (a->shard.count > 0 && (a->shard.index != run.index || a->shard.count != run.count))
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: shard (--shard) differs: the run "
                       "has %d/%d, this command gives %d/%d", (long long)r->run_id, run.index,
                       run.count, a->shard.index, a->shard.count);
    if (a->job != NULL && strcmp(a->job, c->job) != 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: job (--job) differs: the run has "
                       "%s, this command gives %s", (long long)r->run_id, c->job, a->job);
    a->shard = run;
    snprintf(a->job_buf, sizeof a->job_buf, "%s", c->job);
    a->job = a->job_buf;
    return PG_OK;
}

/* Marks in skip[] the layers a resumed part does not own: those missing
 * from its config's "shard_layers" (resume_shard checked it is an array);
 * an entry that is no layer of cap is PG_ERR_USAGE. */
static pg_status resume_skip_unowned(const resume_ctx *r, const capture *cap,
                                     unsigned char *skip, pg_err *err)
{
    unsigned char *owned = calloc((size_t)cap->n_layers, 1);
    if (owned == NULL) return pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    pg_status st = PG_OK;
    for (int i = 0; i < r->cfg.c.n_shard_layers; i++) {
        const int layer = r->cfg.c.shard_layers[i];  /* -1: no number */
        if (layer < 0 || layer >= cap->n_layers) {
            st = pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run's shard_layers name a "
                         "layer the capture (%d layers) does not have", (long long)r->run_id,
                         cap->n_layers);
            break;
        }
        owned[layer] = 1;
    }
    for (int l = 0; st == PG_OK && l < cap->n_layers; l++) skip[l] |= !owned[l];
    free(owned);
    return st;
}

/* Reads run a->resume into r: it must be a sweep run whose config_json
 * records what --resume compares. Each option that defines the numbers and
 * was given must equal the run's (else PG_ERR_USAGE naming the field and
 * both values, resume_check_fields); those not given are taken from the
 * run. --backend auto is resolved and compared later (resume_check_capture). */
static pg_status resume_open(pg_store *store, run_args *a, resume_ctx *r, pg_err *err)
{
    *r = (resume_ctx){.run_id = a->resume};
    store_run_state rs;
    pg_status st = store_run_read(store, a->resume, &rs, err);
    if (st != PG_OK) return st;
    if (strcmp(rs.kind, "sweep") != 0)
        st = pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: run %lld is a '%s' run, not a sweep",
                     (long long)a->resume, (long long)a->resume, rs.kind);
    /* Whether this process may take the run (not one that may still be
     * running), before the capture is loaded and the GPU started; the
     * reopen after the checks takes it atomically. */
    if (st == PG_OK) st = store_run_resumable(store, &rs, "sweep", a->force, err);
    pg_err unreadable = {0};  /* replaced by the message below */
    if (st == PG_OK && run_config_read(rs.config_json, &r->cfg, &unreadable) != PG_OK)
        st = pg_fail(err, PG_ERR_USAGE,
                     "run: --resume %lld: the run has no readable config_json (it failed before "
                     "its sweep started): start a new run", (long long)a->resume);
    store_run_state_free(&rs);
    if (st != PG_OK) return st;
    const run_config *c = &r->cfg.c;
    const char *p_rounding = c->p_rounding;  /* older runs only */
    const char *seed = c->page_seed_decimal;
    /* Absent in runs before --scales (their policy was the default, which
     * the capture resolves again); present, it must be a policy. */
    const char *scales = c->scales;
    sweep_scales run_scales = SWEEP_SCALES_DEFAULT;
    sweep_variants variants;
    st = cfg_variants(c, a->resume, &variants, err);
    if (st != PG_OK) return st;
    int rounds_p = 0; /* a variant whose mode quantizes P (what --p-rounding chose) */
    for (int i = 0; i < variants.n; i++)
        rounds_p |= (pg_mode_traits_of(attn_profile_mode(variants.p[i]))->quantized &
                     PG_TENSOR_P) != 0;
    if (p_rounding != NULL && rounds_p && strcmp(p_rounding, RUN_OLD_P_ROUNDING) != 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run rounded fp8qkv's P to %s "
                       "(--p-rounding, which kernel profiles replaced); no profile does: start "
                       "a new run", (long long)a->resume, p_rounding);
    r->capture_name = c->capture;
    r->digest = c->capture_digest;
    r->backend = c->backend;
    unsigned long long page_seed = 0;
    pg_err ignored = {0};
    if (r->capture_name == NULL || r->digest == NULL || r->backend == NULL || seed == NULL ||
        c->git_rev == NULL || !c->check_spec_known ||
        cli_parse_u64("page_seed_decimal", seed, &page_seed, &ignored) != PG_OK ||
        (scales != NULL && sweep_scales_parse(scales, &run_scales, &ignored) != PG_OK))
        return pg_fail(err, PG_ERR_USAGE,
                       "run: --resume %lld: the run's config_json does not record its capture "
                       "digest, variants, backend, check_spec, page_seed_decimal and "
                       "git_rev (a run from an older precgate): start a new run",
                       (long long)a->resume);
    /* This command's values: the run's, with what was given instead. */
    cJSON *now = cJSON_Duplicate(r->cfg.tree, 1);
    if (now == NULL) return pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    json_set(now, RUN_CONFIG_GIT_REV, cJSON_CreateString(PRECGATE_GIT_REV));
    if (a->given_variants) json_set(now, RUN_CONFIG_VARIANTS, variants_json(&a->variants));
    if (a->given_backend && strcmp(a->backend, "auto") != 0)
        json_set(now, RUN_CONFIG_BACKEND, cJSON_CreateString(a->backend));
    if (a->given_check_spec) json_set(now, RUN_CONFIG_CHECK_SPEC, cJSON_CreateBool(a->check_spec));
    char seed_now[RUN_U64_TEXT_MAX];
    snprintf(seed_now, sizeof seed_now, "%llu", a->seed);
    if (a->given_seed) json_set(now, RUN_CONFIG_PAGE_SEED_DECIMAL, cJSON_CreateString(seed_now));
    if (a->given_scales)
        json_set(now, RUN_CONFIG_SCALES, cJSON_CreateString(sweep_scales_name(a->scales)));
    /* A run from before --attribute has no "attribute": it did not attribute
     * (recorded so in the tree, which a resume from before "layer_rows" stores). */
    if (a->given_attribute && !c->attribute_known)
        json_set(r->cfg.tree, RUN_CONFIG_ATTRIBUTE, cJSON_CreateBool(0));
    if (a->given_attribute) json_set(now, RUN_CONFIG_ATTRIBUTE, cJSON_CreateBool(a->attribute));
    st = resume_check_fields("run", a->resume, r->cfg.tree, now, run_option_fields,
                             sizeof run_option_fields / sizeof run_option_fields[0], err);
    cJSON_Delete(now);
    a->variants = variants;
    if (!a->given_backend) a->backend = r->backend;
    a->check_spec = c->check_spec;
    a->seed = page_seed;
    if (!a->given_scales) a->scales = run_scales;
    a->attribute = c->attribute;
    if (st == PG_OK) st = resume_shard(a, r, err);
    return st;
}

/* What needs the capture and the backend that will run: the content digest
 * (a copy or a move of the capture is fine, other content is not) and, for
 * --backend auto, the backend it chose. */
static pg_status resume_check_capture(const resume_ctx *r, const capture *cap, const char *backend,
                                      pg_err *err)
{
    cJSON *now = cJSON_CreateObject();
    if (now == NULL) return pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    json_set(now, RUN_CONFIG_CAPTURE_DIGEST, cJSON_CreateString(cap->digest));
    json_set(now, RUN_CONFIG_BACKEND, cJSON_CreateString(backend));
    const pg_status st =
        resume_check_fields("run", r->run_id, r->cfg.tree, now, run_capture_fields,
                            sizeof run_capture_fields / sizeof run_capture_fields[0], err);
    cJSON_Delete(now);
    return st;
}

/* Marks in stored[] the layers the run holds whole (sweep_layer_rows), into
 * *n_stored, and in no_shape[] those of them without their layer_shapes row
 * (stored before schema version 12 made the table: whole all the same); a
 * layer holding some of its rows but not all is PG_ERR_DB (the sweep writes
 * a layer in one transaction: the store was edited). */
static pg_status resume_stored_layers(pg_store *store, const resume_ctx *r, const capture *cap,
                                      const sweep_options *so, unsigned char *stored,
                                      unsigned char *no_shape, int *n_stored, pg_err *err)
{
    store_layer_rows *rows = calloc((size_t)cap->n_layers, sizeof *rows);
    if (rows == NULL) return pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    pg_status st = store_sweep_layer_rows(store, r->run_id, r->capture_name, cap->n_layers, rows,
                                          err);
    *n_stored = 0;
    for (int l = 0; st == PG_OK && l < cap->n_layers; l++) {
        store_layer_rows want;
        sweep_layer_rows(cap, l, so, &want);
        stored[l] = rows[l].metrics == want.metrics && rows[l].quant == want.quant &&
                    rows[l].attribution == want.attribution &&
                    rows[l].diagnosis == want.diagnosis &&
                    (rows[l].shapes == want.shapes || rows[l].shapes == 0);
        no_shape[l] = stored[l] && rows[l].shapes == 0;
        *n_stored += stored[l];
        if (!stored[l] && (rows[l].metrics != 0 || rows[l].quant != 0 || rows[l].shapes != 0 ||
                           rows[l].attribution != 0 || rows[l].diagnosis != 0))
            st = pg_fail(err, PG_ERR_DB,
                         "run: --resume %lld: layer %d of capture '%s' holds %lld of its %lld "
                         "layer_metrics rows, %lld of its %lld quant_stats rows, %lld of its "
                         "%lld layer_shapes rows, %lld of its %lld ext_diagnosis rows and %lld "
                         "of its %lld attribution rows: not a whole layer (a layer is stored in "
                         "one transaction, so rows were changed by hand, or the layer was swept "
                         "before the diagnosis existed); nothing was changed: start a new run",
                         (long long)r->run_id, l, r->capture_name, (long long)rows[l].metrics,
                         (long long)want.metrics, (long long)rows[l].quant,
                         (long long)want.quant, (long long)rows[l].shapes,
                         (long long)want.shapes, (long long)rows[l].diagnosis,
                         (long long)want.diagnosis, (long long)rows[l].attribution,
                         (long long)want.attribution);
    }
    free(rows);
    return st;
}

/* Records, in one transaction, the layer_shapes rows of the layers marked
 * in no_shape[] (stored before the table existed), from cap: the capture
 * --resume checked to hold the run's content. *n_recorded counts them. */
static pg_status resume_record_shapes(pg_store *store, int64_t run_id, const char *capture_name,
                                      const capture *cap, const unsigned char *no_shape,
                                      int *n_recorded, pg_err *err)
{
    *n_recorded = 0;
    for (int l = 0; l < cap->n_layers; l++) *n_recorded += no_shape[l];
    if (*n_recorded == 0) return PG_OK;
    pg_status st = store_begin(store, err);
    for (int l = 0; st == PG_OK && l < cap->n_layers; l++) {
        if (!no_shape[l]) continue;
        store_layer_shape shape;
        sweep_layer_shape(cap, l, &shape);
        st = store_put_layer_shape(store, run_id, capture_name, l, &shape, err);
    }
    if (st == PG_OK) st = store_commit(store, err);
    if (st != PG_OK) store_rollback(store);
    return st;
}

/* Adds "layer_rows" (run_complete.h) to the config of a run started before
 * runs recorded it, and stores it: the capture --resume checked holds the
 * run's content, so what its layers hold when whole is known again. */
static pg_status resume_record_layer_rows(pg_store *store, int64_t run_id, resume_ctx *r,
                                          const capture *cap, const sweep_options *so,
                                          pg_err *err)
{
    pg_status st = run_complete_add_layer_rows(r->cfg.tree, cap, so, err);
    char *text = st == PG_OK ? cJSON_PrintUnformatted(r->cfg.tree) : NULL;
    if (st == PG_OK && text == NULL) st = pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    if (st == PG_OK) st = store_run_set_config(store, run_id, text, err);
    free(text);
    return st;
}

/* Writes text to f as one shell word: as it is when it holds only
 * characters no shell treats specially, else in single quotes. */
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
static void print_resume_hint(int64_t run_id, int sig, const sweep_stats *stats,
                              const capture *cap, const run_args *a)
{
    fprintf(stderr,
            "precgate: run %lld interrupted by %s: %d of %d layers stored; continue it with\n"
            "  precgate run --resume %lld --capture ",
            (long long)run_id, interrupt_signal_name(sig),
            stats->layers_stored + stats->layers_skipped, cap->n_layers, (long long)run_id);
    put_shell_word(stderr, a->capture);
    if (a->db != NULL) {
        fputs(" --db ", stderr);
        put_shell_word(stderr, a->db);
    }
    fputc('\n', stderr);
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
    const char *db_path = cli_db_path(a.db);
    pg_store *store = NULL;
    resume_ctx resume = {0};
    if (a.resume > 0) {
        /* The run's configuration decides the backend to start, so the
         * store opens first; nothing in it changes until every check passed. */
        pg_status rst = store_open(db_path, &store, &err);
        if (rst == PG_OK) rst = resume_open(store, &a, &resume, &err);
        if (rst != PG_OK) {
            run_config_doc_free(&resume.cfg);
            store_close(store);
            return cli_report(&err);
        }
    }
    /* The backend starts while the capture loads; a backend error is
     * reported first, as if it had started alone. */
    backend_start bs = {.a = &a};
    pthread_t starter;
    const int threaded = pthread_create(&starter, NULL, backend_start_run, &bs) == 0;
    if (!threaded) backend_start_run(&bs);
    capture *cap = NULL;
    pg_err load_err = {0};
    const double t_load = pg_clock_mono_s();
    /* The capture's scan keeps the default threads, not --threads. */
    pg_status st = capture_open_threads(a.capture, cli_default_threads(), &cap, &load_err);
    const double load_s = pg_clock_mono_s() - t_load;
    /* The first layers go into the GPU sweep's upload buffers while the GPU
     * starts (its context takes 0.2-0.3 s on the H200 machine). */
    sweep_stage *stage = NULL;
    if (st == PG_OK && strcmp(a.backend, "cpu") != 0) stage = sweep_stage_open(cap, &notes);
    if (threaded) pthread_join(starter, NULL);
    attn_backend *gpu = bs.gpu;
    const char *gpu_desc = bs.desc;
    const double gpu_s = bs.seconds;
    if (gpu == NULL) {
        sweep_stage_close(stage);
        stage = NULL;
    }
    if (bs.st == PG_OK && a.check_spec && gpu == NULL)
        bs.st = pg_fail(&bs.err, PG_ERR_DEVICE, "run: --check-spec needs a GPU, and none is usable");
    if (bs.st != PG_OK) {
        capture_close(cap);
        run_config_doc_free(&resume.cfg);
        store_close(store);
        if (a.resume > 0 && !a.given_backend)
            fprintf(stderr, "precgate: run %ld ran on %s, which --resume keeps\n", a.resume,
                    resume.backend);
        return cli_report(&bs.err);
    }
    if (st != PG_OK) err = load_err;

    if (store == NULL && store_open(db_path, &store, &err) != PG_OK) {
        sweep_stage_close(stage);
        capture_close(cap);
        attn_backend_close(gpu);
        return cli_report(&err);
    }
    sweep_stats stats = {0};
    const char *backend = gpu != NULL ? attn_backend_name(gpu) : "cpu";
    /* The scale policy: the given or resumed one, else the capture's default;
     * a capture that cannot give it is refused before a run row exists. */
    if (st == PG_OK) {
        a.scales = sweep_scales_resolve(cap, a.scales);
        st = sweep_scales_check(cap, a.capture, a.scales, &err);
    }
    const volatile sig_atomic_t *stop = interrupt_flag();
    sweep_options so = {.variants = a.variants, .n_threads = (int)a.threads,
                        .page_seed = a.seed, .notes = &notes, .backend = gpu,
                        .check_spec = a.check_spec, .stats = &stats, .stage = stage,
                        .stop = stop, .scales = a.scales, .attribute = a.attribute};
    const char *capture_name = a.capture;
    unsigned char *stored = NULL;
    int64_t run_id = -1;
    char *config = NULL;
    if (a.resume > 0) {
        /* A capture that does not load, or differs, leaves the run as it was. */
        int n_stored = 0, n_shapes = 0;
        unsigned char *no_shape = NULL;
        if (st == PG_OK) st = resume_check_capture(&resume, cap, backend, &err);
        if (st == PG_OK && ((stored = calloc((size_t)cap->n_layers, 1)) == NULL ||
                            (no_shape = calloc((size_t)cap->n_layers, 1)) == NULL))
            st = pg_fail(&err, PG_ERR_NOMEM, "run --resume: out of memory");
        if (st == PG_OK)
            st = resume_stored_layers(store, &resume, cap, &so, stored, no_shape, &n_stored,
                                      &err);
        int n_to_compute = 0;
        if (st == PG_OK && a.shard.count > 0)
            st = resume_skip_unowned(&resume, cap, stored, &err);
        for (int l = 0; st == PG_OK && l < cap->n_layers; l++) n_to_compute += !stored[l];
        if (st == PG_OK) st = store_run_reopen(store, a.resume, "sweep", a.force, &err);
        if (st == PG_OK) run_id = a.resume;  /* reopened: a failure from here marks it */
        if (st == PG_OK)
            st = resume_record_shapes(store, run_id, resume.capture_name, cap, no_shape,
                                      &n_shapes, &err);
        free(no_shape);
        if (st == PG_OK && !resume.cfg.c.layer_rows_known)
            st = resume_record_layer_rows(store, run_id, &resume, cap, &so, &err);
        if (st == PG_OK && n_shapes > 0)
            fprintf(stderr, "precgate: recorded the shapes of %d layers stored before schema "
                            "version 12 (layer_shapes, for precgate advise)\n", n_shapes);
        if (st == PG_OK) {
            capture_name = resume.capture_name;
            so.stored = stored;
            if (strcmp(a.capture, capture_name) != 0)
                fprintf(stderr, "precgate: %s holds the content of the run's capture %s; its "
                                "rows keep that name\n", a.capture, capture_name);
            printf("run %lld resumed: %s, %d layers (%d stored, %d to compute), backend %s\n",
                   (long long)run_id, a.capture, cap->n_layers, n_stored, n_to_compute,
                   backend);
            fflush(stdout);
        }
    } else {
        /* A part sweeps only the layers it owns: the others are skipped as
         * if stored. */
        int n_owned = 0;
        if (st == PG_OK && a.shard.count > 0) {
            if ((stored = calloc((size_t)cap->n_layers, 1)) == NULL)
                st = pg_fail(&err, PG_ERR_NOMEM, "run: out of memory");
            if (st == PG_OK)
                st = shard_capture_layers(cap, a.capture, a.variants.n, a.shard, stored,
                                          &n_owned, &err);
            for (int l = 0; st == PG_OK && l < cap->n_layers; l++) stored[l] = !stored[l];
            if (st == PG_OK && a.job == NULL) {
                st = run_default_job(&a, cap, a.job_buf, &err);
                a.job = a.job_buf;
            }
            so.stored = stored;
        }
        config = st == PG_OK ? run_config_json(&a, cap, backend, &so, stored) : NULL;
        char host[RUN_DESC_MAX], cpu[RUN_DESC_MAX], device[RUN_DESC_MAX + 32];
        store_this_host(host, sizeof host);
        cpu_model(cpu, sizeof cpu);
        if (gpu != NULL) snprintf(device, sizeof device, "%s", gpu_desc);
        else snprintf(device, sizeof device, "cpu: %s, %ld threads", cpu, a.threads);
        const store_run_info info = {"sweep", a.label, PRECGATE_GIT_REV, host, device, config};
        /* A capture that fails validation still gets a run row, marked failed. */
        pg_err run_err = {0};
        if (store_run_begin(store, &info, &run_id, &run_err) != PG_OK) {
            if (st == PG_OK) err = run_err;
            st = run_err.code;
        } else if (st == PG_OK) {
            printf("run %lld: %s, %d layers, backend %s\n", (long long)run_id, a.capture,
                   cap->n_layers, backend);
            if (a.shard.count > 0)
                printf("run %lld: shard %d/%d of job %s: %d of the %d layers\n",
                       (long long)run_id, a.shard.index, a.shard.count, a.job, n_owned,
                       cap->n_layers);
            fflush(stdout);
        }
    }
    if (st == PG_OK) st = sweep_run(store, run_id, cap, capture_name, &so, &err);
    sweep_stage_close(stage);
    const int sig = st == PG_ERR_INTERRUPTED ? interrupt_signal() : 0;
    if (run_id >= 0) {
        pg_err fin = {0};
        /* Room for the signal's name before the sweep's message. */
        char why_stopped[PG_ERR_MSG_MAX + 64];
        snprintf(why_stopped, sizeof why_stopped, "interrupted by %s: %s",
                 interrupt_signal_name(sig), err.msg);
        const char *status = st == PG_OK ? "complete" : sig ? "interrupted" : "failed";
        const pg_status fst = store_run_finish(store, run_id, status, sig ? why_stopped : err.msg,
                                               &fin);
        if (fst != PG_OK && st == PG_OK) {
            err = fin;
            st = fin.code;
        }
        if (fst != PG_OK)
            fprintf(stderr, "precgate: run %lld could not be marked finished: %s\n",
                    (long long)run_id, fin.msg);
        if (st == PG_OK) st = report_sweep_table(store, run_id, stdout, &err);
        if (st == PG_OK) st = diag_print_run(store, run_id, stdout, &err);
        else if (fst == PG_OK && sig) print_resume_hint(run_id, sig, &stats, cap, &a);
        else if (fst == PG_OK)
            fprintf(stderr, "precgate: run %lld marked failed in %s\n", (long long)run_id, db_path);
    }
    free(config);
    free(stored);
    run_config_doc_free(&resume.cfg);
    /* Unmapping the capture and closing the GPU context are timed too: with
     * the phases they account for the command's whole wall time. */
    const double t_close = pg_clock_mono_s();
    capture_close(cap);
    store_close(store);
    attn_backend_close(gpu);
    if (st == PG_OK) {
        const double t_end = pg_clock_mono_s();
        char lock[64] = "", resumed[96] = "", attributed[64] = "", diagnosed[80] = "";
        if (stats.lock_s > 0)
            snprintf(lock, sizeof lock, " (%.2f s of it locking upload buffers)", stats.lock_s);
        if (a.attribute)
            snprintf(attributed, sizeof attributed, " (%.2f s of it --attribute)",
                     stats.attribute_s);
        if (stats.diagnose_s > 0)
            snprintf(diagnosed, sizeof diagnosed, " (%.2f s of it diagnosing external outputs)",
                     stats.diagnose_s);
        if (a.resume > 0)
            snprintf(resumed, sizeof resumed, "; %d layers computed, %d were stored",
                     stats.layers_stored, stats.layers_skipped);
        printf("run %lld complete: %s (backend start %.2f s beside load and validate %.2f s, "
               "compute %.2f s%s%s%s, store %.2f s beside it, close %.2f s; %.2f s in all%s)\n",
               (long long)run_id, db_path, gpu_s, load_s, stats.compute_s, lock, attributed,
               diagnosed,
               stats.store_s,
               t_end - t_close, t_end - t_start, resumed);
    }
    if (sig) return interrupt_exit_code(sig);
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
