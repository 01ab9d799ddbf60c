// cuda_attn_fp8.cu: fp8 (e4m3) prefill attention, the fp8qkv mode of
// kernels/attn.h on the GPU: Q, K and V in e4m3, S = Q8.K8^T and O += P8.V8
// on Hopper's fp8 tensor cores (wgmma m64nNk32 e4m3, fp32 accumulators; see
// cuda_wgmma.cuh), P cast to e4m3 with no scale as FlashAttention-3's fp8
// path does. K and V come straight from the paged e4m3 cache through the
// block table. A block is two warpgroups (128 query rows); each issues its
// own wgmma with A (Q, then P) from registers and B (K, then V^T) from the
// shared-memory stage of the current key tile.
//
// Layout trick for P.V: the fp32 accumulator of S holds, per thread, keys
// 8i + 2q and 8i + 2q + 1 (i = 0..3, q = lane % 4) of each 32-key chunk,
// while the k32 A operand wants four consecutive k slots per register. The
// product does not care about the order of its k index, so slot s of each
// 16-key group is assigned key fp8_slot_key(s), and a pre-pass
// (fp8_vt_kernel) writes V transposed, [page][hkv][d][block_size], in that
// order: each thread packs its own P values with no shuffles, and V^T tiles
// stream in with cp.async like K's.
#include <cuda_fp8.h>
#include <math.h>

#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "cuda_attn_tile.cuh"
#include "cuda_softmax.cuh"
#include "cuda_wgmma.cuh"

namespace {

constexpr int F8_BM = 128;                // query rows per block (8 warps share each K/V tile)
constexpr int F8_BN = 64;                 // keys per tile
constexpr int F8_WARPS = F8_BM / 16;      // 16 rows per warp, 4 warps per warpgroup
constexpr int F8_THREADS = F8_WARPS * 32;
constexpr int F8_MIN_BLOCKS = 2;  // d 64: blocks per SM the register budget must allow (16 warps)
constexpr int F8_KCHUNK = 32;             // k of one e4m3 mma

// Key (within a 16-key group) that k slot s of the P.V product stands for.
__device__ __forceinline__ int fp8_slot_key(int s)
{
    const int q = s / 4, e = s % 4;
    return (e / 2) * 8 + 2 * q + (e % 2);
}

constexpr int F8_GROUP = 16;            // keys per permuted group (one ldmatrix row)
constexpr int F8_VT_THREADS = 256;

// V^T in slot order, one page per block (grid: pages_per_seq, n_seqs):
// vt[((page * hkv + g) * D + dim) * bs + grp * 16 + slot] = V[key][dim] with
// key = grp * 16 + fp8_slot_key(slot); keys past the sequence's end get 0, so
// that P = 0 there never meets the cache's NaN fill (0 * NaN = NaN).
__global__ void __launch_bounds__(F8_VT_THREADS)
fp8_vt_kernel(const cuda_batch b, const uint8_t *__restrict__ cache,
              const int32_t *__restrict__ block_table, int block_size, int pages_per_seq,
              uint8_t *__restrict__ vt)
{
    const int p = blockIdx.x, s = blockIdx.y, d = b.d;
    const int skv = b.seq_kv[s];
    if (p * block_size >= skv) return;
    const int64_t page = block_table[(int64_t)s * pages_per_seq + p];
    if (page <= 0) return;
    const int groups = block_size / F8_GROUP;
    const int64_t half = (int64_t)b.hkv * block_size * d;
    const uint8_t *v = cache + page * 2 * half + half;   // the page's V part [hkv][bs][d]
    for (int w = threadIdx.x; w < b.hkv * d * groups; w += F8_VT_THREADS) {
        const int grp = w % groups, dim = (w / groups) % d, g = w / (groups * d);
        uint32_t word[F8_GROUP / 4];
#pragma unroll
        for (int i = 0; i < F8_GROUP / 4; i++) {
            uint32_t packed = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int slot = grp * F8_GROUP + fp8_slot_key(4 * i + e);
                const uint32_t byte = p * block_size + slot < skv
                                          ? v[((int64_t)g * block_size + slot) * d + dim]
                                          : 0u;
                packed |= byte << (8 * e);
            }
            word[i] = packed;
        }
        uint4 *dst = reinterpret_cast<uint4 *>(
            vt + ((page * b.hkv + g) * (int64_t)d + dim) * block_size + grp * F8_GROUP);
        *dst = make_uint4(word[0], word[1], word[2], word[3]);
    }
}

