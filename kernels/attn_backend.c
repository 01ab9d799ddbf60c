/*
 * attn_backend.c: the backend interface (attn_backend.h) over its two
 * backends, one table of operations each: the CPU specification, and the
 * CUDA kernels (attn_cuda.h; in a build without CUDA its open fails with
 * the reason).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_backend.h"
#include "attn_cuda.h"
#include "base/clock.h"

/* What each backend provides. */
typedef struct backend_ops {
    const char *name;
    pg_status (*open)(attn_backend *be, char *desc, size_t desc_len, pg_err *err);
    void (*close)(attn_backend *be);
    int (*supports)(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                    const char **why);
    pg_status (*run_layer)(attn_backend *be, const attn_layer_job *job, pg_err *err);
    pg_status (*run_variant)(attn_backend *be, const attn_profile *p, const attn_batch *b,
                             const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const attn_quant_options *opt, uint16_t *out, attn_quant_report *rep,
                             pg_err *err);
    int (*supports_hypothesis)(const attn_hypothesis *h, const attn_batch *b, const char **why);
    pg_status (*run_hypothesis)(attn_backend *be, const attn_hypothesis *h, const attn_batch *b,
                                const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                const attn_quant_options *opt, uint16_t *out, pg_err *err);
    pg_status (*reference)(attn_backend *be, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, double *out, pg_err *err);
    pg_status (*paged_write)(attn_backend *be, const attn_batch *b, const uint16_t *k,
                             const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                             uint64_t page_seed, int block_size, kv_paged *out,
                             attn_quant_report *rep, pg_err *err);
    pg_status (*dequant_gather)(attn_backend *be, const kv_paged *src, float k_scale,
                                float v_scale, kv_paged *out, pg_err *err);
    pg_status (*metrics)(attn_backend *be, const uint16_t *out, const double *ref, int64_t tq,
                         int hq, int d, pg_metric_values *m, pg_err *err);
    pg_status (*prefetch)(attn_backend *be, const attn_batch *b, const uint16_t *q,
                          const uint16_t *k, const uint16_t *v, pg_err *err); /* NULL: none */
    pg_status (*pin)(void *p, size_t bytes, pg_err *err);                    /* NULL: none */
    void (*unpin)(void *p);
    void (*limit_memory)(attn_backend *be, double bytes);                    /* NULL: none */
    int takes_extras;   /* 1: run_layer computes attn_layer_job's extra runs */
} backend_ops;

struct attn_backend {
    const backend_ops *ops;
    int n_threads;
    cuda_backend *gpu; /* the cuda backend's device */
};

/* ---- cpu: the specification ------------------------------------------------ */

static pg_status cpu_open(attn_backend *be, char *desc, size_t desc_len, pg_err *err)
{
    (void)err;
    if (desc != NULL && desc_len > 0)
        snprintf(desc, desc_len, "cpu: the CPU specification on %d threads", be->n_threads);
    return PG_OK;
}

static void cpu_close(attn_backend *be) { (void)be; }

static int cpu_supports(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                        const char **why)
{
    (void)p, (void)b, (void)keep_bf16;
    if (why != NULL) *why = NULL;
    return 1; /* the specification defines every profile; a batch it refuses is an error */
}

static int cpu_supports_hypothesis(const attn_hypothesis *h, const attn_batch *b,
                                   const char **why)
{
    (void)h, (void)b;
    if (why != NULL) *why = NULL;
    return 1;
}

static pg_status cpu_run_hypothesis(attn_backend *be, const attn_hypothesis *h,
                                    const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                    const uint16_t *v, const attn_quant_options *opt,
                                    uint16_t *out, pg_err *err)
{
    return attn_hypothesis_run(h, b, q, k, v, opt, out, be->n_threads, err);
}

static pg_status cpu_run_variant(attn_backend *be, const attn_profile *p, const attn_batch *b,
                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                 const attn_quant_options *opt, uint16_t *out,
                                 attn_quant_report *rep, pg_err *err)
{
    if (rep != NULL) memset(rep, 0, sizeof *rep);
    return attn_variant_run(p, b, q, k, v, opt, out, rep, be->n_threads, err);
}

int attn_quant_fold_takes_kv(const attn_profile *p)
{
    const pg_mode_traits *t = pg_mode_traits_of(attn_profile_mode(p));
    return (t->quantized & (ATTN_TENSOR_K | ATTN_TENSOR_V)) && t->k_format == PG_FORMAT_E4M3 &&
           t->kv_scales == PG_SCALES_PER_TENSOR;
}

