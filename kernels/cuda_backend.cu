// cuda_backend.cu: the CUDA backend's host side (see attn_cuda.h): device
// buffers, the paged caches' block tables, and the order of kernels a layer
// runs. The kernels themselves are one per file (cuda_*.cu).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "attn_backend.h"
#include "attn_cuda.h"
#include "attn_hypothesis.h"
#include "attn_profile_impl.h"
#include "cuda_common.cuh"

// bf16 bits of the quiet NaN that unwritten cache slots hold (as kv_cache.c).
#define CUDA_BF16_NAN_BITS 0x7FC0u
// Threads per block of the fill kernel.
#define CUDA_FILL_THREADS 256

// Host arrays up to this size are uploaded through the page-locked staging
// buffer (block tables: 4 bytes per page; a batch's arrays: 24 bytes per
// sequence); larger ones (q, k, v) are copied from where they are.
#define CUDA_STAGE_MAX_BYTES ((size_t)1 << 20)
// The staging buffer's first size; it doubles when a call needs more (the
// 36-layer benchmark's first layer takes it to 8 KiB, growing twice), so the growth
// path runs in every check.
#define CUDA_STAGE_FIRST_BYTES ((size_t)4 << 10)
// Alignment of each staged array in the buffer (16-byte copies).
#define CUDA_STAGE_ALIGN 16

// The three quantization counter sets (q, k, v) of a layer, on either side.
#define CUDA_STATS_BYTES (3 * CUDA_QSTAT_COUNT * sizeof(unsigned long long))

// q, k, v of one layer copied ahead on the copy stream (cuda_prefetch_qkv).
struct prefetch_slot {
    const void *q, *k, *v;           // the host arrays copied (NULL: slot holds nothing)
    size_t q_bytes, kv_bytes;        // bytes copied
    size_t q_cap, k_cap, v_cap;      // bytes the device buffers hold
    uint16_t *dq, *dk, *dv;          // device buffers (cudaMalloc'd, kept between layers)
    cudaEvent_t done;                // recorded after the copies
};

// Prefetch slots: the layer being swept uses one while the next one's copies
// fill the other.
#define CUDA_PREFETCH_SLOTS 2

struct cuda_backend {
    int device;
    cudaStream_t stream;
    cudaStream_t copy_stream;        // prefetch copies, beside the kernels
    prefetch_slot slot[CUDA_PREFETCH_SLOTS];
    int next_slot;
    cudaDeviceProp prop;
    // Small uploads (a batch's arrays, block tables) go up from this
    // page-locked buffer (stage_upload): a copy from pageable memory may wait
    // for the stream's earlier work. stage_done is recorded after each copy;
    // the buffer is refilled from 0 after a call's final wait (dev_pool_free)
    // or once stage_done has passed (stage_drain, when it must grow).
    void *stage_host;
    size_t stage_cap, stage_used;
    cudaEvent_t stage_done;
    // A layer's metrics results and quantization counters come back into
    // this page-locked buffer (sweep_layer_whole), read after the layer's
    // one synchronization.
    void *results_host;
    size_t results_cap;
    // Most bytes a layer may plan with (cuda_backend_limit_memory); 0: no cap.
    double mem_limit;
};

namespace {

// Fills n uint16_t with value.
__global__ void fill_u16_kernel(uint16_t *p, int64_t n, uint16_t value)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = value;
}

// Device allocations of one call, freed together.
struct dev_pool {
    cuda_backend *be;
    void *ptr[48];
    int n;
};

pg_status dev_alloc(dev_pool *pool, void **p, size_t bytes, const char *what, pg_err *err)
{
    *p = nullptr;
    if (pool->n == (int)(sizeof pool->ptr / sizeof pool->ptr[0]))
        return pg_fail(err, PG_ERR_INTERNAL, "cuda: too many buffers in one call");
    cudaError_t rc = cudaMallocAsync(p, bytes ? bytes : 1, pool->be->stream);
    if (rc != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return pg_fail(err, rc == cudaErrorMemoryAllocation ? PG_ERR_NOMEM : PG_ERR_DEVICE,
                       "cuda: cannot allocate %.1f MiB for %s (%.1f of %.1f GiB free): %s",
                       (double)bytes / (1 << 20), what, (double)free_b / (1 << 30),
                       (double)total_b / (1 << 30), cudaGetErrorString(rc));
    }
    pool->ptr[pool->n++] = *p;
    return PG_OK;
}

// Frees the call's buffers and waits for its stream; the staging buffer's
// copies of the call are then done, so the next call stages from its start.
// Every call that allocates from a pool or stages an upload ends here.
void dev_pool_free(dev_pool *pool)
{
    for (int i = 0; i < pool->n; i++) cudaFreeAsync(pool->ptr[i], pool->be->stream);
    if (cudaStreamSynchronize(pool->be->stream) == cudaSuccess) pool->be->stage_used = 0;
    pool->n = 0;
}

// Makes *p (page-locked host memory, *cap bytes) hold at least bytes,
// replacing it (contents not kept) when it is smaller; the caller makes sure
// no copy still reads it.
cudaError_t pinned_reserve(void **p, size_t *cap, size_t bytes)
{
    if (*cap >= bytes) return cudaSuccess;
    cudaFreeHost(*p);
    *p = nullptr;
    *cap = 0;
    const cudaError_t rc = cudaMallocHost(p, bytes);
    if (rc == cudaSuccess) *cap = bytes;
    return rc;
}

// Waits until every staged copy has read the staging buffer, which may then
// be refilled from its start (or replaced).
pg_status stage_drain(cuda_backend *be, pg_err *err)
{
    CUDA_TRY("staging buffer", cudaEventSynchronize(be->stage_done));
    be->stage_used = 0;
    return PG_OK;
}

// Copies bytes (at most CUDA_STAGE_MAX_BYTES) to dst through the staging
// buffer; nothing waits unless the buffer must grow.
pg_status stage_upload(cuda_backend *be, void *dst, const void *src, size_t bytes,
                       const char *what, pg_err *err)
{
    size_t at = (be->stage_used + CUDA_STAGE_ALIGN - 1) / CUDA_STAGE_ALIGN * CUDA_STAGE_ALIGN;
    if (at + bytes > be->stage_cap) {  // a larger buffer, once every copy from this one is done
        pg_status st = stage_drain(be, err);
        if (st != PG_OK) return st;
        size_t cap = be->stage_cap > 0 ? 2 * be->stage_cap : CUDA_STAGE_FIRST_BYTES;
        while (cap < bytes) cap *= 2;
        CUDA_TRY(what, pinned_reserve(&be->stage_host, &be->stage_cap, cap));
        at = 0;
    }
    memcpy((char *)be->stage_host + at, src, bytes);
    be->stage_used = at + bytes;
    pg_status st = PG_OK;
    CUDA_STEP(st, what, cudaMemcpyAsync(dst, (char *)be->stage_host + at, bytes,
                                        cudaMemcpyHostToDevice, be->stream));
    CUDA_STEP(st, what, cudaEventRecord(be->stage_done, be->stream));
    if (st != PG_OK) cudaStreamSynchronize(be->stream);  // stage_done may be stale: let copies end
    return st;
}

// Copies bytes of host memory to dst on the stream: arrays up to
// CUDA_STAGE_MAX_BYTES through the staging buffer, larger ones straight from
// src (from pageable memory such a copy may wait for the stream's earlier work).
pg_status upload(cuda_backend *be, void *dst, const void *src, size_t bytes, const char *what,
                 pg_err *err)
{
    if (bytes <= CUDA_STAGE_MAX_BYTES) return stage_upload(be, dst, src, bytes, what, err);
    CUDA_TRY(what, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, be->stream));
    return PG_OK;
}

pg_status download(cuda_backend *be, void *dst, const void *src, size_t bytes, const char *what,
                   pg_err *err)
{
    CUDA_TRY(what, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->stream));
    CUDA_TRY(what, cudaStreamSynchronize(be->stream));
    return PG_OK;
}

// Copies allocate-and-upload of one host array into the pool.
pg_status dev_copy(dev_pool *pool, void **dst, const void *src, size_t bytes, const char *what,
                   pg_err *err)
{
    pg_status st = dev_alloc(pool, dst, bytes, what, err);
    if (st == PG_OK && bytes > 0) st = upload(pool->be, *dst, src, bytes, what, err);
    return st;
}

// The batch geometry on the device.
pg_status dev_batch_make(dev_pool *pool, const attn_batch *b, cuda_batch *cb, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st != PG_OK) return st;
    const int n = b->n_seqs;
    int64_t *offs = (int64_t *)malloc(2 * (size_t)n * sizeof(int64_t));
    if (offs == nullptr) return pg_fail(err, PG_ERR_NOMEM, "cuda: batch offsets");
    *cb = cuda_batch{};
    cb->n_seqs = n;
    cb->hq = b->hq;
    cb->hkv = b->hkv;
    cb->d = b->d;
    cb->window = b->window;
    cb->sm_scale = b->sm_scale;
    int64_t tq = 0, tkv = 0;
    for (int s = 0; s < n; s++) {
        offs[s] = tq;
        offs[n + s] = tkv;
        tq += b->seq_q[s];
        tkv += b->seq_kv[s];
        if (b->seq_q[s] > cb->max_q) cb->max_q = b->seq_q[s];
        if (b->seq_kv[s] > cb->max_kv) cb->max_kv = b->seq_kv[s];
    }
    cb->tq = tq;
    cb->tkv = tkv;
    // One device allocation and one staged copy (five pageable copies and a
    // synchronization took 0.4 ms per layer on the H200, the GPU idle
    // meanwhile): seq_q, seq_kv, q_off, kv_off, sinks, each at a 16-byte boundary.
    const size_t part[5] = {(size_t)n * sizeof(int32_t), (size_t)n * sizeof(int32_t),
                            (size_t)n * sizeof(int64_t), (size_t)n * sizeof(int64_t),
                            b->sinks != nullptr ? (size_t)b->hq * sizeof(float) : 0};
    const void *src[5] = {b->seq_q, b->seq_kv, offs, offs + n, b->sinks};
    size_t at[5], total = 0;
    for (int i = 0; i < 5; i++) {
        at[i] = total;
        total += (part[i] + 15) / 16 * 16;
    }
    char *dev = nullptr, *packed = (char *)calloc(1, total);
    if (packed == nullptr) st = pg_fail(err, PG_ERR_NOMEM, "cuda: batch arrays");
    if (st == PG_OK) st = dev_alloc(pool, (void **)&dev, total, "batch arrays", err);
    if (st == PG_OK) {
        for (int i = 0; i < 5; i++)
            if (part[i] > 0) memcpy(packed + at[i], src[i], part[i]);
    }
    if (st == PG_OK) st = upload(pool->be, dev, packed, total, "batch arrays", err);
    free(packed);
    free(offs);
    if (st != PG_OK) return st;
    cb->seq_q = (const int32_t *)(dev + at[0]);
    cb->seq_kv = (const int32_t *)(dev + at[1]);
    cb->q_off = (const int64_t *)(dev + at[2]);
    cb->kv_off = (const int64_t *)(dev + at[3]);
    cb->sinks = b->sinks != nullptr ? (const float *)(dev + at[4]) : nullptr;
    return PG_OK;
}

