/* sweep.c: the per-layer precision sweep on the CPU specification (see sweep.h). */
#include "sweep.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/attn_backend.h"
#include "kernels/attn_profile.h"
#include "kernels/kv_cache.h"
#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "attribute.h"
#include "diagnose.h"
#include "base/variant.h"
#include "base/clock.h"
#include "base/note.h"

/* Layer li of cap as one attention batch. */
/* Whether opt's layers run on a backend other than the CPU specification
 * (a "cpu" backend given as opt->backend is the specification itself). */
static int sweep_offloads(const sweep_options *opt)
{
    return opt->backend != NULL && strcmp(attn_backend_name(opt->backend), "cpu") != 0;
}

static attn_batch layer_batch(const capture *cap, int li)
{
    const capture_layer *L = &cap->layers[li];
    return (attn_batch){cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d, L->window,
                        L->sm_scale, L->sinks};
}

/* The modes of the sweep's variants, as bits 1u << pg_mode. */
static unsigned sweep_modes(const sweep_options *opt)
{
    unsigned modes = 0;
    for (int i = 0; i < opt->variants.n; i++) modes |= 1u << attn_profile_mode(opt->variants.p[i]);
    return modes;
}

/* One variant whose kernel refuses a layer (attn_profile_computes). */
typedef struct sweep_refusal {
    const attn_profile *p;
    char why[ATTN_REFUSAL_MAX];
} sweep_refusal;

/* opt's variants whose kernels compute layer li, in opt's order, into *run;
 * the others, with their reasons, into refused[0 .. *n_refused): a cell the
 * kernel cannot compute is stored as such (unsupported_cells), not run. */
static void layer_variants(const capture *cap, int li, const sweep_options *opt,
                           sweep_variants *run, sweep_refusal *refused, int *n_refused)
{
    const attn_batch b = layer_batch(cap, li);
    run->n = 0;
    *n_refused = 0;
    for (int i = 0; i < opt->variants.n; i++) {
        sweep_refusal *r = &refused[*n_refused];
        if (attn_profile_computes(opt->variants.p[i], &b, r->why, sizeof r->why)) {
            run->p[run->n++] = opt->variants.p[i];
        } else {
            r->p = opt->variants.p[i];
            (*n_refused)++;
        }
    }
}

pg_status sweep_variants_parse(const char *list, sweep_variants *out, pg_err *err)
{
    if (attn_profile_count() > SWEEP_MAX_VARIANTS)
        return pg_fail(err, PG_ERR_INTERNAL, "the profile table holds %zu profiles; a sweep "
                       "holds at most %d (SWEEP_MAX_VARIANTS)", attn_profile_count(),
                       SWEEP_MAX_VARIANTS);
    /* The entry each profile was given as, to name both of a duplicate. */
    char given[SWEEP_MAX_VARIANTS][VARIANT_NAME_MAX] = {{0}};
    const char *p = list;
    int any = 0;
    while (*p != '\0') {
        const size_t len = strcspn(p, ",");
        char entry[VARIANT_NAME_MAX];
        if (len == 0 || len >= sizeof entry)
            return pg_fail(err, PG_ERR_USAGE, len == 0 ? "--variants: '%s' has an empty entry"
                                                       : "--variants: an entry of '%s' is too long",
                           list);
        snprintf(entry, sizeof entry, "%.*s", (int)len, p);
        variant_name vn;
        pg_err why = {0};
        if (variant_name_parse("--variants", entry, &vn, &why) != PG_OK ||
            vn.kind != VARIANT_PROFILE)
            return pg_fail(err, PG_ERR_USAGE, "--variants: '%s' is not a kernel profile (one of "
                           "%s)", entry, variant_name_profile_choices());
        const size_t idx = vn.profile;
        if (given[idx][0] != '\0')
            return pg_fail(err, PG_ERR_USAGE, "--variants: '%s' and '%s' are both %s; give each "
                           "profile once", given[idx], entry, vn.full);
        snprintf(given[idx], sizeof given[idx], "%s", entry);
        any = 1;
        p += len;
        if (*p == ',') {
            p++;
            if (*p == '\0')
                return pg_fail(err, PG_ERR_USAGE, "--variants: '%s' ends with a comma", list);
        }
    }
    if (!any) return pg_fail(err, PG_ERR_USAGE, "--variants: the list is empty");
    *out = (sweep_variants){0};
    for (size_t i = 0; i < attn_profile_count(); i++)
        if (given[i][0] != '\0') out->p[out->n++] = attn_profile_at(i);
    return PG_OK;
}

/* vLLM's dynamic q/k/v scale divisors: vllm-project/vllm, vllm/envs.py
 * (Q_SCALE_CONSTANT, K_SCALE_CONSTANT, V_SCALE_CONSTANT, defaults 200, 200,
 * 100), used by vllm/attention/layer.py Attention.calc_kv_scales as
 * `torch.abs(query).max() / self.q_range` (q_range = tensor(Q_SCALE_CONSTANT,
 * float32); k and v alike) once, on the first forward pass with
 * --calculate-kv-scales: one fp32 division of the tensor's amax. vLLM does
 * not guard amax 0 (its scale becomes 0); precgate gives 1.0 there, as for
 * amax / 448 (fp8_scale_from_amax), so that no policy divides by 0. */
#define VLLM_Q_SCALE_CONSTANT 200.0f
#define VLLM_K_SCALE_CONSTANT 200.0f
#define VLLM_V_SCALE_CONSTANT 100.0f
/* vLLM's scale when a checkpoint has none (vllm/model_executor/layers/
 * quantization/kv_cache.py: "Using KV cache scaling factor 1.0"). */
#define VLLM_DEFAULT_SCALE 1.0f

static const struct {
    sweep_scales policy;
    const char *name;
} sweep_scales_table[] = {
    {SWEEP_SCALES_CAPTURE, "capture"},
    {SWEEP_SCALES_AMAX, "amax"},
    {SWEEP_SCALES_VLLM_DYNAMIC, "vllm-dynamic"},
    {SWEEP_SCALES_UNIT, "unit"},
};
#define SWEEP_N_SCALES (sizeof sweep_scales_table / sizeof sweep_scales_table[0])

pg_status sweep_scales_parse(const char *name, sweep_scales *out, pg_err *err)
{
    for (size_t i = 0; i < SWEEP_N_SCALES; i++)
        if (strcmp(name, sweep_scales_table[i].name) == 0) {
            *out = sweep_scales_table[i].policy;
            return PG_OK;
        }
    return pg_fail(err, PG_ERR_USAGE,
                   "--scales: '%s' is not one of capture, amax, vllm-dynamic, unit", name);
}

const char *sweep_scales_name(sweep_scales s)
{
    for (size_t i = 0; i < SWEEP_N_SCALES; i++)
        if (sweep_scales_table[i].policy == s) return sweep_scales_table[i].name;
    return "?";
}

/* Whether cap carries q/k/v_scale metadata (capture_open takes all of
 * them for every layer, or none). */
static int capture_has_scales(const capture *cap)
{
    return cap->n_layers > 0 && cap->layers[0].has_scales;
}

sweep_scales sweep_scales_resolve(const capture *cap, sweep_scales s)
{
    if (s != SWEEP_SCALES_DEFAULT) return s;
    return capture_has_scales(cap) ? SWEEP_SCALES_CAPTURE : SWEEP_SCALES_AMAX;
}