int attn_quant_fold_takes_q(const attn_profile *p)
{
    const pg_mode_traits *t = pg_mode_traits_of(attn_profile_mode(p));
    return attn_quant_fold_takes_kv(p) && (t->quantized & ATTN_TENSOR_Q) &&
           t->q_format == PG_FORMAT_E4M3;
}

void attn_quant_fold_add(attn_quant_fold *f, const attn_profile *p, const attn_quant_report *r)
{
    if (!attn_quant_fold_takes_kv(p)) return;
    if (!f->have_kv) {
        f->rep.k = r->k;
        f->rep.v = r->v;
        f->have_kv = 1;
    }
    if (attn_quant_fold_takes_q(p) && !f->have_q) {
        f->rep.q = r->q;
        f->have_q = 1;
    }
}

void attn_layer_extra_refuse(attn_layer_extra *x, int n_diag_ext, const char *why)
{
    x->refused = 1;
    snprintf(x->why, sizeof x->why, "%.*s", (int)sizeof x->why - 1, why);
    x->rel_l2 = NAN;
    for (int e = 0; x->ext_rel_l2 != NULL && e < n_diag_ext; e++) x->ext_rel_l2[e] = NAN;
}

/* Extra run x of job on the CPU specification into o (nq bf16), measured
 * against ref (scratch: nq doubles). */
static pg_status cpu_run_extra(attn_backend *be, const attn_layer_job *job, attn_layer_extra *x,
                               uint16_t *o, const double *ref, double *scratch, pg_err *err)
{
    const attn_batch *b = job->b;
    const int64_t tq = attn_batch_tq(b);
    const size_t row = (size_t)b->hq * (size_t)b->d, nq = (size_t)tq * row;
    pg_err why = {0};
    pg_status st;
    const double t0 = pg_clock_mono_s();
    x->refused = 0;
    x->why[0] = '\0';
    if (x->p != NULL) {
        attn_quant_options o_kept = *job->opt;
        o_kept.keep_bf16 = x->keep_bf16;
        st = cpu_run_variant(be, x->p, b, job->q, job->k, job->v, &o_kept, o, NULL, &why);
    } else {
        st = cpu_run_hypothesis(be, x->h, b, job->q, job->k, job->v, job->opt, o, &why);
    }
    if (st == PG_ERR_USAGE || st == PG_ERR_UNSUPPORTED) {
        attn_layer_extra_refuse(x, job->n_diag_ext, why.msg);
        x->seconds = pg_clock_mono_s() - t0;
        return PG_OK;
    }
    if (st != PG_OK) {
        if (err != NULL) *err = why;
        return st;
    }
    pg_metric_values m;
    metrics_compare_bf16(o, row, ref, row, (size_t)tq, row, scratch, &m);
    x->rel_l2 = m.rel_l2;
    for (int e = 0; x->ext_rel_l2 != NULL && e < job->n_diag_ext; e++)
        x->ext_rel_l2[e] =
            metrics_rel_l2_bf16(job->ext[job->n_ext - job->n_diag_ext + e], o, nq);
    x->seconds = pg_clock_mono_s() - t0;
    return PG_OK;
}

static pg_status cpu_run_layer(attn_backend *be, const attn_layer_job *job, pg_err *err)
{
    const attn_batch *b = job->b;
    const int64_t tq = attn_batch_tq(b);
    const size_t nq = (size_t)tq * (size_t)b->hq * (size_t)b->d;
    const size_t per = (size_t)b->hq + 1;
    double *ref = malloc(nq * sizeof *ref), *scratch = malloc(nq * sizeof *scratch);
    uint16_t *own = malloc(nq * sizeof *own);
    pg_status st = ref && scratch && own
                       ? PG_OK
                       : pg_fail(err, PG_ERR_NOMEM, "cpu: cannot allocate a layer of %zu values",
                                 nq);
    if (st == PG_OK) st = attn_reference(b, job->q, job->k, job->v, ref, be->n_threads, err);
    attn_quant_fold fold = {0};
    for (int i = 0; st == PG_OK && i < job->n_var; i++) {
        uint16_t *o = job->out != NULL && job->out[i] != NULL ? job->out[i] : own;
        attn_quant_report r;
        st = cpu_run_variant(be, job->var[i], b, job->q, job->k, job->v, job->opt, o, &r, err);
        if (st != PG_OK) break;
        attn_quant_fold_add(&fold, job->var[i], &r);
        metrics_compare_heads(o, ref, tq, b->hq, b->d, scratch, job->metrics + (size_t)i * per);
    }
    for (int e = 0; st == PG_OK && e < job->n_ext; e++)
        metrics_compare_heads(job->ext[e], ref, tq, b->hq, b->d, scratch,
                              job->metrics + (size_t)(job->n_var + e) * per);
    for (int x = 0; st == PG_OK && x < job->n_extra; x++)
        st = cpu_run_extra(be, job, &job->extra[x], own, ref, scratch, err);
    if (st == PG_OK && job->rep != NULL) *job->rep = fold.rep;
    if (st == PG_OK && job->ref_out != NULL) memcpy(job->ref_out, ref, nq * sizeof *ref);
    free(ref);
    free(scratch);
    free(own);
    return st;
}

