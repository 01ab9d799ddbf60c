/*
 * safetensors.c: the safetensors container (see safetensors.h).
 *
 * The reader maps the file read-only, copies the header out of the mapping
 * (so cJSON always sees a NUL-terminated buffer), and validates every entry
 * and the offset layout before a single tensor is handed out. The writer
 * emits the header by hand (exact integer offsets, insertion order) and
 * streams tensor data straight from the caller's buffers into path.tmp,
 * which is renamed over path only once everything reached the disk.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes of the little-endian header length that opens every file. */
#define ST_LEN_BYTES 8
/* The writer starts the data buffer at a multiple of this many bytes, as the
 * reference writer does, so that no element of up to 8 bytes is misaligned. */
#define ST_DATA_ALIGN 8
/* Largest integer accepted from the header: cJSON holds numbers as doubles,
 * which represent every integer up to 2^53 - 1 exactly. */
#define ST_JSON_INT_MAX ((((int64_t)1) << 53) - 1)
/* The reserved header key of the string-to-string metadata map. */
#define ST_META_KEY "__metadata__"
/* Suffix of the temporary file that st_writer_write renames over the target. */
#define ST_TMP_SUFFIX ".tmp"
/* Most bytes handed to one fwrite call when streaming tensor data. */
#define ST_WRITE_CHUNK ((size_t)64 << 20)
/* Room for a formatted shape such as "[4, 8, 2]" in an error message. */
#define ST_SHAPE_STR_MAX 200

/* ------------------------------------------------------------------------ */
/* dtypes                                                                   */
/* ------------------------------------------------------------------------ */

/* Spelling and element size of each dtype, indexed by st_dtype. */
static const struct {
    const char *name;
    size_t size;
} k_dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},         [ST_U8] = {"U8", 1},
    [ST_I8] = {"I8", 1},             [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1},   [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},           [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},         [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},           [ST_F32] = {"F32", 4},
    [ST_I64] = {"I64", 8},           [ST_U64] = {"U64", 8},
    [ST_F64] = {"F64", 8},
};

/* True when dtype is one of the enumerators that name a real type. */
static bool dtype_valid(st_dtype dtype)
{
    return (int)dtype >= 0 && dtype < ST_DTYPE_COUNT;
}

size_t st_dtype_size(st_dtype dtype)
{
    return dtype_valid(dtype) ? k_dtypes[dtype].size : 0;
}

const char *st_dtype_name(st_dtype dtype)
{
    return dtype_valid(dtype) ? k_dtypes[dtype].name : "INVALID";
}

pg_status st_dtype_parse(const char *what, const char *name, st_dtype *out, pg_err *err)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (name != NULL && strcmp(name, k_dtypes[i].name) == 0) {
            *out = (st_dtype)i;
            return PG_OK;
        }
    }
    return pg_fail(err, PG_ERR_FORMAT, "%s: dtype '%s' is unknown", what,
                   name != NULL ? name : "");
}

/* ------------------------------------------------------------------------ */
/* small shared helpers                                                     */
/* ------------------------------------------------------------------------ */

void st_shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n >= 0 && (used += (size_t)n) < size; i++)
        n = snprintf(buf + used, size - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n >= 0 && (used += (size_t)n) < size) snprintf(buf + used, size - used, "]");
}

/* Element count of shape (1 for ndim 0, 0 when any dimension is 0) in *numel;
 * false when it overflows int64. */
static bool shape_numel(int ndim, const int64_t *shape, int64_t *numel)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            *numel = 0;
            return true;
        }
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n)) return false;
    *numel = n;
    return true;
}

/* Byte size of numel elements of dtype in *nbytes; false on overflow of size_t. */
static bool numel_bytes(int64_t numel, st_dtype dtype, size_t *nbytes)
{
    return !__builtin_mul_overflow((uint64_t)numel, (uint64_t)st_dtype_size(dtype), nbytes);
}