size_t elem_bytes(pg_number_format e)
{
    return e == PG_FORMAT_BF16 ? 2 : 1;
}

// A NaN-filled device paged cache with the host's block table (uploaded).
pg_status dev_paged_make(dev_pool *pool, const attn_batch *b, pg_number_format elem, int block_size,
                         int64_t n_pages, int pages_per_seq, const int32_t *table_host,
                         cuda_paged *c, pg_err *err)
{
    *c = cuda_paged{};
    c->elem = elem;
    c->block_size = block_size;
    c->pages_per_seq = pages_per_seq;
    c->n_pages = n_pages;
    const int64_t elems = n_pages * 2 * b->hkv * (int64_t)block_size * b->d;
    void *table = nullptr;
    pg_status st = dev_alloc(pool, &c->data, (size_t)elems * elem_bytes(elem), "paged cache", err);
    if (st == PG_OK)
        st = dev_copy(pool, &table, table_host,
                      (size_t)b->n_seqs * (size_t)pages_per_seq * sizeof(int32_t), "block table",
                      err);
    if (st != PG_OK) return st;
    c->block_table = (const int32_t *)table;
    if (elem != PG_FORMAT_BF16) {  // one byte per code (elem_bytes)
        CUDA_TRY("fill cache", cudaMemsetAsync(c->data, fp_codec_of(elem)->nan_code,
                                               (size_t)elems, pool->be->stream));
    } else {
        fill_u16_kernel<<<1024, CUDA_FILL_THREADS, 0, pool->be->stream>>>(
            (uint16_t *)c->data, elems, CUDA_BF16_NAN_BITS);
        CUDA_TRY_LAUNCH("fill cache");
    }
    return PG_OK;
}

// The scattered cache of kv_paged_write (same seed, same table) on the device.
pg_status dev_paged_write(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                          const uint16_t *dk, const uint16_t *dv, pg_number_format elem, float ks,
                          float vs, uint64_t seed, int block_size, cuda_paged *c,
                          unsigned long long *dstats, pg_err *err)
{
    int64_t n_pages;
    int width;
    int32_t *table = nullptr;
    pg_status st = kv_block_table_build(b, block_size, seed, &n_pages, &width, &table, err);
    if (st == PG_OK) st = dev_paged_make(pool, b, elem, block_size, n_pages, width, table, c, err);
    free(table);
    if (st == PG_OK) st = cuda_kv_cache_write(cb, dk, dv, ks, vs, c, dstats, pool->be->stream, err);
    return st;
}

// The compact cache of the dequant gather (B*P + 1 pages, table 1..B*P) on
// the device: the halves of kept (CUDA_HALF_K, CUDA_HALF_V) copied from the
// bf16 cache kept_src (same block table), the others gathered from src.
pg_status dev_gather_mixed(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                           const cuda_paged *src, const cuda_paged *kept_src, unsigned kept,
                           float ks, float vs, cuda_paged *out, pg_err *err)
{
    const int B = b->n_seqs, P = src->pages_per_seq;
    int32_t *table = (int32_t *)malloc((size_t)B * (size_t)P * sizeof(int32_t) + 1);
    if (table == nullptr) return pg_fail(err, PG_ERR_NOMEM, "cuda: mock block table");
    for (int64_t i = 0; i < (int64_t)B * P; i++) table[i] = (int32_t)(i + 1);
    pg_status st = dev_paged_make(pool, b, PG_FORMAT_BF16, src->block_size, (int64_t)B * P + 1, P,
                                  table, out, err);
    free(table);
    const unsigned all = CUDA_HALF_K | CUDA_HALF_V;
    if (st == PG_OK && (kept & all) != all)
        st = cuda_kv_dequant_gather(cb, src, ks, vs, all & ~kept, out, pool->be->stream, err);
    if (st == PG_OK && (kept & all) != 0)
        st = cuda_kv_dequant_gather(cb, kept_src, 1.f, 1.f, kept & all, out, pool->be->stream,
                                    err);
    return st;
}

// The compact cache of the dequant gather of src alone.
pg_status dev_gather(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                     const cuda_paged *src, float ks, float vs, cuda_paged *out, pg_err *err)
{
    return dev_gather_mixed(pool, b, cb, src, nullptr, 0, ks, vs, out, err);
}

void stats_to_host(const unsigned long long *s, fp8_quant_stats *out)
{
    out->n = s[CUDA_QSTAT_N];
    out->n_saturated = s[CUDA_QSTAT_SAT];
    out->n_nonzero = s[CUDA_QSTAT_NONZERO];
    out->n_underflow = s[CUDA_QSTAT_UNDERFLOW];
}

// Uploads q/k/v of a batch.
pg_status dev_qkv(dev_pool *pool, const cuda_batch *cb, const uint16_t *q, const uint16_t *k,
                  const uint16_t *v, uint16_t **dq, uint16_t **dk, uint16_t **dv, pg_err *err)
{
    const size_t nq = (size_t)cb->tq * cb->hq * cb->d, nkv = (size_t)cb->tkv * cb->hkv * cb->d;
    pg_status st = dev_copy(pool, (void **)dq, q, nq * 2, "q", err);
    if (st == PG_OK) st = dev_copy(pool, (void **)dk, k, nkv * 2, "k", err);
    if (st == PG_OK) st = dev_copy(pool, (void **)dv, v, nkv * 2, "v", err);
    return st;
}

// Milliseconds between two recorded events (0 when timing is off).
double event_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess)
        return 0;
    return ms;
}

}  // namespace

extern "C" pg_status cuda_backend_open(cuda_backend **out, char *desc, size_t desc_len,
                                       pg_err *err)
{
    *out = nullptr;
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess)
        return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: %s (%s)", cudaGetErrorString(rc),
                       cudaGetErrorName(rc));
    if (count == 0) return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: the driver sees no device");
    cuda_backend *be = (cuda_backend *)calloc(1, sizeof *be);
    if (be == nullptr) return pg_fail(err, PG_ERR_NOMEM, "cuda backend");
    be->device = 0;
    pg_status st = PG_OK;
    rc = cudaSetDevice(0);
    if (rc == cudaSuccess) rc = cudaGetDeviceProperties(&be->prop, 0);
    if (rc == cudaSuccess) rc = cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking);
    if (rc == cudaSuccess) rc = cudaStreamCreateWithFlags(&be->copy_stream, cudaStreamNonBlocking);
    for (int i = 0; rc == cudaSuccess && i < CUDA_PREFETCH_SLOTS; i++)
        rc = cudaEventCreateWithFlags(&be->slot[i].done, cudaEventDisableTiming);
    if (rc == cudaSuccess) rc = cudaEventCreateWithFlags(&be->stage_done, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        st = pg_fail(err, PG_ERR_DEVICE, "GPU 0: cannot start: %s", cudaGetErrorString(rc));
        cuda_backend_close(be);
        return st;
    }
    if (be->prop.major * 10 + be->prop.minor != CUDA_TARGET_SM) {
        st = pg_fail(err, PG_ERR_DEVICE,
                     "GPU 0 (%s) is sm_%d%d; the kernels are built for sm_%da (Hopper: H100, "
                     "H200), whose wgmma instructions run on no other GPU",
                     be->prop.name, be->prop.major, be->prop.minor, CUDA_TARGET_SM);
        cuda_backend_close(be);
        return st;
    }
    /* Keep freed stream-ordered memory in the pool between layers instead of
     * returning it to the driver at every synchronization (the default). */
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    if (desc != nullptr && desc_len > 0)
        snprintf(desc, desc_len, "cuda: %s (sm_%d%d, %d SMs, %.0f GiB)", be->prop.name,
                 be->prop.major, be->prop.minor, be->prop.multiProcessorCount,
                 (double)be->prop.totalGlobalMem / (1 << 30));
    *out = be;
    return PG_OK;
}

extern "C" void cuda_backend_limit_memory(cuda_backend *be, double bytes)
{
    if (be != nullptr) be->mem_limit = bytes > 0 ? bytes : 0;
}

extern "C" void cuda_backend_close(cuda_backend *be)
{
    if (be == nullptr) return;
    if (be->copy_stream != nullptr) cudaStreamSynchronize(be->copy_stream);
    for (int i = 0; i < CUDA_PREFETCH_SLOTS; i++) {
        prefetch_slot *sl = &be->slot[i];
        cudaFree(sl->dq);
        cudaFree(sl->dk);
        cudaFree(sl->dv);
        if (sl->done != nullptr) cudaEventDestroy(sl->done);
    }
    if (be->stage_done != nullptr) {
        cudaEventSynchronize(be->stage_done);
        cudaEventDestroy(be->stage_done);
    }
    cudaFreeHost(be->stage_host);
    cudaFreeHost(be->results_host);
    if (be->copy_stream != nullptr) cudaStreamDestroy(be->copy_stream);
    if (be->stream != nullptr) cudaStreamDestroy(be->stream);
    free(be);
}

