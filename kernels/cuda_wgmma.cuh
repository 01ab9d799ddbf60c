// cuda_wgmma.cuh: Hopper's warpgroup matrix instructions (PTX ISA,
// "Asynchronous warpgroup level matrix multiply-accumulate": wgmma.mma_async,
// sm_90a) as the fp8 attention kernel uses them: A (64 x 32 e4m3) from
// registers, B (N x 32 e4m3, K-major) from shared memory through a matrix
// descriptor, fp32 accumulators in registers.
//
// Layouts (PTX ISA, "Register fragments and shared memory matrix layouts"):
// - A in registers, per warp w of the warpgroup (rows 16w .. 16w+15): the
//   fragment of mma.sync m16n8k32 (a0: row lane/4, k 4(lane%4)..+3; a1: row +8;
//   a2, a3: the same at k + 16).
// - D (m64 x N, fp32): per warp the m16n8 accumulator layout repeated over N/8
//   column tiles: d[4j + e] is row 16w + lane/4 + 8(e/2), column
//   8j + 2(lane%4) + (e%2) -- the float[N/8][4] arrays of the kernels.
// - B in shared memory, no swizzle ("interleave"): 8 x 16-byte core matrices
//   of 128 contiguous bytes (row r of the core matrix at 16 r); the core
//   matrix of rows 8i.. and k bytes 16c.. sits at i * SBO + c * LBO. The
//   tiles here put the k chunks of a row group side by side (LBO = 128).
#ifndef PG_CUDA_WGMMA_CUH
#define PG_CUDA_WGMMA_CUH

#include <stdint.h>

#include "cuda_mma.cuh"

// Bytes of one core matrix (8 rows x 16 bytes) and the LBO of the tiles here.
#define WGMMA_CORE_BYTES 128

// Byte offset of (row, 16-byte chunk) in a K-major tile whose rows hold
// chunks chunks: row groups of 8 at chunks * 128 bytes (SBO), chunks at 128 (LBO).
__device__ __forceinline__ int wgmma_tile_offset(int row, int chunk, int chunks)
{
    return (row / 8) * chunks * WGMMA_CORE_BYTES + chunk * WGMMA_CORE_BYTES + (row % 8) * 16;
}

// Matrix descriptor of a no-swizzle K-major tile starting at p (16-byte
// aligned): start address, LBO and SBO, each in 16-byte units.
__device__ __forceinline__ uint64_t wgmma_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    const uint64_t addr = smem_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32);
}

// Orders this thread's register writes (accumulators, A fragments) before
// the wgmma instructions that follow.
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most n committed wgmma groups are pending.
template <int n>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory");
}

// Makes this thread's ordinary shared-memory writes (cp.async included)
// visible to the async proxy the tensor cores read through; then a barrier.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#define WGMMA_F4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])