static pg_status cpu_reference(attn_backend *be, const attn_batch *b, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v, double *out, pg_err *err)
{
    return attn_reference(b, q, k, v, out, be->n_threads, err);
}

static pg_status cpu_paged_write(attn_backend *be, const attn_batch *b, const uint16_t *k,
                                 const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                                 uint64_t page_seed, int block_size, kv_paged *out,
                                 attn_quant_report *rep, pg_err *err)
{
    (void)be;
    if (rep != NULL) memset(rep, 0, sizeof *rep);
    return kv_paged_write(b, k, v, elem, k_scale, v_scale, page_seed, block_size, out,
                          rep != NULL ? &rep->k : NULL, rep != NULL ? &rep->v : NULL, err);
}

static pg_status cpu_dequant_gather(attn_backend *be, const kv_paged *src, float k_scale,
                                    float v_scale, kv_paged *out, pg_err *err)
{
    (void)be;
    return kv_dequant_gather(src, k_scale, v_scale, out, err);
}

static pg_status cpu_metrics(attn_backend *be, const uint16_t *out, const double *ref,
                             int64_t tq, int hq, int d, pg_metric_values *m, pg_err *err)
{
    (void)be;
    double *scratch = malloc((size_t)tq * (size_t)hq * (size_t)d * sizeof *scratch);
    if (scratch == NULL) return pg_fail(err, PG_ERR_NOMEM, "cpu: metrics scratch");
    metrics_compare_heads(out, ref, tq, hq, d, scratch, m);
    free(scratch);
    return PG_OK;
}

static const backend_ops cpu_ops = {
    "cpu",           cpu_open,        cpu_close,          cpu_supports,
    cpu_run_layer,   cpu_run_variant, cpu_supports_hypothesis, cpu_run_hypothesis,
    cpu_reference,   cpu_paged_write, cpu_dequant_gather, cpu_metrics,
    NULL,            NULL,            NULL,               NULL,
    1};

/* ---- cuda: our kernels ------------------------------------------------------ */

static pg_status gpu_open(attn_backend *be, char *desc, size_t desc_len, pg_err *err)
{
    return cuda_backend_open(&be->gpu, desc, desc_len, err);
}

static void gpu_close(attn_backend *be) { cuda_backend_close(be->gpu); }

static pg_status gpu_run_layer(attn_backend *be, const attn_layer_job *job, pg_err *err)
{
    return cuda_sweep_layer(be->gpu, job->b, job->q, job->k, job->v, job->opt, job->n_var,
                            job->var, job->n_ext, job->ext, job->metrics, job->rep, job->out,
                            job->ref_out, NULL, NULL, NULL, job->notes, err);
}

static pg_status gpu_run_variant(attn_backend *be, const attn_profile *p, const attn_batch *b,
                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                 const attn_quant_options *opt, uint16_t *out,
                                 attn_quant_report *rep, pg_err *err)
{
    return cuda_variant_run(be->gpu, p, b, q, k, v, opt, out, rep, err);
}

static pg_status gpu_run_hypothesis(attn_backend *be, const attn_hypothesis *h,
                                    const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                    const uint16_t *v, const attn_quant_options *opt,
                                    uint16_t *out, pg_err *err)
{
    return cuda_hypothesis_run(be->gpu, h, b, q, k, v, opt, out, err);
}

static pg_status gpu_prefetch(attn_backend *be, const attn_batch *b, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, pg_err *err)
{
    return cuda_prefetch_qkv(be->gpu, b, q, k, v, err);
}

static pg_status gpu_reference(attn_backend *be, const attn_batch *b, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v, double *out, pg_err *err)
{
    return cuda_reference(be->gpu, b, q, k, v, out, err);
}

