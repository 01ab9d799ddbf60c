// cuda_metrics.cu: the error metrics of harness/metrics.c on the GPU, for a
// whole layer and for each head, with only a few KB travelling back.
//
//   1. metrics_stats_kernel (one pass over out and ref): per head, double sums
//      of e^2, r^2, o^2, o*r, |e|, max |e| and the NaN / Inf counts of o; it
//      also writes each element's key, the bits of (float)|e| (non-negative
//      floats order like their bits; a non-finite o gives +inf), head-major.
//   2. Exact nearest-rank p99 of each segment (segments 0..hq-1: the heads;
//      segment hq: the whole layer) by a 3-pass radix select over the 32-bit
//      keys (11, 11, 10 bits, most significant first): metrics_hist_kernel
//      histograms the keys that match each segment's prefix so far (the
//      first pass's, of all keys, is the stats kernel's), then
//      metrics_select_kernel finds the bin holding each segment's remaining
//      rank and extends its prefix. After the last pass the prefix is the key.
//   3. The host turns the sums into metrics with metrics.c's formulas and
//      special cases (non-finite output, n == 0, zero reference).
//
// The sums are reduced in another order than metrics.c's sequential loop, so
// they agree to rounding, not bit for bit; max_abs, the counts and n are
// exact; p99_abs is exactly (double)(float) of metrics.c's value (rounding to
// fp32 is monotone, so the k-th smallest rounded key is the rounded k-th
// smallest |e|). ref is assumed finite (it is the fp64 reference): a NaN ref
// element gives a NaN |e| whose key sorts above +inf, where metrics.c's
// quickselect has no defined answer either.
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "base/status.h"

#include "cuda_common.cuh"