pg_status sweep_scales_check(const capture *cap, const char *capture_name, sweep_scales s,
                             pg_err *err)
{
    if (s == SWEEP_SCALES_CAPTURE && !capture_has_scales(cap))
        return pg_fail(err, PG_ERR_USAGE,
                       "--scales capture: capture '%s' has no q_scale/k_scale/v_scale metadata "
                       "(use --scales amax, vllm-dynamic or unit)", capture_name);
    return PG_OK;
}

/* Layer L's q, k and v scales under policy s (not DEFAULT; CAPTURE only on a
 * layer that has them, sweep_scales_check), from the amax capture_open read. */
static void layer_scales(const capture_layer *L, sweep_scales s, attn_quant_options *fo)
{
    switch (s) {
    case SWEEP_SCALES_CAPTURE:
        fo->q_scale = L->q_scale;
        fo->k_scale = L->k_scale;
        fo->v_scale = L->v_scale;
        break;
    case SWEEP_SCALES_VLLM_DYNAMIC:
        fo->q_scale = fp8_scale_from_amax(L->q_amax, VLLM_Q_SCALE_CONSTANT);
        fo->k_scale = fp8_scale_from_amax(L->k_amax, VLLM_K_SCALE_CONSTANT);
        fo->v_scale = fp8_scale_from_amax(L->v_amax, VLLM_V_SCALE_CONSTANT);
        break;
    case SWEEP_SCALES_UNIT:
        fo->q_scale = fo->k_scale = fo->v_scale = VLLM_DEFAULT_SCALE;
        break;
    case SWEEP_SCALES_AMAX:
    case SWEEP_SCALES_DEFAULT:
    default:
        fo->q_scale = fp8_e4m3_calibrated_scale(L->q_amax);
        fo->k_scale = fp8_e4m3_calibrated_scale(L->k_amax);
        fo->v_scale = fp8_e4m3_calibrated_scale(L->v_amax);
        break;
    }
}

/* One variant's metrics for one layer: [0] whole layer, [1 + h] head h. */
typedef struct variant_metrics {
    char name[VARIANT_NAME_MAX];
    const char *backend;      /* "cpu" or "cuda": where this variant ran */
    pg_metric_values *m;
    int n_heads;              /* 0: all heads; else the sampled heads 0..n_heads-1 */
} variant_metrics;

/* One quantized tensor's statistics for quant_stats. */
typedef struct tensor_quant {
    const char *tensor;  /* "q", "k", "v" */
    float scale;
    fp8_quant_stats st;
    int present;
} tensor_quant;

/* Writes one layer's rows in one transaction; spec rows (vm[i].n_heads set)
 * cover only the sampled heads; ar: the n_ar attribution rows (run --attribute);
 * diag: the external outputs' ext_diagnosis rows. */
static pg_status store_layer(pg_store *store, int64_t run_id, const char *capture_name,
                             int layer, const capture_layer *L, const store_layer_shape *shape,
                             const variant_metrics *vm, int n_vm, const tensor_quant *tq,
                             const char *scale_source, const attribute_row *ar, int n_ar,
                             const store_kv_format_stats *kfs, int n_kfs,
                             const sweep_refusal *refused, int n_refused,
                             const diag_layer *diag, pg_err *err)
{
    const int hq = shape->hq;
    pg_status st = store_begin(store, err);
    if (st == PG_OK) st = store_put_layer_shape(store, run_id, capture_name, layer, shape, err);
    for (int i = 0; st == PG_OK && i < n_refused; i++)
        st = store_put_unsupported_cell(store, run_id, capture_name, layer,
                                        attn_profile_variant(refused[i].p), refused[i].why, err);
    for (int i = 0; st == PG_OK && i < n_vm; i++) {
        const int heads = vm[i].n_heads > 0 ? vm[i].n_heads : hq;
        for (int h = -1; st == PG_OK && h < heads; h++) {
            st = store_put_layer_metrics(store, run_id, capture_name, layer, h, vm[i].name,
                                         vm[i].backend, &vm[i].m[h + 1], err);
        }
    }
    for (int i = 0; st == PG_OK && i < 3; i++) {
        if (!tq[i].present) continue;
        const fp8_quant_stats *s = &tq[i].st;
        const double sat = s->n ? (double)s->n_saturated / (double)s->n : 0.0;
        const double under = s->n_nonzero ? (double)s->n_underflow / (double)s->n_nonzero : 0.0;
        st = store_put_quant_stats(store, run_id, capture_name, layer, tq[i].tensor,
                                   tq[i].scale, scale_source, sat, under, err);
    }
    for (int i = 0; st == PG_OK && i < n_kfs; i++)
        st = store_put_kv_format_stats(store, run_id, capture_name, layer, &kfs[i], err);
    for (int i = 0; st == PG_OK && i < n_ar; i++)
        st = attribution_store_put(store, run_id, capture_name, layer,
                                   attn_profile_variant(ar[i].p),
                                   attribution_tensors[ar[i].tensor], ar[i].rel_l2, err);
    /* The scale-plumbing diagnosis of the external outputs (harness/diagnose.h). */
    if (st == PG_OK && diag->n_ext > 0) {
        st = diag_layer_store(store, run_id, capture_name, layer, L->ext, diag, err);
    }
    /* The heartbeat commits with the layer: a run that stops beating stopped
     * storing, and a layer costs no second write. */
    if (st == PG_OK) st = store_run_heartbeat(store, run_id, err);
    if (st == PG_OK) st = store_commit(store, err);
    if (st != PG_OK) store_rollback(store);
    return st;
}

/* What one layer's sweep works on and fills. */
typedef struct layer_ctx {
    const capture *cap;
    const capture_layer *L;
    int li;
    attn_batch b;
    size_t nq;
    attn_quant_options fo;
    variant_metrics *vm;     /* [SWEEP_MAX_VARIANTS * 2 + n_ext] */
    pg_metric_values *mbuf;
    int n_vm;
    tensor_quant tqs[3];
    const uint16_t *gq, *gk, *gv; /* what the GPU uploads: page-locked copies, or L's arrays */
    attribute_row attr[SWEEP_MAX_VARIANTS * ATTRIBUTE_MAX_ROWS]; /* run --attribute */
    int n_attr;
    store_kv_format_stats kfs[2 * PG_MODE_COUNT]; /* each swept mode's K and V cache */
    int n_kfs;
    diag_layer diag;         /* the external outputs' distances to the hypotheses */
    sweep_variants run;      /* the variants whose kernels compute the layer */
    sweep_refusal refused[SWEEP_MAX_VARIANTS]; /* the others: unsupported_cells */
    int n_refused;
    double *ref;             /* run --attribute: the layer's one reference, from its
                              * backend's layer run, shared with attribution */
} layer_ctx;

/* The attribution rows and hypotheses a layer's job runs beside its
 * variants (on the GPU: on the layer's caches, against its reference, only
 * numbers coming back); x[0 .. n_attr) are attribution rows (attr_row_of:
 * each one's row of layer_ctx.attr), x[n_attr .. n_attr + n_hyp) hypotheses
 * (hyp_of: each one's index in the hypothesis table). */