/* qsort comparator for an array of C strings. */
static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice among n names (sorted in place), or NULL. */
static const char *find_duplicate(const char **names, size_t n)
{
    if (n < 2) return NULL;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* reader                                                                   */
/* ------------------------------------------------------------------------ */

/* A tensor's byte range in the data buffer while the header is validated. */
typedef struct st_span {
    uint64_t begin, end;
    int index; /* into the parse-order tensor array */
} st_span;

/* Orders spans by begin, then end, then parse order (deterministic). */
static int cmp_span(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* True when x is a JSON integer in [0, ST_JSON_INT_MAX]; stores it in *out. */
static bool json_uint(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsNumber(x)) return false;
    double v = x->valuedouble;
    if (!isfinite(v) || v < 0 || v > (double)ST_JSON_INT_MAX || floor(v) != v) return false;
    *out = (uint64_t)v;
    return true;
}

/* Describes a JSON value that failed validation, for error messages. */
static const char *json_kind(const cJSON *x)
{
    if (cJSON_IsNumber(x)) return "a number";
    if (cJSON_IsString(x)) return "a string";
    if (cJSON_IsArray(x)) return "an array";
    if (cJSON_IsObject(x)) return "an object";
    if (cJSON_IsBool(x)) return "a boolean";
    if (cJSON_IsNull(x)) return "null";
    return "missing";
}

/* Validates one header entry (dtype, shape, data_offsets and their byte size)
 * and fills t (name left to the caller) and span's begin/end. */
static pg_status parse_entry(const char *path, const cJSON *item, st_tensor *t,
                             st_span *span, pg_err *err)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s': entry is %s, expected an object",
                       path, name, json_kind(item));

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dtype))
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s': dtype is %s, expected a string",
                       path, name, json_kind(dtype));
    char what[PG_ERR_MSG_MAX];
    snprintf(what, sizeof what, "%s: tensor '%s'", path, name);
    if (st_dtype_parse(what, dtype->valuestring, &t->dtype, err) != PG_OK) return err->code;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape))
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s': shape is %s, expected an array",
                       path, name, json_kind(shape));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': shape has %d dimensions, at most %d are supported",
                       path, name, ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    int i = 0;
    for (const cJSON *d = shape->child; d != NULL; d = d->next, i++) {
        uint64_t v;
        if (!json_uint(d, &v)) {
            if (cJSON_IsNumber(d))
                return pg_fail(err, PG_ERR_FORMAT,
                               "%s: tensor '%s': shape[%d] is %g, expected a non-negative integer",
                               path, name, i, d->valuedouble);
            return pg_fail(err, PG_ERR_FORMAT,
                           "%s: tensor '%s': shape[%d] is %s, expected a non-negative integer",
                           path, name, i, json_kind(d));
        }
        t->shape[i] = (int64_t)v;
    }
    char shape_str[ST_SHAPE_STR_MAX];
    st_shape_str(shape_str, sizeof shape_str, t->ndim, t->shape);
    if (!shape_numel(t->ndim, t->shape, &t->numel) || !numel_bytes(t->numel, t->dtype, &t->nbytes))
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s': shape %s has too many elements",
                       path, name, shape_str);

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets is %s, expected an array [begin, end]",
                       path, name, cJSON_IsArray(offs) ? "an array of the wrong length"
                                                      : json_kind(offs));
    if (!json_uint(offs->child, &span->begin) || !json_uint(offs->child->next, &span->end))
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets must be two non-negative integers",
                       path, name);
    if (span->begin > span->end)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                       path, name, span->begin, span->end);
    if (span->end - span->begin != (uint64_t)t->nbytes)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] give %" PRIu64
                       " bytes, but %s %s needs %zu",
                       path, name, span->begin, span->end, span->end - span->begin,
                       st_dtype_name(t->dtype), shape_str, t->nbytes);
    return PG_OK;
}

