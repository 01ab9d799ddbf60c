/* test_capture.c: loading and validating precgate capture v1 files. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/capture/capture.h"
#include "harness/capture/safetensors.h"
#include "testutil.h"

/* Most layers / metadata entries a test capture has. */
#define MAX_LAYERS 4
#define MAX_META 16
/* Bytes of the little-endian header length at the start of a file. */
#define LEN_BYTES 8
/* What a generated value depends on besides its index. */
enum { KIND_Q, KIND_K, KIND_V, KIND_SINKS, KIND_OUT };
/* Distinct multiples of 1/8 the generator cycles through (exact in bf16). */
#define VAL_PERIOD 61
#define VAL_OFFSET 30
#define VAL_DENOM 8.0f

/* The bf16 bits of x, by truncation: exact for every value gen_val makes. */
static uint16_t bf16_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (uint16_t)(b >> 16);
}

/* The float whose top half is the bf16 bits h. */
static float bf16_value(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The test value of element i of tensor kind in layer l: a multiple of 1/8
 * in [-30/8, 30/8], so exact in bf16. */
static float gen_val(int l, int kind, int64_t i)
{
    return (float)((i * 7 + l * 13 + kind * 5) % VAL_PERIOD - VAL_OFFSET) / VAL_DENOM;
}

/* One layer of a test capture. */
typedef struct layer_spec {
    int hq, hkv, d;
    bool sinks, ext;
} layer_spec;

/* A test capture and the defects to plant in it. */
typedef struct cap_spec {
    int n_layers;
    layer_spec layer[MAX_LAYERS];
    int layer_id[MAX_LAYERS];  /* the number layer i is written under */
    int tq, tkv;               /* token counts of the tensors */
    int n_meta;
    const char *meta_key[MAX_META], *meta_val[MAX_META];
    bool with_meta;            /* write __metadata__ at all */
    int lo, hi;                /* write layers lo..hi-1 */
    st_dtype q_dtype;
    int k_extra_tokens;        /* rows added to every k */
    int skip_v_layer;          /* layer written without v, or -1 */
    int bad_layer, bad_token, bad_head, bad_dim; /* NaN planted in k (bad_layer -1: none) */
    uint16_t bad_bits;
} cap_spec;

/* Sets (value != NULL), replaces or removes (value == NULL) a metadata entry. */
static void set_meta(cap_spec *s, const char *key, const char *value)
{
    for (int i = 0; i < s->n_meta; i++) {
        if (strcmp(s->meta_key[i], key) == 0) {
            if (value != NULL) {
                s->meta_val[i] = value;
            } else {
                s->meta_key[i] = s->meta_key[s->n_meta - 1];
                s->meta_val[i] = s->meta_val[--s->n_meta];
            }
            return;
        }
    }
    if (value == NULL) return;
    cr_assert_lt(s->n_meta, MAX_META);
    s->meta_key[s->n_meta] = key;
    s->meta_val[s->n_meta++] = value;
}

/* The valid reference capture: 2 layers with different GQA shapes, 2
 * sequences of 3 and 2 new tokens, the first with 2 tokens of context, sinks
 * and an external output on layer 0, windows, scales and a block size. */
static cap_spec default_spec(void)
{
    cap_spec s = {
        .n_layers = 2,
        .layer = {{.hq = 4, .hkv = 2, .d = 8, .sinks = true, .ext = true},
                  {.hq = 6, .hkv = 3, .d = 6}}, /* 1/sqrt(6) differs in float math */
        .layer_id = {0, 1},
        .tq = 5,
        .tkv = 7,
        .with_meta = true,
        .lo = 0,
        .hi = 2,
        .q_dtype = ST_BF16,
        .skip_v_layer = -1,
        .bad_layer = -1,
    };
    set_meta(&s, "format", CAPTURE_FORMAT_V1);
    set_meta(&s, "model", "tiny-test");
    set_meta(&s, "seq_q", "[3, 2]");
    set_meta(&s, "seq_kv", "[5, 2]");
    set_meta(&s, "sliding_window", "[4, 0]");
    set_meta(&s, "q_scale", "[0.5, 0.25]");
    set_meta(&s, "k_scale", "[2, 4]");
    set_meta(&s, "v_scale", "[0.125, 8e-3]");
    set_meta(&s, "block_size", "32");
    set_meta(&s, "producer", "an unknown key is allowed");
    return s;
}

/* A malloc'd array of n bf16 test values of (l, kind). */
static uint16_t *gen_bf16(int l, int kind, int64_t n)
{
    uint16_t *p = malloc((size_t)n * sizeof *p);
    cr_assert_not_null(p);
    for (int64_t i = 0; i < n; i++) p[i] = bf16_bits(gen_val(l, kind, i));
    return p;
}

/* Writes the capture s describes to path with the safetensors writer. */
static void write_capture(const char *path, const cap_spec *s)
{
    st_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    for (int i = 0; s->with_meta && i < s->n_meta; i++)
        cr_assert_eq(st_writer_add_meta(w, s->meta_key[i], s->meta_val[i], &err), PG_OK);
    void *bufs[MAX_LAYERS * 5];
    int n_bufs = 0;
    for (int i = s->lo; i < s->hi; i++) {
        const layer_spec *L = &s->layer[i];
        int id = s->layer_id[i];
        char name[64];
        int tkv = s->tkv + s->k_extra_tokens;
        const int64_t qs[3] = {s->tq, L->hq, L->d};
        const int64_t ks[3] = {tkv, L->hkv, L->d};
        const int64_t vs[3] = {s->tkv, L->hkv, L->d};
        const int64_t ss[1] = {L->hq};
        uint16_t *q = gen_bf16(id, KIND_Q, qs[0] * qs[1] * qs[2]);
        uint16_t *k = gen_bf16(id, KIND_K, ks[0] * ks[1] * ks[2]);
        uint16_t *v = gen_bf16(id, KIND_V, vs[0] * vs[1] * vs[2]);
        if (s->bad_layer == id)
            k[((int64_t)s->bad_token * L->hkv + s->bad_head) * L->d + s->bad_dim] = s->bad_bits;
        bufs[n_bufs++] = q;
        bufs[n_bufs++] = k;
        bufs[n_bufs++] = v;
        snprintf(name, sizeof name, "layers.%d.q", id);
        cr_assert_eq(st_writer_add_tensor(w, name, s->q_dtype, 3, qs, q, &err), PG_OK, "%s", err.msg);
        snprintf(name, sizeof name, "layers.%d.k", id);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, ks, k, &err), PG_OK, "%s", err.msg);
        snprintf(name, sizeof name, "layers.%d.v", id);
        if (s->skip_v_layer != id)
            cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, vs, v, &err), PG_OK, "%s", err.msg);
        if (L->sinks) {
            float *sk = malloc((size_t)L->hq * sizeof *sk);
            cr_assert_not_null(sk);
            for (int h = 0; h < L->hq; h++) sk[h] = gen_val(id, KIND_SINKS, h);
            bufs[n_bufs++] = sk;
            snprintf(name, sizeof name, "layers.%d.sinks", id);
            cr_assert_eq(st_writer_add_tensor(w, name, ST_F32, 1, ss, sk, &err), PG_OK);
        }
        if (L->ext) {
            uint16_t *o = gen_bf16(id, KIND_OUT, qs[0] * qs[1] * qs[2]);
            bufs[n_bufs++] = o;
            snprintf(name, sizeof name, "layers.%d.out.vllm-fa3", id);
            cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, qs, o, &err), PG_OK);
        }
    }
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
}