// Share of the free device memory the two prefetch slots may take; beyond it
// cuda_prefetch_qkv stages nothing and the layer uploads as it runs.
#define CUDA_PREFETCH_MAX_SHARE 0.1

namespace {

// (Re)allocates *p to hold bytes when it holds less than *cap.
cudaError_t ensure_capacity(uint16_t **p, size_t *cap, size_t bytes)
{
    if (*cap >= bytes) return cudaSuccess;
    cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    const cudaError_t rc = cudaMalloc((void **)p, bytes);
    if (rc == cudaSuccess) *cap = bytes;
    return rc;
}

// Bytes of a batch's bf16 q ([tq, hq, d]) and of each of k, v ([tkv, hkv, d]).
void qkv_bytes(const attn_batch *b, size_t *q_bytes, size_t *kv_bytes)
{
    *q_bytes = (size_t)attn_batch_tq(b) * b->hq * b->d * sizeof(uint16_t);
    *kv_bytes = (size_t)attn_batch_tkv(b) * b->hkv * b->d * sizeof(uint16_t);
}

// The slot holding exactly these host arrays' copies, or NULL.
prefetch_slot *prefetched(cuda_backend *be, const void *q, const void *k, const void *v,
                          size_t q_bytes, size_t kv_bytes)
{
    for (int i = 0; i < CUDA_PREFETCH_SLOTS; i++) {
        prefetch_slot *sl = &be->slot[i];
        if (sl->q == q && sl->k == k && sl->v == v && sl->q_bytes == q_bytes &&
            sl->kv_bytes == kv_bytes && q != nullptr)
            return sl;
    }
    return nullptr;
}

}  // namespace

extern "C" pg_status cuda_prefetch_qkv(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, pg_err *err)
{
    static const char what[] = "cuda_prefetch_qkv";
    pg_status st = attn_batch_check(b, err);
    if (st != PG_OK) return st;
    size_t q_bytes, kv_bytes;
    qkv_bytes(b, &q_bytes, &kv_bytes);
    size_t free_b = 0, total_b = 0;
    CUDA_TRY(what, cudaMemGetInfo(&free_b, &total_b));
    if ((double)CUDA_PREFETCH_SLOTS * (q_bytes + 2 * kv_bytes) > CUDA_PREFETCH_MAX_SHARE * free_b)
        return PG_OK;  // too large to hold twice: the layer uploads as it runs
    prefetch_slot *sl = &be->slot[be->next_slot];
    be->next_slot = (be->next_slot + 1) % CUDA_PREFETCH_SLOTS;
    // The slot's last copies must be done before its buffers are reused.
    CUDA_TRY(what, cudaEventSynchronize(sl->done));
    sl->q = sl->k = sl->v = nullptr;
    CUDA_TRY(what, ensure_capacity(&sl->dq, &sl->q_cap, q_bytes));
    CUDA_TRY(what, ensure_capacity(&sl->dk, &sl->k_cap, kv_bytes));
    CUDA_TRY(what, ensure_capacity(&sl->dv, &sl->v_cap, kv_bytes));
    CUDA_TRY(what, cudaMemcpyAsync(sl->dq, q, q_bytes, cudaMemcpyHostToDevice, be->copy_stream));
    CUDA_TRY(what, cudaMemcpyAsync(sl->dk, k, kv_bytes, cudaMemcpyHostToDevice, be->copy_stream));
    CUDA_TRY(what, cudaMemcpyAsync(sl->dv, v, kv_bytes, cudaMemcpyHostToDevice, be->copy_stream));
    CUDA_TRY(what, cudaEventRecord(sl->done, be->copy_stream));
    sl->q = q;
    sl->k = k;
    sl->v = v;
    sl->q_bytes = q_bytes;
    sl->kv_bytes = kv_bytes;
    return PG_OK;
}

extern "C" pg_status cuda_reference(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v, double *out, pg_err *err)
{
    dev_pool pool = {be, {}, 0};
    cuda_batch cb = {};
    uint16_t *dq, *dk, *dv;
    double *dout;
    pg_status st = dev_batch_make(&pool, b, &cb, err);
    if (st == PG_OK) st = dev_qkv(&pool, &cb, q, k, v, &dq, &dk, &dv, err);
    const size_t nq = (size_t)cb.tq * cb.hq * cb.d;
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dout, nq * sizeof(double), "reference", err);
    if (st == PG_OK) st = cuda_attn_reference(&cb, dq, dk, dv, dout, be->stream, err);
    if (st == PG_OK) st = download(be, out, dout, nq * sizeof(double), "reference", err);
    dev_pool_free(&pool);
    return st;
}

// What the GPU runs of a profile (cuda_supports), read from its mode's
// traits (base/mode.h: kv_consumption, formats, scale granularity) and its
// profile's knobs (attn_profile_impl.h).
enum gpu_kind {
    GK_NONE,
    GK_BF16,           // a bf16 cache read as it is: the bf16 kernel
    GK_FP8KV_DEQUANT,  // an e4m3 / e5m2 cache, the dequant gather, the bf16 kernel
                       // with the profile's plumbing (attn_kv_plumbing_of)
    GK_FP8QKV_TILED,   // fp8 matmuls with a tiled online softmax: cuda_attn_fp8
    GK_FP8QKV_IDEAL    // fp8 codes with the final-max softmax: the bf16 kernel on the
                       // codes' values, P rounded to e4m3
};

// The GPU caches of a fp8 KV format with per-tensor scales: 0 e4m3, 1 e5m2,
// -1 a format the GPU's cache write does not take.
static int fp8_cache_index(pg_number_format f)
{
    return f == PG_FORMAT_E4M3 ? 0 : f == PG_FORMAT_E5M2 ? 1 : -1;
}

// The fp8 core of tiled profile p at batch b's shape, given the per-tensor
// scales q_scale, k_scale and v_scale.
static cuda_fp8_core fp8_core_of(const attn_profile *p, const attn_batch *b, float q_scale,
                                 float k_scale, float v_scale)
{
    cuda_fp8_core c = {};
    c.softmax = p->softmax;
    c.two_level = p->accum == ATTN_ACCUM_MMA_2LEVEL;
    c.block_n = attn_profile_block_n(p, b->d, b->window);
    attn_tiled_scales_of(p, b->sm_scale, q_scale, k_scale, v_scale, &c.scales);
    return c;
}

// The GPU path of profile p on batch b, or GK_NONE with why set: the reason
// `precgate help profiles` prints (attn_backend_gpu_runs) and the CPU runs
// the profile beside the GPU.
static gpu_kind gpu_kind_of(const attn_profile *p, const attn_batch *b, const char **why)
{
    const char *no = nullptr;
    gpu_kind k = GK_NONE;
    const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(p));
    const bool per_tensor = mt->kv_scales == PG_SCALES_PER_TENSOR;
    if (b->d != 64 && b->d != 128) {
        no = "the GPU kernels take head dims 64 and 128";
    } else {
        switch (mt->kv_consumption) {
        case PG_KV_READ_AS_BF16: k = GK_BF16; break;
        case PG_KV_DEQUANT_TO_BF16_COPY:
            if (per_tensor && fp8_cache_index(mt->k_format) >= 0 && mt->v_format == mt->k_format)
                k = GK_FP8KV_DEQUANT;
            else
                no = "the GPU's cache write and dequant gather take e4m3 and e5m2 codes with "
                     "per-tensor scales only";
            break;
        case PG_KV_DEQUANT_IN_REGISTERS:
            // the per-token-head caches: Triton's row, its scales per (token, head)
            no = "the GPU has no kernel that dequantizes a per-token-head cache in registers "
                 "(vLLM's Triton unified attention)";
            break;
        case PG_KV_CENTROID_SCORES:
            no = "the GPU has no TurboQuant decode kernel";
            break;
        case PG_KV_FP8_MATMULS:
            if (!per_tensor || mt->k_format != PG_FORMAT_E4M3 || mt->v_format != PG_FORMAT_E4M3) {
                no = "the GPU's fp8 kernels read e4m3 codes with per-tensor scales only (no "
                     "nvfp4 cache write or conversion on the GPU)";
            } else if (p->out_e4m3) {
                no = "the GPU's fp8 kernels write bf16 outputs, not e4m3";
            } else if (p->softmax == ATTN_SOFTMAX_FINAL_MAX) {
                if (p->accum == ATTN_ACCUM_EXACT && mt->p_format == PG_FORMAT_E4M3)
                    k = GK_FP8QKV_IDEAL;
                else
                    no = "the GPU's final-max kernel sums exactly with P in e4m3 only";
            } else if (p->softmax == ATTN_SOFTMAX_TRITON) {
                no = "the GPU has no kernel for the Triton row";
            } else {
                const cuda_fp8_core c = fp8_core_of(p, b, 1.f, 1.f, 1.f);
                if (cuda_attn_fp8_supports(b->d, &c))
                    k = GK_FP8QKV_TILED;
                else
                    no = "the GPU's fp8 kernel is not compiled for this profile's tile width "
                         "and accumulation at this head dim (cuda_attn_fp8.cu fp8_instances)";
            }
            break;
        }
    }
    if (why != nullptr) *why = no;
    return k;
}

// Why the GPU cannot run kind with the tensors of keep_bf16 kept bf16
// (attribution), or NULL when it can.
static const char *keep_refusal(gpu_kind kind, unsigned keep_bf16)
{
    if (keep_bf16 == 0 || kind != GK_FP8QKV_TILED) return nullptr;
    // the specification runs the Hopper fp8 accumulation rule (fp8_mma.h) on
    // the bf16 values of a kept tensor: no tensor-core instruction takes a
    // bf16 operand into an e4m3 wgmma, so no GPU kernel computes it
    return "a tiled fp8 profile with a tensor kept bf16 applies the fp8 tensor cores' "
           "accumulation rule to bf16 values, which no GPU instruction computes: the CPU "
           "specification runs its attribution";
}