typedef struct layer_extras {
    attn_layer_extra x[ATTN_LAYER_MAX_EXTRAS];
    int attr_row_of[SWEEP_MAX_VARIANTS * ATTRIBUTE_MAX_ROWS];
    int n_attr;
    int hyp_of[ATTN_LAYER_MAX_EXTRAS];
    int n_hyp;
} layer_extras;

/* The next variant_metrics slot, named name, run on backend, covering
 * n_heads (0 = all). */
static variant_metrics *next_vm(layer_ctx *c, const char *name, const char *backend, int n_heads)
{
    variant_metrics *v = &c->vm[c->n_vm];
    snprintf(v->name, sizeof v->name, "%s", name);
    v->backend = backend;
    v->m = c->mbuf + (size_t)c->n_vm * (size_t)(c->L->hq + 1);
    v->n_heads = n_heads;
    c->n_vm++;
    return v;
}

/* The layer's quant_stats rows from the folded reports (attn_quant_fold_add,
 * folded in opt's table order wherever each profile ran). */
static void note_quant(layer_ctx *c, const attn_quant_fold *f)
{
    c->tqs[0].st = f->rep.q;
    c->tqs[0].present = f->have_q;
    c->tqs[1].st = f->rep.k;
    c->tqs[2].st = f->rep.v;
    c->tqs[1].present = c->tqs[2].present = f->have_kv;
}

/* A fraction num / den, NaN when den is 0 (stored NULL: nothing to count). */
static double frac_or_nan(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : NAN;
}

/* The kv_format_stats row of one tensor of mode m's cache write. */
static store_kv_format_stats kv_format_row(pg_mode m, const char *tensor,
                                           const fp8_quant_stats *q, const kv_code_stats *c)
{
    const pg_mode_traits *t = pg_mode_traits_of(m);
    const int is_v = strcmp(tensor, "v") == 0;
    return (store_kv_format_stats){
        .mode = t->name, .tensor = tensor,
        .format = pg_number_format_name(is_v ? t->v_format : t->k_format),
        .n_values = (int64_t)q->n, .saturated_frac = frac_or_nan(q->n_saturated, q->n),
        .underflow_frac = frac_or_nan(q->n_underflow, q->n_nonzero),
        .code_bits = is_v ? t->v_element_bits : t->k_element_bits, .codes_used = kv_code_stats_used(c),
        .code_entropy_bits = kv_code_stats_entropy_bits(c), .n_scales = (int64_t)c->n_scales,
        .scale_floor_frac = frac_or_nan(c->n_scales_at_floor, c->n_scales),
        .scale_min = c->n_scales ? c->scale_min : NAN,
        .scale_mean = c->n_scales ? c->scale_sum / (double)c->n_scales : NAN,
        .scale_max = c->n_scales ? c->scale_max : NAN};
}

/* The layer's kv_format_stats rows: each swept mode with a quantized KV
 * cache written once more on the CPU (the variants' runs may be the GPU's),
 * with the layer's per-tensor scales and paging; a mode whose cache write is
 * an earlier one's (kv_mode_same_cache_write: fp8kv and fp8qkv) takes its
 * numbers instead of counting them again. */
static pg_status layer_kv_format_stats(layer_ctx *c, const sweep_options *opt, pg_err *err)
{
    const unsigned modes = sweep_modes(opt);
    fp8_quant_stats kq[PG_MODE_COUNT], vq[PG_MODE_COUNT];
    kv_code_stats kc[PG_MODE_COUNT], vc[PG_MODE_COUNT];
    c->n_kfs = 0;
    for (int m = 0; m < PG_MODE_COUNT; m++) {
        if (!((modes >> m) & 1u) || pg_mode_traits_of((pg_mode)m)->k_format == PG_FORMAT_BF16)
            continue;
        int same = -1;
        for (int e = 0; e < m && same < 0; e++)
            if (((modes >> e) & 1u) && pg_mode_traits_of((pg_mode)e)->k_format != PG_FORMAT_BF16 &&
                kv_mode_same_cache_write((pg_mode)e, (pg_mode)m))
                same = e;
        if (same >= 0) {
            kq[m] = kq[same];
            vq[m] = vq[same];
            kc[m] = kc[same];
            vc[m] = vc[same];
        } else {
            pg_status st = kv_mode_code_stats((pg_mode)m, &c->b, c->L->k, c->L->v, c->fo.k_scale,
                                              c->fo.v_scale, c->fo.page_seed, c->fo.block_size,
                                              opt->n_threads, &kq[m], &vq[m], &kc[m], &vc[m], err);
            if (st != PG_OK) return st;
        }
        c->kfs[c->n_kfs++] = kv_format_row((pg_mode)m, "k", &kq[m], &kc[m]);
        c->kfs[c->n_kfs++] = kv_format_row((pg_mode)m, "v", &vq[m], &vc[m]);
    }
    return PG_OK;
}

/* --check-spec: the backend's output of profile p against the CPU specification's,
 * on the query heads of kv head 0 (one GQA group: a sample that costs 1/hkv
 * of a CPU sweep). */