/* Opens path expecting success. */
static capture *open_ok(const char *path)
{
    pg_err err = {0};
    capture *c = NULL;
    pg_status st = capture_open(path, &c, &err);
    cr_assert_eq(st, PG_OK, "capture_open failed: %s", err.msg);
    cr_assert_not_null(c);
    return c;
}

/* Opens path expecting failure with code and a message holding every
 * non-NULL substring. */
static void expect_fail(const char *path, pg_status code, const char *s1, const char *s2,
                        const char *s3)
{
    pg_err err = {0};
    capture *c = (capture *)1;
    pg_status st = capture_open(path, &c, &err);
    cr_assert_eq(st, code, "status %d (%s), expected %d; message: %s", st, pg_status_str(st), code,
                 err.msg);
    cr_assert_eq(err.code, code);
    cr_assert_null(c, "nothing is returned on failure");
    cr_log_info("%s", err.msg);
    const char *subs[] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        if (subs[i] != NULL)
            cr_assert(strstr(err.msg, subs[i]) != NULL, "message \"%s\" lacks \"%s\"", err.msg,
                      subs[i]);
}

/* Writes s as cap.safetensors in a fresh directory and expects failure with
 * code; the message must name the file and hold s1, s2. */
static void expect_spec_fail(const cap_spec *s, pg_status code, const char *s1, const char *s2)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    write_capture(path, s);
    expect_fail(path, code, "cap.safetensors", s1, s2);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Checks that layer l of c holds spec layer l's generated values. */