/* Copies __metadata__ (an object of strings) into f->meta. */
static pg_status parse_metadata(const char *path, const cJSON *meta, st_file *f, pg_err *err)
{
    if (!cJSON_IsObject(meta))
        return pg_fail(err, PG_ERR_FORMAT, "%s: %s is %s, expected an object of strings", path,
                       ST_META_KEY, json_kind(meta));
    int n = cJSON_GetArraySize(meta);
    f->meta = calloc(n > 0 ? (size_t)n : 1, sizeof *f->meta);
    const char **keys = calloc(n > 0 ? (size_t)n : 1, sizeof *keys);
    if (f->meta == NULL || keys == NULL) {
        free(keys);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading %s", path, ST_META_KEY);
    }
    pg_status st = PG_OK;
    for (const cJSON *e = meta->child; e != NULL && st == PG_OK; e = e->next) {
        if (!cJSON_IsString(e)) {
            st = pg_fail(err, PG_ERR_FORMAT, "%s: %s '%s': value is %s, expected a string", path,
                         ST_META_KEY, e->string, json_kind(e));
            break;
        }
        st_meta *m = &f->meta[f->n_meta];
        m->key = strdup(e->string);
        m->value = strdup(e->valuestring);
        keys[f->n_meta++] = e->string;
        if (m->key == NULL || m->value == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading %s", path, ST_META_KEY);
    }
    const char *dup = st == PG_OK ? find_duplicate(keys, (size_t)f->n_meta) : NULL;
    if (dup != NULL)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: %s key '%s' appears twice", path, ST_META_KEY, dup);
    free(keys);
    return st;
}

/* Checks that the sorted spans tile [0, data_len) exactly: the first begins
 * at 0, each begins where the previous ended, the last ends at data_len. */
static pg_status check_layout(const char *path, const st_span *spans, int n,
                              const st_tensor *parsed, uint64_t data_len, pg_err *err)
{
    uint64_t expected = 0;
    for (int i = 0; i < n; i++) {
        const st_span *s = &spans[i];
        const char *name = parsed[s->index].name;
        if (i == 0 && s->begin != 0)
            return pg_fail(err, PG_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets begin at %" PRIu64
                           ", expected 0 (a hole at the start of the data buffer)",
                           path, name, s->begin);
        if (i > 0 && s->begin < expected)
            return pg_fail(err, PG_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                           path, name, s->begin, s->end, parsed[spans[i - 1].index].name,
                           spans[i - 1].begin, spans[i - 1].end);
        if (i > 0 && s->begin > expected)
            return pg_fail(err, PG_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets begin at %" PRIu64
                           ", leaving a hole of %" PRIu64 " bytes after tensor '%s' (ends at %" PRIu64 ")",
                           path, name, s->begin, s->begin - expected,
                           parsed[spans[i - 1].index].name, expected);
        expected = s->end;
    }
    if (n == 0 && data_len != 0)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: no tensors, but the data buffer holds %" PRIu64 " bytes", path, data_len);
    if (n > 0 && expected > data_len)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets end at %" PRIu64
                       ", past the end of the data buffer (%" PRIu64 " bytes; file truncated?)",
                       path, parsed[spans[n - 1].index].name, expected, data_len);
    if (n > 0 && expected < data_len)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets end at %" PRIu64
                       ", but the data buffer holds %" PRIu64 " bytes (%" PRIu64 " unaccounted for)",
                       path, parsed[spans[n - 1].index].name, expected, data_len,
                       data_len - expected);
    return PG_OK;
}

/* Frees the names of n parse-order tensors and the array itself. */
static void free_tensor_array(st_tensor *t, int n)
{
    if (t == NULL) return;
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* Validates the parsed header object root and fills f's tensors (in data
 * order, pointing into the mapping at data) and metadata. */