static pg_status spec_check(layer_ctx *c, const attn_profile *p, const uint16_t *gpu_out,
                            attn_backend *cpu, const char *backend_name, pg_err *err)
{
    const capture_layer *L = c->L;
    const int G = L->hq / L->hkv, d = L->d;
    const int64_t tq = c->cap->tq, tkv = c->cap->tkv;
    const attn_batch sb = {c->b.n_seqs, c->b.seq_q, c->b.seq_kv, G, 1, d, c->b.window,
                           c->b.sm_scale, c->b.sinks};
    const size_t nq = (size_t)tq * G * d, nkv = (size_t)tkv * d;
    uint16_t *q = malloc(nq * 2), *k = malloc(nkv * 2), *v = malloc(nkv * 2), *o = malloc(nq * 2);
    double *od = malloc(nq * sizeof *od), *scratch = malloc(nq * sizeof *scratch);
    pg_status st = PG_OK;
    if (!q || !k || !v || !o || !od || !scratch)
        st = pg_fail(err, PG_ERR_NOMEM, "--check-spec: cannot allocate the sampled heads");
    if (st == PG_OK) {
        for (int64_t t = 0; t < tq; t++)
            memcpy(q + (size_t)t * G * d, L->q + (size_t)t * L->hq * d, (size_t)G * d * 2);
        for (int64_t t = 0; t < tkv; t++) {
            memcpy(k + (size_t)t * d, L->k + (size_t)t * L->hkv * d, (size_t)d * 2);
            memcpy(v + (size_t)t * d, L->v + (size_t)t * L->hkv * d, (size_t)d * 2);
        }
        attn_quant_report rep;
        st = attn_backend_run_variant(cpu, p, &sb, q, k, v, &c->fo, o, &rep, err);
    }
    if (st == PG_OK) {
        for (size_t i = 0; i < nq; i++) od[i] = bf16_to_f32(o[i]);
        char name[VARIANT_NAME_MAX];
        variant_name_spec(attn_profile_id(p), name, sizeof name);
        pg_metric_values *m = next_vm(c, name, backend_name, G)->m;
        const size_t row = (size_t)L->hq * d;
        metrics_compare_bf16(gpu_out, row, od, (size_t)G * d, (size_t)tq, (size_t)G * d, scratch,
                             &m[0]);
        for (int h = 0; h < G; h++)
            metrics_compare_bf16(gpu_out + (size_t)h * d, row, od + (size_t)h * d, (size_t)G * d,
                                 (size_t)tq, (size_t)d, scratch, &m[1 + h]);
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(od);
    free(scratch);
    return st;
}

/* The layer: the variants the backend runs (attn_backend_supports) and
 * the external outputs in one run_layer call; every other variant first
 * on the CPU specification (cpu), its output handed to that call as one
 * more external output, so that all are measured against the backend's
 * reference, and stored with backend "cpu". */
static pg_status layer_run(layer_ctx *c, const sweep_options *opt, attn_backend *be,
                           attn_backend *cpu, layer_extras *lx, const pg_notes *notes,
                           int64_t *step, pg_err *err)
{
    const capture_layer *L = c->L;
    const int offload = be != cpu;
    const attn_profile *on_be[SWEEP_MAX_VARIANTS], *on_cpu[SWEEP_MAX_VARIANTS];
    uint16_t *outs[SWEEP_MAX_VARIANTS] = {NULL}, *cpu_outs[SWEEP_MAX_VARIANTS] = {NULL};
    int n_be = 0, n_cpu = 0;
    pg_status st = PG_OK;
    for (int i = 0; i < c->run.n; i++) {
        const attn_profile *p = c->run.p[i];
        if (!offload || attn_backend_supports(be, p, &c->b, NULL)) {
            if (offload && opt->check_spec && (outs[n_be] = malloc(c->nq * 2)) == NULL)
                st = pg_fail(err, PG_ERR_NOMEM, "--check-spec: output copies");
            on_be[n_be++] = p;
        } else {
            on_cpu[n_cpu++] = p;
        }
    }
    const uint16_t **ext = calloc((size_t)(n_cpu + L->n_ext) + 1, sizeof *ext);
    if (st == PG_OK && ext == NULL) st = pg_fail(err, PG_ERR_NOMEM, "external outputs");
    attn_quant_report rep, cpu_rep[SWEEP_MAX_VARIANTS];
    char what[64];
    for (int i = 0; st == PG_OK && i < n_cpu; i++) {
        snprintf(what, sizeof what, "layer %d %s", c->li, attn_profile_variant(on_cpu[i]));
        pg_note_progress_step(notes, *step, what);
        if ((cpu_outs[i] = malloc(c->nq * 2)) == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "cannot allocate outputs for %zu elements", c->nq);
            break;
        }
        st = attn_backend_run_variant(cpu, on_cpu[i], &c->b, L->q, L->k, L->v, &c->fo,
                                      cpu_outs[i], &cpu_rep[i], err);
        ext[i] = cpu_outs[i];
        (*step)++;
    }
    for (int e = 0; e < L->n_ext && ext != NULL; e++) ext[n_cpu + e] = L->ext[e].out;
    snprintf(what, sizeof what, "layer %d on %s", c->li, attn_backend_name(be));
    pg_note_progress_step(notes, *step, what);
    const attn_layer_job job = {.b = &c->b,
                                .q = offload ? c->gq : L->q,
                                .k = offload ? c->gk : L->k,
                                .v = offload ? c->gv : L->v,
                                .opt = &c->fo,
                                .n_var = n_be,
                                .var = on_be,
                                .n_ext = n_cpu + L->n_ext,
                                .ext = ext,
                                .metrics = c->mbuf,
                                .rep = &rep,
                                .out = opt->check_spec ? outs : NULL,
                                .notes = notes,
                                .ref_out = c->ref,
                                .n_extra = lx->n_attr + lx->n_hyp,
                                .extra = lx->x,
                                .n_diag_ext = lx->n_hyp > 0 ? L->n_ext : 0};
    /* Called with no variant too: it takes the prefetched copies. */
    if (st == PG_OK) st = attn_backend_run_layer(be, &job, err);
    if (st == PG_OK) {
        /* run_layer filled mbuf in the job's order: its variants, then ext. */
        for (int i = 0; i < n_be; i++)
            next_vm(c, attn_profile_variant(on_be[i]), attn_backend_name(be), 0);
        /* in table order: each CPU profile its own report, the backend's the
         * fold of its variants (those come in table order too) */
        attn_quant_fold fold = {0};
        for (int i = 0, ic = 0; i < c->run.n; i++) {
            const attn_profile *p = c->run.p[i];
            if (ic < n_cpu && on_cpu[ic] == p) attn_quant_fold_add(&fold, p, &cpu_rep[ic++]);
            else attn_quant_fold_add(&fold, p, &rep);
        }
        note_quant(c, &fold);
        for (int i = 0; i < n_cpu; i++) next_vm(c, attn_profile_variant(on_cpu[i]), "cpu", 0);
        for (int e = 0; e < L->n_ext; e++) {
            char name[VARIANT_NAME_MAX];
            variant_name_ext(L->ext[e].name, name, sizeof name);
            next_vm(c, name, attn_backend_name(be), 0);
        }
        *step += n_be;
    }
    for (int i = 0; st == PG_OK && offload && opt->check_spec && i < n_be; i++) {
        snprintf(what, sizeof what, "layer %d %s" VARIANT_SPEC_SUFFIX, c->li, attn_profile_variant(on_be[i]));
        pg_note_progress_step(notes, *step, what);
        st = spec_check(c, on_be[i], outs[i], cpu, attn_backend_name(be), err);
    }
    for (int i = 0; i < n_be; i++) free(outs[i]);
    for (int i = 0; i < n_cpu; i++) free(cpu_outs[i]);
    free(ext);
    return st;
}

/* GPU uploads come from page-locked memory (53 GB/s on the H200 machine,
 * against 6 GB/s from the capture's mapping; 2026-12-02). Locking the mapping
 * itself holds the sweep's thread for the lock's time (134 ms for a 3 GB
 * capture; locks taken on another thread serialize with its CUDA calls), so
 * each layer's q, k and v are instead copied by CPU threads into one of
 * STAGE_SLOTS page-locked buffers STAGE_AHEAD layers ahead: the copy for
 * layer l + 3 starts when layer l does and has until layer l + 2 starts, while
 * layer l + 1's buffer goes to the GPU. Needing no GPU until it is locked,
 * the ring is filled with its first layers while the GPU starts (cmd_run):
 * on the 36-layer benchmark, 0.93-0.94 s of process wall against 1.03 s with
 * the whole capture locked (2026-12-02, three slots: 252 MB locked instead
 * of 3 GB; four now, 336 MB), and a capture of any size runs the same way.
 * With the copy two layers ahead, it had one layer's time: after a windowed
 * layer (about 4 ms) the sweep waited for it, 21-22 ms in all; three ahead,
 * 0.0 ms (H200 machine, 2026-12-03). */
#define STAGE_SLOTS 4
#define STAGE_AHEAD 3
/* Copies in flight: those of layers l + 2 and l + 3 while layer l computes. */
#define STAGE_JOBS (STAGE_AHEAD - 1)
/* Threads of one layer's copy (memcpy runs at several GB/s per thread; a
 * layer of the gpt-oss-120b benchmark is 84 MB in about 15 ms of compute). */
#define STAGE_THREADS 4
/* Pieces each array's copy is cut into for those threads. */
#define STAGE_PIECE_BYTES (4u << 20)
/* The buffers may take at most this share of the machine's memory. */
#define STAGE_MAX_SHARE 0.25