static void check_layer_values(const capture *c, const cap_spec *s, int l)
{
    const capture_layer *L = &c->layers[l];
    const layer_spec *ls = &s->layer[l];
    cr_assert_eq(L->hq, ls->hq, "layer %d hq", l);
    cr_assert_eq(L->hkv, ls->hkv, "layer %d hkv", l);
    cr_assert_eq(L->d, ls->d, "layer %d d", l);
    cr_assert_eq((uintptr_t)L->q % sizeof(uint16_t), 0, "q aligned");
    cr_assert_eq((uintptr_t)L->k % sizeof(uint16_t), 0, "k aligned");
    cr_assert_eq((uintptr_t)L->v % sizeof(uint16_t), 0, "v aligned");
    for (int64_t i = 0; i < (int64_t)c->tq * ls->hq * ls->d; i++)
        cr_assert_eq(bf16_value(L->q[i]), gen_val(l, KIND_Q, i), "layer %d q[%ld]", l, (long)i);
    for (int64_t i = 0; i < (int64_t)c->tkv * ls->hkv * ls->d; i++) {
        cr_assert_eq(bf16_value(L->k[i]), gen_val(l, KIND_K, i), "layer %d k[%ld]", l, (long)i);
        cr_assert_eq(bf16_value(L->v[i]), gen_val(l, KIND_V, i), "layer %d v[%ld]", l, (long)i);
    }
    if (ls->sinks) {
        cr_assert_not_null(L->sinks);
        cr_assert_eq((uintptr_t)L->sinks % sizeof(float), 0, "sinks aligned");
        for (int h = 0; h < ls->hq; h++) cr_assert_eq(L->sinks[h], gen_val(l, KIND_SINKS, h));
    } else {
        cr_assert_null(L->sinks);
    }
    cr_assert_eq(L->n_ext, ls->ext ? 1 : 0);
    if (ls->ext) {
        cr_assert_str_eq(L->ext[0].name, "vllm-fa3");
        cr_assert_eq((uintptr_t)L->ext[0].out % sizeof(uint16_t), 0);
        for (int64_t i = 0; i < (int64_t)c->tq * ls->hq * ls->d; i++)
            cr_assert_eq(bf16_value(L->ext[0].out[i]), gen_val(l, KIND_OUT, i));
    }
}

/* Checks every sequence/metadata field that default_spec implies. */
static void check_default_fields(const capture *c, const char *path, const cap_spec *s)
{
    cr_assert_str_eq(c->path, path);
    cr_assert_str_eq(c->model, "tiny-test");
    cr_assert_eq(c->n_seqs, 2);
    cr_assert_eq(c->seq_q[0], 3);
    cr_assert_eq(c->seq_q[1], 2);
    cr_assert_eq(c->seq_kv[0], 5);
    cr_assert_eq(c->seq_kv[1], 2);
    cr_assert_eq(c->tq, 5);
    cr_assert_eq(c->tkv, 7);
    cr_assert_eq(c->block_size, 32);
    cr_assert_eq(c->n_layers, 2);
    const int window[2] = {4, 0};
    const float qs[2] = {0.5f, 0.25f}, ks[2] = {2.0f, 4.0f}, vs[2] = {0.125f, 8e-3f};
    for (int l = 0; l < 2; l++) {
        const capture_layer *L = &c->layers[l];
        cr_assert_eq(L->window, window[l], "layer %d window", l);
        cr_assert_eq(L->sm_scale, (float)(1.0 / sqrt((double)s->layer[l].d)), "layer %d sm_scale", l);
        cr_assert_eq(L->has_scales, 1);
        cr_assert_eq(L->q_scale, qs[l]);
        cr_assert_eq(L->k_scale, ks[l]);
        cr_assert_eq(L->v_scale, vs[l]);
        check_layer_values(c, s, l);
    }
}