// The GPU path of profile p on batch b with the tensors of keep_bf16 kept
// bf16, or GK_NONE with why set (gpu_kind_of, keep_refusal): the one check
// every entry point makes before it runs p.
static gpu_kind gpu_kind_kept(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                              const char **why)
{
    const char *no = nullptr;
    gpu_kind kind = gpu_kind_of(p, b, &no);
    if (kind != GK_NONE && (no = keep_refusal(kind, keep_bf16)) != nullptr) kind = GK_NONE;
    if (why != nullptr) *why = no;
    return kind;
}

extern "C" int cuda_supports(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                             const char **why)
{
    return gpu_kind_kept(p, b, keep_bf16, why) != GK_NONE;
}

// A layer's buffers that its variants share, made on first use (data ==
// nullptr) and kept to the layer's end, as the memory plan (layer_bytes)
// counts them: the fp8 paged cache of each format (e4m3, e5m2), its dequant
// gather with the k/v scales (scaled) and without (codes: @ideal), the fp8
// Q and @ideal's Q values.
struct layer_caches {
    cuda_paged bf16;                // the bf16 paged cache (bf16 mode; kept K or V)
    cuda_paged fp8[2];
    cuda_paged gathered[2][2][4];   // [format][scaled][kept halves: CUDA_HALF_K | _V]
    uint8_t *q8;
    uint16_t *q_values;
};

// The layer's bf16 paged cache (lc->bf16), written on first use.
static pg_status bf16_cache(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                            const uint16_t *dk, const uint16_t *dv, const attn_quant_options *opt,
                            layer_caches *lc, pg_err *err)
{
    if (lc->bf16.data != nullptr) return PG_OK;
    return dev_paged_write(pool, b, cb, dk, dv, PG_FORMAT_BF16, 1.f, 1.f, opt->page_seed,
                           opt->block_size, &lc->bf16, nullptr, err);
}

// The layer's fp8 cache of format f (lc->fp8), written on first use; its K/V
// counters added to kvstats (may be NULL) when written now.
static pg_status fp8_cache(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                           const uint16_t *dk, const uint16_t *dv, pg_number_format f,
                           const attn_quant_options *opt, layer_caches *lc,
                           unsigned long long *kvstats, cuda_paged **out, pg_err *err)
{
    cuda_paged *c = &lc->fp8[fp8_cache_index(f)];
    *out = c;
    if (c->data != nullptr) return PG_OK;
    return dev_paged_write(pool, b, cb, dk, dv, f, opt->k_scale, opt->v_scale, opt->page_seed,
                           opt->block_size, c, kvstats, err);
}

// The dequant gather of cache src (format f) with the k/v scales (scaled) or
// scales 1 (the codes' values), the halves of kept (CUDA_HALF_*) copied from
// the layer's bf16 cache instead; made on first use.
static pg_status gathered(dev_pool *pool, const attn_batch *b, const cuda_batch *cb,
                          const uint16_t *dk, const uint16_t *dv, const cuda_paged *src,
                          pg_number_format f, int scaled, unsigned kept,
                          const attn_quant_options *opt, layer_caches *lc, cuda_paged **out,
                          pg_err *err)
{
    cuda_paged *c = &lc->gathered[fp8_cache_index(f)][scaled ? 1 : 0][kept];
    *out = c;
    if (c->data != nullptr) return PG_OK;
    pg_status st = kept != 0 ? bf16_cache(pool, b, cb, dk, dv, opt, lc, err) : PG_OK;
    if (st != PG_OK) return st;
    return dev_gather_mixed(pool, b, cb, src, &lc->bf16, kept, scaled ? opt->k_scale : 1.f,
                            scaled ? opt->v_scale : 1.f, c, err);
}

// The CUDA_HALF_* bits of the attn_tensor bits kept.
static unsigned kept_halves(unsigned kept)
{
    return ((kept & ATTN_TENSOR_K) ? CUDA_HALF_K : 0u) | ((kept & ATTN_TENSOR_V) ? CUDA_HALF_V : 0u);
}

// How a run applies its options beyond its profile: the fp8kv plumbing a
// hypothesis forces (has_pl; else the profile's own, attn_kv_plumbing_of),
// and whether a kept tensor's scale is 1 (a variant, as attn_variant_run
// takes it) or taken as it is (a hypothesis, as attn_fp8kv_plumbed_run).
struct run_rules {
    bool has_pl;
    attn_kv_plumbing pl;
    bool kept_scale_one;
};
static const run_rules VARIANT_RULES = {false, {0, 0, 0, 0}, true};

// Runs profile p (its GPU path kind) on the device arrays dq/dk/dv of batch
// b into dout, with the layer's shared buffers lc and opt->keep_bf16's
// tensors kept bf16 (kind from gpu_kind_kept), by rules. Counters (device, may be NULL): Q's go to
// qstats when this run quantizes Q; K's and V's to kvstats when this run
// writes its fp8 cache (once per layer and format).
static pg_status run_kind(dev_pool *pool, cuda_backend *be, const attn_batch *b,
                          const cuda_batch *cb, const attn_profile *p, gpu_kind kind,
                          const run_rules &rules, const uint16_t *dq, const uint16_t *dk,
                          const uint16_t *dv, const attn_quant_options *opt, layer_caches *lc,
                          unsigned long long *qstats, unsigned long long *kvstats,
                          uint16_t *dout, pg_err *err)
{
    pg_status st = PG_OK;
    const size_t nq = (size_t)cb->tq * cb->hq * cb->d;
    if (kind == GK_BF16) {
        st = bf16_cache(pool, b, cb, dk, dv, opt, lc, err);
        return st == PG_OK ? cuda_attn_bf16(cb, dq, &lc->bf16, 1.f, 0, dout, be->stream, err) : st;
    }
    if (!opt->quantize)
        return pg_fail(err, PG_ERR_USAGE, "cuda: the fp8 modes always quantize on the GPU");
    const unsigned kept = opt->keep_bf16, one = rules.kept_scale_one ? kept : 0u;
    const float qs = (one & ATTN_TENSOR_Q) ? 1.f : opt->q_scale,
                ks = (one & ATTN_TENSOR_K) ? 1.f : opt->k_scale,
                vs = (one & ATTN_TENSOR_V) ? 1.f : opt->v_scale;
    const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(p));
    cuda_paged *cache, *compact;
    st = fp8_cache(pool, b, cb, dk, dv, mt->k_format, opt, lc, kvstats, &cache, err);
    if (st != PG_OK) return st;
    if (kind == GK_FP8KV_DEQUANT) {
        // attn_fp8kv_plumbed_run's scales: the gather's, bmm1's and bmm2's
        const attn_kv_plumbing pl = rules.has_pl ? rules.pl : attn_kv_plumbing_of(p);
        st = gathered(pool, b, cb, dk, dv, cache, mt->k_format, pl.dequant_scaled,
                      kept_halves(kept), opt, lc, &compact, err);
        if (st != PG_OK) return st;
        cuda_batch scaled = *cb;
        scaled.sm_scale = attn_vllm_bmm1_scale(pl.bmm1_q ? qs : 1.f, pl.bmm1_k ? ks : 1.f,
                                               b->sm_scale);
        return cuda_attn_bf16(&scaled, dq, compact, pl.bmm2_v ? vs : 1.f, 0, dout, be->stream,
                              err);
    }
    if (!(kept & ATTN_TENSOR_Q)) {
        if (lc->q8 == nullptr) st = dev_alloc(pool, (void **)&lc->q8, nq, "fp8 q", err);
        if (st == PG_OK)
            st = cuda_quantize_e4m3(dq, (int64_t)nq, opt->q_scale, p->q_by_inverse, lc->q8, qstats,
                                    be->stream, err);
        if (st != PG_OK) return st;
    }
    if (kind == GK_FP8QKV_TILED) {  // nothing kept (keep_refusal)
        const cuda_fp8_core core = fp8_core_of(p, b, qs, ks, vs);
        return cuda_attn_fp8(cb, lc->q8, cache, &core, dout, be->stream, err);
    }
    // GK_FP8QKV_IDEAL (attn_fp8_matmuls_run, final max): the codes' values
    // (a kept tensor's bf16 values), bmm1 = q*k*sm_scale, v_scale on the
    // output, P rounded to e4m3 unless kept
    const uint16_t *qin = dq;
    if (!(kept & ATTN_TENSOR_Q)) {
        if (lc->q_values == nullptr)
            st = dev_alloc(pool, (void **)&lc->q_values, nq * 2, "fp8 q values", err);
        if (st == PG_OK)
            st = cuda_e4m3_values_bf16(lc->q8, (int64_t)nq, lc->q_values, be->stream, err);
        qin = lc->q_values;
    }
    if (st == PG_OK)
        st = gathered(pool, b, cb, dk, dv, cache, mt->k_format, 0, kept_halves(kept), opt, lc,
                      &compact, err);
    if (st != PG_OK) return st;
    cuda_batch scaled = *cb;
    scaled.sm_scale = attn_vllm_bmm1_scale(qs, ks, b->sm_scale);
    return cuda_attn_bf16(&scaled, qin, compact, vs, !(kept & ATTN_TENSOR_P), dout, be->stream,
                          err);
}

