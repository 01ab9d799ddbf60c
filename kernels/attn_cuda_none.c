/* attn_cuda_none.c: the CUDA backend's entry points in a build without CUDA
 * (see attn_cuda.h): each says so with PG_ERR_DEVICE. */
#include "attn_cuda.h"

#ifndef PG_HAVE_CUDA
/* The one message of a build without CUDA. */
static pg_status no_cuda(pg_err *err)
{
    return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: precgate was built without CUDA "
                                       "(nvcc not found or -DPRECGATE_CUDA=OFF)");
}

pg_status cuda_backend_open(cuda_backend **out, char *desc, size_t desc_len, pg_err *err)
{
    *out = NULL;
    if (desc_len > 0) desc[0] = '\0';
    return no_cuda(err);
}

void cuda_backend_close(cuda_backend *be)
{
    (void)be;
}

void cuda_backend_limit_memory(cuda_backend *be, double bytes)
{
    (void)be;
    (void)bytes;
}

pg_status cuda_prefetch_qkv(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v, pg_err *err)
{
    (void)be, (void)b, (void)q, (void)k, (void)v;
    return no_cuda(err);
}

pg_status cuda_host_register(void *p, size_t bytes, pg_err *err)
{
    (void)p, (void)bytes;
    return no_cuda(err);
}

void cuda_host_unregister(void *p)
{
    (void)p;
}

pg_status cuda_reference(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v, double *out, pg_err *err)
{
    (void)be, (void)b, (void)q, (void)k, (void)v, (void)out;
    return no_cuda(err);
}

int cuda_supports(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                  const char **why)
{
    (void)p, (void)b, (void)keep_bf16;
    if (why != NULL) *why = "precgate was built without CUDA";
    return 0;
}

int cuda_hypothesis_supports(const attn_hypothesis *h, const attn_batch *b, const char **why)
{
    (void)h, (void)b;
    if (why != NULL) *why = "precgate was built without CUDA";
    return 0;
}

pg_status cuda_hypothesis_run(cuda_backend *be, const attn_hypothesis *h, const attn_batch *b,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v,
                              const attn_quant_options *opt, uint16_t *out, pg_err *err)
{
    (void)be, (void)h, (void)b, (void)q, (void)k, (void)v, (void)opt, (void)out;
    return no_cuda(err);
}

pg_status cuda_variant_run(cuda_backend *be, const attn_profile *p, const attn_batch *b,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const attn_quant_options *opt, uint16_t *out, attn_quant_report *rep,
                           pg_err *err)
{
    (void)be, (void)p, (void)b, (void)q, (void)k, (void)v, (void)opt, (void)out, (void)rep;
    return no_cuda(err);
}

pg_status cuda_dequant_gather(cuda_backend *be, const kv_paged *src, float k_scale, float v_scale,
                              kv_paged *out, pg_err *err)
{
    (void)be, (void)src, (void)k_scale, (void)v_scale, (void)out;
    return no_cuda(err);
}

pg_status cuda_paged_write(cuda_backend *be, const attn_batch *b, const uint16_t *k,
                           const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                           uint64_t page_seed, int block_size, kv_paged *out,
                           attn_quant_report *rep, pg_err *err)
{
    (void)be, (void)b, (void)k, (void)v, (void)elem, (void)k_scale, (void)v_scale;
    (void)page_seed, (void)block_size, (void)out, (void)rep;
    return no_cuda(err);
}

pg_status cuda_metrics_host(cuda_backend *be, const uint16_t *out, const double *ref, int64_t tq,
                            int hq, int d, pg_metric_values *m, pg_err *err)
{
    (void)be, (void)out, (void)ref, (void)tq, (void)hq, (void)d, (void)m;
    return no_cuda(err);
}

pg_status cuda_sweep_layer(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                           int n_var, const attn_profile *const *var, int n_ext,
                           const uint16_t *const *ext, pg_metric_values *metrics,
                           attn_quant_report *rep, uint16_t *const *mode_out, double *ref_out,
                           double *ms_ref, double *ms_modes, double *ms_metrics,
                           const pg_notes *notes, pg_err *err)
{
    (void)notes, (void)ref_out;
    (void)be, (void)b, (void)q, (void)k, (void)v, (void)opt, (void)n_var, (void)var, (void)n_ext;
    (void)ext;
    (void)metrics, (void)rep, (void)mode_out, (void)ms_ref, (void)ms_modes, (void)ms_metrics;
    return no_cuda(err);
}

pg_status cuda_time_kernels(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                            int reps, cuda_kernel_times *t, pg_err *err)
{
    (void)be, (void)b, (void)q, (void)k, (void)v, (void)opt, (void)reps, (void)t;
    return no_cuda(err);
}
#else
/* Built with CUDA: cuda_backend.cu provides these. */
typedef int attn_cuda_none_unused;
#endif
