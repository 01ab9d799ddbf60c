/* test_safetensors.c: the safetensors writer and the validating reader. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/capture/safetensors.h"
#include "testutil.h"

/* Bytes of the little-endian header length at the start of a file. */
#define LEN_BYTES 8
/* The writer's data alignment. */
#define DATA_ALIGN 8



/* Writes a file of: len_field (u64 LE), hdr_bytes bytes of hdr, then
 * data_len bytes of a counting pattern. */
static void write_raw(const char *path, uint64_t len_field, const char *hdr, size_t hdr_bytes,
                      size_t data_len)
{
    size_t total = LEN_BYTES + hdr_bytes + data_len;
    unsigned char *buf = malloc(total + 1);
    cr_assert_not_null(buf);
    for (int i = 0; i < LEN_BYTES; i++) buf[i] = (unsigned char)(len_field >> (8 * i));
    memcpy(buf + LEN_BYTES, hdr, hdr_bytes);
    for (size_t i = 0; i < data_len; i++) buf[LEN_BYTES + hdr_bytes + i] = (unsigned char)i;
    tu_write_file(path, buf, total);
    free(buf);
}

/* Writes a well-framed file with header text hdr and data_len data bytes. */
static void write_st(const char *path, const char *hdr, size_t data_len)
{
    write_raw(path, strlen(hdr), hdr, strlen(hdr), data_len);
}

/* Opens path expecting failure with code and a message holding every
 * non-NULL substring s1..s3. */
static void expect_fail(const char *path, pg_status code, const char *s1, const char *s2,
                        const char *s3)
{
    pg_err err = {0};
    st_file *f = (st_file *)1;
    pg_status st = st_open(path, &f, &err);
    cr_assert_eq(st, code, "status %d (%s), expected %d; message: %s", st, pg_status_str(st), code,
                 err.msg);
    cr_assert_eq(err.code, code);
    cr_assert_null(f, "no file is returned on failure");
    cr_log_info("%s", err.msg);
    const char *subs[] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        if (subs[i] != NULL)
            cr_assert(strstr(err.msg, subs[i]) != NULL, "message \"%s\" lacks \"%s\"", err.msg,
                      subs[i]);
}

/* Builds a file from hdr/data_len in a fresh directory and expects failure. */
static void expect_header_fail(const char *hdr, size_t data_len, pg_status code, const char *s1,
                               const char *s2, const char *s3)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "bad.safetensors");
    write_st(path, hdr, data_len);
    expect_fail(path, code, "bad.safetensors", s1, s2);
    if (s3 != NULL) expect_fail(path, code, s3, NULL, NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Opens path expecting success. */
static st_file *open_ok(const char *path)
{
    pg_err err = {0};
    st_file *f = NULL;
    pg_status st = st_open(path, &f, &err);
    cr_assert_eq(st, PG_OK, "st_open failed: %s", err.msg);
    cr_assert_not_null(f);
    return f;
}

/* ---------------------------------------------------------------- dtypes */

Test(safetensors, dtype_table_round_trips)
{
    static const size_t sizes[ST_DTYPE_COUNT] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        st_dtype d;
        cr_assert_eq(st_dtype_parse("t", st_dtype_name((st_dtype)i), &d, NULL), PG_OK);
        cr_assert_eq(d, (st_dtype)i);
        cr_assert_eq(st_dtype_size((st_dtype)i), sizes[i], "size of %s", st_dtype_name(d));
    }
    st_dtype d;
    cr_assert_eq(st_dtype_parse("t", "bf16", &d, NULL), PG_ERR_FORMAT,
                 "dtype names are case-sensitive");
    pg_err err = {0};
    cr_assert_eq(st_dtype_parse("t", "F99", &d, &err), PG_ERR_FORMAT);
    cr_assert_str_eq(err.msg, "t: dtype 'F99' is unknown");
    cr_assert_str_eq(st_dtype_name(ST_F8_E4M3), "F8_E4M3");
}

/* ------------------------------------------------------------ round trip */