namespace {

// ---- constants ---------------------------------------------------------------

constexpr int kBlock = 256;                   // threads per block, stats and histogram kernels
constexpr int kWarps = kBlock / 32;           // warps per such block
constexpr int kBlocksPerSm = 8;               // blocks per SM the grids aim for (2048 threads)
constexpr int kKeysPerLane = 4;               // keys a lane loads per histogram-loop step
constexpr int kVec = 8;                       // elements per chunk of the vector stats kernel
constexpr int kRadixBins = 2048;              // bins of the widest digit (11 bits)
constexpr int kPasses = 3;                    // radix-select passes over the keys
constexpr int kPassBits[kPasses] = {11, 11, 10};  // digit width per pass, most significant first
constexpr int kFirstBits = 11;                    // kPassBits[0], as device code can read it
constexpr int kFirstShift = 32 - kFirstBits;      // the first digit: key >> kFirstShift
constexpr int kSelectBlock = 256;             // threads of a select block (one per segment)
constexpr uint32_t kKeyNonFinite = 0x7F800000u;   // the key of a NaN / Inf output: +inf
constexpr int64_t kMaxElements = (int64_t)1 << 40;       // shape limit (keys: 4 TB), keeps grids in range
constexpr int64_t kMaxKeysPerHistBlock = (int64_t)1 << 30;  // keeps smem uint32 bin counts exact
constexpr size_t kAlign = 256;                // alignment of each part of the device scratch

static_assert(kBlock % 32 == 0, "whole warps");
static_assert(kPassBits[0] + kPassBits[1] + kPassBits[2] == 32, "the passes cover the key");
static_assert(kFirstBits == kPassBits[0], "the stats kernel histograms the first digit");
static_assert((1 << kPassBits[0]) <= kRadixBins && (1 << kPassBits[1]) <= kRadixBins &&
                  (1 << kPassBits[2]) <= kRadixBins, "histogram rows hold every digit");
static_assert((1 << kPassBits[2]) % kSelectBlock == 0 && kRadixBins % kSelectBlock == 0,
              "select threads split the bins evenly");

// Per-head sums that metrics_stats_kernel accumulates (zeroed before it runs).
struct head_acc {
    double err2, ref2, out2, dot, sum_abs;
    unsigned long long max_bits;  // bits of max |e| (a non-negative double: orders like its bits)
    unsigned long long nan_count, inf_count;
};

// Radix-select state of one segment.
struct seg_state {
    unsigned long long rank;  // 0-based rank still to find among the keys matching prefix
    uint32_t prefix;          // key bits chosen so far (bits below the current digit are 0)
    uint32_t pad;
};

// ---- device helpers ------------------------------------------------------------

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ __forceinline__ double warp_max(double v)  // v never NaN here
{
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
    return v;
}

// ---- kernels -------------------------------------------------------------------

// Adds one element, the output of (a bf16 widened to float) against its
// reference y, to s (metrics_add_element); returns its key: the bits of
// (float)|e|, or kKeyNonFinite for a non-finite output.
__device__ __forceinline__ uint32_t add_element(metrics_sums &s, float of, double y)
{
    const double e = metrics_add_element(&s, of, y);
    return isfinite(of) ? __float_as_uint((float)e) : kKeyNonFinite;
}

// Reduces the block's sums (every thread of the block calls it) and adds them
// to *a with one atomic per quantity.
__device__ __forceinline__ void flush_sums(metrics_sums s, head_acc *a)
{
    __shared__ double s_sum[5][kWarps];
    __shared__ double s_max[kWarps];
    __shared__ unsigned long long s_cnt[2][kWarps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s.err2 = warp_sum(s.err2);
    s.ref2 = warp_sum(s.ref2);
    s.out2 = warp_sum(s.out2);
    s.dot = warp_sum(s.dot);
    s.sum_abs = warp_sum(s.sum_abs);
    s.max_abs = warp_max(s.max_abs);
    unsigned long long nan_count = warp_sum((unsigned long long)s.nan_count);
    unsigned long long inf_count = warp_sum((unsigned long long)s.inf_count);
    if (lane == 0) {
        s_sum[0][warp] = s.err2;
        s_sum[1][warp] = s.ref2;
        s_sum[2][warp] = s.out2;
        s_sum[3][warp] = s.dot;
        s_sum[4][warp] = s.sum_abs;
        s_max[warp] = s.max_abs;
        s_cnt[0][warp] = nan_count;
        s_cnt[1][warp] = inf_count;
    }
    __syncthreads();
    if (warp != 0) return;
    const bool has = lane < kWarps;
    s.err2 = warp_sum(has ? s_sum[0][lane] : 0.0);
    s.ref2 = warp_sum(has ? s_sum[1][lane] : 0.0);
    s.out2 = warp_sum(has ? s_sum[2][lane] : 0.0);
    s.dot = warp_sum(has ? s_sum[3][lane] : 0.0);
    s.sum_abs = warp_sum(has ? s_sum[4][lane] : 0.0);
    s.max_abs = warp_max(has ? s_max[lane] : 0.0);
    nan_count = warp_sum(has ? s_cnt[0][lane] : 0ull);
    inf_count = warp_sum(has ? s_cnt[1][lane] : 0ull);
    if (lane == 0) {
        atomicAdd(&a->err2, s.err2);
        atomicAdd(&a->ref2, s.ref2);
        atomicAdd(&a->out2, s.out2);
        atomicAdd(&a->dot, s.dot);
        atomicAdd(&a->sum_abs, s.sum_abs);
        atomicMax(&a->max_bits, (unsigned long long)__double_as_longlong(s.max_abs));
        atomicAdd(&a->nan_count, nan_count);
        atomicAdd(&a->inf_count, inf_count);
    }
}

// Pass 1. Grid (bx, hq), kBlock threads; block (x, h) covers head h in chunks
// of VEC consecutive elements of a token row (VEC divides d), chunk c =
// token t = c / (d / VEC), columns from (c % (d / VEC)) * VEC, grid-stride.
// For each element (add_element) it adds to acc[h] (zeroed before) and writes
// keys[h*tq*d + t*d + j]. VEC = kVec reads 16 bytes of out and 64 of ref and
// writes 32 of keys per chunk (d % 8 == 0, out and ref 16-byte aligned): a
// gpt-oss layer in 156 us against 274 with one element per thread (H200,
// 2026-12-03); VEC = 1 serves any d. One atomic per block per quantity, and
// one per non-empty bin of the first radix digit.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
metrics_stats_kernel(const uint16_t *__restrict__ out, const double *__restrict__ ref, int64_t tq,
                     int hq, int d, head_acc *__restrict__ acc, uint32_t *__restrict__ keys,
                     unsigned long long *__restrict__ hist)
{
    static_assert(VEC == 1 || VEC == kVec, "two widths");
    // The radix select's first pass rides along: its filter (no bits chosen
    // yet) takes every key, so the histogram of the keys' top digit is the
    // head's and, added up over the heads, the layer's.
    __shared__ uint32_t s_hist[1 << kFirstBits];
    for (int i = threadIdx.x; i < (1 << kFirstBits); i += kBlock) s_hist[i] = 0;
    __syncthreads();
    const int h = blockIdx.y;
    const int per_row = d / VEC;
    const int64_t chunks = tq * per_row;
    uint32_t *hkeys = keys + (int64_t)h * tq * d;
    metrics_sums s = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t c = (int64_t)blockIdx.x * kBlock + threadIdx.x; c < chunks;
         c += (int64_t)gridDim.x * kBlock) {
        const int64_t t = c / per_row;
        const int j = (int)(c % per_row) * VEC;
        const int64_t src = (t * hq + h) * (int64_t)d + j;
        const int64_t dst = t * (int64_t)d + j;
        if constexpr (VEC == 1) {
            const uint32_t key = add_element(s, __uint_as_float((uint32_t)out[src] << 16), ref[src]);
            hkeys[dst] = key;
            atomicAdd(&s_hist[key >> kFirstShift], 1u);
        } else {
            const uint4 ov = *(const uint4 *)(out + src);
            const uint32_t pair[4] = {ov.x, ov.y, ov.z, ov.w};  // bf16 pairs, low half first
            uint32_t key[kVec];
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const double2 y = *(const double2 *)(ref + src + 2 * w);
                key[2 * w] = add_element(s, __uint_as_float(pair[w] << 16), y.x);
                key[2 * w + 1] = add_element(s, __uint_as_float(pair[w] & 0xFFFF0000u), y.y);
            }
            *(uint4 *)(hkeys + dst) = make_uint4(key[0], key[1], key[2], key[3]);
            *(uint4 *)(hkeys + dst + 4) = make_uint4(key[4], key[5], key[6], key[7]);
#pragma unroll
            for (int e = 0; e < kVec; e++) atomicAdd(&s_hist[key[e] >> kFirstShift], 1u);
        }
    }
    flush_sums(s, &acc[h]);  // its barrier also orders the histogram's atomics
    unsigned long long *row_head = hist + (int64_t)h * kRadixBins;
    unsigned long long *row_layer = hist + (int64_t)hq * kRadixBins;
    for (int i = threadIdx.x; i < (1 << kFirstBits); i += kBlock) {
        const uint32_t c = s_hist[i];
        if (c) {
            atomicAdd(&row_head[i], (unsigned long long)c);
            atomicAdd(&row_layer[i], (unsigned long long)c);
        }
    }
}