// Shared-memory plan. Q rows are padded by 16 bytes for conflict-free
// ldmatrix; the K tile ([F8_BN keys][D]) and the V^T tile ([D][F8_BN keys])
// are in wgmma's no-swizzle core-matrix layout (wgmma_tile_offset).
template <int D>
struct fp8_smem {
    static constexpr int stride = D + 16;       // bytes per Q row
    static constexpr int q_bytes = F8_BM * stride;
    static constexpr int kv_bytes = F8_BN * D;  // one K tile, and one V^T tile
    static constexpr size_t bytes = (size_t)q_bytes + 4 * kv_bytes;
};

// Two floats to packed e4m3 (low byte first), saturating, nearest even.
__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi)
{
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

template <int D>
__global__ void __launch_bounds__(F8_THREADS, D == 64 ? F8_MIN_BLOCKS : 1)
attn_fp8_kernel(const cuda_batch b, const uint8_t *__restrict__ q8,
                const uint8_t *__restrict__ cache, const uint8_t *__restrict__ vt,
                const int32_t *__restrict__ block_table,
                const int block_size, const int pages_per_seq, const float qk_scale,
                const float v_scale, uint16_t *__restrict__ out)
{
    using sm = fp8_smem<D>;
    constexpr int CH = D / 16;  // 16-byte chunks per row
    const attn_block blk = attn_block_of(b.hq);
    const int s = blk.s, h = blk.h, m0 = blk.qb * F8_BM;
    const int sq = b.seq_q[s];
    if (m0 >= sq) return;
    const int skv = b.seq_kv[s], ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    extern __shared__ __align__(128) uint8_t smem_fp8[];
    uint8_t *sQ = smem_fp8;
    uint8_t *sK2 = sQ + sm::q_bytes;             // stage st's K tile at st * kv_bytes
    uint8_t *sVt2 = sK2 + 2 * sm::kv_bytes;      // stage st's V^T tile at st * kv_bytes

    load_q_tile<F8_BM, F8_THREADS, D>(sQ, sm::stride, q8, b, s, h, m0, sq);
    const key_tiles kt = key_tiles_of<F8_BM, F8_BN>(b, m0, sq, ctx);
    const int n_begin = kt.n_begin, n_end = kt.n_end, n_tiles = kt.n_tiles;

    constexpr int VT_CH = F8_BN / F8_GROUP;  // 16-key chunks per V^T row
    auto load_kv = [&](int tile, int stage) {
        const int n0 = n_begin + tile * F8_BN;
        uint8_t *sK = sK2 + stage * sm::kv_bytes;
        for (int c = tid; c < F8_BN * CH; c += F8_THREADS) {
            const int r = c / CH, cc = c % CH, t = n0 + r;
            const bool ok = t < n_end;
            const int tt = ok ? t : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + tt / block_size];
            const int64_t base = (page * 2 * b.hkv + g) * (int64_t)block_size * D +
                                 (int64_t)(tt % block_size) * D + cc * 16;
            cp_async_16(sK + wgmma_tile_offset(r, cc, CH), cache + base, ok ? 16 : 0);
        }
        // V^T: D rows of F8_BN keys, 16-key groups from their pages.
        uint8_t *sVt = sVt2 + stage * sm::kv_bytes;
        for (int c = tid; c < D * VT_CH; c += F8_THREADS) {
            const int dim = c / VT_CH, grp = c % VT_CH;
            const int kb = n0 + grp * F8_GROUP;
            const bool ok = kb < n_end;
            const int kk = ok ? kb : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + kk / block_size];
            const uint8_t *src = vt + ((page * b.hkv + g) * (int64_t)D + dim) * block_size +
                                 kk % block_size;
            cp_async_16(sVt + wgmma_tile_offset(dim, grp, VT_CH), src, ok ? 16 : 0);
        }
    };

    load_kv(0, 0);
    cp_async_commit();

    const float scale_log2 = qk_scale * SOFTMAX_LOG2E;
    const int row0 = m0 + warp * 16 + lane / 4;
    softmax_rows sm_rows = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    for (int tile = 0; tile < n_tiles; tile++) {
        const int stage = tile & 1;
        if (tile + 1 < n_tiles) {
            load_kv(tile + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();  // this thread's tile bytes, before the tensor cores read them
        __syncthreads();
        uint32_t qf[D / F8_KCHUNK][4];
        // Q's A fragments, loaded again every tile: kept in registers across
        // tiles, ptxas 13.0 gave them to P at d 64 (seen in the SASS: P packed
        // into Q's registers after the first tile).
#pragma unroll
        for (int kk = 0; kk < D / F8_KCHUNK; kk++)
            ldmatrix_x4(qf[kk], sQ + (warp * 16 + lane % 16) * sm::stride + kk * 32 +
                                    (lane / 16) * 16);
        const uint8_t *sK = sK2 + stage * sm::kv_bytes;
        const uint8_t *sVt = sVt2 + stage * sm::kv_bytes;

        // S = Q8.K8^T: one m64n64k32 per 32 dims (two 16-byte chunks).
        float sc[F8_BN / 8][4];
        wgmma_e4m3_tile(sc, qf, sK, CH, 0);

        const int n0 = n_begin + tile * F8_BN;
        float alpha[2];
        softmax_tile<F8_BN>(sc, sm_rows, alpha, b, m0, warp, lane, n0, sq, ctx, scale_log2);
        softmax_rescale<D>(o, alpha);

        // O += e4m3(P).V8, one 32-key chunk (four accumulator tiles) per wgmma.
        uint32_t pa[F8_BN / F8_KCHUNK][4];
#pragma unroll
        for (int kc = 0; kc < F8_BN / F8_KCHUNK; kc++) {
            const int t0 = 4 * kc;
            pa[kc][0] = pack_e4m3x2(sc[t0][0], sc[t0][1]) |
                        pack_e4m3x2(sc[t0 + 1][0], sc[t0 + 1][1]) << 16;
            pa[kc][1] = pack_e4m3x2(sc[t0][2], sc[t0][3]) |
                        pack_e4m3x2(sc[t0 + 1][2], sc[t0 + 1][3]) << 16;
            pa[kc][2] = pack_e4m3x2(sc[t0 + 2][0], sc[t0 + 2][1]) |
                        pack_e4m3x2(sc[t0 + 3][0], sc[t0 + 3][1]) << 16;
            pa[kc][3] = pack_e4m3x2(sc[t0 + 2][2], sc[t0 + 2][3]) |
                        pack_e4m3x2(sc[t0 + 3][2], sc[t0 + 3][3]) << 16;
        }
        wgmma_e4m3_tile(o, pa, sVt, VT_CH, 1);
        __syncthreads();  // the stage is overwritten by the load two tiles on
    }

    store_rows<D>(out, o, sm_rows, v_scale, b, s, h, row0, sq);
}

template <int D>
pg_status launch_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                     const uint8_t *vt, float qk_scale, float v_scale, uint16_t *out,
                     cudaStream_t stream, pg_err *err)
{
    const size_t smem = fp8_smem<D>::bytes;
    CUDA_TRY("attn_fp8", cudaFuncSetAttribute(attn_fp8_kernel<D>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem));
    dim3 grid;
    const pg_status st = attn_grid(b, F8_BM, "attn_fp8", &grid, err);
    if (st != PG_OK) return st;
    attn_fp8_kernel<D><<<grid, F8_THREADS, smem, stream>>>(
        *b, q8, static_cast<const uint8_t *>(kv->data), vt, kv->block_table, kv->block_size,
        kv->pages_per_seq, qk_scale, v_scale, out);
    CUDA_TRY_LAUNCH("attn_fp8");
    return PG_OK;
}

}  // namespace

