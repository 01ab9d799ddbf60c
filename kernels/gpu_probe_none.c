/* gpu_probe_none.c: gpu_probe for a build without CUDA (see gpu_probe.h). */
#include "gpu_probe.h"

#ifndef PG_HAVE_CUDA
pg_status gpu_probe(char *name, size_t len, pg_err *err)
{
    if (len > 0) name[0] = '\0';
    return pg_fail(err, PG_ERR_DEVICE, "no usable GPU: precgate was built without CUDA "
                                       "(nvcc not found or -DPRECGATE_CUDA=OFF)");
}
#else
/* Built with CUDA: gpu_probe.cu provides gpu_probe. */
typedef int gpu_probe_none_unused;
#endif