// One radix pass. Grid (bx, hq), kBlock threads; block (x, h) reads head h's
// keys (keys[h*nh .. h*nh + nh), grid-stride over x) and counts each key k
// with (k & hi_mask) == state[h].prefix into hist[h][(k >> shift) & digit_mask]
// and each key with (k & hi_mask) == state[hq].prefix into hist[hq][same
// digit]; hist (rows of kRadixBins) must be zero before the pass. Counts go
// to shared-memory histograms first (plain shared atomics: measured 4x faster
// on the H200 than warp aggregation with __match_any_sync, ties included),
// then one global atomic per non-zero bin per block. When the head's
// and the layer's prefixes are equal, the two filters are the same and the
// head histogram is flushed into both rows.
__global__ void __launch_bounds__(kBlock)
metrics_hist_kernel(const uint32_t *__restrict__ keys, int64_t nh, int hq,
                    const seg_state *__restrict__ state, uint32_t hi_mask, int shift,
                    uint32_t digit_mask, unsigned long long *__restrict__ hist)
{
    __shared__ uint32_t s_head[kRadixBins];
    __shared__ uint32_t s_layer[kRadixBins];
    const int h = blockIdx.y;
    const uint32_t pre_head = state[h].prefix, pre_layer = state[hq].prefix;
    const bool same = pre_head == pre_layer;  // block-uniform
    for (int b = threadIdx.x; b < kRadixBins; b += kBlock) {
        s_head[b] = 0;
        s_layer[b] = 0;
    }
    __syncthreads();

    const uint32_t *hk = keys + (int64_t)h * nh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t step = 32 * kKeysPerLane;  // keys per warp per iteration
    // Each warp covers step consecutive keys per iteration (coalesced loads).
    for (int64_t base = ((int64_t)blockIdx.x * kWarps + warp) * step; base < nh;
         base += (int64_t)gridDim.x * kWarps * step) {
        uint32_t k[kKeysPerLane];
        bool valid[kKeysPerLane];
#pragma unroll
        for (int u = 0; u < kKeysPerLane; u++) {
            const int64_t i = base + u * 32 + lane;
            valid[u] = i < nh;
            k[u] = valid[u] ? hk[i] : 0u;
        }
#pragma unroll
        for (int u = 0; u < kKeysPerLane; u++) {
            if (!valid[u]) continue;
            const uint32_t digit = (k[u] >> shift) & digit_mask;
            if ((k[u] & hi_mask) == pre_head) atomicAdd(&s_head[digit], 1u);
            if (!same && (k[u] & hi_mask) == pre_layer) atomicAdd(&s_layer[digit], 1u);
        }
    }
    __syncthreads();

    unsigned long long *row_head = hist + (int64_t)h * kRadixBins;
    unsigned long long *row_layer = hist + (int64_t)hq * kRadixBins;
    for (int b = threadIdx.x; b < kRadixBins; b += kBlock) {
        const uint32_t ch = s_head[b];
        if (ch) {
            atomicAdd(&row_head[b], (unsigned long long)ch);
            if (same) atomicAdd(&row_layer[b], (unsigned long long)ch);
        }
        const uint32_t cl = s_layer[b];  // 0 when same
        if (cl) atomicAdd(&row_layer[b], (unsigned long long)cl);
    }
}