/* One layer's copy into its slot, on a thread of its own. */
typedef struct stage_job {
    struct sweep_stage *ring;
    int layer;           /* -1: none */
    pthread_t thread;
    int threaded;        /* 1: the thread runs it and must be joined */
} stage_job;

struct sweep_stage {
    const capture *cap;
    uint8_t *buf;        /* STAGE_SLOTS * slot_bytes, anonymous memory */
    size_t slot_bytes, bytes;
    int registered;      /* buf is pinned by pinned_by (attn_backend_pin) */
    attn_backend *pinned_by;
    stage_job job[STAGE_JOBS];  /* layer l's copy is job[l % STAGE_JOBS] */
};

/* q, k, v bytes of layer li. */
static void layer_qkv_bytes(const capture *cap, int li, size_t bytes[3])
{
    const capture_layer *L = &cap->layers[li];
    bytes[0] = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d * 2;
    bytes[1] = bytes[2] = (size_t)cap->tkv * (size_t)L->hkv * (size_t)L->d * 2;
}

void sweep_stage_layer(const sweep_stage *r, int li, const uint16_t *out[3])
{
    size_t bytes[3];
    layer_qkv_bytes(r->cap, li, bytes);
    const uint8_t *p = r->buf + (size_t)(li % STAGE_SLOTS) * r->slot_bytes;
    out[0] = (const uint16_t *)p;
    out[1] = (const uint16_t *)(p + bytes[0]);
    out[2] = (const uint16_t *)(p + bytes[0] + bytes[1]);
}

typedef struct stage_copy {
    const uint8_t *src[3];
    uint8_t *dst[3];
    size_t bytes[3], pieces[3];
} stage_copy;

static void stage_copy_piece(void *ctx, int item, int thread)
{
    (void)thread;
    const stage_copy *c = ctx;
    int a = 0;
    while ((size_t)item >= c->pieces[a]) item -= (int)c->pieces[a++];
    const size_t off = (size_t)item * STAGE_PIECE_BYTES;
    const size_t n = c->bytes[a] - off < STAGE_PIECE_BYTES ? c->bytes[a] - off : STAGE_PIECE_BYTES;
    memcpy(c->dst[a] + off, c->src[a] + off, n);
}

/* Copies job->layer's q, k, v into its slot. */
static void *stage_run(void *arg)
{
    const stage_job *job = arg;
    const sweep_stage *r = job->ring;
    const capture_layer *L = &r->cap->layers[job->layer];
    const uint16_t *slot[3];
    sweep_stage_layer(r, job->layer, slot);
    stage_copy c = {.src = {(const uint8_t *)L->q, (const uint8_t *)L->k, (const uint8_t *)L->v}};
    layer_qkv_bytes(r->cap, job->layer, c.bytes);
    size_t n = 0;
    for (int a = 0; a < 3; a++) {
        c.dst[a] = (uint8_t *)slot[a];
        c.pieces[a] = (c.bytes[a] + STAGE_PIECE_BYTES - 1) / STAGE_PIECE_BYTES;
        n += c.pieces[a];
    }
    pg_err err = {0};
    if (parallel_for((int)n, STAGE_THREADS, stage_copy_piece, &c, &err) != PG_OK)
        for (size_t i = 0; i < n; i++) stage_copy_piece(&c, (int)i, 0);  /* no threads: here */
    return NULL;
}

/* Waits for the copy of layer li if one is in flight. */
static void stage_join(sweep_stage *r, int li)
{
    stage_job *job = &r->job[li % STAGE_JOBS];
    if (job->layer != li) return;
    if (job->threaded) pthread_join(job->thread, NULL);
    job->threaded = 0;
    job->layer = -1;
}

/* Starts copying layer li into its slot on a thread (here when none starts);
 * the copy of layer li - STAGE_JOBS, on the same job, must be joined. */
static void stage_start(sweep_stage *r, int li)
{
    stage_job *job = &r->job[li % STAGE_JOBS];
    job->ring = r;
    job->layer = li;
    job->threaded = pthread_create(&job->thread, NULL, stage_run, job) == 0;
    if (!job->threaded) stage_run(job);
}

/* Waits for every copy in flight. */
static void stage_join_all(sweep_stage *r)
{
    for (int j = 0; j < STAGE_JOBS; j++)
        if (r->job[j].layer >= 0) stage_join(r, r->job[j].layer);
}

sweep_stage *sweep_stage_open(const capture *cap, const pg_notes *notes)
{
    size_t slot_bytes = 0;
    for (int l = 0; l < cap->n_layers; l++) {
        size_t bytes[3];
        layer_qkv_bytes(cap, l, bytes);
        const size_t b = bytes[0] + bytes[1] + bytes[2];
        if (b > slot_bytes) slot_bytes = b;
    }
    if (slot_bytes == 0) return NULL;
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    const double want = (double)STAGE_SLOTS * (double)slot_bytes;
    if (!(mem > 0 && want <= STAGE_MAX_SHARE * mem)) {
        pg_note_warning(notes, "%.0f MiB of upload buffers would exceed %.0f%% of memory; "
                        "uploads run from the capture's mapping, slower",
                want / (1 << 20), 100 * STAGE_MAX_SHARE);
        return NULL;
    }
    sweep_stage *r = calloc(1, sizeof *r);
    void *buf = MAP_FAILED;
    if (r != NULL)
        buf = mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        pg_note_warning(notes, "cannot map %.0f MiB of upload buffers (%s); uploads run from "
                        "the capture's mapping, slower", want / (1 << 20), strerror(errno));
        free(r);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, (size_t)want, MADV_HUGEPAGE); /* a hint: fewer pages to fault and lock */
#endif
    *r = (sweep_stage){.cap = cap, .buf = buf, .slot_bytes = slot_bytes, .bytes = (size_t)want};
    for (int j = 0; j < STAGE_JOBS; j++) r->job[j].layer = -1;
    for (int l = 0; l < cap->n_layers && l < STAGE_AHEAD; l++) {
        stage_start(r, l);
        stage_join(r, l);
    }
    /* Fault in the slots past the first STAGE_AHEAD (filled above when the
     * capture has that many layers): the lock (attn_backend_pin, on the
     * sweep's thread once the GPU is up) would otherwise allocate their
     * pages itself, while here it runs beside the GPU's start. */
    const long page = sysconf(_SC_PAGESIZE);
    for (size_t off = (size_t)STAGE_AHEAD * slot_bytes; page > 0 && off < (size_t)want;
         off += (size_t)page)
        ((volatile uint8_t *)buf)[off] = 0;
    return r;
}

void sweep_stage_close(sweep_stage *r)
{
    if (r == NULL) return;
    stage_join_all(r);
    if (r->registered) attn_backend_unpin(r->pinned_by, r->buf);
    munmap(r->buf, r->bytes);
    free(r);
}

/* attn_backend_prefetch of layer li's staged q, k and v. */
static pg_status prefetch_layer(const sweep_stage *r, int li, attn_backend *be, pg_err *err)
{
    const attn_batch b = layer_batch(r->cap, li);
    const uint16_t *slot[3];
    sweep_stage_layer(r, li, slot);
    return attn_backend_prefetch(be, &b, slot[0], slot[1], slot[2], err);
}

/* Prefixes err's message with "layer li: " unless it already names a layer,
 * keeping the first failure's code. */