// cuda_variant_run and cuda_hypothesis_run: profile p by rules on one batch
// with host arrays in and out.
static pg_status run_one(cuda_backend *be, const attn_profile *p, const run_rules &rules,
                         const attn_batch *b, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const attn_quant_options *opt, uint16_t *out,
                         attn_quant_report *rep, pg_err *err)
{
    const char *why = nullptr;
    pg_status st = attn_batch_check(b, err);
    if (st == PG_OK) st = attn_quant_options_check(opt, err);
    if (st != PG_OK) return st;
    const gpu_kind kind = gpu_kind_kept(p, b, opt->keep_bf16, &why);
    if (kind == GK_NONE)
        return pg_fail(err, PG_ERR_USAGE, "cuda: %s (keep_bf16 0x%x) does not run on the GPU: %s",
                       attn_profile_variant(p), opt->keep_bf16, why);
    char refusal[ATTN_REFUSAL_MAX];
    if (!attn_profile_computes(p, b, refusal, sizeof refusal))  // as attn_variant_run
        return pg_fail(err, PG_ERR_UNSUPPORTED, "variant %s: %s", attn_profile_variant(p),
                       refusal);
    if (rules.has_pl && kind != GK_FP8KV_DEQUANT)
        return pg_fail(err, PG_ERR_INTERNAL, "cuda: a forced fp8kv plumbing on %s, which has "
                       "no dequant gather", attn_profile_variant(p));
    const unsigned kept = opt->keep_bf16;
    dev_pool pool = {be, {}, 0};
    cuda_batch cb = {};
    uint16_t *dq, *dk, *dv, *dout;
    unsigned long long *dstats;
    layer_caches lc = {};
    st = dev_batch_make(&pool, b, &cb, err);
    if (st == PG_OK) st = dev_qkv(&pool, &cb, q, k, v, &dq, &dk, &dv, err);
    const size_t nq = (size_t)cb.tq * cb.hq * cb.d;
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dout, nq * 2, "output", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dstats, CUDA_STATS_BYTES, "stats", err);
    CUDA_STEP(st, "stats", cudaMemsetAsync(dstats, 0, CUDA_STATS_BYTES, be->stream));
    if (st == PG_OK)
        st = run_kind(&pool, be, b, &cb, p, kind, rules, dq, dk, dv, opt, &lc, dstats,
                      dstats + CUDA_QSTAT_COUNT, dout, err);
    unsigned long long hs[3 * CUDA_QSTAT_COUNT];
    if (st == PG_OK) st = download(be, out, dout, nq * 2, "output", err);
    if (st == PG_OK) st = download(be, hs, dstats, sizeof hs, "stats", err);
    if (st == PG_OK && rep != nullptr) {
        memset(rep, 0, sizeof *rep);
        // as the CPU reports (fp8_cache_write): a kept tensor's counters zero
        if ((kind == GK_FP8QKV_TILED || kind == GK_FP8QKV_IDEAL) && !(kept & ATTN_TENSOR_Q))
            stats_to_host(hs, &rep->q);
        if (kind != GK_BF16) {
            if (!(kept & ATTN_TENSOR_K)) stats_to_host(hs + CUDA_QSTAT_COUNT, &rep->k);
            if (!(kept & ATTN_TENSOR_V)) stats_to_host(hs + 2 * CUDA_QSTAT_COUNT, &rep->v);
        }
    }
    dev_pool_free(&pool);
    return st;
}

extern "C" pg_status cuda_variant_run(cuda_backend *be, const attn_profile *p, const attn_batch *b,
                                      const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                      const attn_quant_options *opt, uint16_t *out,
                                      attn_quant_report *rep, pg_err *err)
{
    return run_one(be, p, VARIANT_RULES, b, q, k, v, opt, out, rep, err);
}

// Hypothesis h as a GPU run: its profile *p, the rules (a forced plumbing;
// kept tensors' scales as they are) and opt adjusted into *o
// (attn_hypothesis_profile_run); 0 with *why when the GPU cannot run it.
static int hypothesis_gpu_run(const attn_hypothesis *h, const attn_batch *b,
                              const attn_quant_options *opt, const attn_profile **p,
                              run_rules *rules, attn_quant_options *o, const char **why)
{
    int has_pl = 0;
    *rules = run_rules{false, {0, 0, 0, 0}, false};
    if (!attn_hypothesis_profile_run(h, opt, p, &rules->pl, &has_pl, o, why)) return 0;
    rules->has_pl = has_pl != 0;
    const gpu_kind kind = gpu_kind_kept(*p, b, o->keep_bf16, why);
    if (kind == GK_NONE) return 0;
    if (rules->has_pl && kind != GK_FP8KV_DEQUANT) {
        if (why != nullptr)
            *why = "its plumbing is of a dequant-to-bf16 cache, which this profile has not";
        return 0;
    }
    return 1;
}

// The options hypothesis_gpu_run is asked with when only the answer counts.
static const attn_quant_options HYPOTHESIS_PROBE_OPTIONS = {1, 1.f, 1.f, 1.f, 16, 0, 0};

extern "C" int cuda_hypothesis_supports(const attn_hypothesis *h, const attn_batch *b,
                                        const char **why)
{
    const attn_profile *p;
    run_rules rules;
    attn_quant_options o;
    return hypothesis_gpu_run(h, b, &HYPOTHESIS_PROBE_OPTIONS, &p, &rules, &o, why);
}

extern "C" pg_status cuda_hypothesis_run(cuda_backend *be, const attn_hypothesis *h,
                                         const attn_batch *b, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v,
                                         const attn_quant_options *opt, uint16_t *out, pg_err *err)
{
    if (opt->keep_bf16 != 0 || !opt->quantize)
        return pg_fail(err, PG_ERR_USAGE, "hypothesis %s: the options must quantize as the "
                       "stack does (quantize 1, keep_bf16 0)", attn_hypothesis_name(h));
    const char *why = nullptr;
    const attn_profile *p;
    run_rules rules;
    attn_quant_options o;
    if (!hypothesis_gpu_run(h, b, opt, &p, &rules, &o, &why))
        return pg_fail(err, PG_ERR_USAGE, "cuda: hypothesis %s does not run on the GPU: %s",
                       attn_hypothesis_name(h), why);
    return run_one(be, p, rules, b, q, k, v, &o, out, nullptr, err);
}

extern "C" pg_status cuda_paged_write(cuda_backend *be, const attn_batch *b, const uint16_t *k,
                                      const uint16_t *v, pg_number_format elem, float k_scale,
                                      float v_scale, uint64_t page_seed, int block_size,
                                      kv_paged *out, attn_quant_report *rep, pg_err *err)
{
    dev_pool pool = {be, {}, 0};
    cuda_batch cb = {};
    uint16_t *dk, *dv;
    unsigned long long *dstats;
    cuda_paged cache;
    memset(out, 0, sizeof *out);
    pg_status st = dev_batch_make(&pool, b, &cb, err);
    const size_t nkv = (size_t)cb.tkv * cb.hkv * cb.d;
    if (st == PG_OK) st = dev_copy(&pool, (void **)&dk, k, nkv * 2, "k", err);
    if (st == PG_OK) st = dev_copy(&pool, (void **)&dv, v, nkv * 2, "v", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dstats, 2 * CUDA_QSTAT_COUNT * 8, "stats", err);
    CUDA_STEP(st, "stats", cudaMemsetAsync(dstats, 0, 2 * CUDA_QSTAT_COUNT * 8, be->stream));
    if (st == PG_OK)
        st = dev_paged_write(&pool, b, &cb, dk, dv, elem, k_scale, v_scale, page_seed, block_size,
                             &cache, dstats, err);
    if (st == PG_OK) {
        *out = kv_paged{elem, b->n_seqs, b->hkv, b->d, block_size, cache.n_pages,
                        cache.pages_per_seq, nullptr, nullptr, nullptr, 0};
        const size_t bytes = (size_t)cache.n_pages * 2 * b->hkv * block_size * b->d * elem_bytes(elem);
        const size_t tbytes = (size_t)b->n_seqs * cache.pages_per_seq * sizeof(int32_t);
        out->data = malloc(bytes + 1);
        out->block_table = (int32_t *)malloc(tbytes + 1);
        if (out->data == nullptr || out->block_table == nullptr)
            st = pg_fail(err, PG_ERR_NOMEM, "cuda: host copy of the paged cache");
        if (st == PG_OK) st = download(be, out->data, cache.data, bytes, "paged cache", err);
        if (st == PG_OK) st = download(be, out->block_table, cache.block_table, tbytes, "table", err);
    }
    unsigned long long hs[2 * CUDA_QSTAT_COUNT];
    if (st == PG_OK) st = download(be, hs, dstats, sizeof hs, "stats", err);
    if (st == PG_OK && rep != nullptr) {
        memset(rep, 0, sizeof *rep);
        stats_to_host(hs, &rep->k);
        stats_to_host(hs + CUDA_QSTAT_COUNT, &rep->v);
    }
    if (st != PG_OK) kv_paged_free(out);
    dev_pool_free(&pool);
    return st;
}

extern "C" pg_status cuda_dequant_gather(cuda_backend *be, const kv_paged *src, float k_scale,
                                         float v_scale, kv_paged *out, pg_err *err)
{
    dev_pool pool = {be, {}, 0};
    memset(out, 0, sizeof *out);
    // The gather needs only n_seqs and the geometry: a batch of that many sequences.
    const int B = src->n_seqs, P = src->pages_per_seq;
    int32_t *ones = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    if (ones == nullptr) return pg_fail(err, PG_ERR_NOMEM, "cuda: gather batch");
    for (int i = 0; i < B; i++) ones[i] = 1;
    const attn_batch b = {B, ones, ones, src->hkv, src->hkv, src->d, 0, 1.f, nullptr};
    cuda_batch cb = {};
    cuda_paged dsrc, dout;
    pg_status st = dev_batch_make(&pool, &b, &cb, err);
    const size_t src_bytes = (size_t)src->n_pages * 2 * src->hkv * src->block_size * src->d *
                             elem_bytes(src->elem);
    if (st == PG_OK)
        st = dev_paged_make(&pool, &b, src->elem, src->block_size, src->n_pages, P,
                            src->block_table, &dsrc, err);
    if (st == PG_OK) st = upload(be, dsrc.data, src->data, src_bytes, "gather source", err);
    if (st == PG_OK) st = dev_gather(&pool, &b, &cb, &dsrc, k_scale, v_scale, &dout, err);
    if (st == PG_OK) {
        *out = kv_paged{PG_FORMAT_BF16, B, src->hkv, src->d, src->block_size, (int64_t)B * P + 1, P,
                        nullptr, nullptr, nullptr, 0};
        const size_t bytes = (size_t)out->n_pages * 2 * src->hkv * src->block_size * src->d * 2;
        out->data = malloc(bytes + 1);
        out->block_table = (int32_t *)malloc((size_t)B * P * sizeof(int32_t) + 1);
        if (out->data == nullptr || out->block_table == nullptr)
            st = pg_fail(err, PG_ERR_NOMEM, "cuda: host copy of the compact cache");
        if (st == PG_OK) st = download(be, out->data, dout.data, bytes, "compact cache", err);
        if (st == PG_OK)
            st = download(be, out->block_table, dout.block_table, (size_t)B * P * sizeof(int32_t),
                          "compact table", err);
    }
    if (st != PG_OK) kv_paged_free(out);
    free(ones);
    dev_pool_free(&pool);
    return st;
}