extern "C" pg_status cuda_attn_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                                   float qk_scale, float v_scale, int p_rounding, uint16_t *out,
                                   cudaStream_t stream, pg_err *err)
{
    if (kv->elem != KV_ELEM_E4M3)
        return pg_fail(err, PG_ERR_INTERNAL, "attn_fp8: the cache must hold e4m3");
    if (p_rounding != ATTN_P_E4M3)
        return pg_fail(err, PG_ERR_USAGE, "attn_fp8: the GPU kernel rounds P to e4m3 only "
                                          "(--p-rounding e4m3)");
    if (b->d != 64 && b->d != 128)
        return pg_fail(err, PG_ERR_SHAPE, "attn_fp8: head dim %d is not supported on the GPU "
                                          "(64 or 128)", b->d);
    // V^T in slot order (fp8_vt_kernel), one byte per cached V element.
    uint8_t *vt = nullptr;
    const size_t vt_bytes = (size_t)kv->n_pages * b->hkv * kv->block_size * b->d;
    CUDA_TRY("attn_fp8: V^T", cudaMallocAsync((void **)&vt, vt_bytes, stream));
    fp8_vt_kernel<<<dim3((unsigned)kv->pages_per_seq, (unsigned)b->n_seqs), F8_VT_THREADS, 0,
                    stream>>>(*b, static_cast<const uint8_t *>(kv->data), kv->block_table,
                              kv->block_size, kv->pages_per_seq, vt);
    pg_status st = PG_OK;
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        st = pg_fail(err, PG_ERR_DEVICE, "attn_fp8: fp8_vt_kernel launch: %s",
                     cudaGetErrorString(rc));
    if (st == PG_OK)
        st = b->d == 64 ? launch_fp8<64>(b, q8, kv, vt, qk_scale, v_scale, out, stream, err)
                        : launch_fp8<128>(b, q8, kv, vt, qk_scale, v_scale, out, stream, err);
    cudaFreeAsync(vt, stream);
    return st;
}