/* ------------------------------------------------------------- valid */

Test(capture, valid_capture_loads_every_field)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    cap_spec s = default_spec();
    write_capture(path, &s);
    capture *c = open_ok(path);
    check_default_fields(c, path, &s);
    capture_close(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, defaults_when_optional_metadata_absent)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    cap_spec s = default_spec();
    static const char *const optional[] = {"model", "sliding_window", "q_scale", "k_scale",
                                           "v_scale", "block_size"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) set_meta(&s, optional[i], NULL);
    write_capture(path, &s);
    capture *c = open_ok(path);
    cr_assert_str_eq(c->model, "");
    cr_assert_eq(c->block_size, CAPTURE_DEFAULT_BLOCK_SIZE);
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(c->layers[l].window, 0);
        cr_assert_eq(c->layers[l].has_scales, 0);
        cr_assert_eq(c->layers[l].sm_scale, (float)(1.0 / sqrt((double)s.layer[l].d)));
    }
    capture_close(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, sm_scale_from_metadata_applies_to_every_layer)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    cap_spec s = default_spec();
    set_meta(&s, "sm_scale", "0.125");
    write_capture(path, &s);
    capture *c = open_ok(path);
    cr_assert_eq(c->layers[0].sm_scale, 0.125f);
    cr_assert_eq(c->layers[1].sm_scale, 0.125f);
    capture_close(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, directory_of_two_shards)
{
    char *dir = tu_tempdir();
    cap_spec s = default_spec();
    s.hi = 1; /* shard a: all metadata and layer 0 */
    char *a = tu_join(dir, "model-00001-of-00002.safetensors");
    write_capture(a, &s);
    s.lo = 1; /* shard b: layer 1 and only the keys it agrees on */
    s.hi = 2;
    cap_spec b = s;
    b.n_meta = 0;
    set_meta(&b, "seq_q", "[3, 2]");
    char *bpath = tu_join(dir, "model-00002-of-00002.safetensors");
    write_capture(bpath, &b);
    char *notes = tu_join(dir, "notes.txt");
    tu_write_file(notes, "not a shard", 11);
    char *hidden = tu_join(dir, ".partial.safetensors");
    tu_write_file(hidden, "junk", 4);

    capture *c = open_ok(dir);
    s.lo = 0;
    check_default_fields(c, dir, &s);
    capture_close(c);
    free(a);
    free(bpath);
    free(notes);
    free(hidden);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, shards_must_agree_and_not_repeat)
{
    char *dir = tu_tempdir();
    cap_spec s = default_spec();
    s.hi = 1;
    char *a = tu_join(dir, "a.safetensors");
    write_capture(a, &s);
    cap_spec b = s;
    b.lo = 1;
    b.hi = 2;
    set_meta(&b, "seq_kv", "[6, 2]");
    char *bp = tu_join(dir, "b.safetensors");
    write_capture(bp, &b);
    expect_fail(dir, PG_ERR_FORMAT, "b.safetensors: metadata 'seq_kv'", "a.safetensors has \"[5, 2]\"",
                "shards must agree");

    b = s; /* layer 0 again in the second shard */
    write_capture(bp, &b);
    expect_fail(dir, PG_ERR_FORMAT, "b.safetensors: tensor 'layers.0.q' also appears in",
                "a.safetensors", NULL);

    b.with_meta = false; /* neither shard says format */
    s.with_meta = false;
    b.lo = 1;
    b.hi = 2;
    write_capture(a, &s);
    write_capture(bp, &b);
    expect_fail(dir, PG_ERR_FORMAT, "no shard has metadata 'format'", CAPTURE_FORMAT_V1, NULL);
    free(a);
    free(bp);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, empty_directory_and_missing_path)
{
    char *dir = tu_tempdir();
    expect_fail(dir, PG_ERR_FORMAT, dir, "no *.safetensors shards", NULL);
    char *missing = tu_join(dir, "absent.safetensors");
    expect_fail(missing, PG_ERR_IO, "absent.safetensors", "cannot open", NULL);
    free(missing);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ dtypes / shapes */

Test(capture, wrong_dtype_for_q)
{
    cap_spec s = default_spec();
    s.q_dtype = ST_F16;
    expect_spec_fail(&s, PG_ERR_FORMAT, "tensor 'layers.0.q'", "dtype F16, expected BF16");
}

Test(capture, k_tokens_do_not_match_seq_kv_sum)
{
    cap_spec s = default_spec();
    s.k_extra_tokens = 1;
    expect_spec_fail(&s, PG_ERR_SHAPE, "tensor 'layers.0.k'",
                     "dimension 0 (tokens) is 8, expected 7 (sum of seq_kv)");
}

Test(capture, q_heads_not_a_multiple_of_kv_heads)
{
    cap_spec s = default_spec();
    s.layer[1].hq = 4; /* 4 % 3 != 0 */
    expect_spec_fail(&s, PG_ERR_SHAPE, "tensor 'layers.1.k': dimension 1 (kv_heads) is 3",
                     "does not divide the 4 query heads");
}

Test(capture, missing_v)
{
    cap_spec s = default_spec();
    s.skip_v_layer = 1;
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    write_capture(path, &s);
    expect_fail(path, PG_ERR_FORMAT, "cap.safetensors", "layers.1.v is missing", NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, gap_in_layer_numbers)
{
    cap_spec s = default_spec();
    s.layer_id[1] = 2;
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    write_capture(path, &s);
    expect_fail(path, PG_ERR_FORMAT, "cap.safetensors", "layer 1 has no tensors",
                "without gaps");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, unknown_tensor_name_is_rejected)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    static const char *const bad[] = {"layer.0.q", "layers.0.query", "layers.01.q", "layers.0.out.",
                                      "layers.0.out.a b", "layers.-1.q", "embed"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_writer *w = NULL;
        pg_err err = {0};
        const int64_t shape[1] = {1};
        const uint16_t x[1] = {0};
        cr_assert_eq(st_writer_create(&w, &err), PG_OK);
        cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
        cr_assert_eq(st_writer_add_meta(w, "seq_q", "[1]", &err), PG_OK);
        cr_assert_eq(st_writer_add_meta(w, "seq_kv", "[1]", &err), PG_OK);
        cr_assert_eq(st_writer_add_tensor(w, bad[i], ST_BF16, 1, shape, x, &err), PG_OK);
        cr_assert_eq(st_writer_write(w, path, &err), PG_OK);
        st_writer_free(w);
        char want[96];
        snprintf(want, sizeof want, "tensor '%s': name is not layers.L", bad[i]);
        expect_fail(path, PG_ERR_FORMAT, "cap.safetensors", want, NULL);
    }
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ metadata */

Test(capture, seq_q_not_valid_json)
{
    cap_spec s = default_spec();
    set_meta(&s, "seq_q", "[1,2");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_q' is not valid JSON (\"[1,2\")",
                     "expected a non-empty JSON array of integers");
}

Test(capture, seq_q_and_seq_kv_lengths_differ)
{
    cap_spec s = default_spec();
    set_meta(&s, "seq_kv", "[5, 2, 1]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_kv' has 3 entries, expected 2", NULL);
}

Test(capture, seq_kv_less_than_seq_q)
{
    cap_spec s = default_spec();
    set_meta(&s, "seq_kv", "[2, 2]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_kv'[0] is 2",
                     "expected at least seq_q[0] = 3");
}

Test(capture, seq_q_entries_must_be_positive_integers)
{
    cap_spec s = default_spec();
    set_meta(&s, "seq_q", "[3, 0]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_q'[1] is 0", "expected an integer in [1,");
    set_meta(&s, "seq_q", "[3, 1.5]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_q'[1] is 1.5", NULL);
    set_meta(&s, "seq_q", "[]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_q'", "non-empty");
    set_meta(&s, "seq_q", NULL);
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'seq_q' is missing", NULL);
}

Test(capture, wrong_format_string)
{
    cap_spec s = default_spec();
    set_meta(&s, "format", "precgate.capture.v2");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'format' is \"precgate.capture.v2\"",
                     "expected \"" CAPTURE_FORMAT_V1 "\"");
}