static pg_status gpu_paged_write(attn_backend *be, const attn_batch *b, const uint16_t *k,
                                 const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                                 uint64_t page_seed, int block_size, kv_paged *out,
                                 attn_quant_report *rep, pg_err *err)
{
    return cuda_paged_write(be->gpu, b, k, v, elem, k_scale, v_scale, page_seed, block_size, out,
                            rep, err);
}

static pg_status gpu_dequant_gather(attn_backend *be, const kv_paged *src, float k_scale,
                                    float v_scale, kv_paged *out, pg_err *err)
{
    return cuda_dequant_gather(be->gpu, src, k_scale, v_scale, out, err);
}

static pg_status gpu_metrics(attn_backend *be, const uint16_t *out, const double *ref,
                             int64_t tq, int hq, int d, pg_metric_values *m, pg_err *err)
{
    return cuda_metrics_host(be->gpu, out, ref, tq, hq, d, m, err);
}

static void gpu_limit_memory(attn_backend *be, double bytes)
{
    cuda_backend_limit_memory(be->gpu, bytes);
}

static const backend_ops gpu_ops = {
    "cuda",          gpu_open,        gpu_close,          cuda_supports,
    gpu_run_layer,   gpu_run_variant, cuda_hypothesis_supports, gpu_run_hypothesis,
    gpu_reference,   gpu_paged_write, gpu_dequant_gather, gpu_metrics,
    gpu_prefetch,    cuda_host_register, cuda_host_unregister, gpu_limit_memory,
    /* its rows and hypotheses run one call each (attn_backend_run_variant,
     * attn_backend_run_hypothesis), their outputs measured on its metrics */
    0};

/* ---- the interface ---------------------------------------------------------- */

static const backend_ops *const backends[] = {&cpu_ops, &gpu_ops};

pg_status attn_backend_open(const char *name, int n_threads, attn_backend **out, char *desc,
                            size_t desc_len, pg_err *err)
{
    *out = NULL;
    const backend_ops *ops = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(name, backends[i]->name) == 0) ops = backends[i];
    if (ops == NULL)
        return pg_fail(err, PG_ERR_USAGE, "backend '%s' is not one of cpu, cuda", name);
    attn_backend *be = calloc(1, sizeof *be);
    if (be == NULL) return pg_fail(err, PG_ERR_NOMEM, "backend %s: out of memory", name);
    be->ops = ops;
    be->n_threads = n_threads < 1 ? 1 : n_threads;
    const pg_status st = ops->open(be, desc, desc_len, err);
    if (st != PG_OK) {
        free(be);
        return st;
    }
    *out = be;
    return PG_OK;
}

void attn_backend_close(attn_backend *be)
{
    if (be == NULL) return;
    be->ops->close(be);
    free(be);
}

const char *attn_backend_name(const attn_backend *be) { return be->ops->name; }

int attn_backend_supports(const attn_backend *be, const attn_profile *p, const attn_batch *b,
                          const char **why)
{
    return be->ops->supports(p, b, 0, why);
}

int attn_backend_supports_kept(const attn_backend *be, const attn_profile *p,
                               const attn_batch *b, unsigned keep_bf16, const char **why)
{
    return be->ops->supports(p, b, keep_bf16, why);
}

/* A layer of head dim d and no sinks or window, as the GPU's placement is
 * asked about without one (one token: the shape alone decides). */
static const int32_t probe_tokens = 1;
static attn_batch probe_batch(int d)
{
    return (attn_batch){1, &probe_tokens, &probe_tokens, 1, 1, d, 0, 1.0f, NULL};
}

int attn_backend_gpu_runs(const attn_profile *p, int d, unsigned keep_bf16, const char **why)
{
    const attn_batch b = probe_batch(d);
    return cuda_supports(p, &b, keep_bf16, why);
}

int attn_backend_gpu_runs_hypothesis(const attn_hypothesis *h, int d, const char **why)
{
    const attn_batch b = probe_batch(d);
    return cuda_hypothesis_supports(h, &b, why);
}