static void err_name_layer(pg_err *err, int li)
{
    if (err == NULL || strncmp(err->msg, "layer ", 6) == 0) return;
    char prefix[32];
    const size_t plen = (size_t)snprintf(prefix, sizeof prefix, "layer %d: ", li);
    size_t len = strlen(err->msg);
    if (plen + len >= sizeof err->msg) len = sizeof err->msg - plen - 1;
    memmove(err->msg + plen, err->msg, len);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + len] = '\0';
}

/* One computed layer on its way to the store: written on a thread of its own
 * while the next layer computes. The sweep's thread does not touch the store
 * until the write is joined, so the connection has one user at a time. */
typedef struct layer_write {
    pg_store *store;
    int64_t run_id;
    const char *capture_name, *scale_source;
    layer_ctx c;       /* owns c.vm and c.mbuf */
    double seconds;    /* the transaction's wall time */
    pg_status st;
    pg_err err;
    pthread_t thread;
    int threaded;      /* 1: thread runs it; 0: ran on the caller's thread */
    int started;       /* 1: layer_write_start ran and the join is still to come */
} layer_write;

/* Thread body: stores w's layer in one transaction and frees its metrics. */
static void *layer_write_run(void *arg)
{
    layer_write *w = arg;
    const double t0 = pg_clock_mono_s();
    store_layer_shape shape;
    sweep_layer_shape(w->c.cap, w->c.li, &shape);
    w->st = store_layer(w->store, w->run_id, w->capture_name, w->c.li, w->c.L, &shape, w->c.vm,
                        w->c.n_vm, w->c.tqs, w->scale_source, w->c.attr, w->c.n_attr,
                        w->c.kfs, w->c.n_kfs, w->c.refused, w->c.n_refused, &w->c.diag,
                        &w->err);
    if (w->st != PG_OK) err_name_layer(&w->err, w->c.li);
    w->seconds = pg_clock_mono_s() - t0;
    free(w->c.vm);
    free(w->c.mbuf);
    diag_layer_free(&w->c.diag);
    w->c.vm = NULL;
    w->c.mbuf = NULL;
    return NULL;
}

/* Starts storing w's layer on a thread (on this one when none can start). */
static void layer_write_start(layer_write *w)
{
    w->started = 1;
    w->threaded = pthread_create(&w->thread, NULL, layer_write_run, w) == 0;
    if (!w->threaded) layer_write_run(w);
}

/* Waits for w's store and adds its time to stats when not NULL, once (later
 * calls do nothing); a failure replaces *st and *err: w's layer came before
 * anything the caller did since. Returns 1 when w's layer is now committed. */
static int layer_write_join(layer_write *w, sweep_stats *stats, pg_status *st, pg_err *err)
{
    if (w->threaded) pthread_join(w->thread, NULL);
    if (stats != NULL) stats->store_s += w->seconds;
    const int committed = w->started && w->st == PG_OK;
    if (w->st != PG_OK) {
        *st = w->st;
        if (err != NULL) *err = w->err;
    }
    w->threaded = 0;
    w->started = 0;
    w->seconds = 0;
    w->st = PG_OK;
    return committed;
}

/* The wall seconds backends timed for extra runs x[0 .. n) (attn_layer_extra.seconds). */
static double extras_seconds(const attn_layer_extra *x, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++) t += x[i].seconds;
    return t;
}

/* Computes the reference, every selected mode and every external output of
 * layer li into *c (c->vm and c->mbuf allocated here, the caller's to free);
 * *scale_source says where the fp8 scales came from. */
static pg_status layer_compute(const capture *cap, int li, const sweep_options *opt,
                               attn_backend *be, attn_backend *cpu, const sweep_stage *ring,
                               const pg_notes *notes, int64_t *step, layer_ctx *c,
                               const char **scale_source, pg_err *err)
{
    const capture_layer *L = &cap->layers[li];
    *c = (layer_ctx){.cap = cap, .L = L, .li = li,
                     .b = layer_batch(cap, li),
                     .nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d,
                     .gq = L->q, .gk = L->k, .gv = L->v};
    if (ring != NULL) {
        const uint16_t *slot[3];
        sweep_stage_layer(ring, li, slot);
        c->gq = slot[0];
        c->gk = slot[1];
        c->gv = slot[2];
    }
    const int n_vm_max = 2 * SWEEP_MAX_VARIANTS + L->n_ext;
    c->vm = calloc((size_t)n_vm_max, sizeof *c->vm);
    c->mbuf = calloc((size_t)n_vm_max * (size_t)(L->hq + 1), sizeof *c->mbuf);
    if (!c->vm || !c->mbuf) return pg_fail(err, PG_ERR_NOMEM, "cannot allocate metrics");

    /* The scales of opt->scales, chosen here for both backends. */
    *scale_source = sweep_layer_quant_options(cap, li, opt, &c->fo);
    const tensor_quant tq0[3] = {{"q", c->fo.q_scale, {0}, 0}, {"k", c->fo.k_scale, {0}, 0},
                                 {"v", c->fo.v_scale, {0}, 0}};
    memcpy(c->tqs, tq0, sizeof tq0);
    layer_variants(cap, li, opt, &c->run, c->refused, &c->n_refused);
    /* each refused cell is done, stored and not run: its steps and those of
     * its attribution (sweep_run counts both for every variant) */
    for (int i = 0; i < c->n_refused; i++)
        *step += 1 + (opt->attribute ? attribute_row_count(c->refused[i].p) : 0);
    /* The attribution rows and hypotheses the backend runs go into the
     * layer's job beside its variants where it takes extra runs
     * (attn_backend_takes_extras: on its caches, against its reference);
     * every other row and hypothesis runs after the job, on the backend
     * where it runs it, else on the CPU specification. */
    layer_extras *lx = calloc(1, sizeof *lx);
    pg_status st = lx != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "a layer's extra runs");
    /* room for every row but "all" of each variant, and every hypothesis */
    const size_t most = (size_t)c->run.n * (ATTRIBUTE_MAX_ROWS - 1) + attn_hypothesis_count();
    if (st == PG_OK && most > ATTN_LAYER_MAX_EXTRAS)
        st = pg_fail(err, PG_ERR_INTERNAL, "layer %d: up to %zu extra runs, more than a layer "
                     "job's %d", li, most, ATTN_LAYER_MAX_EXTRAS);
    if (st == PG_OK && opt->attribute) {
        attribute_plan(be, &c->b, c->run.p, c->run.n, c->attr, &c->n_attr, lx->x,
                       lx->attr_row_of, &lx->n_attr);
        /* every variant's "all" row is the layer run's own metric (below) */
        if (attribute_left(c->attr, c->n_attr, lx->n_attr) > 0 &&
            (c->ref = malloc(c->nq * sizeof *c->ref)) == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "attribution: the layer's reference (%zu values)",
                         c->nq);
    }
    if (st == PG_OK && L->n_ext > 0)
        st = diag_layer_plan(be, &c->b, &c->fo, sweep_modes(opt), L->n_ext, &c->diag,
                             lx->x + lx->n_attr, lx->hyp_of, &lx->n_hyp, err);
    if (st == PG_OK) st = layer_run(c, opt, be, cpu, lx, notes, step, err);
    if (st == PG_OK) st = layer_kv_format_stats(c, opt, err);
    if (st == PG_OK && opt->attribute) {
        char what[64];
        snprintf(what, sizeof what, "layer %d attribution", li);
        pg_note_progress_step(notes, *step, what);
        /* Attribution is measured against the layer run's own reference
         * (c->ref), so a variant is its own "all" row, whichever backend ran
         * it (the same options, the same reference): found, not run again. */
        double joint[SWEEP_MAX_VARIANTS];
        for (int i = 0; i < c->run.n; i++) {
            joint[i] = NAN;
            for (int j = 0; j < c->n_vm; j++)
                if (c->vm[j].n_heads == 0 &&
                    strcmp(c->vm[j].name, attn_profile_variant(c->run.p[i])) == 0)
                    joint[i] = c->vm[j].m[0].rel_l2;
        }
        const double t0 = pg_clock_mono_s();
        st = attribute_finish(be, cpu, &c->b, L->q, L->k, L->v, &c->fo, joint, c->ref, c->attr,
                              c->n_attr, lx->x, lx->attr_row_of, lx->n_attr, err);
        if (opt->stats != NULL)
            opt->stats->attribute_s += pg_clock_mono_s() - t0 + extras_seconds(lx->x, lx->n_attr);
        *step += c->n_attr;
    }
    free(c->ref);
    c->ref = NULL;
    if (st == PG_OK && L->n_ext > 0) {
        /* Every hypothesis once, shared by the layer's external outputs, with
         * the fp8 variants' options: those in the layer's job are done, the
         * others run here. */
        char what[64];
        snprintf(what, sizeof what, "layer %d diagnosis", li);
        pg_note_progress_step(notes, *step, what);
        const double t0 = pg_clock_mono_s();
        st = diag_layer_finish(be, cpu, &c->b, L->q, L->k, L->v, &c->fo, L->n_ext, L->ext,
                               &c->diag, lx->x + lx->n_attr, lx->hyp_of, lx->n_hyp, err);
        if (opt->stats != NULL)
            opt->stats->diagnose_s +=
                pg_clock_mono_s() - t0 + extras_seconds(lx->x + lx->n_attr, lx->n_hyp);
    }
    free(lx);
    return st;
}

