/*
 * safetensors.h: reading and writing the safetensors container.
 *
 * Layout (https://huggingface.co/docs/safetensors, format section): an
 * 8-byte little-endian header length N, N bytes of JSON (an object mapping
 * tensor names to {"dtype","shape","data_offsets":[begin,end]} plus an
 * optional "__metadata__" string-to-string map), then the data buffer that
 * the offsets index, relative to its start, with no holes and no overlaps.
 *
 * The reader maps the file read-only and validates every field before it
 * hands anything out; a failure names the file, the tensor and the field.
 */
#ifndef PG_SAFETENSORS_H
#define PG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Largest header accepted, as in the reference implementation (100 MB). */
#define ST_HEADER_MAX ((uint64_t)100 * 1000 * 1000)
/* Most dimensions a tensor may have. */
#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2, ST_I16, ST_U16, ST_F16,
    ST_BF16, ST_I32, ST_U32, ST_F32, ST_I64, ST_U64, ST_F64, ST_DTYPE_COUNT
} st_dtype;

/* One tensor of an open file. data points into the mapping (not necessarily
 * aligned to the element size: copy before typed access when unaligned). */
typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data;
} st_tensor;

/* One __metadata__ entry. */
typedef struct st_meta {
    char *key;
    char *value;
} st_meta;

/* An open, validated file. Tensors are in data-offset order. */
typedef struct st_file {
    char *path;
    void *map;
    size_t map_len;
    int n_tensors;
    st_tensor *tensors;
    int n_meta;
    st_meta *meta;
} st_file;

/* Maps and validates the file at path; on success *out owns the mapping. */
pg_status st_open(const char *path, st_file **out, pg_err *err);

/* Unmaps and frees f; NULL is a no-op. */
void st_close(st_file *f);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/* The metadata value for key, or NULL. */
const char *st_meta_get(const st_file *f, const char *key);

/* Bytes per element of dtype. */
size_t st_dtype_size(st_dtype dtype);

/* The format's spelling of dtype ("BF16", "F8_E4M3", ...). */
const char *st_dtype_name(st_dtype dtype);

/* Parses a dtype string into *out; PG_ERR_FORMAT "WHAT: dtype 'NAME' is
 * unknown" when it is none (NULL included). */
pg_status st_dtype_parse(const char *what, const char *name, st_dtype *out, pg_err *err);

/* Writes shape as "[d0, d1, ...]" into buf (truncated to size, always terminated). */
void st_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* A file being assembled; tensors are referenced, not copied, until written. */
typedef struct st_writer st_writer;

/* A new empty writer. */
pg_status st_writer_create(st_writer **out, pg_err *err);

/* Adds (or replaces) a __metadata__ entry; both strings are copied. */
pg_status st_writer_add_meta(st_writer *w, const char *key, const char *value, pg_err *err);

/* Adds a tensor; data must stay valid until st_writer_write returns. */
pg_status st_writer_add_tensor(st_writer *w, const char *name, st_dtype dtype, int ndim,
                               const int64_t *shape, const void *data, pg_err *err);

/* Writes the file to path (through path.tmp and a rename, so a reader never
 * sees a half-written file). */
pg_status st_writer_write(st_writer *w, const char *path, pg_err *err);

/* Frees w; NULL is a no-op. */
void st_writer_free(st_writer *w);

#endif /* PG_SAFETENSORS_H */