// d (+)= a * B, m64n32k32 e4m3; accumulate = 0 overwrites d: the 32-key
// piece of a 160-key tile (wgmma_e4m3_cols).
__device__ __forceinline__ void wgmma_e4m3_m64n32k32(float (&d)[4][4], const uint32_t (&a)[4],
                                                     uint64_t b_desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
        "{%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
        : WGMMA_F4(d, 0), WGMMA_F4(d, 1), WGMMA_F4(d, 2), WGMMA_F4(d, 3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

// d (+)= a * B, m64n64k32 e4m3; accumulate = 0 overwrites d.
__device__ __forceinline__ void wgmma_e4m3_m64n64k32(float (&d)[8][4], const uint32_t (&a)[4],
                                                     uint64_t b_desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
        : WGMMA_F4(d, 0), WGMMA_F4(d, 1), WGMMA_F4(d, 2), WGMMA_F4(d, 3), WGMMA_F4(d, 4),
          WGMMA_F4(d, 5), WGMMA_F4(d, 6), WGMMA_F4(d, 7)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

// The same with N = 128 (64 accumulators per thread).
__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[16][4], const uint32_t (&a)[4],
                                                      uint64_t b_desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
        : WGMMA_F4(d, 0), WGMMA_F4(d, 1), WGMMA_F4(d, 2), WGMMA_F4(d, 3), WGMMA_F4(d, 4),
          WGMMA_F4(d, 5), WGMMA_F4(d, 6), WGMMA_F4(d, 7), WGMMA_F4(d, 8), WGMMA_F4(d, 9),
          WGMMA_F4(d, 10), WGMMA_F4(d, 11), WGMMA_F4(d, 12), WGMMA_F4(d, 13), WGMMA_F4(d, 14),
          WGMMA_F4(d, 15)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

// The same with N = 192 (96 accumulators per thread): FA3's fp8 key tile for
// head dim 128 (kernels/cuda_attn_fp8.cu).
__device__ __forceinline__ void wgmma_e4m3_m64n192k32(float (&d)[24][4], const uint32_t (&a)[4],
                                                      uint64_t b_desc, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, "
        "{%96,%97,%98,%99}, %100, p, 1, 1;\n}\n"
        : WGMMA_F4(d, 0), WGMMA_F4(d, 1), WGMMA_F4(d, 2), WGMMA_F4(d, 3), WGMMA_F4(d, 4),
          WGMMA_F4(d, 5), WGMMA_F4(d, 6), WGMMA_F4(d, 7), WGMMA_F4(d, 8), WGMMA_F4(d, 9),
          WGMMA_F4(d, 10), WGMMA_F4(d, 11), WGMMA_F4(d, 12), WGMMA_F4(d, 13), WGMMA_F4(d, 14),
          WGMMA_F4(d, 15), WGMMA_F4(d, 16), WGMMA_F4(d, 17), WGMMA_F4(d, 18), WGMMA_F4(d, 19),
          WGMMA_F4(d, 20), WGMMA_F4(d, 21), WGMMA_F4(d, 22), WGMMA_F4(d, 23)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

#undef WGMMA_F4

// d (+)= a * B for the accumulator width the caller holds (N = 8 * NT).
template <int NT>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[NT][4], const uint32_t (&a)[4],
                                           uint64_t b_desc, int accumulate);
template <>
__device__ __forceinline__ void wgmma_e4m3<4>(float (&d)[4][4], const uint32_t (&a)[4],
                                              uint64_t b_desc, int accumulate)
{
    wgmma_e4m3_m64n32k32(d, a, b_desc, accumulate);
}
template <>
__device__ __forceinline__ void wgmma_e4m3<8>(float (&d)[8][4], const uint32_t (&a)[4],
                                              uint64_t b_desc, int accumulate)
{
    wgmma_e4m3_m64n64k32(d, a, b_desc, accumulate);
}
template <>
__device__ __forceinline__ void wgmma_e4m3<16>(float (&d)[16][4], const uint32_t (&a)[4],
                                               uint64_t b_desc, int accumulate)
{
    wgmma_e4m3_m64n128k32(d, a, b_desc, accumulate);
}

template <>
__device__ __forceinline__ void wgmma_e4m3<24>(float (&d)[24][4], const uint32_t (&a)[4],
                                               uint64_t b_desc, int accumulate)
{
    wgmma_e4m3_m64n192k32(d, a, b_desc, accumulate);
}

// The widest wgmma shape the kernels issue for NT column tiles (N = 8 NT):
// 192, 128, 64 or 32 columns; wider tiles are issued as pieces of it.
template <int NT>
struct wgmma_piece {
    static constexpr int nt = NT == 24 ? 24 : NT >= 16 ? 16 : NT >= 8 ? 8 : 4;
};

// Columns OFF*8 .. of d (+)= a * B for k step a, in pieces (wgmma_piece):
// column c of d is its own accumulation chain over k, and the wgmma of a
// piece sums exactly the products of a full-width one for its columns, so
// splitting N changes no result bit. B's rows (K-major: keys for S, head
// dims for P.V) are in row groups of 8 at `chunks` core matrices each
// (wgmma_tile_offset); the piece's rows start at group OFF.
template <int NT, int OFF>
__device__ __forceinline__ void wgmma_e4m3_cols(float (&d)[NT][4], const uint32_t (&a)[4],
                                                const uint8_t *kstep, int chunks, int accumulate)
{
    if constexpr (OFF < NT) {
        constexpr int P = wgmma_piece<NT - OFF>::nt;
        wgmma_e4m3<P>(*reinterpret_cast<float(*)[P][4]>(&d[OFF]), a,
                      wgmma_desc(kstep + OFF * chunks * WGMMA_CORE_BYTES, WGMMA_CORE_BYTES,
                                 chunks * WGMMA_CORE_BYTES),
                      accumulate);
        wgmma_e4m3_cols<NT, OFF + P>(d, a, kstep, chunks, accumulate);
    }
}

// d (+)= A.B over KS k32 steps, waited for: A's fragments a[k] from
// registers, B the K-major tile at tile (rows of `chunks` 16-byte chunks,
// wgmma_tile_offset) whose k bytes 32k .. 32k+31 step k reads. accumulate = 0
// overwrites d. N = 8 NT columns, in pieces where no single shape has them.
template <int NT, int KS>
__device__ __forceinline__ void wgmma_e4m3_tile(float (&d)[NT][4], const uint32_t (&a)[KS][4],
                                                const uint8_t *tile, int chunks, int accumulate)
{
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < KS; k++)
        wgmma_e4m3_cols<NT, 0>(d, a[k], tile + k * 2 * WGMMA_CORE_BYTES, chunks,
                               accumulate || k > 0);
    wgmma_commit();
    wgmma_wait<0>();
}

#endif  // PG_CUDA_WGMMA_CUH