Test(safetensors, writer_reader_round_trip)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "rt.safetensors");

    const uint16_t a[6] = {0x3F80, 0x4000, 0xBF80, 0x0000, 0x7F7F, 0x0001};
    const uint8_t b[3] = {1, 2, 255};            /* odd byte count: c lands unaligned */
    const float c[4] = {1.5f, -2.25f, 0.0f, 3e38f};
    const int64_t scalar[1] = {-42};
    const double d[1] = {3.141592653589793};
    const int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[2] = {2, 2}, se[2] = {0, 4}, sd[1] = {1};

    st_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "a", ST_BF16, 2, sa, a, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_tensor(w, "b", ST_U8, 1, sb, b, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_tensor(w, "c", ST_F32, 2, sc, c, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_tensor(w, "empty", ST_F32, 2, se, NULL, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_tensor(w, "scalar", ST_I64, 0, NULL, scalar, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(st_writer_add_tensor(w, "d", ST_F64, 1, sd, d, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_meta(w, "format", "old", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "note", "say \"hi\"\\\n\ttab", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "format", "new", &err), PG_OK, "add_meta replaces");
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK, "%s", err.msg);
    st_writer_free(w);

    char *tmp = tu_join(dir, "rt.safetensors.tmp");
    cr_assert_neq(access(tmp, F_OK), 0, "the temporary file is renamed away");
    free(tmp);

    st_file *f = open_ok(path);
    cr_assert_str_eq(f->path, path);
    cr_assert_eq(f->n_tensors, 6);
    static const char *const order[] = {"a", "b", "c", "empty", "scalar", "d"};
    for (int i = 0; i < 6; i++) cr_assert_str_eq(f->tensors[i].name, order[i], "tensor %d", i);

    const struct {
        const char *name;
        st_dtype dtype;
        int ndim;
        const int64_t *shape;
        int64_t numel;
        const void *data;
    } want[] = {
        {"a", ST_BF16, 2, sa, 6, a},       {"b", ST_U8, 1, sb, 3, b},
        {"c", ST_F32, 2, sc, 4, c},        {"empty", ST_F32, 2, se, 0, NULL},
        {"scalar", ST_I64, 0, NULL, 1, scalar}, {"d", ST_F64, 1, sd, 1, d},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_tensor *t = st_find(f, want[i].name);
        cr_assert_not_null(t, "tensor %s", want[i].name);
        cr_assert_eq(t->dtype, want[i].dtype, "%s dtype", want[i].name);
        cr_assert_eq(t->ndim, want[i].ndim, "%s ndim", want[i].name);
        for (int k = 0; k < t->ndim; k++) cr_assert_eq(t->shape[k], want[i].shape[k]);
        cr_assert_eq(t->numel, want[i].numel, "%s numel", want[i].name);
        cr_assert_eq(t->nbytes, (size_t)want[i].numel * st_dtype_size(want[i].dtype));
        if (t->nbytes) cr_assert_eq(memcmp(t->data, want[i].data, t->nbytes), 0, "%s bytes", t->name);
    }
    cr_assert_null(st_find(f, "nope"));
    cr_assert_eq(f->n_meta, 2);
    cr_assert_str_eq(st_meta_get(f, "format"), "new");
    cr_assert_str_eq(st_meta_get(f, "note"), "say \"hi\"\\\n\ttab");
    cr_assert_null(st_meta_get(f, "missing"));

    /* The data buffer starts at a multiple of 8, after space padding. */
    const unsigned char *m = f->map;
    uint64_t n = 0;
    for (int i = LEN_BYTES - 1; i >= 0; i--) n = (n << 8) | m[i];
    cr_assert_eq((LEN_BYTES + n) % DATA_ALIGN, 0, "data starts at %" PRIu64, LEN_BYTES + n);
    cr_assert_eq((const unsigned char *)f->tensors[0].data, m + LEN_BYTES + n);
    cr_assert_eq(m[LEN_BYTES], '{', "metadata comes first");
    cr_assert(memcmp(m + LEN_BYTES, "{\"__metadata__\"", 15) == 0);
    st_close(f);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, writer_empty_file_round_trip)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "empty.safetensors");
    st_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    st_file *f = open_ok(path);
    cr_assert_eq(f->n_tensors, 0);
    cr_assert_eq(f->n_meta, 0);
    st_close(f);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, writer_rejects_duplicate_and_reserved_names)
{
    st_writer *w = NULL;
    pg_err err = {0};
    const int64_t shape[1] = {1};
    const uint8_t x[1] = {0};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "x", ST_U8, 1, shape, x, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "x", ST_U8, 1, shape, x, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "'x' added twice") != NULL, "%s", err.msg);
    pg_err_clear(&err);
    cr_assert_eq(st_writer_add_tensor(w, "__metadata__", ST_U8, 1, shape, x, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "reserved") != NULL, "%s", err.msg);
    st_writer_free(w);
}