extern "C" pg_status cuda_metrics_host(cuda_backend *be, const uint16_t *out, const double *ref,
                                       int64_t tq, int hq, int d, pg_metric_values *m,
                                       pg_err *err)
{
    dev_pool pool = {be, {}, 0};
    const size_t n = (size_t)tq * hq * d;
    uint16_t *dout;
    double *dref;
    pg_status st = dev_copy(&pool, (void **)&dout, out, n * 2, "metrics output", err);
    if (st == PG_OK) st = dev_copy(&pool, (void **)&dref, ref, n * 8, "metrics reference", err);
    if (st == PG_OK) st = cuda_metrics(dout, dref, tq, hq, d, m, be->stream, err);
    dev_pool_free(&pool);
    return st;
}

// The whole layer on the device in one go (it fits: see cuda_sweep_layer).
static pg_status sweep_layer_whole(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                                   const uint16_t *k, const uint16_t *v,
                                   const attn_quant_options *opt, int n_var,
                                   const attn_profile *const *var, const gpu_kind *kinds,
                                   int n_ext,
                                   const uint16_t *const *ext, pg_metric_values *metrics,
                                   attn_quant_report *rep, uint16_t *const *mode_out,
                                   double *ref_out, double *ms_ref, double *ms_modes,
                                   double *ms_metrics, pg_err *err)
{
    dev_pool pool = {be, {}, 0};
    cuda_batch cb = {};
    uint16_t *dq, *dk, *dv, *dout;
    double *dref;
    unsigned long long *dstats;
    void *dmetrics;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    double t_metrics = 0;
    pg_status st = dev_batch_make(&pool, b, &cb, err);
    const size_t nq = (size_t)cb.tq * cb.hq * cb.d, nkv = (size_t)cb.tkv * cb.hkv * cb.d;
    prefetch_slot *sl = st == PG_OK ? prefetched(be, q, k, v, nq * 2, nkv * 2) : nullptr;
    if (sl != nullptr) {  // copied ahead (cuda_prefetch_qkv): wait for the copies, use them once
        CUDA_STEP(st, "prefetched q/k/v", cudaStreamWaitEvent(be->stream, sl->done, 0));
        dq = sl->dq;
        dk = sl->dk;
        dv = sl->dv;
        sl->q = sl->k = sl->v = nullptr;
    } else if (st == PG_OK) {
        st = dev_qkv(&pool, &cb, q, k, v, &dq, &dk, &dv, err);
    }
    const int per = b->hq + 1;
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dref, nq * 8, "reference", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dout, nq * 2, "output", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dstats, CUDA_STATS_BYTES, "stats", err);
    if (st == PG_OK)
        st = dev_alloc(&pool, &dmetrics, cuda_metrics_scratch_bytes(cb.tq, cb.hq, cb.d), "metrics",
                       err);
    CUDA_STEP(st, "stats", cudaMemsetAsync(dstats, 0, CUDA_STATS_BYTES, be->stream));
    // Host space for every comparison's results, then the counters.
    const int n_cmp = n_var + n_ext;
    const size_t result_bytes = cuda_metrics_result_bytes(cb.hq);
    const size_t results_total = (size_t)n_cmp * result_bytes + CUDA_STATS_BYTES;
    // (the last layer's copies into it ended at that layer's synchronization)
    CUDA_STEP(st, "metrics results",
              pinned_reserve(&be->results_host, &be->results_cap, results_total));
    char *results = (char *)be->results_host;  // NULL only if st != PG_OK
    unsigned long long *stats_host =
        results != nullptr ? (unsigned long long *)(results + (size_t)n_cmp * result_bytes) : nullptr;
    CUDA_STEP(st, "events", cudaEventCreate(&ev[0]));
    CUDA_STEP(st, "events", cudaEventCreate(&ev[1]));
    CUDA_STEP(st, "events", cudaEventRecord(ev[0], be->stream));
    if (st == PG_OK) st = cuda_attn_reference(&cb, dq, dk, dv, dref, be->stream, err);
    CUDA_STEP(st, "events", cudaEventRecord(ev[1], be->stream));
    if (st == PG_OK && ms_ref) *ms_ref = event_ms(ev[0], ev[1]);

    int slot = 0;
    layer_caches lc = {};
    bool q_counted = false;  // the fold's rule (attn_quant_fold): the first variant's Q
    for (int mi = 0; st == PG_OK && mi < n_var; mi++) {
        // K/V: the e4m3 cache's (written once); Q: the first fp8qkv variant's
        const bool count_q = !q_counted && attn_quant_fold_takes_q(var[mi]);
        q_counted = q_counted || count_q;
        CUDA_STEP(st, "events", cudaEventRecord(ev[0], be->stream));
        if (st == PG_OK)
            st = run_kind(&pool, be, b, &cb, var[mi], kinds[mi], VARIANT_RULES, dq, dk, dv, opt, &lc,
                          count_q ? dstats : nullptr,
                          attn_quant_fold_takes_kv(var[mi]) ? dstats + CUDA_QSTAT_COUNT : nullptr,
                          dout, err);
        CUDA_STEP(st, "events", cudaEventRecord(ev[1], be->stream));
        if (st == PG_OK && ms_modes) ms_modes[mi] = event_ms(ev[0], ev[1]);
        if (st == PG_OK && mode_out != nullptr && mode_out[slot] != nullptr)
            st = download(be, mode_out[slot], dout, nq * 2, "mode output", err);
        if (st == PG_OK) {
            CUDA_STEP(st, "events", cudaEventRecord(ev[0], be->stream));
            if (st == PG_OK)
                st = cuda_metrics_enqueue(dout, dref, cb.tq, cb.hq, cb.d, dmetrics,
                                          results + (size_t)slot * result_bytes, be->stream, err);
            CUDA_STEP(st, "events", cudaEventRecord(ev[1], be->stream));
            if (st == PG_OK && ms_metrics) t_metrics += event_ms(ev[0], ev[1]);
        }
        slot++;
    }
    for (int e = 0; st == PG_OK && e < n_ext; e++) {
        st = upload(be, dout, ext[e], nq * 2, "external output", err);
        if (st == PG_OK)
            st = cuda_metrics_enqueue(dout, dref, cb.tq, cb.hq, cb.d, dmetrics,
                                      results + (size_t)slot * result_bytes, be->stream, err);
        slot++;
    }
    CUDA_STEP(st, "stats", cudaMemcpyAsync(stats_host, dstats, CUDA_STATS_BYTES,
                                           cudaMemcpyDeviceToHost, be->stream));
    // The layer's one wait: everything above was only enqueued (unless
    // --check-spec downloads the modes' outputs, the caller asked for
    // timings, or an external output over CUDA_STAGE_MAX_BYTES came up from
    // pageable memory: each of those waits too).
    CUDA_STEP(st, "layer", cudaStreamSynchronize(be->stream));
    // the reference for attribution, once the layer's kernels are all enqueued and done
    if (st == PG_OK && ref_out != nullptr) st = download(be, ref_out, dref, nq * 8, "reference", err);
    for (int c = 0; st == PG_OK && c < n_cmp; c++)
        st = cuda_metrics_collect(results + (size_t)c * result_bytes, cb.tq, cb.hq, cb.d,
                                  metrics + (size_t)c * per, err);
    if (st == PG_OK && rep != nullptr) {
        memset(rep, 0, sizeof *rep);
        stats_to_host(stats_host, &rep->q);
        stats_to_host(stats_host + CUDA_QSTAT_COUNT, &rep->k);
        stats_to_host(stats_host + 2 * CUDA_QSTAT_COUNT, &rep->v);
    }
    if (ms_metrics) *ms_metrics = t_metrics;
    for (int i = 0; i < 2; i++)
        if (ev[i] != nullptr) cudaEventDestroy(ev[i]);
    dev_pool_free(&pool);
    return st;
}

namespace {

int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

}  // namespace

// Runs one stage reps + 1 times (the first a warm-up) between events; the
// median of the timed runs goes to *ms. STAGE is a statement setting st.
#define TIME_STAGE(ms, STAGE)                                                      \
    do {                                                                           \
        double runs_[CUDA_TIME_MAX_REPS];                                          \
        for (int r_ = 0; st == PG_OK && r_ <= reps; r_++) {                        \
            CUDA_STEP(st, "timing", cudaEventRecord(ev[0], be->stream));           \
            if (st == PG_OK) {                                                     \
                STAGE;                                                             \
            }                                                                      \
            CUDA_STEP(st, "timing", cudaEventRecord(ev[1], be->stream));           \
            if (st == PG_OK && r_ > 0) runs_[r_ - 1] = event_ms(ev[0], ev[1]);     \
        }                                                                          \
        if (st == PG_OK) {                                                         \
            qsort(runs_, (size_t)reps, sizeof(double), cmp_double);                \
            *(ms) = runs_[reps / 2];                                               \
        }                                                                          \
    } while (0)

// Most timed repetitions per stage.
#define CUDA_TIME_MAX_REPS 64

