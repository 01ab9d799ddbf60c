// gpu_probe.cu: asks the CUDA runtime for a usable GPU (see gpu_probe.h).
#include <cuda_runtime.h>
#include <stdio.h>

#include "gpu_probe.h"

extern "C" pg_status gpu_probe(char *name, size_t len, pg_err *err)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: %s (%s)", cudaGetErrorString(rc),
                       cudaGetErrorName(rc));
    }
    if (count == 0) return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: the driver sees no device");
    cudaDeviceProp prop;
    rc = cudaGetDeviceProperties(&prop, 0);
    if (rc != cudaSuccess)
        return pg_fail(err, PG_ERR_DEVICE, "GPU 0: cannot read its properties: %s",
                       cudaGetErrorString(rc));
    snprintf(name, len, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return PG_OK;
}