/* Says which attribution rows backend be leaves to the CPU specification
 * (attribute_rows_off, on the first layer's shape), per variant with any. */
static void say_cpu_attribution(const capture *cap, const sweep_options *opt,
                                const attn_backend *be, const pg_notes *notes)
{
    if (cap->n_layers == 0) return;
    const attn_batch b = layer_batch(cap, 0);
    for (int i = 0; i < opt->variants.n; i++) {
        const char *why = NULL;
        const attn_profile *p = opt->variants.p[i];
        const int n = attribute_rows_off(be, p, &b, &why);
        if (n > 0)
            pg_note_warning(notes, "--attribute: %d of %s's %d attribution runs a layer go to "
                            "the CPU specification beside %s: %s", n, attn_profile_variant(p),
                            attribute_row_count(p) - 1, attn_backend_name(be),
                            why != NULL ? why : "no reason given");
    }
}

/* The attribution rows of variants under opt (0 without --attribute). */
static int layer_attribution_rows(const sweep_options *opt, const sweep_variants *variants)
{
    int n = 0;
    for (int i = 0; opt->attribute && i < variants->n; i++)
        n += attribute_row_count(variants->p[i]);
    return n;
}

const char *sweep_layer_quant_options(const capture *cap, int li, const sweep_options *opt,
                                    attn_quant_options *fo)
{
    *fo = (attn_quant_options){.quantize = 1, .block_size = cap->block_size,
                             .page_seed = opt->page_seed + (uint64_t)li};
    const sweep_scales policy = sweep_scales_resolve(cap, opt->scales);
    layer_scales(&cap->layers[li], policy, fo);
    return sweep_scales_name(policy);
}

void sweep_layer_rows(const capture *cap, int li, const sweep_options *opt,
                      store_layer_rows *want)
{
    const capture_layer *L = &cap->layers[li];
    const int64_t whole_and_heads = (int64_t)L->hq + 1;
    sweep_variants run;
    sweep_refusal refused[SWEEP_MAX_VARIANTS];
    int n_refused = 0;
    layer_variants(cap, li, opt, &run, refused, &n_refused);
    want->unsupported = n_refused;  /* store_layer: one row per refused cell */
    want->metrics = (run.n + L->n_ext) * whole_and_heads;
    const attn_batch b = layer_batch(cap, li);
    int fold_kv = 0, fold_q = 0, on_gpu = 0;
    for (int i = 0; i < run.n; i++) {
        fold_kv |= attn_quant_fold_takes_kv(run.p[i]);
        fold_q |= attn_quant_fold_takes_q(run.p[i]);
        on_gpu += sweep_offloads(opt) && attn_backend_supports(opt->backend, run.p[i], &b, NULL);
    }
    if (sweep_offloads(opt) && opt->check_spec)  /* spec_check: one GQA group of heads */
        want->metrics += on_gpu * ((int64_t)(L->hq / L->hkv) + 1);
    /* note_quant: the rows the fold keeps (attn_quant_fold_takes_kv / _q). */
    want->quant = (fold_kv ? 2 : 0) + (fold_q ? 1 : 0);
    want->attribution = layer_attribution_rows(opt, &run);
    /* ext_diagnosis: every hypothesis against every external output. */
    want->diagnosis = diag_layer_rows(L->n_ext, sweep_modes(opt));
    want->shapes = 1;  /* store_layer: the layer's shape */
    /* layer_kv_format_stats: K and V of each swept mode with a quantized cache */
    want->kv_formats = 0;
    for (int m = 0; m < PG_MODE_COUNT; m++)
        if ((sweep_modes(opt) >> m) & 1u && pg_mode_traits_of((pg_mode)m)->k_format != PG_FORMAT_BF16)
            want->kv_formats += 2;
}

void sweep_layer_shape(const capture *cap, int li, store_layer_shape *out)
{
    const capture_layer *L = &cap->layers[li];
    *out = (store_layer_shape){.hq = L->hq, .hkv = L->hkv, .d = L->d, .window = L->window,
                               .has_sinks = L->sinks != NULL};
}

/* Says through notes where a sweep of cap on backend be runs each of opt's
 * profiles: which on be in every layer, and which on the CPU specification
 * instead, on how many layers, and why (attn_backend_supports). */
static void say_cpu_profiles(const capture *cap, const sweep_options *opt, attn_backend *be,
                             const pg_notes *notes)
{
    char on_be[SWEEP_MAX_VARIANTS * VARIANT_NAME_MAX] = "";
    size_t at = 0;
    for (int i = 0; i < opt->variants.n; i++) {
        const attn_profile *p = opt->variants.p[i];
        int n_cpu = 0;
        const char *why = NULL;
        for (int li = 0; li < cap->n_layers; li++) {
            const attn_batch b = layer_batch(cap, li);
            const char *w = NULL;
            if (attn_profile_computes(p, &b, NULL, 0) && !attn_backend_supports(be, p, &b, &w)) {
                n_cpu++;
                if (why == NULL) why = w;
            }
        }
        if (n_cpu == 0 && at < sizeof on_be)
            at += (size_t)snprintf(on_be + at, sizeof on_be - at, "%s%s", at ? ", " : "",
                                   attn_profile_variant(p));
        if (n_cpu == cap->n_layers)
            pg_note_warning(notes, "backend %s does not run %s (%s): it runs on the CPU "
                            "specification beside it (rows with backend cpu)",
                    attn_backend_name(be), attn_profile_variant(p),
                    why != NULL ? why : "unsupported");
        else if (n_cpu > 0)
            pg_note_warning(notes, "backend %s does not run %s on %d of the %d layers (%s): "
                            "those run on the CPU specification (rows with backend cpu)",
                    attn_backend_name(be), attn_profile_variant(p), n_cpu, cap->n_layers,
                    why != NULL ? why : "unsupported");
    }
    if (at > 0) pg_note_warning(notes, "on backend %s: %s", attn_backend_name(be), on_be);
}