// After a pass. Grid hq + 1 (block s: segment s), kSelectBlock threads. Finds
// the bin b of hist[s][0 .. bins) where the cumulative count first exceeds
// state[s].rank, then state[s].rank -= count below b and state[s].prefix |=
// b << shift. If no bin holds the rank (a broken invariant), sets *flag = 1
// and leaves the state as it was.
__global__ void __launch_bounds__(kSelectBlock)
metrics_select_kernel(const unsigned long long *__restrict__ hist, int bins, int shift,
                      seg_state *__restrict__ state, unsigned int *__restrict__ flag)
{
    __shared__ unsigned long long s_part[kSelectBlock];
    const int s = blockIdx.x;
    const unsigned long long *row = hist + (int64_t)s * kRadixBins;
    const int per = bins / kSelectBlock;
    unsigned long long part = 0;
    for (int b = threadIdx.x * per; b < (threadIdx.x + 1) * per; b++) part += row[b];
    s_part[threadIdx.x] = part;
    __syncthreads();
    if (threadIdx.x != 0) return;

    const unsigned long long rank = state[s].rank;
    unsigned long long below = 0;
    int chunk = -1;
    for (int c = 0; c < kSelectBlock; c++) {
        if (rank < below + s_part[c]) {
            chunk = c;
            break;
        }
        below += s_part[c];
    }
    if (chunk >= 0) {
        for (int b = chunk * per; b < (chunk + 1) * per; b++) {
            const unsigned long long cnt = row[b];
            if (rank < below + cnt) {
                state[s].rank = rank - below;
                state[s].prefix |= (uint32_t)b << shift;
                return;
            }
            below += cnt;
        }
    }
    *flag = 1;
}