Test(capture, sliding_window_wrong_length)
{
    cap_spec s = default_spec();
    set_meta(&s, "sliding_window", "[4]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'sliding_window' is \"[4]\" (wrong length)",
                     "a JSON array of 2 integers");
    set_meta(&s, "sliding_window", "[4, -1]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'sliding_window'[1] is -1", NULL);
}

Test(capture, only_q_scale_given)
{
    cap_spec s = default_spec();
    set_meta(&s, "k_scale", NULL);
    set_meta(&s, "v_scale", NULL);
    expect_spec_fail(&s, PG_ERR_FORMAT, "has 'q_scale' but not 'k_scale' and 'v_scale'", NULL);
}

Test(capture, scale_must_be_finite_positive)
{
    cap_spec s = default_spec();
    set_meta(&s, "k_scale", "[2, 0]");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'k_scale'[1] is not a finite number > 0", NULL);
    set_meta(&s, "k_scale", "[2, 1e300]"); /* overflows float */
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'k_scale'[1]", NULL);
}

Test(capture, sm_scale_and_block_size_checked)
{
    cap_spec s = default_spec();
    set_meta(&s, "sm_scale", "-0.5");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'sm_scale' is \"-0.5\"", "finite JSON number > 0");
    set_meta(&s, "sm_scale", "abc");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'sm_scale' is not valid JSON", NULL);
    set_meta(&s, "sm_scale", NULL);
    set_meta(&s, "block_size", "48");
    expect_spec_fail(&s, PG_ERR_FORMAT, "metadata 'block_size' is \"48\"", "16, 32, 64");
}

