// gpu_fp64_peak.cu: the H200's fp64 ceilings, the yardstick of the GPU
// reference attention (kernels/cuda_attn_reference.cu):
//   dmma  - independent DMMA m16n8k8 .f64 chains (the tensor-core rate);
//   dfma  - independent DFMA chains (the fp64 CUDA-core rate);
//   mixed - both in one warp, DFMA_PER_DMMA DFMAs per DMMA, which shows whether
//           the two share a pipe (the reference's softmax runs on DFMA while
//           its products run on DMMA);
//   imma  - independent IMMA m16n8k32 s8 chains (mma.sync), the integer
//           tensor rate an exact split-integer (Ozaki) product would run at;
//   imma+dfma - both in one warp, DFMA_PER_DMMA DFMAs per IMMA: whether the
//           integer tensor pipe runs beside the fp64 one.
// Every result feeds a checksum the host prints, so nothing is optimized out.
//
// usage: gpu_fp64_peak            prints TFLOP/s (2 flops per multiply-add)
#include <cuda_runtime.h>
#include <stdio.h>

#define PEAK_CHAINS 4        // independent accumulators per warp (> DMMA latency / issue)
#define PEAK_ITERS 4096      // loop trips per kernel
#define PEAK_WARPS 16        // warps per block
#define PEAK_BLOCKS_PER_SM 2
#define DMMA_FLOPS (2.0 * 16 * 8 * 8)
#define IMMA_OPS (2.0 * 16 * 8 * 32)
#define DFMA_PER_DMMA 8      // softmax-like mix: fp64 ops per tensor op

#define CHECK(x)                                                                      \
    do {                                                                              \
        cudaError_t e_ = (x);                                                         \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "gpu_fp64_peak: %s: %s\n", #x, cudaGetErrorString(e_));   \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

__device__ __forceinline__ void dmma(double (&c)[4], double a0, double a1, double a2, double a3,
                                     double b0, double b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                 : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}

__device__ __forceinline__ void imma(int (&c)[4], unsigned a0, unsigned a1, unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a0), "r"(a1), "r"(b0), "r"(a0));
}

// mode 0: DMMA only, 1: DFMA only, 2: both, 3: IMMA only, 4: IMMA and DFMA.
template <int MODE>
__global__ void peak_kernel(double seed, double *sink)
{
    double c[PEAK_CHAINS][4], f[PEAK_CHAINS * 2];
    int ic[PEAK_CHAINS][4];
    const unsigned ia = 0x01020304u + threadIdx.x, ib = 0x7F80FF01u ^ threadIdx.x;
    const double a = seed + threadIdx.x * 1e-9, b = 1.0 - 1e-12;
    for (int i = 0; i < PEAK_CHAINS; i++) {
        c[i][0] = c[i][1] = c[i][2] = c[i][3] = a;
        f[2 * i] = f[2 * i + 1] = a;
        ic[i][0] = ic[i][1] = ic[i][2] = ic[i][3] = (int)threadIdx.x;
    }
    for (int it = 0; it < PEAK_ITERS; it++) {
#pragma unroll
        for (int i = 0; i < PEAK_CHAINS; i++) {
            if (MODE == 0 || MODE == 2) dmma(c[i], a, b, a, b, b, a);
            if (MODE >= 3) imma(ic[i], ia, ib, ia ^ ib);
            if (MODE == 1 || MODE == 2 || MODE == 4) {
#pragma unroll
                for (int r = 0; r < DFMA_PER_DMMA / 2; r++) {
                    f[2 * i] = fma(f[2 * i], b, a);
                    f[2 * i + 1] = fma(f[2 * i + 1], b, a);
                }
            }
        }
    }
    double s = 0;
    for (int i = 0; i < PEAK_CHAINS; i++)
        s += c[i][0] + c[i][1] + c[i][2] + c[i][3] + f[2 * i] + f[2 * i + 1] +
             (double)(ic[i][0] ^ ic[i][1] ^ ic[i][2] ^ ic[i][3]);
    if (s == 12345.678) *sink = s;  // never true; keeps the work
}

template <int MODE>
static int time_mode(const char *name, int sms, double *sink)
{
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const dim3 grid(sms * PEAK_BLOCKS_PER_SM), block(PEAK_WARPS * 32);
    peak_kernel<MODE><<<grid, block>>>(1.0, sink);
    CHECK(cudaDeviceSynchronize());
    float ms = 0;
    CHECK(cudaEventRecord(e0));
    peak_kernel<MODE><<<grid, block>>>(1.0, sink);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double warps = (double)grid.x * PEAK_WARPS, trips = warps * PEAK_ITERS * PEAK_CHAINS;
    const double dmma_flops = MODE == 0 || MODE == 2 ? trips * DMMA_FLOPS : 0;
    const double dfma_flops = MODE == 1 || MODE == 2 || MODE == 4 ? trips * 32 * DFMA_PER_DMMA * 2.0 : 0;
    const double imma_ops = MODE >= 3 ? trips * IMMA_OPS : 0;
    printf("%-9s %8.3f ms  DMMA %6.1f TFLOP/s  DFMA %6.1f TFLOP/s  IMMA %7.1f TOP/s\n", name, ms,
           dmma_flops / ms / 1e9, dfma_flops / ms / 1e9, imma_ops / ms / 1e9);
    return 0;
}

int main(void)
{
    int dev = 0, sms = 0, clk = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
    printf("gpu_fp64_peak: %d SMs, %d MHz max clock\n", sms, clk / 1000);
    double *sink;
    CHECK(cudaMalloc(&sink, sizeof(double)));
    return time_mode<0>("dmma", sms, sink) || time_mode<1>("dfma", sms, sink) ||
           time_mode<2>("mixed", sms, sink) || time_mode<3>("imma", sms, sink) ||
           time_mode<4>("imma+dfma", sms, sink);
}