static pg_status parse_header(const char *path, const cJSON *root, const unsigned char *data,
                              uint64_t data_len, st_file *f, pg_err *err)
{
    int n_items = cJSON_GetArraySize(root);
    size_t cap = n_items > 0 ? (size_t)n_items : 1;
    st_tensor *parsed = calloc(cap, sizeof *parsed);
    st_span *spans = calloc(cap, sizeof *spans);
    const char **names = calloc(cap, sizeof *names);
    int n = 0, n_names = 0;
    pg_status st = PG_OK;
    if (parsed == NULL || spans == NULL || names == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading the header", path);

    const cJSON *meta = NULL;
    for (const cJSON *item = root->child; item != NULL && st == PG_OK; item = item->next) {
        names[n_names++] = item->string;
        if (strcmp(item->string, ST_META_KEY) == 0) {
            meta = meta == NULL ? item : meta; /* a second one is reported as a duplicate */
            continue;
        }
        st_tensor *t = &parsed[n];
        t->name = strdup(item->string);
        if (t->name == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading the header", path);
            break;
        }
        spans[n].index = n;
        n++;
        st = parse_entry(path, item, t, &spans[n - 1], err);
    }
    const char *dup = st == PG_OK ? find_duplicate(names, (size_t)n_names) : NULL;
    if (dup != NULL)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path, dup);
    if (st == PG_OK && meta != NULL) st = parse_metadata(path, meta, f, err);
    if (st == PG_OK) {
        qsort(spans, (size_t)n, sizeof *spans, cmp_span);
        st = check_layout(path, spans, n, parsed, data_len, err);
    }
    if (st == PG_OK) {
        f->tensors = calloc(cap, sizeof *f->tensors);
        if (f->tensors == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading the header", path);
    }
    if (st == PG_OK) {
        for (int i = 0; i < n; i++) {
            f->tensors[i] = parsed[spans[i].index];
            f->tensors[i].data = data + spans[i].begin;
            parsed[spans[i].index].name = NULL; /* moved */
        }
        f->n_tensors = n;
    }
    free_tensor_array(parsed, n);
    free(spans);
    free(names);
    return st;
}

/* True for the bytes JSON counts as whitespace (the header's padding). */
static bool json_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses the n header bytes at hdr as one JSON object followed only by
 * whitespace; *out owns the tree on success. */
static pg_status parse_json_header(const char *path, const unsigned char *hdr, uint64_t n,
                                   cJSON **out, pg_err *err)
{
    char *text = malloc((size_t)n + 1);
    if (text == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header",
                       path, n);
    memcpy(text, hdr, (size_t)n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    pg_status st = PG_OK;
    if (root == NULL) {
        st = pg_fail(err, PG_ERR_FORMAT, "%s: header is not valid JSON (error at byte %td of %" PRIu64 ")",
                     path, end != NULL ? end - text : 0, n);
    } else if (!cJSON_IsObject(root)) {
        st = pg_fail(err, PG_ERR_FORMAT, "%s: header is %s, expected a JSON object", path,
                     json_kind(root));
    } else {
        for (const char *p = end; p < text + n; p++) {
            if (!json_space((unsigned char)*p)) {
                st = pg_fail(err, PG_ERR_FORMAT,
                             "%s: header has non-whitespace after the JSON object (byte %td of %" PRIu64 ")",
                             path, p - text, n);
                break;
            }
        }
    }
    free(text);
    if (st != PG_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return PG_OK;
}

/* Decodes the 8-byte little-endian header length at p. */
static uint64_t load_u64_le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = ST_LEN_BYTES - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Opens path and maps it read-only into f->map / f->map_len. */
static pg_status map_file(const char *path, st_file *f, pg_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) return pg_fail(err, PG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    pg_status st = PG_OK;
    if (fstat(fd, &sb) != 0)
        st = pg_fail(err, PG_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = pg_fail(err, PG_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size < ST_LEN_BYTES)
        st = pg_fail(err, PG_ERR_FORMAT,
                     "%s: file is %jd bytes, shorter than the %d-byte header length (truncated?)",
                     path, (intmax_t)sb.st_size, ST_LEN_BYTES);
    if (st == PG_OK) {
        /* Shared, not private: nothing writes through it either way, and the
         * GPU backend page-locks a layer's span of it, which on the H200
         * machine (2026-12-02) never returned for a private mapping and took
         * 4.4 ms per 84 MB for a shared one. */
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            st = pg_fail(err, PG_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        } else {
            f->map = map;
            f->map_len = (size_t)sb.st_size;
            /* Every byte is read once front to back (validation, then the sweep):
             * ask for read-ahead; advice only, so its result is not an error. */
            (void)madvise(map, f->map_len, MADV_SEQUENTIAL);
            (void)madvise(map, f->map_len, MADV_WILLNEED);
        }
    }
    close(fd);
    return st;
}

pg_status st_open(const char *path, st_file **out, pg_err *err)
{
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    }
    pg_status st = map_file(path, f, err);
    const unsigned char *base = f->map;
    uint64_t n = st == PG_OK ? load_u64_le(base) : 0;
    if (st == PG_OK && n > ST_HEADER_MAX)
        st = pg_fail(err, PG_ERR_FORMAT,
                     "%s: header length %" PRIu64 " exceeds the %" PRIu64 "-byte limit", path, n,
                     ST_HEADER_MAX);
    if (st == PG_OK && n > f->map_len - ST_LEN_BYTES)
        st = pg_fail(err, PG_ERR_FORMAT,
                     "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes; truncated?)",
                     path, n, f->map_len);
    cJSON *root = NULL;
    if (st == PG_OK) st = parse_json_header(path, base + ST_LEN_BYTES, n, &root, err);
    if (st == PG_OK)
        st = parse_header(path, root, base + ST_LEN_BYTES + n,
                          (uint64_t)f->map_len - ST_LEN_BYTES - n, f, err);
    cJSON_Delete(root);
    if (st != PG_OK) {
        st_close(f);
        return st;
    }
    *out = f;
    return PG_OK;
}

void st_close(st_file *f)
{
    if (f == NULL) return;
    if (f->map != NULL) munmap(f->map, f->map_len);
    free_tensor_array(f->tensors, f->n_tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    free(f->path);
    free(f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta_get(const st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* writer                                                                   */
/* ------------------------------------------------------------------------ */

/* A tensor queued for writing; data is the caller's. */
typedef struct st_wtensor {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
} st_wtensor;

/* Tensors (referencing the caller's data) and metadata, in insertion order. */
struct st_writer {
    st_wtensor *tensors;
    int n_tensors, cap_tensors;
    st_meta *meta;
    int n_meta, cap_meta;
};

/* Grows *arr (of elem bytes each, capacity *cap) to hold at least need. */
static bool grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int new_cap = *cap > 0 ? *cap * 2 : 8;
    if (new_cap < need) new_cap = need;
    void *p = realloc(*arr, (size_t)new_cap * elem);
    if (p == NULL) return false;
    *arr = p;
    *cap = new_cap;
    return true;
}

pg_status st_writer_create(st_writer **out, pg_err *err)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL) return pg_fail(err, PG_ERR_NOMEM, "safetensors writer: out of memory");
    return PG_OK;
}

pg_status st_writer_add_meta(st_writer *w, const char *key, const char *value, pg_err *err)
{
    char *v = strdup(value);
    if (v == NULL) return pg_fail(err, PG_ERR_NOMEM, "safetensors writer: out of memory");
    for (int i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            free(w->meta[i].value);
            w->meta[i].value = v;
            return PG_OK;
        }
    }
    char *k = strdup(key);
    if (k == NULL || !grow((void **)&w->meta, &w->cap_meta, w->n_meta + 1, sizeof *w->meta)) {
        free(k);
        free(v);
        return pg_fail(err, PG_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->meta[w->n_meta++] = (st_meta){.key = k, .value = v};
    return PG_OK;
}

pg_status st_writer_add_tensor(st_writer *w, const char *name, st_dtype dtype, int ndim,
                               const int64_t *shape, const void *data, pg_err *err)
{
    if (strcmp(name, ST_META_KEY) == 0)
        return pg_fail(err, PG_ERR_FORMAT, "safetensors writer: tensor name '%s' is reserved", name);
    for (int i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return pg_fail(err, PG_ERR_FORMAT, "safetensors writer: tensor '%s' added twice", name);
    if (!dtype_valid(dtype))
        return pg_fail(err, PG_ERR_FORMAT, "safetensors writer: tensor '%s': invalid dtype %d",
                       name, (int)dtype);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return pg_fail(err, PG_ERR_SHAPE,
                       "safetensors writer: tensor '%s': %d dimensions, expected 0..%d", name, ndim,
                       ST_MAX_DIMS);
    st_wtensor t = {.dtype = dtype, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || shape[i] > ST_JSON_INT_MAX)
            return pg_fail(err, PG_ERR_SHAPE,
                           "safetensors writer: tensor '%s': shape[%d] is %" PRId64, name, i,
                           shape[i]);
        t.shape[i] = shape[i];
    }
    int64_t numel;
    if (!shape_numel(ndim, shape, &numel) || !numel_bytes(numel, dtype, &t.nbytes))
        return pg_fail(err, PG_ERR_SHAPE, "safetensors writer: tensor '%s': too many elements",
                       name);
    if (t.nbytes > 0 && data == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "safetensors writer: tensor '%s': NULL data", name);
    t.name = strdup(name);
    if (t.name == NULL ||
        !grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof *w->tensors)) {
        free(t.name);
        return pg_fail(err, PG_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->tensors[w->n_tensors++] = t;
    return PG_OK;
}

void st_writer_free(st_writer *w)
{
    if (w == NULL) return;
    for (int i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->meta);
    free(w);
}

/* A growable text buffer; oom latches the first allocation failure. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

/* Appends n bytes of s. */
static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Appends a printf-formatted string. */
static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true; /* only short numeric fragments are formatted this way */
        return;
    }
    sb_put(b, tmp, (size_t)n);
}

/* Appends s as a quoted JSON string (quotes, backslashes and control bytes escaped). */
static void sb_json_string(strbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            sb_printf(b, "\\u%04x", *p);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Builds the header: __metadata__ first, tensors in insertion order with
 * contiguous offsets, padded with spaces so that 8 + length is a multiple of
 * ST_DATA_ALIGN. */
static bool build_header(const st_writer *w, strbuf *b)
{
    sb_put(b, "{", 1);
    bool first = true;
    if (w->n_meta > 0) {
        sb_json_string(b, ST_META_KEY);
        sb_put(b, ":{", 2);
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_put(b, ",", 1);
            sb_json_string(b, w->meta[i].key);
            sb_put(b, ":", 1);
            sb_json_string(b, w->meta[i].value);
        }
        sb_put(b, "}", 1);
        first = false;
    }
    uint64_t offset = 0;
    for (int i = 0; i < w->n_tensors; i++) {
        const st_wtensor *t = &w->tensors[i];
        if (!first) sb_put(b, ",", 1);
        first = false;
        sb_json_string(b, t->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(b, "%s%" PRId64, d ? "," : "", t->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%" PRIu64 ",", offset);
        offset += t->nbytes;
        sb_printf(b, "%" PRIu64 "]}", offset);
    }
    sb_put(b, "}", 1);
    while (!b->oom && (ST_LEN_BYTES + b->len) % ST_DATA_ALIGN != 0) sb_put(b, " ", 1);
    return !b->oom;
}

/* Writes n bytes from p to f in chunks of at most ST_WRITE_CHUNK. */
static bool write_all(FILE *f, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        size_t k = n < ST_WRITE_CHUNK ? n : ST_WRITE_CHUNK;
        if (fwrite(c, 1, k, f) != k) return false;
        c += k;
        n -= k;
    }
    return true;
}

/* Writes the length, header and every tensor's bytes to f, then flushes and
 * syncs it; false with errno set on failure. */
static bool write_body(FILE *f, const st_writer *w, const strbuf *hdr)
{
    unsigned char len_le[ST_LEN_BYTES];
    uint64_t n = hdr->len;
    for (int i = 0; i < ST_LEN_BYTES; i++) len_le[i] = (unsigned char)(n >> (8 * i));
    if (!write_all(f, len_le, sizeof len_le) || !write_all(f, hdr->p, hdr->len)) return false;
    for (int i = 0; i < w->n_tensors; i++)
        if (!write_all(f, w->tensors[i].data, w->tensors[i].nbytes)) return false;
    return fflush(f) == 0 && fsync(fileno(f)) == 0;
}

pg_status st_writer_write(st_writer *w, const char *path, pg_err *err)
{
    strbuf hdr = {0};
    if (!build_header(w, &hdr)) {
        free(hdr.p);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    if (hdr.len > ST_HEADER_MAX) {
        free(hdr.p);
        return pg_fail(err, PG_ERR_FORMAT, "%s: header of %zu bytes exceeds the %" PRIu64
                       "-byte limit", path, hdr.len, ST_HEADER_MAX);
    }
    size_t tmp_len = strlen(path) + sizeof ST_TMP_SUFFIX;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        free(hdr.p);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, tmp_len, "%s%s", path, ST_TMP_SUFFIX);

    pg_status st = PG_OK;
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        st = pg_fail(err, PG_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    } else {
        bool ok = write_body(f, w, &hdr);
        int saved = errno;
        if (fclose(f) != 0 && ok) {
            ok = false;
            saved = errno;
        }
        if (!ok)
            st = pg_fail(err, PG_ERR_IO, "%s: cannot write %s: %s", path, tmp, strerror(saved));
        else if (rename(tmp, path) != 0)
            st = pg_fail(err, PG_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp,
                         strerror(errno));
        if (st != PG_OK) unlink(tmp);
    }
    free(tmp);
    free(hdr.p);
    return st;
}