/* ------------------------------------------------------------ numerics */

Test(capture, nan_in_k_names_tensor_and_position)
{
    cap_spec s = default_spec();
    s.bad_layer = 1;
    s.bad_token = 5;
    s.bad_head = 2;
    s.bad_dim = 3;
    s.bad_bits = 0x7FC1; /* a quiet NaN */
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.1.k': NaN at token 5, head 2, dim 3",
                     "element 105");
    s.bad_bits = 0xFF80; /* -Inf */
    s.bad_token = 0;
    s.bad_head = 0;
    s.bad_dim = 0;
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.1.k': -Inf at token 0, head 0, dim 0", NULL);
}

Test(capture, nan_in_large_tensor_found_past_first_block)
{
    cap_spec s = default_spec();
    s.n_layers = 1;
    s.hi = 1;
    s.layer[0] = (layer_spec){.hq = 16, .hkv = 16, .d = 128}; /* k: 14336 values */
    set_meta(&s, "sliding_window", NULL);
    set_meta(&s, "q_scale", NULL);
    set_meta(&s, "k_scale", NULL);
    set_meta(&s, "v_scale", NULL);
    s.bad_layer = 0;
    s.bad_token = 3; /* element 6791: in the second scan block */
    s.bad_head = 5;
    s.bad_dim = 7;
    s.bad_bits = 0x7F80;
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.0.k': +Inf at token 3, head 5, dim 7",
                     "element 6791");
    s.bad_token = 6; /* the very last element, 14335: in the tail after the blocks */
    s.bad_head = 15;
    s.bad_dim = 127;
    s.bad_bits = 0xFFFF;
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.0.k': NaN at token 6, head 15, dim 127",
                     "element 14335");
}

/* capture_open scans in parallel work items of 2^21 values: a NaN in the
 * second item of a tensor is found and placed, in either layer. */