extern "C" pg_status cuda_time_kernels(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v,
                                       const attn_quant_options *opt, int reps,
                                       cuda_kernel_times *t, pg_err *err)
{
    if (reps < 1) reps = 1;
    if (reps > CUDA_TIME_MAX_REPS) reps = CUDA_TIME_MAX_REPS;
    memset(t, 0, sizeof *t);
    dev_pool pool = {be, {}, 0};
    cuda_batch cb = {};
    uint16_t *dq, *dk, *dv, *dout;
    uint8_t *dq8;
    double *dref;
    cuda_paged e4m3, compact;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    pg_status st = PG_OK;
    CUDA_STEP(st, "events", cudaEventCreate(&ev[0]));
    CUDA_STEP(st, "events", cudaEventCreate(&ev[1]));
    if (st == PG_OK) st = dev_batch_make(&pool, b, &cb, err);
    if (st == PG_OK) st = dev_qkv(&pool, &cb, q, k, v, &dq, &dk, &dv, err);
    const size_t nq = (size_t)cb.tq * cb.hq * cb.d;
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dref, nq * 8, "reference", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dout, nq * 2, "output", err);
    if (st == PG_OK) st = dev_alloc(&pool, (void **)&dq8, nq, "fp8 q", err);
    if (st == PG_OK)
        st = dev_paged_write(&pool, b, &cb, dk, dv, PG_FORMAT_E4M3, opt->k_scale, opt->v_scale,
                             opt->page_seed, opt->block_size, &e4m3, nullptr, err);
    if (st == PG_OK) st = dev_gather(&pool, b, &cb, &e4m3, opt->k_scale, opt->v_scale, &compact, err);
    TIME_STAGE(&t->reference, st = cuda_attn_reference(&cb, dq, dk, dv, dref, be->stream, err));
    TIME_STAGE(&t->cache_write_e4m3, st = cuda_kv_cache_write(&cb, dk, dv, opt->k_scale,
                                                              opt->v_scale, &e4m3, nullptr,
                                                              be->stream, err));
    TIME_STAGE(&t->dequant_gather, st = cuda_kv_dequant_gather(&cb, &e4m3, opt->k_scale,
                                                               opt->v_scale,
                                                               CUDA_HALF_K | CUDA_HALF_V, &compact,
                                                               be->stream, err));
    TIME_STAGE(&t->attn_bf16, st = cuda_attn_bf16(&cb, dq, &compact, 1.f, 0, dout, be->stream, err));
    const attn_profile *fa3 = nullptr;  // the profile the fp8 kernel implements
    if (st == PG_OK) st = attn_profile_find(variant_profile_name(VARIANT_FP8QKV_FA3), &fa3, err);
    TIME_STAGE(&t->quantize_q, st = cuda_quantize_e4m3(dq, (int64_t)nq, opt->q_scale,
                                                       fa3->q_by_inverse, dq8, nullptr,
                                                       be->stream, err));
    const cuda_fp8_core core = fp8_core_of(fa3, b, opt->q_scale, opt->k_scale, opt->v_scale);
    TIME_STAGE(&t->attn_fp8, st = cuda_attn_fp8(&cb, dq8, &e4m3, &core, dout, be->stream, err));
    pg_metric_values *m = (pg_metric_values *)calloc((size_t)b->hq + 1, sizeof *m);
    if (m == nullptr) st = pg_fail(err, PG_ERR_NOMEM, "metrics");
    TIME_STAGE(&t->metrics, st = cuda_metrics(dout, dref, cb.tq, cb.hq, cb.d, m, be->stream, err));
    free(m);
    /* The gather reads the e4m3 pages the batch uses and writes them as bf16. */
    int64_t used = 0;
    for (int s = 0; s < b->n_seqs; s++) used += (b->seq_kv[s] + opt->block_size - 1) / opt->block_size;
    t->gather_bytes = (double)used * 2 * b->hkv * opt->block_size * b->d * (1 + 2);
    if (ev[0] != nullptr) cudaEventDestroy(ev[0]);
    if (ev[1] != nullptr) cudaEventDestroy(ev[1]);
    dev_pool_free(&pool);
    return st;
}

// ---- memory planning: layers larger than the GPU run in pieces ----

// Share of the free device memory a layer may plan to use (the rest is the
// allocator's slack and the kernels' own buffers).
#define CUDA_PLAN_FRACTION 0.8
// Bytes per query element and per kv element a layer holds at its peak, by
// what its variants use (layer_plan_of): per query element q 2 + reference 8
// + output 2 + metric keys 4, the fp8 Q 1 and @ideal's Q values 2 where used;
// per kv element k and v 2 + 2, and each cache the variants make (the bf16
// paged cache 4, an fp8 cache 2 per format, each gathered bf16 copy 4, the
// fp8 kernel's V^T 1) times CUDA_CACHE_SLACK for the caches' spare pages (a
// quarter, kv_cache.c) and the rounding of each sequence to whole pages; and
// the reference's own scratch (cuda_attn_reference_scratch).
#define CUDA_BYTES_PER_Q 16.0
#define CUDA_BYTES_PER_Q_FP8 1.0
#define CUDA_BYTES_PER_Q_VALUES 2.0
#define CUDA_BYTES_PER_KV 4.0
#define CUDA_BYTES_PER_KV_BF16_CACHE 4.0
#define CUDA_BYTES_PER_KV_FP8_CACHE 2.0
#define CUDA_BYTES_PER_KV_GATHERED 4.0
#define CUDA_BYTES_PER_KV_VT 1.0
#define CUDA_CACHE_SLACK 1.5

namespace {

// Bytes per query and per kv element of a layer's variants (the rule above).
struct layer_plan {
    double per_q, per_kv;
};

layer_plan layer_plan_of(int n_var, const attn_profile *const *var, const gpu_kind *kinds)
{
    bool bf16 = false, fp8[2] = {false, false}, gath[2][2] = {}, q8 = false, qval = false,
         vt = false;
    for (int i = 0; i < n_var; i++) {
        const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(var[i]));
        const int f = fp8_cache_index(mt->k_format);
        switch (kinds[i]) {
        case GK_BF16: bf16 = true; break;
        case GK_FP8KV_DEQUANT:
            fp8[f] = true;
            gath[f][attn_kv_plumbing_of(var[i]).dequant_scaled ? 1 : 0] = true;
            break;
        case GK_FP8QKV_TILED: fp8[f] = q8 = vt = true; break;
        case GK_FP8QKV_IDEAL: fp8[f] = q8 = qval = gath[f][0] = true; break;
        case GK_NONE: break;
        }
    }
    double caches = (bf16 ? CUDA_BYTES_PER_KV_BF16_CACHE : 0) + (vt ? CUDA_BYTES_PER_KV_VT : 0);
    for (int f = 0; f < 2; f++)
        caches += (fp8[f] ? CUDA_BYTES_PER_KV_FP8_CACHE : 0) +
                  CUDA_BYTES_PER_KV_GATHERED * ((gath[f][0] ? 1 : 0) + (gath[f][1] ? 1 : 0));
    return layer_plan{CUDA_BYTES_PER_Q + (q8 ? CUDA_BYTES_PER_Q_FP8 : 0) +
                          (qval ? CUDA_BYTES_PER_Q_VALUES : 0),
                      CUDA_BYTES_PER_KV + CUDA_CACHE_SLACK * caches};
}

double layer_bytes(const attn_batch *b, const layer_plan &plan)
{
    return plan.per_q * (double)attn_batch_tq(b) * b->hq * b->d +
           plan.per_kv * (double)attn_batch_tkv(b) * b->hkv * b->d +
           cuda_attn_reference_scratch(attn_batch_tkv(b), b->n_seqs, b->hkv, b->d);
}

// Bytes a layer may plan with: a share of the free memory, or be's cap
// (cuda_backend_limit_memory) when that is smaller.
pg_status plan_budget(const cuda_backend *be, double *budget, pg_err *err)
{
    size_t free_b = 0, total_b = 0;
    CUDA_TRY("memory plan", cudaMemGetInfo(&free_b, &total_b));
    *budget = CUDA_PLAN_FRACTION * (double)free_b;
    if (be->mem_limit > 0 && be->mem_limit < *budget) *budget = be->mem_limit;
    return PG_OK;
}

// One piece: whole sequences [s0, s1), or rows [j0, j1) of sequence s0 alone
// (with its keys up to context + j1).
struct piece {
    int s0, s1, j0, j1;
};

// Splits the batch into pieces whose planned bytes fit budget; *out malloc'd.
pg_status plan_pieces(const attn_batch *b, const layer_plan &plan, double budget, piece **out,
                      int *n_out, pg_err *err)
{
    int cap = 16, n = 0;
    piece *ps = (piece *)malloc((size_t)cap * sizeof *ps);
    if (ps == nullptr) return pg_fail(err, PG_ERR_NOMEM, "memory plan");
    auto push = [&](piece p) -> bool {
        if (n == cap) {
            cap *= 2;
            piece *g = (piece *)realloc(ps, (size_t)cap * sizeof *ps);
            if (g == nullptr) return false;
            ps = g;
        }
        ps[n++] = p;
        return true;
    };
    int s = 0;
    while (s < b->n_seqs) {
        // As many whole sequences as fit.
        int e = s;
        while (e < b->n_seqs) {
            const attn_batch sub = {e + 1 - s, b->seq_q + s, b->seq_kv + s, b->hq, b->hkv, b->d,
                                    b->window, b->sm_scale, b->sinks};
            if (layer_bytes(&sub, plan) > budget) break;
            e++;
        }
        if (e > s) {
            if (!push(piece{s, e, 0, 0})) goto nomem;
            s = e;
            continue;
        }
        // One sequence too large: row chunks, each with the keys it needs.
        {
            const int sq = b->seq_q[s], ctx = b->seq_kv[s] - sq;
            int j0 = 0;
            while (j0 < sq) {
                int j1 = sq;
                for (;;) {
                    const int32_t q1 = j1 - j0, kv1 = ctx + j1;
                    const attn_batch sub = {1, &q1, &kv1, b->hq, b->hkv, b->d, b->window,
                                            b->sm_scale, b->sinks};
                    if (layer_bytes(&sub, plan) <= budget) break;
                    if (j1 - j0 == 1) {
                        free(ps);
                        return pg_fail(err, PG_ERR_NOMEM,
                                       "sequence %d: one query row with its %d keys needs %.2f GiB "
                                       "on the GPU, more than the %.2f GiB planned",
                                       s, kv1, layer_bytes(&sub, plan) / (1 << 30), budget / (1 << 30));
                    }
                    j1 = j0 + (j1 - j0) / 2;
                }
                if (!push(piece{s, s + 1, j0, j1})) goto nomem;
                j0 = j1;
            }
            s++;
        }
    }
    *out = ps;
    *n_out = n;
    return PG_OK;
nomem:
    free(ps);
    return pg_fail(err, PG_ERR_NOMEM, "memory plan: out of host memory");
}

