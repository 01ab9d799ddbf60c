/*
 * gpu_probe.h: whether this process can use a CUDA GPU.
 */
#ifndef PG_GPU_PROBE_H
#define PG_GPU_PROBE_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PG_OK with the first GPU's name and compute capability in name, or
 * PG_ERR_DEVICE saying why none is usable (built without CUDA, no driver,
 * no device, driver older than the runtime). Never aborts. */
pg_status gpu_probe(char *name, size_t len, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_GPU_PROBE_H */