Test(capture, nan_past_the_first_parallel_scan_item)
{
    cap_spec s = default_spec();
    s.layer[0] = (layer_spec){.hq = 8, .hkv = 8, .d = 128}; /* k: 2,150,400 values */
    s.layer[1] = (layer_spec){.hq = 8, .hkv = 8, .d = 128};
    s.tq = s.tkv = 2100;
    set_meta(&s, "seq_q", "[2100]");
    set_meta(&s, "seq_kv", "[2100]");
    set_meta(&s, "sliding_window", NULL);
    set_meta(&s, "q_scale", NULL);
    set_meta(&s, "k_scale", NULL);
    set_meta(&s, "v_scale", NULL);
    s.bad_layer = 0;
    s.bad_token = 2099; /* the last element, 2,150,399, in the second item */
    s.bad_head = 7;
    s.bad_dim = 127;
    s.bad_bits = 0x7FC0;
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.0.k': NaN at token 2099, head 7, dim 127",
                     "element 2150399");
    s.bad_layer = 1; /* only in layer 1 now: still found */
    expect_spec_fail(&s, PG_ERR_NUMERIC, "tensor 'layers.1.k': NaN at token 2099, head 7, dim 127",
                     "element 2150399");
}

/* ------------------------------------------------------------ alignment */

/* Rewrites the safetensors file at path with its header padding removed and
 * one space added when needed, so that the data starts at an odd offset. */
static void misalign_data(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    uint64_t n = 0;
    for (int i = LEN_BYTES - 1; i >= 0; i--) n = (n << 8) | buf[i];
    uint64_t m = n;
    while (m > 0 && buf[LEN_BYTES + m - 1] == ' ') m--;
    uint64_t m_odd = m % 2 ? m : m + 1;
    size_t out_len = LEN_BYTES + m_odd + ((size_t)size - LEN_BYTES - n);
    unsigned char *out = malloc(out_len);
    cr_assert_not_null(out);
    for (int i = 0; i < LEN_BYTES; i++) out[i] = (unsigned char)(m_odd >> (8 * i));
    memcpy(out + LEN_BYTES, buf + LEN_BYTES, m);
    if (m_odd != m) out[LEN_BYTES + m] = ' ';
    memcpy(out + LEN_BYTES + m_odd, buf + LEN_BYTES + n, (size_t)size - LEN_BYTES - n);
    tu_write_file(path, out, out_len);
    free(buf);
    free(out);
}