// Before pass 0. One block: every segment's state starts at its rank (heads:
// rank_head among tq*d keys; segment hq, the layer: rank_layer), prefix 0.
__global__ void __launch_bounds__(kSelectBlock)
metrics_state_init_kernel(seg_state *__restrict__ state, int hq, unsigned long long rank_head,
                          unsigned long long rank_layer)
{
    for (int s = threadIdx.x; s <= hq; s += kSelectBlock)
        state[s] = seg_state{s < hq ? rank_head : rank_layer, 0u, 0u};
}

// ---- host ----------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The float whose bits are key, widened.
double key_value(uint32_t key)
{
    float f;
    memcpy(&f, &key, sizeof f);
    return (double)f;
}

// Where the parts of one comparison's device scratch lie (byte offsets). The
// results (acc, state, flag) come first: they travel back as the one block
// [0, hist) into the caller's host buffer, at the same offsets.
struct scratch_layout {
    size_t acc, state, flag, hist, keys, total;
};

scratch_layout make_layout(int hq, int64_t n)
{
    scratch_layout l;
    l.acc = 0;
    l.state = l.acc + align_up((size_t)hq * sizeof(head_acc));
    l.flag = l.state + align_up((size_t)(hq + 1) * sizeof(seg_state));
    l.hist = l.flag + align_up(sizeof(unsigned int));
    l.keys = l.hist + align_up((size_t)(hq + 1) * kRadixBins * sizeof(unsigned long long));
    l.total = l.keys + align_up((size_t)n * sizeof(uint32_t));
    return l;
}

// The shape limits of one comparison (see cuda_metrics in cuda_common.cuh).
pg_status check_shape(int64_t tq, int hq, int d, pg_err *err)
{
    if (tq < 0 || hq < 0 || d < 0)
        return pg_fail(err, PG_ERR_SHAPE, "cuda_metrics: negative shape tq=%lld hq=%d d=%d",
                       (long long)tq, hq, d);
    if (hq > 65535)
        return pg_fail(err, PG_ERR_SHAPE, "cuda_metrics: hq=%d exceeds the grid's 65535 heads", hq);
    if (d > 0 && hq > 0 && tq > kMaxElements / d / hq)
        return pg_fail(err, PG_ERR_SHAPE,
                       "cuda_metrics: tq*hq*d (%lld*%d*%d) exceeds 2^40 elements", (long long)tq, hq,
                       d);
    return PG_OK;
}

}  // namespace

extern "C" size_t cuda_metrics_scratch_bytes(int64_t tq, int hq, int d)
{
    return make_layout(hq, tq * hq * d).total;
}

extern "C" size_t cuda_metrics_result_bytes(int hq) { return make_layout(hq, 0).hist; }