void add_stats(fp8_quant_stats *a, const fp8_quant_stats *b)
{
    a->n += b->n;
    a->n_saturated += b->n_saturated;
    a->n_nonzero += b->n_nonzero;
    a->n_underflow += b->n_underflow;
}

// The layer in pieces: each piece's reference and mode outputs come back to
// the host, where the metrics of the whole layer are computed.
pg_status sweep_layer_pieces(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                             const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                             int n_var, const attn_profile *const *var,
                             int n_ext, const uint16_t *const *ext,
                             pg_metric_values *metrics, attn_quant_report *rep,
                             uint16_t *const *mode_out, double *ref_out, const piece *ps,
                             int n_pieces, pg_err *err)
{
    const int64_t tq = attn_batch_tq(b);
    const size_t nq = (size_t)tq * b->hq * b->d;
    const size_t qrow = (size_t)b->hq * b->d, kvrow = (size_t)b->hkv * b->d;
    double *ref = (double *)malloc(nq * sizeof(double));
    double *scratch = (double *)malloc(nq * sizeof(double));
    uint16_t **outs = (uint16_t **)calloc((size_t)n_var + 1, sizeof *outs);
    pg_status st = (ref && scratch && outs) ? PG_OK
                                            : pg_fail(err, PG_ERR_NOMEM, "pieces: host arrays");
    for (int mi = 0; st == PG_OK && mi < n_var; mi++)
        if ((outs[mi] = (uint16_t *)malloc(nq * 2)) == nullptr)
            st = pg_fail(err, PG_ERR_NOMEM, "pieces: host outputs");
    // the fold's rule (attn_quant_fold): K/V of the first variant with the
    // e4m3 cache, counted once per layer; Q of the first fp8qkv variant
    int kv_counter = -1, q_counter = -1;
    for (int mi = n_var - 1; mi >= 0; mi--) {
        if (attn_quant_fold_takes_kv(var[mi])) kv_counter = mi;
        if (attn_quant_fold_takes_q(var[mi])) q_counter = mi;
    }
    attn_quant_report total = {};
    int64_t *q_off = (int64_t *)malloc(((size_t)b->n_seqs + 1) * 2 * sizeof(int64_t));
    if (st == PG_OK && q_off == nullptr) st = pg_fail(err, PG_ERR_NOMEM, "pieces: offsets");
    if (st == PG_OK) {
        int64_t *kv_off = q_off + b->n_seqs + 1;
        q_off[0] = kv_off[0] = 0;
        for (int s = 0; s < b->n_seqs; s++) {
            q_off[s + 1] = q_off[s] + b->seq_q[s];
            kv_off[s + 1] = kv_off[s] + b->seq_kv[s];
        }
        for (int p = 0; st == PG_OK && p < n_pieces; p++) {
            const piece &pc = ps[p];
            int32_t one_q, one_kv;
            attn_batch sub = {pc.s1 - pc.s0, b->seq_q + pc.s0, b->seq_kv + pc.s0, b->hq, b->hkv,
                              b->d, b->window, b->sm_scale, b->sinks};
            int64_t q0 = q_off[pc.s0];
            if (pc.j1 > pc.j0) {  // a row chunk of one sequence
                one_q = pc.j1 - pc.j0;
                one_kv = b->seq_kv[pc.s0] - b->seq_q[pc.s0] + pc.j1;
                sub.seq_q = &one_q;
                sub.seq_kv = &one_kv;
                q0 += pc.j0;
            }
            const uint16_t *pq = q + (size_t)q0 * qrow;
            const uint16_t *pk = k + (size_t)kv_off[pc.s0] * kvrow;
            const uint16_t *pv = v + (size_t)kv_off[pc.s0] * kvrow;
            st = cuda_reference(be, &sub, pq, pk, pv, ref + (size_t)q0 * qrow, err);
            for (int mi = 0; st == PG_OK && mi < n_var; mi++) {
                uint16_t *o = outs[mi] + (size_t)q0 * qrow;
                attn_quant_report r = {};
                st = cuda_variant_run(be, var[mi], &sub, pq, pk, pv, opt, o, &r, err);
                if (st != PG_OK) break;
                /* K/V of a row chunk repeat its sequence's earlier keys: count
                 * the cache's statistics once per piece of whole sequences
                 * or the chunk that ends the sequence. */
                if (mi == kv_counter && (pc.j1 == pc.j0 || pc.j1 == b->seq_q[pc.s0])) {
                    add_stats(&total.k, &r.k);
                    add_stats(&total.v, &r.v);
                }
                if (mi == q_counter) add_stats(&total.q, &r.q);
            }
        }
    }
    int slot = 0;
    const int per = b->hq + 1;
    for (int mi = 0; st == PG_OK && mi < n_var; mi++) {
        metrics_compare_heads(outs[mi], ref, tq, b->hq, b->d, scratch, metrics + (size_t)slot * per);
        if (mode_out != nullptr && mode_out[slot] != nullptr) memcpy(mode_out[slot], outs[mi], nq * 2);
        slot++;
    }
    for (int e = 0; st == PG_OK && e < n_ext; e++, slot++)
        metrics_compare_heads(ext[e], ref, tq, b->hq, b->d, scratch, metrics + (size_t)slot * per);
    if (st == PG_OK && rep != nullptr) *rep = total;
    if (st == PG_OK && ref_out != nullptr) memcpy(ref_out, ref, nq * sizeof(double));
    free(q_off);
    for (int mi = 0; outs != nullptr && mi < n_var; mi++) free(outs[mi]);
    free(outs);
    free(ref);
    free(scratch);
    return st;
}

}  // namespace

extern "C" pg_status cuda_host_register(void *p, size_t bytes, pg_err *err)
{
    const cudaError_t rc = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (rc == cudaSuccess) return PG_OK;
    (void)cudaGetLastError();  // not sticky; clear it so later checks see their own errors
    return pg_fail(err, rc == cudaErrorMemoryAllocation ? PG_ERR_NOMEM : PG_ERR_DEVICE,
                   "cuda: cannot page-lock %.1f MiB: %s", (double)bytes / (1 << 20),
                   cudaGetErrorString(rc));
}

extern "C" void cuda_host_unregister(void *p)
{
    // Copies from p may still be in flight after a failed layer (a prefetch
    // on the copy stream): let every stream's work end first.
    cudaDeviceSynchronize();
    if (p != nullptr) cudaHostUnregister(p);
}

extern "C" pg_status cuda_sweep_layer(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                                      const uint16_t *k, const uint16_t *v,
                                      const attn_quant_options *opt, int n_var,
                                      const attn_profile *const *var, int n_ext,
                                      const uint16_t *const *ext, pg_metric_values *metrics,
                                      attn_quant_report *rep, uint16_t *const *mode_out,
                                      double *ref_out, double *ms_ref, double *ms_modes,
                                      double *ms_metrics, const pg_notes *notes, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st == PG_OK) st = attn_quant_options_check(opt, err);
    if (st != PG_OK) return st;
    if (n_var < 0 || n_var > CUDA_MAX_VARIANTS)
        return pg_fail(err, PG_ERR_USAGE, "cuda: %d variants in one layer (at most %d)", n_var,
                       CUDA_MAX_VARIANTS);
    gpu_kind kinds[CUDA_MAX_VARIANTS];
    for (int i = 0; i < n_var; i++) {
        const char *why = nullptr;
        if ((kinds[i] = gpu_kind_kept(var[i], b, opt->keep_bf16, &why)) == GK_NONE)
            return pg_fail(err, PG_ERR_USAGE, "cuda: %s does not run on the GPU: %s",
                           attn_profile_variant(var[i]), why);
    }
    double budget = 0;
    st = plan_budget(be, &budget, err);
    if (st != PG_OK) return st;
    const layer_plan plan = layer_plan_of(n_var, var, kinds);
    const double need = layer_bytes(b, plan);
    if (need <= budget) {
        st = sweep_layer_whole(be, b, q, k, v, opt, n_var, var, kinds, n_ext, ext, metrics, rep,
                               mode_out, ref_out, ms_ref, ms_modes, ms_metrics, err);
    } else {
        // Copies prefetched for these arrays are not used in pieces: let
        // them end (the caller may reuse the host arrays) and free the slot.
        size_t q_bytes, kv_bytes;
        qkv_bytes(b, &q_bytes, &kv_bytes);
        prefetch_slot *sl = prefetched(be, q, k, v, q_bytes, kv_bytes);
        if (sl != nullptr) {
            CUDA_TRY("prefetched q/k/v", cudaEventSynchronize(sl->done));
            sl->q = sl->k = sl->v = nullptr;
        }
        piece *ps = nullptr;
        int n = 0;
        st = plan_pieces(b, plan, budget, &ps, &n, err);
        if (st == PG_OK) {
            pg_note_warning(notes, "layer needs %.2f GiB on the GPU, %.2f GiB planned: running "
                                   "it in %d pieces, metrics on the host",
                    need / (1 << 30), budget / (1 << 30), n);
            if (ms_ref) *ms_ref = 0;
            if (ms_metrics) *ms_metrics = 0;
            for (int i = 0; ms_modes != nullptr && i < n_var; i++) ms_modes[i] = 0;
            st = sweep_layer_pieces(be, b, q, k, v, opt, n_var, var, n_ext, ext, metrics,
                                    rep, mode_out, ref_out, ps, n, err);
        }
        free(ps);
    }
    return st;
}