/* Says through notes, per variant of opt whose kernel refuses some of cap's
 * layers, on how many and why (the first layer's reason): those cells are
 * stored as unsupported, the rest of the run goes on. */
static void say_refused_cells(const capture *cap, const sweep_options *opt, const pg_notes *notes)
{
    for (int i = 0; i < opt->variants.n; i++) {
        const attn_profile *p = opt->variants.p[i];
        char why[ATTN_REFUSAL_MAX] = "", w[ATTN_REFUSAL_MAX];
        int n = 0;
        for (int li = 0; li < cap->n_layers; li++) {
            const attn_batch b = layer_batch(cap, li);
            if (!attn_profile_computes(p, &b, w, sizeof w) && n++ == 0) memcpy(why, w, sizeof w);
        }
        if (n > 0)
            pg_note_warning(notes, "%s cannot compute %d of the %d layers (%s layer: %s): those "
                            "cells are stored as not supported, with the reason",
                            attn_profile_variant(p), n, cap->n_layers,
                            n == cap->n_layers ? "every" : "first", why);
    }
}

/* Whether opt marks layer li stored. */
static int layer_stored(const sweep_options *opt, int li)
{
    return opt->stored != NULL && opt->stored[li];
}

pg_status sweep_run(pg_store *store, int64_t run_id, const capture *cap,
                    const char *capture_name, const sweep_options *opt, pg_err *err)
{
    pg_status st = sweep_scales_check(cap, capture_name, opt->scales, err);
    if (st != PG_OK) return st;
    const int per_layer = opt->variants.n + layer_attribution_rows(opt, &opt->variants);
    /* The variants the backend does not run go to the CPU specification. */
    attn_backend *cpu = NULL;
    st = attn_backend_open("cpu", opt->n_threads, &cpu, NULL, 0, err);
    if (st != PG_OK) return st;
    attn_backend *be = sweep_offloads(opt) ? opt->backend : cpu;
    const pg_notes *notes = opt->notes;
    if (be != cpu) say_cpu_profiles(cap, opt, be, notes);
    say_refused_cells(cap, opt, notes);
    if (be != cpu && opt->attribute) say_cpu_attribution(cap, opt, be, notes);
    int n_todo = 0;
    for (int li = 0; li < cap->n_layers; li++) n_todo += !layer_stored(opt, li);
    pg_note_progress_begin(notes, (int64_t)n_todo * per_layer);
    int64_t step = 0;
    /* On the GPU, uploads come from the ring of page-locked buffers
     * (sweep_stage): the caller's, whose first layers were copied while the
     * GPU started, or one opened here. */
    sweep_stage *own = NULL, *ring = NULL;
    const double t0 = pg_clock_mono_s();
    if (be != cpu) {
        ring = opt->stage != NULL ? opt->stage : (own = sweep_stage_open(cap, notes));
        if (ring != NULL && !ring->registered) {
            pg_err lock_err = {0};
            const double t_lock = pg_clock_mono_s();
            ring->registered = attn_backend_pin(be, ring->buf, ring->bytes, &lock_err) == PG_OK;
            ring->pinned_by = be;
            if (opt->stats != NULL) opt->stats->lock_s += pg_clock_mono_s() - t_lock;
            if (!ring->registered)
                pg_note_warning(notes, "%s; uploads run from pageable memory, slower",
                                lock_err.msg);
        }
    }
    if (opt->stats != NULL) opt->stats->compute_s += pg_clock_mono_s() - t0;
    /* Layer li computes while layer li - 1 is stored (w[li % 2]). */
    layer_write w[2] = {{.st = PG_OK}, {.st = PG_OK}};
    int stopped_at = -1, stored = 0;  /* the layer not started once *opt->stop was set */
    for (int li = 0; st == PG_OK && li < cap->n_layers; li++) {
        const int skip = layer_stored(opt, li);
        if (!skip && opt->stop != NULL && *opt->stop) {
            stopped_at = li;
            break;
        }
        const double t1 = pg_clock_mono_s();
        if (ring != NULL) {
            /* Layer li + 1's copy into its slot (started when li - 2 did)
             * is joined and goes to the GPU while li computes; li + 3 is
             * copied into the slot li - 1 used (its copy to the GPU is done)
             * while li + 2's copy may still run. A stored layer is neither
             * copied nor sent, and its slot is not read. */
            stage_join(ring, li + 1);
            if (li == 0 && !skip) st = prefetch_layer(ring, 0, be, err);
            if (li + 1 < cap->n_layers && !layer_stored(opt, li + 1) && st == PG_OK)
                st = prefetch_layer(ring, li + 1, be, err);
            if (li + STAGE_AHEAD < cap->n_layers && !layer_stored(opt, li + STAGE_AHEAD) &&
                st == PG_OK)
                stage_start(ring, li + STAGE_AHEAD);
        }
        layer_write *cur = &w[li % 2], *prev = &w[(li + 1) % 2];
        *cur = (layer_write){.store = store, .run_id = run_id, .capture_name = capture_name,
                             .st = PG_OK};
        if (st == PG_OK && !skip)
            st = layer_compute(cap, li, opt, be, cpu, ring, notes, &step, &cur->c,
                               &cur->scale_source, err);
        if (st != PG_OK) err_name_layer(err, li);
        if (opt->stats != NULL) opt->stats->compute_s += pg_clock_mono_s() - t1;
        /* The layer before must be stored before this one starts: an earlier
         * failure wins, and this layer is then not stored. (A stored layer
         * joins it too: w[li % 2] must be free when li + 1 takes it.) */
        stored += layer_write_join(prev, opt->stats, &st, err);
        if (st == PG_OK && !skip) layer_write_start(cur);
        else {
            free(cur->c.vm);
            free(cur->c.mbuf);
            diag_layer_free(&cur->c.diag);
        }
    }
    for (int i = 0; i < 2; i++) stored += layer_write_join(&w[i], opt->stats, &st, err);
    if (ring != NULL) stage_join_all(ring);
    sweep_stage_close(own); /* a caller's ring stays locked until its sweep_stage_close */
    attn_backend_close(cpu);
    pg_note_progress_end(notes);
    if (opt->stats != NULL) {
        opt->stats->layers_stored += stored;
        opt->stats->layers_skipped += cap->n_layers - n_todo;
    }
    if (st == PG_OK && stopped_at >= 0)
        st = pg_fail(err, PG_ERR_INTERRUPTED,
                     "stopped before layer %d: %d of the capture's %d layers are stored",
                     stopped_at, cap->n_layers - n_todo + stored, cap->n_layers);
    return st;
}