Test(capture, unaligned_bf16_tensor_loads_with_right_values)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    cap_spec s = default_spec();
    write_capture(path, &s);
    misalign_data(path);

    st_file *f = NULL;
    pg_err err = {0};
    cr_assert_eq(st_open(path, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq((uintptr_t)st_find(f, "layers.0.q")->data % 2, 1, "the test really misaligns q");
    st_close(f);

    capture *c = open_ok(path);
    check_default_fields(c, path, &s);
    capture_close(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, unaligned_f32_sinks_after_odd_bf16_loads)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    cap_spec s = default_spec();
    s.n_layers = 1;
    s.hi = 1;
    s.layer[0] = (layer_spec){.hq = 3, .hkv = 1, .d = 3, .sinks = true}; /* q: 45 values */
    set_meta(&s, "sliding_window", "[0]");
    set_meta(&s, "q_scale", "[1]");
    set_meta(&s, "k_scale", "[1]");
    set_meta(&s, "v_scale", "[1]");
    write_capture(path, &s);

    st_file *f = NULL;
    pg_err err = {0};
    cr_assert_eq(st_open(path, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_neq((uintptr_t)st_find(f, "layers.0.sinks")->data % sizeof(float), 0,
                  "the test really misaligns the sinks");
    st_close(f);

    capture *c = open_ok(path);
    check_layer_values(c, &s, 0);
    capture_close(c);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, nan_in_sinks)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    st_writer *w = NULL;
    pg_err err = {0};
    const int64_t qs[3] = {1, 2, 2}, ss[1] = {2};
    const uint16_t q[4] = {0};
    const float sinks[2] = {0.5f, NAN};
    cr_assert_eq(st_writer_create(&w, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_q", "[1]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_kv", "[1]", &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.q", ST_BF16, 3, qs, q, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.k", ST_BF16, 3, qs, q, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.v", ST_BF16, 3, qs, q, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.sinks", ST_F32, 1, ss, sinks, &err), PG_OK);
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK);
    st_writer_free(w);
    expect_fail(path, PG_ERR_NUMERIC, "cap.safetensors", "tensor 'layers.0.sinks': NaN at head 1",
                NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ digest */

/* The content digest of the capture at path (which must open). */
static void digest_of(const char *path, char out[CAPTURE_DIGEST_MAX])
{
    capture *c = open_ok(path);
    snprintf(out, CAPTURE_DIGEST_MAX, "%s", c->digest);
    capture_close(c);
}

Test(capture, digest_is_the_content_not_the_path_or_the_layout)
{
    char *dir = tu_tempdir();
    cap_spec s = default_spec();
    char *a = tu_join(dir, "a.safetensors"), *b = tu_join(dir, "b.safetensors");
    write_capture(a, &s);
    write_capture(b, &s);
    char da[CAPTURE_DIGEST_MAX], db[CAPTURE_DIGEST_MAX];
    digest_of(a, da);
    cr_assert_eq(strncmp(da, CAPTURE_DIGEST_PREFIX, strlen(CAPTURE_DIGEST_PREFIX)), 0, "%s", da);
    cr_assert_eq(strlen(da), strlen(CAPTURE_DIGEST_PREFIX) + 32, "%s", da);
    digest_of(b, db);
    cr_assert_str_eq(da, db, "another path, same content");
    misalign_data(b); /* other header bytes, aligned copies of every tensor */
    digest_of(b, db);
    cr_assert_str_eq(da, db, "another header layout, same content");

    /* The same tensors and metadata as two shards. */
    char *sd = tu_join(dir, "shards");
    cr_assert_eq(mkdir(sd, 0755), 0);
    char *s0 = tu_join(sd, "0.safetensors"), *s1 = tu_join(sd, "1.safetensors");
    cap_spec p = s;
    p.hi = 1;
    write_capture(s0, &p);
    p.lo = 1;
    p.hi = 2;
    p.n_meta = 0;
    set_meta(&p, "seq_q", "[3, 2]");
    write_capture(s1, &p);
    digest_of(sd, db);
    cr_assert_str_eq(da, db, "shards of the same content");

    /* One bit of any tensor, or one metadata value, changes it. */
    const char *const tensors[] = {"layers.0.q", "layers.1.k", "layers.1.v", "layers.0.sinks",
                                   "layers.0.out.vllm-fa3"};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        write_capture(b, &s);
        tu_flip_tensor_bit(b, tensors[i], 0);
        digest_of(b, db);
        cr_assert_str_neq(da, db, "one bit of %s", tensors[i]);
    }
    cap_spec m = s;
    set_meta(&m, "producer", "another producer");
    write_capture(b, &m);
    digest_of(b, db);
    cr_assert_str_neq(da, db, "a metadata value");
    free(s0);
    free(s1);
    free(sd);
    free(a);
    free(b);
    tu_rmtree(dir);
    free(dir);
}

Test(capture, digest_covers_every_scan_item_of_a_large_tensor)
{
    cap_spec s = default_spec();
    s.layer[0] = (layer_spec){.hq = 8, .hkv = 8, .d = 128}; /* k: 2,150,400 values, 2 items */
    s.layer[1] = (layer_spec){.hq = 8, .hkv = 8, .d = 128};
    s.tq = s.tkv = 2100;
    set_meta(&s, "seq_q", "[2100]");
    set_meta(&s, "seq_kv", "[2100]");
    set_meta(&s, "sliding_window", NULL);
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "cap.safetensors");
    write_capture(path, &s);
    char d0[CAPTURE_DIGEST_MAX], d1[CAPTURE_DIGEST_MAX];
    digest_of(path, d0);
    const size_t k_bytes = (size_t)2100 * 8 * 128 * 2;
    tu_flip_tensor_bit(path, "layers.0.k", k_bytes - 2); /* the last value, in the second item */
    digest_of(path, d1);
    cr_assert_str_neq(d0, d1);
    tu_flip_tensor_bit(path, "layers.0.k", k_bytes - 2); /* back */
    digest_of(path, d1);
    cr_assert_str_eq(d0, d1);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
