/* run_lifecycle.c: a sweep run created or resumed, swept and finished (run_lifecycle.h). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/variant.h"
#include "db/run_config.h"
#include "db/store.h"
#include "kernels/attn_backend.h"
#include "kernels/attn_profile.h"
#include "harness/capture/capture.h"
#include "harness/eval_resume.h"
#include "harness/interrupt.h"
#include "harness/run_complete.h"
#include "harness/run_lifecycle.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Length of host and device descriptions. */
#define RUN_DESC_MAX 256

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
static char *run_config_json(const run_sweep_request *a, const capture *cap, const char *backend,
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
            .layer_rows = rows,
            .part = {.job = a->job, .index = a->shard.index, .count = a->shard.count},
            .shard_layers = owned, .n_shard_layers = n_owned};
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
static pg_status run_default_job(const run_sweep_request *a, const capture *cap, char out[SHARD_JOB_MAX],
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
static pg_status open_backend(const run_sweep_request *a, attn_backend **be, char *desc, size_t len,
                              pg_err *err)
{
    *be = NULL;
    if (strcmp(a->backend, "cpu") == 0) return PG_OK;
    pg_err probe = {0};
    if (attn_backend_open("cuda", (int)a->threads, be, desc, len, &probe) == PG_OK) {
        double mem_limit = 0;
        if (a->cuda_mem_limit != NULL && a->cuda_mem_limit(&mem_limit, err) != PG_OK) {
            attn_backend_close(*be);
            *be = NULL;
            return err->code;
        }
        attn_backend_limit_memory(*be, mem_limit);
        if (strcmp(a->backend, "auto") == 0)
            pg_note_warning(a->notes, "backend auto: using %s", desc);
        return PG_OK;
    }
    if (strcmp(a->backend, "cuda") == 0)
        return pg_fail(err, PG_ERR_DEVICE, "--backend cuda: %s", probe.msg);
    pg_note_warning(a->notes, "backend auto: %s; using cpu", probe.msg);
    return PG_OK;
}

/* open_backend on a thread of its own: starting a CUDA context takes about
 *0.2 s, as long as loading and validating a large capture, and neither
 * needs the other. */
typedef struct backend_start {
    const run_sweep_request *a;
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
static pg_status resume_shard(run_sweep_request *a, const resume_ctx *r, pg_err *err)
{
    const run_config *c = &r->cfg.c;
    if (!c->part.known) {
        if (a->shard.count > 0 || a->job != NULL)
            return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run is no part of a "
                           "sharded job: --shard and --job do not go with its resume",
                           (long long)r->run_id);
        return PG_OK;
    }
    if (!c->part.readable || c->n_shard_layers < 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: the run's config_json has no "
                       "readable job, shard and shard_layers: start a new run",
                       (long long)r->run_id);
    const shard_spec run = {.index = c->part.index, .count = c->part.count};
    if (a->shard.count > 0 && (a->shard.index != run.index || a->shard.count != run.count))
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: shard (--shard) differs: the run "
                       "has %d/%d, this command gives %d/%d", (long long)r->run_id, run.index,
                       run.count, a->shard.index, a->shard.count);
    if (a->job != NULL && strcmp(a->job, c->part.job) != 0)
        return pg_fail(err, PG_ERR_USAGE, "run: --resume %lld: job (--job) differs: the run has "
                       "%s, this command gives %s", (long long)r->run_id, c->part.job, a->job);
    a->shard = run;
    snprintf(a->job_buf, sizeof a->job_buf, "%s", c->part.job);
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
static pg_status resume_open(pg_store *store, run_sweep_request *a, resume_ctx *r, pg_err *err)
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
    pg_err ignored = {0};
    if (r->capture_name == NULL || r->digest == NULL || r->backend == NULL ||
        !c->page_seed_known || c->git_rev == NULL || !c->check_spec_known ||
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
    if (!a->given_backend) {  /* a copy: the config's tree is freed when the run ends */
        snprintf(a->backend_buf, sizeof a->backend_buf, "%s", r->backend);
        a->backend = a->backend_buf;
    }
    a->check_spec = c->check_spec;
    a->seed = c->page_seed;
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
                    rows[l].kv_formats == want.kv_formats &&
                    rows[l].unsupported == want.unsupported &&
                    rows[l].attribution == want.attribution &&
                    rows[l].diagnosis == want.diagnosis &&
                    (rows[l].shapes == want.shapes || rows[l].shapes == 0);
        no_shape[l] = stored[l] && rows[l].shapes == 0;
        *n_stored += stored[l];
        if (!stored[l] && (rows[l].metrics != 0 || rows[l].quant != 0 || rows[l].shapes != 0 ||
                           rows[l].attribution != 0 || rows[l].diagnosis != 0 ||
                           rows[l].kv_formats != 0 || rows[l].unsupported != 0))
            st = pg_fail(err, PG_ERR_DB,
                         "run: --resume %lld: layer %d of capture '%s' holds %lld of its %lld "
                         "layer_metrics rows, %lld of its %lld quant_stats rows, %lld of its "
                         "%lld layer_shapes rows, %lld of its %lld ext_diagnosis rows, %lld "
                         "of its %lld attribution rows, %lld of its %lld kv_format_stats "
                         "rows and %lld of its %lld unsupported_cells rows: not a whole layer (a layer is stored in "
                         "one transaction, so rows were changed by hand, or the layer was swept "
                         "before the diagnosis existed); nothing was changed: start a new run",
                         (long long)r->run_id, l, r->capture_name, (long long)rows[l].metrics,
                         (long long)want.metrics, (long long)rows[l].quant,
                         (long long)want.quant, (long long)rows[l].shapes,
                         (long long)want.shapes, (long long)rows[l].diagnosis,
                         (long long)want.diagnosis, (long long)rows[l].attribution,
                         (long long)want.attribution, (long long)rows[l].kv_formats,
                         (long long)want.kv_formats, (long long)rows[l].unsupported,
                         (long long)want.unsupported);
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

/* The run's announcement line (printf-style) on rq->out, flushed: a test or
 * a script reading the run id must see it before the sweep ends. */
static void announce(const run_sweep_request *rq, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void announce(const run_sweep_request *rq, const char *fmt, ...)
{
    if (rq->out == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(rq->out, fmt, ap);
    va_end(ap);
    fflush(rq->out);
}

/* Reopens run rq->resume after every check passed: marks in stored[] the
 * layers it holds whole (and those another part owns), records what older
 * schemas lacked, and announces it. *run_id is set once reopened (a failure
 * after that marks the run). */
static pg_status resume_begin(pg_store *store, run_sweep_request *rq, resume_ctx *r,
                              const capture *cap, const char *backend, sweep_options *so,
                              unsigned char **stored_out, const char **capture_name,
                              int64_t *run_id, pg_err *err)
{
    int n_stored = 0, n_shapes = 0;
    unsigned char *no_shape = NULL, *stored = NULL;
    pg_status st = resume_check_capture(r, cap, backend, err);
    if (st == PG_OK && ((stored = calloc((size_t)cap->n_layers, 1)) == NULL ||
                        (no_shape = calloc((size_t)cap->n_layers, 1)) == NULL))
        st = pg_fail(err, PG_ERR_NOMEM, "run --resume: out of memory");
    *stored_out = stored;
    if (st == PG_OK)
        st = resume_stored_layers(store, r, cap, so, stored, no_shape, &n_stored, err);
    int n_to_compute = 0;
    if (st == PG_OK && rq->shard.count > 0) st = resume_skip_unowned(r, cap, stored, err);
    for (int l = 0; st == PG_OK && l < cap->n_layers; l++) n_to_compute += !stored[l];
    if (st == PG_OK) st = store_run_reopen(store, rq->resume, "sweep", rq->force, err);
    if (st == PG_OK) *run_id = rq->resume;
    if (st == PG_OK)
        st = resume_record_shapes(store, *run_id, r->capture_name, cap, no_shape, &n_shapes,
                                  err);
    free(no_shape);
    if (st == PG_OK && !r->cfg.c.layer_rows_known)
        st = resume_record_layer_rows(store, *run_id, r, cap, so, err);
    if (st == PG_OK && n_shapes > 0)
        pg_note_warning(rq->notes, "recorded the shapes of %d layers stored before schema "
                                   "version 12 (layer_shapes, for precgate advise)", n_shapes);
    if (st != PG_OK) return st;
    *capture_name = r->capture_name;
    so->stored = stored;
    if (strcmp(rq->capture, r->capture_name) != 0)
        pg_note_warning(rq->notes, "%s holds the content of the run's capture %s; its rows keep "
                                   "that name", rq->capture, r->capture_name);
    announce(rq, "run %lld resumed: %s, %d layers (%d stored, %d to compute), backend %s\n",
             (long long)*run_id, rq->capture, cap->n_layers, n_stored, n_to_compute, backend);
    return PG_OK;
}

/* Creates the run's row: a part first marks in stored[] the layers it does
 * not own. A capture that failed to load (st != PG_OK) still gets a row,
 * marked failed by the caller. */
static pg_status new_run_begin(pg_store *store, run_sweep_request *rq, const capture *cap,
                               const char *backend, const char *device_desc, sweep_options *so,
                               unsigned char **stored_out, char **config, int64_t *run_id,
                               pg_status st, pg_err *err)
{
    int n_owned = 0;
    unsigned char *stored = NULL;
    if (st == PG_OK && rq->shard.count > 0) {
        if ((stored = calloc((size_t)cap->n_layers, 1)) == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "run: out of memory");
        if (st == PG_OK)
            st = shard_capture_layers(cap, rq->capture, rq->variants.n, rq->shard, stored,
                                      &n_owned, err);
        for (int l = 0; st == PG_OK && l < cap->n_layers; l++) stored[l] = !stored[l];
        if (st == PG_OK && rq->job == NULL) {
            st = run_default_job(rq, cap, rq->job_buf, err);
            rq->job = rq->job_buf;
        }
        so->stored = stored;
    }
    *stored_out = stored;
    *config = st == PG_OK ? run_config_json(rq, cap, backend, so, stored) : NULL;
    char host[RUN_DESC_MAX], cpu[RUN_DESC_MAX], device[RUN_DESC_MAX + 32];
    store_this_host(host, sizeof host);
    cpu_model(cpu, sizeof cpu);
    if (device_desc != NULL) snprintf(device, sizeof device, "%s", device_desc);
    else snprintf(device, sizeof device, "cpu: %s, %ld threads", cpu, rq->threads);
    const store_run_info info = {"sweep", rq->label, PRECGATE_GIT_REV, host, device, *config};
    pg_err run_err = {0};
    if (store_run_begin(store, &info, run_id, &run_err) != PG_OK) {
        if (st == PG_OK) *err = run_err;
        return run_err.code;
    }
    if (st != PG_OK) return st;
    announce(rq, "run %lld: %s, %d layers, backend %s\n", (long long)*run_id, rq->capture,
             cap->n_layers, backend);
    if (rq->shard.count > 0)
        announce(rq, "run %lld: shard %d/%d of job %s: %d of the %d layers\n",
                 (long long)*run_id, rq->shard.index, rq->shard.count, rq->job, n_owned,
                 cap->n_layers);
    return PG_OK;
}

/* Marks run_id complete, failed or interrupted after the sweep ended with
 * st (err its message); res->finished when the mark was stored. A failed
 * mark on a complete sweep becomes the result. */
static pg_status finish_run(pg_store *store, const run_sweep_request *rq, int64_t run_id,
                            pg_status st, run_sweep_result *res, pg_err *err)
{
    pg_err fin = {0};
    /* Room for the signal's name before the sweep's message. */
    char why_stopped[PG_ERR_MSG_MAX + 64];
    snprintf(why_stopped, sizeof why_stopped, "interrupted by %s: %s",
             interrupt_signal_name(res->signal), err->msg);
    const char *status = st == PG_OK ? "complete" : res->signal ? "interrupted" : "failed";
    const pg_status fst =
        store_run_finish(store, run_id, status, res->signal ? why_stopped : err->msg, &fin);
    res->finished = fst == PG_OK;
    if (fst != PG_OK)
        pg_note_warning(rq->notes, "run %lld could not be marked finished: %s",
                        (long long)run_id, fin.msg);
    if (fst != PG_OK && st == PG_OK) {
        *err = fin;
        return fin.code;
    }
    return st;
}

pg_status run_lifecycle_sweep(run_sweep_request *rq, run_sweep_result *res, pg_err *err)
{
    *res = (run_sweep_result){.run_id = -1};
    pg_store *store = NULL;
    resume_ctx resume = {0};
    if (rq->resume > 0) {
        /* The run's configuration decides the backend to start, so the
         * store opens first; nothing in it changes until every check passed. */
        pg_status rst = store_open(rq->db_path, &store, err);
        if (rst == PG_OK) rst = resume_open(store, rq, &resume, err);
        if (rst != PG_OK) {
            run_config_doc_free(&resume.cfg);
            store_close(store);
            return rst;
        }
    }
    /* The backend starts while the capture loads; a backend error is
     * reported first, as if it had started alone. */
    backend_start bs = {.a = rq};
    pthread_t starter;
    const int threaded = pthread_create(&starter, NULL, backend_start_run, &bs) == 0;
    if (!threaded) backend_start_run(&bs);
    capture *cap = NULL;
    pg_err load_err = {0};
    const double t_load = pg_clock_mono_s();
    pg_status st = capture_open_threads(rq->capture, rq->scan_threads, &cap, &load_err);
    res->load_s = pg_clock_mono_s() - t_load;
    /* The first layers go into the GPU sweep's upload buffers while the GPU
     * starts (its context takes 0.2-0.3 s on the H200 machine). */
    sweep_stage *stage = NULL;
    if (st == PG_OK && strcmp(rq->backend, "cpu") != 0) stage = sweep_stage_open(cap, rq->notes);
    if (threaded) pthread_join(starter, NULL);
    attn_backend *gpu = bs.gpu;
    res->backend_s = bs.seconds;
    if (gpu == NULL) {
        sweep_stage_close(stage);
        stage = NULL;
    }
    if (bs.st == PG_OK && rq->check_spec && gpu == NULL)
        bs.st = pg_fail(&bs.err, PG_ERR_DEVICE, "run: --check-spec needs a GPU, and none is usable");
    if (bs.st != PG_OK) {
        capture_close(cap);
        run_config_doc_free(&resume.cfg);
        store_close(store);
        if (rq->resume > 0 && !rq->given_backend)
            pg_note_warning(rq->notes, "run %ld ran on %s, which --resume keeps", rq->resume,
                            resume.backend);
        *err = bs.err;
        return bs.st;
    }
    if (st != PG_OK) *err = load_err;
    else res->n_layers = cap->n_layers;
    if (store == NULL && store_open(rq->db_path, &store, err) != PG_OK) {
        sweep_stage_close(stage);
        capture_close(cap);
        attn_backend_close(gpu);
        return err->code;
    }
    const char *backend = gpu != NULL ? attn_backend_name(gpu) : "cpu";
    /* The scale policy: the given or resumed one, else the capture's default;
     * a capture that cannot give it is refused before a run row exists. */
    if (st == PG_OK) {
        rq->scales = sweep_scales_resolve(cap, rq->scales);
        st = sweep_scales_check(cap, rq->capture, rq->scales, err);
    }
    sweep_options so = {.variants = rq->variants, .n_threads = (int)rq->threads,
                        .page_seed = rq->seed, .notes = rq->notes, .backend = gpu,
                        .check_spec = rq->check_spec, .stats = &res->stats, .stage = stage,
                        .stop = interrupt_flag(), .scales = rq->scales,
                        .attribute = rq->attribute};
    const char *capture_name = rq->capture;
    unsigned char *stored = NULL;
    int64_t run_id = -1;
    char *config = NULL;
    if (rq->resume > 0) {
        /* A capture that does not load, or differs, leaves the run as it was. */
        if (st == PG_OK)
            st = resume_begin(store, rq, &resume, cap, backend, &so, &stored, &capture_name,
                              &run_id, err);
    } else {
        st = new_run_begin(store, rq, cap, backend, gpu != NULL ? bs.desc : NULL, &so, &stored,
                           &config, &run_id, st, err);
    }
    if (st == PG_OK) st = sweep_run(store, run_id, cap, capture_name, &so, err);
    sweep_stage_close(stage);
    res->signal = st == PG_ERR_INTERRUPTED ? interrupt_signal() : 0;
    res->run_id = run_id;
    if (run_id >= 0) st = finish_run(store, rq, run_id, st, res, err);
    free(config);
    free(stored);
    run_config_doc_free(&resume.cfg);
    /* Unmapping the capture and closing the GPU context are timed too: with
     * the phases they account for the command's whole wall time. */
    const double t_close = pg_clock_mono_s();
    capture_close(cap);
    store_close(store);
    attn_backend_close(gpu);
    res->close_s = pg_clock_mono_s() - t_close;
    return st;
}