extern "C" pg_status cuda_metrics_enqueue(const uint16_t *out, const double *ref, int64_t tq,
                                          int hq, int d, void *scratch_v, void *results,
                                          cudaStream_t stream, pg_err *err)
{
    pg_status st = check_shape(tq, hq, d, err);
    if (st != PG_OK) return st;
    const int64_t nh = tq * d, n = nh * hq;
    if (n == 0) return PG_OK;  // cuda_metrics_collect gives metrics.c's n == 0 answer
    if (!out || !ref || !scratch_v || !results)
        return pg_fail(err, PG_ERR_INTERNAL, "cuda_metrics: a NULL array");
    int dev = 0, sms = 0;
    CUDA_TRY("cuda_metrics", cudaGetDevice(&dev));
    CUDA_TRY("cuda_metrics", cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (sms < 1) sms = 1;

    char *scratch = (char *)scratch_v;
    const scratch_layout l = make_layout(hq, n);
    head_acc *acc = (head_acc *)(scratch + l.acc);
    seg_state *state = (seg_state *)(scratch + l.state);
    unsigned int *flag = (unsigned int *)(scratch + l.flag);
    unsigned long long *hist = (unsigned long long *)(scratch + l.hist);
    uint32_t *keys = (uint32_t *)(scratch + l.keys);
    const size_t hist_bytes = (size_t)(hq + 1) * kRadixBins * sizeof(unsigned long long);

    // The results block zeroed, then each segment's rank set on the device
    // (no host copy to wait for).
    CUDA_TRY("cuda_metrics", cudaMemsetAsync(scratch, 0, l.hist, stream));
    metrics_state_init_kernel<<<1, kSelectBlock, 0, stream>>>(
        state, hq, (unsigned long long)metrics_p99_index(nh),
        (unsigned long long)metrics_p99_index(n));
    CUDA_TRY_LAUNCH("cuda_metrics: metrics_state_init_kernel");

    // Blocks per head: enough for kBlocksPerSm blocks per SM over all heads.
    const int64_t per_head = ceil_div((int64_t)sms * kBlocksPerSm, hq);
    const bool vec = d % kVec == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)ref % 16 == 0;
    const int64_t chunks = ceil_div(tq * (vec ? d / kVec : d), kBlock);
    const int64_t bx_stats = per_head < chunks ? per_head : chunks;
    // Pass 0's histogram comes from the stats kernel; passes 1.. from metrics_hist_kernel.
    CUDA_TRY("cuda_metrics", cudaMemsetAsync(hist, 0, hist_bytes, stream));
    if (vec)
        metrics_stats_kernel<kVec><<<dim3((unsigned)bx_stats, (unsigned)hq), kBlock, 0, stream>>>(
            out, ref, tq, hq, d, acc, keys, hist);
    else
        metrics_stats_kernel<1><<<dim3((unsigned)bx_stats, (unsigned)hq), kBlock, 0, stream>>>(
            out, ref, tq, hq, d, acc, keys, hist);
    CUDA_TRY_LAUNCH("cuda_metrics: metrics_stats_kernel");

    const int64_t tiles = ceil_div(nh, (int64_t)32 * kKeysPerLane * kWarps);
    int64_t bx_hist = per_head > ceil_div(nh, kMaxKeysPerHistBlock) ? per_head
                                                                    : ceil_div(nh, kMaxKeysPerHistBlock);
    if (bx_hist > tiles) bx_hist = tiles;
    int shift = 32;
    for (int p = 0; p < kPasses; p++) {
        const int bits = kPassBits[p];
        const uint32_t hi_mask = shift >= 32 ? 0u : ~((1u << shift) - 1u);  // bits chosen so far
        shift -= bits;
        const uint32_t digit_mask = (1u << bits) - 1u;
        if (p > 0) {
            CUDA_TRY("cuda_metrics", cudaMemsetAsync(hist, 0, hist_bytes, stream));
            metrics_hist_kernel<<<dim3((unsigned)bx_hist, (unsigned)hq), kBlock, 0, stream>>>(
                keys, nh, hq, state, hi_mask, shift, digit_mask, hist);
            CUDA_TRY_LAUNCH("cuda_metrics: metrics_hist_kernel");
        }
        metrics_select_kernel<<<(unsigned)(hq + 1), kSelectBlock, 0, stream>>>(hist, 1 << bits,
                                                                               shift, state, flag);
        CUDA_TRY_LAUNCH("cuda_metrics: metrics_select_kernel");
    }
    CUDA_TRY("cuda_metrics",
             cudaMemcpyAsync(results, scratch, l.hist, cudaMemcpyDeviceToHost, stream));
    return PG_OK;
}