Test(safetensors, writer_failure_names_path_and_removes_tmp)
{
    char *dir = tu_tempdir();
    const int64_t shape[1] = {4};
    const uint8_t x[4] = {1, 2, 3, 4};
    st_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "x", ST_U8, 1, shape, x, &err), PG_OK);

    /* No such directory: the tmp file cannot even be created. */
    char *missing = tu_join(dir, "no/such/dir.safetensors");
    cr_assert_eq(st_writer_write(w, missing, &err), PG_ERR_IO);
    cr_assert(strstr(err.msg, missing) != NULL, "%s", err.msg);

    /* The target is a directory: the rename fails and the tmp file goes. */
    pg_err_clear(&err);
    char *sub = tu_join(dir, "sub.safetensors");
    cr_assert_eq(mkdir(sub, 0700), 0);
    char *keep = tu_join(sub, "keep");
    tu_write_file(keep, "x", 1);
    cr_assert_eq(st_writer_write(w, sub, &err), PG_ERR_IO);
    cr_assert(strstr(err.msg, "sub.safetensors") != NULL, "%s", err.msg);
    char *tmp = tu_join(dir, "sub.safetensors.tmp");
    cr_assert_neq(access(tmp, F_OK), 0, "the tmp file is removed on failure");
    unlink(keep);
    rmdir(sub);
    st_writer_free(w);
    free(tmp);
    free(keep);
    free(sub);
    free(missing);
    tu_rmtree(dir);
    free(dir);
}

/* --------------------------------------------------------- valid variants */

Test(safetensors, padded_header_and_zero_size_tensors_load)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "pad.safetensors");
    write_st(path,
             "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
             "\"x\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
             "\"__metadata__\":{}}  \t\n ",
             3);
    st_file *f = open_ok(path);
    cr_assert_eq(f->n_tensors, 2);
    cr_assert_str_eq(f->tensors[0].name, "z", "zero-size first at equal offsets");
    cr_assert_eq(f->tensors[0].numel, 0);
    cr_assert_eq(f->tensors[1].nbytes, 3);
    cr_assert_eq(((const uint8_t *)f->tensors[1].data)[2], 2);
    st_close(f);

    write_st(path, "{}", 0);
    f = open_ok(path);
    cr_assert_eq(f->n_tensors, 0);
    st_close(f);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ---------------------------------------------------------- I/O failures */

Test(safetensors, missing_file_and_directory_are_io_errors)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "absent.safetensors");
    expect_fail(path, PG_ERR_IO, "absent.safetensors", "cannot open", NULL);
    expect_fail(dir, PG_ERR_IO, dir, "not a regular file", NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ----------------------------------------------------- framing / truncation */

Test(safetensors, truncated_shorter_than_length_field)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "short.safetensors");
    tu_write_file(path, "\x10\0\0\0\0", 5);
    expect_fail(path, PG_ERR_FORMAT, "short.safetensors", "file is 5 bytes", "8-byte");
    tu_write_file(path, "", 0);
    expect_fail(path, PG_ERR_FORMAT, "short.safetensors", "file is 0 bytes", NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, truncated_header_cut)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cut.safetensors");
    const char *hdr = "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    write_raw(path, strlen(hdr), hdr, strlen(hdr) / 2, 0); /* header cut in half */
    expect_fail(path, PG_ERR_FORMAT, "cut.safetensors", "header length", "runs past the end");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, truncated_data_cut)
{
    expect_header_fail("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10,
                       PG_ERR_FORMAT, "tensor 'x'", "data_offsets end at 16",
                       "past the end of the data buffer (10 bytes");
}

Test(safetensors, header_length_past_end)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "past.safetensors");
    write_raw(path, 1000, "{}", 2, 0);
    expect_fail(path, PG_ERR_FORMAT, "past.safetensors", "header length 1000", "runs past the end");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(safetensors, header_length_over_limit)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "huge.safetensors");
    write_raw(path, ST_HEADER_MAX + 1, "{}", 2, 0);
    expect_fail(path, PG_ERR_FORMAT, "huge.safetensors", "header length 100000001", "limit");
    write_raw(path, UINT64_MAX, "{}", 2, 0); /* must not wrap around in 8 + N */
    expect_fail(path, PG_ERR_FORMAT, "huge.safetensors", "exceeds", NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ----------------------------------------------------------------- JSON */

Test(safetensors, header_not_json)
{
    expect_header_fail("{\"x\": nope", 0, PG_ERR_FORMAT, "not valid JSON", NULL, NULL);
}

Test(safetensors, header_not_an_object)
{
    expect_header_fail("[1, 2]", 0, PG_ERR_FORMAT, "header is an array", "expected a JSON object",
                       NULL);
}

Test(safetensors, header_trailing_garbage)
{
    expect_header_fail("{}  x", 0, PG_ERR_FORMAT, "non-whitespace after the JSON object", NULL,
                       NULL);
}

/* ------------------------------------------------------------ offsets */

Test(safetensors, overlapping_offsets)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                       12, PG_ERR_FORMAT, "tensor 'b': data_offsets [4, 12]", "overlap tensor 'a' [0, 8]",
                       NULL);
}