pg_status attn_backend_run_layer(attn_backend *be, const attn_layer_job *job, pg_err *err)
{
    for (int i = 0; i < job->n_var; i++) {
        const char *why = NULL;
        if (!be->ops->supports(job->var[i], job->b, job->opt->keep_bf16, &why))
            return pg_fail(err, PG_ERR_USAGE, "backend %s does not run %s: %s", be->ops->name,
                           attn_profile_variant(job->var[i]), why);
    }
    if (job->n_extra > 0 && !be->ops->takes_extras)
        return pg_fail(err, PG_ERR_USAGE, "backend %s takes no extra runs in a layer job (%d "
                       "given): run them one by one", be->ops->name, job->n_extra);
    if (job->n_diag_ext < 0 || job->n_diag_ext > job->n_ext || job->n_extra < 0 ||
        job->n_extra > ATTN_LAYER_MAX_EXTRAS || (job->n_extra > 0 && job->extra == NULL))
        return pg_fail(err, PG_ERR_INTERNAL, "layer job: %d extra runs, %d of %d external "
                       "outputs diagnosed", job->n_extra, job->n_diag_ext, job->n_ext);
    for (int i = 0; i < job->n_extra; i++) {
        const attn_layer_extra *x = &job->extra[i];
        const char *why = NULL;
        if ((x->p == NULL) == (x->h == NULL))
            return pg_fail(err, PG_ERR_INTERNAL, "layer job: extra run %d must name a profile "
                           "or a hypothesis, not %s", i, x->p == NULL ? "neither" : "both");
        if (x->p != NULL ? !be->ops->supports(x->p, job->b, x->keep_bf16, &why)
                         : !be->ops->supports_hypothesis(x->h, job->b, &why))
            return pg_fail(err, PG_ERR_USAGE, "backend %s does not run %s (%s 0x%x): %s",
                           be->ops->name,
                           x->p != NULL ? attn_profile_variant(x->p) : attn_hypothesis_name(x->h),
                           x->p != NULL ? "keep_bf16" : "hypothesis", x->keep_bf16, why);
    }
    return be->ops->run_layer(be, job, err);
}

int attn_backend_takes_extras(const attn_backend *be) { return be->ops->takes_extras; }

int attn_backend_supports_hypothesis(const attn_backend *be, const attn_hypothesis *h,
                                     const attn_batch *b, const char **why)
{
    return be->ops->supports_hypothesis(h, b, why);
}

pg_status attn_backend_run_hypothesis(attn_backend *be, const attn_hypothesis *h,
                                      const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, const attn_quant_options *opt,
                                      uint16_t *out, pg_err *err)
{
    return be->ops->run_hypothesis(be, h, b, q, k, v, opt, out, err);
}

pg_status attn_backend_run_variant(attn_backend *be, const attn_profile *p, const attn_batch *b,
                                   const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                   const attn_quant_options *opt, uint16_t *out,
                                   attn_quant_report *rep, pg_err *err)
{
    return be->ops->run_variant(be, p, b, q, k, v, opt, out, rep, err);
}

pg_status attn_backend_reference(attn_backend *be, const attn_batch *b, const uint16_t *q,
                                 const uint16_t *k, const uint16_t *v, double *out, pg_err *err)
{
    return be->ops->reference(be, b, q, k, v, out, err);
}

pg_status attn_backend_paged_write(attn_backend *be, const attn_batch *b, const uint16_t *k,
                                   const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                                   uint64_t page_seed, int block_size, kv_paged *out,
                                   attn_quant_report *rep, pg_err *err)
{
    return be->ops->paged_write(be, b, k, v, elem, k_scale, v_scale, page_seed, block_size, out,
                                rep, err);
}

pg_status attn_backend_dequant_gather(attn_backend *be, const kv_paged *src, float k_scale,
                                      float v_scale, kv_paged *out, pg_err *err)
{
    return be->ops->dequant_gather(be, src, k_scale, v_scale, out, err);
}

pg_status attn_backend_metrics(attn_backend *be, const uint16_t *out, const double *ref,
                               int64_t tq, int hq, int d, pg_metric_values *m, pg_err *err)
{
    return be->ops->metrics(be, out, ref, tq, hq, d, m, err);
}

pg_status attn_backend_prefetch(attn_backend *be, const attn_batch *b, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, pg_err *err)
{
    return be->ops->prefetch != NULL ? be->ops->prefetch(be, b, q, k, v, err) : PG_OK;
}

pg_status attn_backend_pin(attn_backend *be, void *p, size_t bytes, pg_err *err)
{
    return be->ops->pin != NULL ? be->ops->pin(p, bytes, err) : PG_OK;
}

void attn_backend_unpin(attn_backend *be, void *p)
{
    if (be->ops->unpin != NULL) be->ops->unpin(p);
}

void attn_backend_limit_memory(attn_backend *be, double bytes)
{
    if (be->ops->limit_memory != NULL) be->ops->limit_memory(be, bytes);
}