extern "C" pg_status cuda_metrics_collect(const void *results, int64_t tq, int hq, int d,
                                          pg_metric_values *m, pg_err *err)
{
    if (!m) return pg_fail(err, PG_ERR_INTERNAL, "cuda_metrics: m is NULL");
    pg_status st = check_shape(tq, hq, d, err);
    if (st != PG_OK) return st;
    const int64_t nh = tq * d, n = nh * hq;
    if (n == 0) {  // no elements: metrics.c's n == 0 rule everywhere
        const metrics_sums zero = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int s = 0; s <= hq; s++) metrics_from_sums(&zero, 0, 0.0, &m[s]);
        return PG_OK;
    }
    const scratch_layout l = make_layout(hq, n);
    const char *r = (const char *)results;
    unsigned int flag;
    memcpy(&flag, r + l.flag, sizeof flag);
    if (flag)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "cuda_metrics: radix select lost its rank (tq=%lld, hq=%d, d=%d)",
                       (long long)tq, hq, d);
    metrics_sums layer = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int h = 0; h < hq; h++) {
        head_acc a;
        seg_state s;
        memcpy(&a, r + l.acc + (size_t)h * sizeof a, sizeof a);
        memcpy(&s, r + l.state + (size_t)h * sizeof s, sizeof s);
        double mx;
        memcpy(&mx, &a.max_bits, sizeof mx);
        const metrics_sums hs = {a.err2, a.ref2, a.out2, a.dot, a.sum_abs, mx,
                                (int64_t)a.nan_count, (int64_t)a.inf_count};
        metrics_from_sums(&hs, nh, key_value(s.prefix), &m[1 + h]);
        layer.err2 += hs.err2;
        layer.ref2 += hs.ref2;
        layer.out2 += hs.out2;
        layer.dot += hs.dot;
        layer.sum_abs += hs.sum_abs;
        if (hs.max_abs > layer.max_abs) layer.max_abs = hs.max_abs;
        layer.nan_count += hs.nan_count;
        layer.inf_count += hs.inf_count;
    }
    seg_state all;
    memcpy(&all, r + l.state + (size_t)hq * sizeof all, sizeof all);
    metrics_from_sums(&layer, n, key_value(all.prefix), &m[0]);
    return PG_OK;
}

extern "C" pg_status cuda_metrics(const uint16_t *out, const double *ref, int64_t tq, int hq,
                                  int d, pg_metric_values *m, cudaStream_t stream, pg_err *err)
{
    if (!m) return pg_fail(err, PG_ERR_INTERNAL, "cuda_metrics: m is NULL");
    pg_status st = check_shape(tq, hq, d, err);
    if (st != PG_OK) return st;
    void *scratch = NULL;
    void *results = malloc(cuda_metrics_result_bytes(hq));
    if (!results) return pg_fail(err, PG_ERR_NOMEM, "cuda_metrics: out of host memory (hq=%d)", hq);
    CUDA_STEP(st, "cuda_metrics",
              cudaMallocAsync(&scratch, cuda_metrics_scratch_bytes(tq, hq, d), stream));
    if (st == PG_OK) st = cuda_metrics_enqueue(out, ref, tq, hq, d, scratch, results, stream, err);
    // Every path frees the scratch (stream-ordered) and waits for the stream.
    const cudaError_t free_rc = scratch != NULL ? cudaFreeAsync(scratch, stream) : cudaSuccess;
    const cudaError_t sync_rc = cudaStreamSynchronize(stream);
    CUDA_STEP(st, "cuda_metrics", free_rc);
    CUDA_STEP(st, "cuda_metrics", sync_rc);
    if (st == PG_OK) st = cuda_metrics_collect(results, tq, hq, d, m, err);
    free(results);
    return st;
}