Test(safetensors, hole_between_tensors)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
                       10, PG_ERR_FORMAT, "tensor 'b'", "hole of 2 bytes after tensor 'a'", NULL);
}

Test(safetensors, first_tensor_not_at_zero)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6,
                       PG_ERR_FORMAT, "tensor 'a'", "begin at 2, expected 0", NULL);
}

Test(safetensors, offsets_past_end)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                       6, PG_ERR_FORMAT, "tensor 'b'", "end at 8, past the end", NULL);
}

Test(safetensors, unused_bytes_after_last_tensor)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 8,
                       PG_ERR_FORMAT, "tensor 'a'", "holds 8 bytes (4 unaccounted for)", NULL);
    expect_header_fail("{}", 3, PG_ERR_FORMAT, "no tensors, but the data buffer holds 3 bytes",
                       NULL, NULL);
}

Test(safetensors, offsets_begin_after_end)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
                       PG_ERR_FORMAT, "tensor 'a'", "[4, 0] end before they begin", NULL);
}

Test(safetensors, offsets_not_integers)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,\"2\"]}}", 2,
                       PG_ERR_FORMAT, "tensor 'a'", "data_offsets must be two non-negative integers",
                       NULL);
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}}", 2,
                       PG_ERR_FORMAT, "tensor 'a'", "data_offsets is an array of the wrong length",
                       NULL);
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2]}}", 2, PG_ERR_FORMAT, "tensor 'a'",
                       "data_offsets is missing", NULL);
}

Test(safetensors, byte_size_not_numel_times_dtype_size)
{
    expect_header_fail("{\"layers.3.k\":{\"dtype\":\"BF16\",\"shape\":[4,8,2],\"data_offsets\":[0,100]}}",
                       100, PG_ERR_FORMAT,
                       "bad.safetensors: tensor 'layers.3.k': data_offsets [0, 100] give 100 bytes, "
                       "but BF16 [4, 8, 2] needs 128",
                       NULL, NULL);
}

/* -------------------------------------------------------- dtype / shape */

Test(safetensors, unknown_dtype)
{
    expect_header_fail("{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                       PG_ERR_FORMAT, "tensor 'a'", "dtype 'F99' is unknown", NULL);
    expect_header_fail("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                       PG_ERR_FORMAT, "tensor 'a'", "dtype is a number", NULL);
}

Test(safetensors, negative_shape)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2,-3],\"data_offsets\":[0,0]}}", 0,
                       PG_ERR_FORMAT, "tensor 'a'", "shape[1] is -3, expected a non-negative integer",
                       NULL);
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,0]}}", 0,
                       PG_ERR_FORMAT, "tensor 'a'", "shape[0] is 2.5", NULL);
}

Test(safetensors, too_many_dims)
{
    expect_header_fail(
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
        PG_ERR_FORMAT, "tensor 'a'", "shape has 9 dimensions, at most 8", NULL);
}

Test(safetensors, element_count_overflow)
{
    expect_header_fail("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                       "\"data_offsets\":[0,0]}}",
                       0, PG_ERR_FORMAT, "tensor 'a'", "shape [4294967296, 4294967296] has too many",
                       NULL);
}

/* -------------------------------------------------------- names / metadata */

Test(safetensors, metadata_non_string_value)
{
    expect_header_fail("{\"__metadata__\":{\"ok\":\"yes\",\"seq_q\":[1,2]}}", 0, PG_ERR_FORMAT,
                       "__metadata__ 'seq_q'", "value is an array, expected a string", NULL);
    expect_header_fail("{\"__metadata__\":\"text\"}", 0, PG_ERR_FORMAT,
                       "__metadata__ is a string, expected an object", NULL, NULL);
}

Test(safetensors, duplicate_tensor_names)
{
    expect_header_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                       2, PG_ERR_FORMAT, "tensor 'a' appears twice", NULL, NULL);
    expect_header_fail("{\"__metadata__\":{},\"__metadata__\":{}}", 0, PG_ERR_FORMAT,
                       "'__metadata__' appears twice", NULL, NULL);
    expect_header_fail("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, PG_ERR_FORMAT,
                       "__metadata__ key 'k' appears twice", NULL, NULL);
}

Test(safetensors, entry_not_an_object)
{
    expect_header_fail("{\"a\":[1,2]}", 0, PG_ERR_FORMAT, "tensor 'a'", "entry is an array", NULL);
}
