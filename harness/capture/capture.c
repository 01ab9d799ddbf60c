/*
 * capture.c: opening and validating a precgate capture v1 (see capture.h).
 *
 * capture_open goes in stages, each of which only runs when the previous
 * ones passed: open the shard(s); merge their metadata; read the sequence
 * metadata; sort every tensor into its layer by name; read the per-layer
 * metadata; then per layer check dtypes and shapes, make aligned views and
 * scan for NaN/Inf. Any failure frees everything through capture_close.
 */
#include "capture.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "safetensors.h"

/* xxHash as inline code (no library at run time: the GPU machine has none). */
#define XXH_INLINE_ALL
#include <xxhash.h>

const int capture_block_sizes[CAPTURE_N_BLOCK_SIZES] = {16, 32, 64};

/* File-name suffix of a shard inside a capture directory. */
#define SHARD_SUFFIX ".safetensors"
/* Prefix every capture tensor name starts with. */
#define LAYER_PREFIX "layers."
/* Infix between a layer and the NAME of an external output. */
#define EXT_PREFIX "out."
/* Longest excerpt of a metadata value quoted in an error message. */
#define META_QUOTE_MAX 40
/* Room for one "expected ..." phrase or a shape in an error message. */
#define PHRASE_MAX 160

/* bf16 sign/exponent/mantissa fields; the exponent is all ones for Inf/NaN. */
#define BF16_EXP_MASK 0x7F80u
#define BF16_MANT_MASK 0x007Fu
#define BF16_SIGN_MASK 0x8000u
/* The magnitude bits of a bf16 (all but the sign): their unsigned order is
 * the order of the magnitudes, and they are >= BF16_EXP_MASK exactly for
 * Inf and NaN. */
#define BF16_MAGNITUDE_MASK 0x7FFFu
/* Values per inner loop of the scan: a constant trip count, so that the
 * compiler vectorizes it at -O2. */
#define SCAN_BLOCK 4096
/* binary32 fields, as for bf16. */
#define F32_EXP_MASK 0x7F800000u
#define F32_MANT_MASK 0x007FFFFFu
#define F32_SIGN_MASK 0x80000000u

/* The open shards and the aligned copies that layer pointers may refer to. */
typedef struct capture_impl {
    st_file **shards;
    int n_shards;
    void **copies;
    int n_copies, cap_copies;
} capture_impl;

/* One metadata key after merging the shards, and the shard it came from. */
typedef struct meta_entry {
    const char *key, *value, *file;
} meta_entry;

/* The merged metadata of all shards. */
typedef struct meta_set {
    meta_entry *e;
    int n;
} meta_set;

/* A tensor and the shard that holds it (t == NULL: absent). */
typedef struct tref {
    const st_tensor *t;
    const st_file *f;
} tref;

/* An external output's tensor and its NAME. */
typedef struct ext_ref {
    const char *name;
    tref r;
} ext_ref;

/* Everything one layer number collected from the shards. */
typedef struct layer_refs {
    bool any;
    tref q, k, v, sinks;
    ext_ref *ext;
    int n_ext, cap_ext;
} layer_refs;

/* What a capture tensor name says. */
typedef enum tensor_kind { TK_Q, TK_K, TK_V, TK_SINKS, TK_OUT } tensor_kind;

/* Suffix after "layers.L." for each kind except TK_OUT. */
static const char *const k_kind_names[] = {[TK_Q] = "q", [TK_K] = "k", [TK_V] = "v",
                                           [TK_SINKS] = "sinks"};

/* ------------------------------------------------------------------------ */
/* shards                                                                   */
/* ------------------------------------------------------------------------ */

/* True when name is a shard file name: "*.safetensors", not a dot file. */
static bool is_shard_name(const char *name)
{
    size_t n = strlen(name), s = strlen(SHARD_SUFFIX);
    return name[0] != '.' && n > s && strcmp(name + n - s, SHARD_SUFFIX) == 0;
}

/* qsort comparator for an array of C strings. */
static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Lists dir's shard files as malloc'd full paths, sorted by name. */
static pg_status list_shards(const char *dir, char ***out, int *n_out, pg_err *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) return pg_fail(err, PG_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **paths = NULL;
    int n = 0, cap = 0;
    pg_status st = PG_OK;
    const char *sep = dir[0] != '\0' && dir[strlen(dir) - 1] == '/' ? "" : "/";
    for (struct dirent *e; st == PG_OK && (e = readdir(d)) != NULL;) {
        if (!is_shard_name(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **p = realloc(paths, (size_t)cap * sizeof *p);
            if (p == NULL) {
                st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory listing shards", dir);
                break;
            }
            paths = p;
        }
        size_t len = strlen(dir) + strlen(sep) + strlen(e->d_name) + 1;
        if ((paths[n] = malloc(len)) == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory listing shards", dir);
            break;
        }
        snprintf(paths[n++], len, "%s%s%s", dir, sep, e->d_name);
    }
    closedir(d);
    if (st == PG_OK && n == 0)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: directory holds no *%s shards", dir, SHARD_SUFFIX);
    if (st != PG_OK) {
        for (int i = 0; i < n; i++) free(paths[i]);
        free(paths);
        return st;
    }
    qsort(paths, (size_t)n, sizeof *paths, cmp_str_ptr);
    *out = paths;
    *n_out = n;
    return PG_OK;
}

/* Opens path as one shard, or every shard of the directory path, into impl. */
static pg_status open_shards(const char *path, capture_impl *impl, pg_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return pg_fail(err, PG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char **paths = NULL;
    int n = 1;
    pg_status st = PG_OK;
    if (S_ISDIR(sb.st_mode)) {
        st = list_shards(path, &paths, &n, err);
        if (st != PG_OK) return st;
    }
    impl->shards = calloc((size_t)n, sizeof *impl->shards);
    if (impl->shards == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n && st == PG_OK; i++) {
        st = st_open(paths ? paths[i] : path, &impl->shards[i], err);
        if (st == PG_OK) impl->n_shards++;
    }
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
    return st;
}

/* ------------------------------------------------------------------------ */
/* metadata                                                                 */
/* ------------------------------------------------------------------------ */

/* Unions the shards' metadata into *ms (pointing into the shards); a key that
 * two shards carry must have the same value in both. */
static pg_status merge_metadata(const capture_impl *impl, meta_set *ms, pg_err *err)
{
    int total = 0;
    for (int i = 0; i < impl->n_shards; i++) total += impl->shards[i]->n_meta;
    ms->e = calloc(total > 0 ? (size_t)total : 1, sizeof *ms->e);
    if (ms->e == NULL) return pg_fail(err, PG_ERR_NOMEM, "out of memory merging metadata");
    for (int i = 0; i < impl->n_shards; i++) {
        const st_file *f = impl->shards[i];
        for (int j = 0; j < f->n_meta; j++) {
            const st_meta *m = &f->meta[j];
            int k = 0;
            while (k < ms->n && strcmp(ms->e[k].key, m->key) != 0) k++;
            if (k == ms->n) {
                ms->e[ms->n++] = (meta_entry){.key = m->key, .value = m->value, .file = f->path};
            } else if (strcmp(ms->e[k].value, m->value) != 0) {
                return pg_fail(err, PG_ERR_FORMAT,
                               "%s: metadata '%s' is \"%.*s\", but %s has \"%.*s\" (shards must agree)",
                               f->path, m->key, META_QUOTE_MAX, m->value, ms->e[k].file,
                               META_QUOTE_MAX, ms->e[k].value);
            }
        }
    }
    return PG_OK;
}

/* The merged entry for key, or NULL. */
static const meta_entry *meta_find(const meta_set *ms, const char *key)
{
    for (int i = 0; i < ms->n; i++)
        if (strcmp(ms->e[i].key, key) == 0) return &ms->e[i];
    return NULL;
}

/* Parses m's whole value as JSON into *out; expected (e.g. "a JSON array of
 * integers") goes into the error message. */
static pg_status meta_json(const meta_entry *m, const char *expected, cJSON **out, pg_err *err)
{
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(m->value, &end, 1);
    if (*out == NULL)
        return pg_fail(err, PG_ERR_FORMAT, "%s: metadata '%s' is not valid JSON (\"%.*s\"), expected %s",
                       m->file, m->key, META_QUOTE_MAX, m->value, expected);
    return PG_OK;
}

/* The finite double of JSON number x in *v; false for anything else. */
static bool json_finite(const cJSON *x, double *v)
{
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) return false;
    *v = x->valuedouble;
    return true;
}

/* Reads m as a JSON array of integers in [lo, hi] (of length want_len unless
 * it is negative) into a malloc'd *out of *n_out entries. */
static pg_status meta_int_array(const meta_entry *m, int want_len, int64_t lo, int64_t hi,
                                int64_t **out, int *n_out, pg_err *err)
{
    char expected[PHRASE_MAX];
    if (want_len >= 0)
        snprintf(expected, sizeof expected, "a JSON array of %d integers (one per layer)", want_len);
    else
        snprintf(expected, sizeof expected, "a non-empty JSON array of integers");
    cJSON *j = NULL;
    pg_status st = meta_json(m, expected, &j, err);
    if (st != PG_OK) return st;
    int n = cJSON_GetArraySize(j);
    if (!cJSON_IsArray(j) || (want_len >= 0 && n != want_len) || (want_len < 0 && n == 0)) {
        st = pg_fail(err, PG_ERR_FORMAT, "%s: metadata '%s' is \"%.*s\"%s, expected %s", m->file,
                     m->key, META_QUOTE_MAX, m->value,
                     cJSON_IsArray(j) ? " (wrong length)" : "", expected);
        cJSON_Delete(j);
        return st;
    }
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (v == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", m->file);
    int i = 0;
    for (const cJSON *x = j->child; st == PG_OK && x != NULL; x = x->next, i++) {
        double d = 0;
        if (!json_finite(x, &d) || floor(d) != d || d < (double)lo || d > (double)hi) {
            char found[PHRASE_MAX];
            if (cJSON_IsNumber(x)) snprintf(found, sizeof found, "%g", x->valuedouble);
            else snprintf(found, sizeof found, "not a number");
            st = pg_fail(err, PG_ERR_FORMAT,
                         "%s: metadata '%s'[%d] is %s, expected an integer in [%" PRId64 ", %" PRId64 "]",
                         m->file, m->key, i, found, lo, hi);
            break;
        }
        v[i] = (int64_t)d;
    }
    cJSON_Delete(j);
    if (st != PG_OK) {
        free(v);
        return st;
    }
    *out = v;
    *n_out = n;
    return PG_OK;
}

/* True when d is finite, > 0 and stays so when rounded to float (in *f). */
static bool positive_float(double d, float *f)
{
    *f = (float)d;
    return isfinite(d) && d > 0 && isfinite(*f) && *f > 0;
}

/* Reads m as a JSON array of want_len finite numbers > 0 into malloc'd *out. */
static pg_status meta_scale_array(const meta_entry *m, int want_len, float **out, pg_err *err)
{
    char expected[PHRASE_MAX];
    snprintf(expected, sizeof expected,
             "a JSON array of %d finite numbers > 0 (one per layer)", want_len);
    cJSON *j = NULL;
    pg_status st = meta_json(m, expected, &j, err);
    if (st != PG_OK) return st;
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != want_len) {
        st = pg_fail(err, PG_ERR_FORMAT, "%s: metadata '%s' is \"%.*s\"%s, expected %s", m->file,
                     m->key, META_QUOTE_MAX, m->value,
                     cJSON_IsArray(j) ? " (wrong length)" : "", expected);
        cJSON_Delete(j);
        return st;
    }
    float *v = malloc((size_t)want_len * sizeof *v);
    if (v == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", m->file);
    int i = 0;
    for (const cJSON *x = j->child; st == PG_OK && x != NULL; x = x->next, i++) {
        double d = 0;
        if (!json_finite(x, &d) || !positive_float(d, &v[i])) {
            st = pg_fail(err, PG_ERR_FORMAT,
                         "%s: metadata '%s'[%d] is not a finite number > 0 (as a float)", m->file,
                         m->key, i);
        }
    }
    cJSON_Delete(j);
    if (st != PG_OK) {
        free(v);
        return st;
    }
    *out = v;
    return PG_OK;
}

/* Checks "format" (required, CAPTURE_FORMAT_V1) and copies "model". */
static pg_status load_format_model(capture *c, const meta_set *ms, pg_err *err)
{
    const meta_entry *fmt = meta_find(ms, "format");
    if (fmt == NULL)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: no shard has metadata 'format', expected \"%s\" (not a precgate capture?)",
                       c->path, CAPTURE_FORMAT_V1);
    if (strcmp(fmt->value, CAPTURE_FORMAT_V1) != 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: metadata 'format' is \"%.*s\", expected \"%s\"",
                       fmt->file, META_QUOTE_MAX, fmt->value, CAPTURE_FORMAT_V1);
    const meta_entry *model = meta_find(ms, "model");
    c->model = strdup(model ? model->value : "");
    if (c->model == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    return PG_OK;
}

/* Reads the required seq_q / seq_kv arrays into c (n_seqs, seq_q, seq_kv, tq, tkv). */
static pg_status load_sequences(capture *c, const meta_set *ms, pg_err *err)
{
    const meta_entry *mq = meta_find(ms, "seq_q"), *mkv = meta_find(ms, "seq_kv");
    if (mq == NULL || mkv == NULL)
        return pg_fail(err, PG_ERR_FORMAT,
                       "%s: metadata '%s' is missing, expected a JSON array of integers", c->path,
                       mq == NULL ? "seq_q" : "seq_kv");
    int64_t *q = NULL, *kv = NULL;
    int nq = 0, nkv = 0;
    pg_status st = meta_int_array(mq, -1, 1, INT32_MAX, &q, &nq, err);
    if (st == PG_OK) st = meta_int_array(mkv, -1, 1, INT32_MAX, &kv, &nkv, err);
    if (st == PG_OK && nq != nkv)
        st = pg_fail(err, PG_ERR_FORMAT,
                     "%s: metadata 'seq_kv' has %d entries, expected %d (one per sequence, as 'seq_q')",
                     mkv->file, nkv, nq);
    if (st == PG_OK) {
        c->seq_q = malloc((size_t)nq * sizeof *c->seq_q);
        c->seq_kv = malloc((size_t)nq * sizeof *c->seq_kv);
        if (c->seq_q == NULL || c->seq_kv == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    }
    for (int i = 0; st == PG_OK && i < nq; i++) {
        if (kv[i] < q[i]) {
            st = pg_fail(err, PG_ERR_FORMAT,
                         "%s: metadata 'seq_kv'[%d] is %" PRId64 ", expected at least seq_q[%d] = %" PRId64
                         " (context plus new tokens)",
                         mkv->file, i, kv[i], i, q[i]);
            break;
        }
        c->seq_q[i] = (int32_t)q[i];
        c->seq_kv[i] = (int32_t)kv[i];
        c->tq += q[i];
        c->tkv += kv[i];
    }
    if (st == PG_OK) c->n_seqs = nq;
    free(q);
    free(kv);
    return st;
}

/* Reads the optional "block_size" into c (default CAPTURE_DEFAULT_BLOCK_SIZE). */
static pg_status load_block_size(capture *c, const meta_set *ms, pg_err *err)
{
    c->block_size = CAPTURE_DEFAULT_BLOCK_SIZE;
    const meta_entry *m = meta_find(ms, "block_size");
    if (m == NULL) return PG_OK;
    static const char expected[] = "one of capture_block_sizes: 16, 32, 64";
    cJSON *j = NULL;
    pg_status st = meta_json(m, expected, &j, err);
    if (st != PG_OK) return st;
    double d = 0;
    bool ok = false;
    if (json_finite(j, &d))
        for (int i = 0; i < CAPTURE_N_BLOCK_SIZES; i++)
            if (d == capture_block_sizes[i]) {
                c->block_size = capture_block_sizes[i];
                ok = true;
            }
    cJSON_Delete(j);
    if (!ok)
        return pg_fail(err, PG_ERR_FORMAT, "%s: metadata 'block_size' is \"%.*s\", expected %s",
                       m->file, META_QUOTE_MAX, m->value, expected);
    return PG_OK;
}

/* Reads the optional "sm_scale" into *scale; *present says whether it was there. */
static pg_status load_sm_scale(const meta_set *ms, float *scale, bool *present, pg_err *err)
{
    const meta_entry *m = meta_find(ms, "sm_scale");
    *present = m != NULL;
    if (m == NULL) return PG_OK;
    static const char expected[] = "a finite JSON number > 0";
    cJSON *j = NULL;
    pg_status st = meta_json(m, expected, &j, err);
    if (st != PG_OK) return st;
    double d = 0;
    bool ok = json_finite(j, &d) && positive_float(d, scale);
    cJSON_Delete(j);
    if (!ok)
        return pg_fail(err, PG_ERR_FORMAT, "%s: metadata 'sm_scale' is \"%.*s\", expected %s",
                       m->file, META_QUOTE_MAX, m->value, expected);
    return PG_OK;
}

/* Fills every layer's window, sm_scale and q/k/v scales from the metadata
 * (defaults: 0, 1/sqrt(D) in double rounded once to float, none); needs d. */
static pg_status load_layer_metadata(capture *c, const meta_set *ms, pg_err *err)
{
    float sm_scale = 0;
    bool has_sm = false;
    pg_status st = load_sm_scale(ms, &sm_scale, &has_sm, err);
    if (st != PG_OK) return st;

    int64_t *window = NULL;
    int n_window = 0;
    const meta_entry *mw = meta_find(ms, "sliding_window");
    if (mw != NULL) st = meta_int_array(mw, c->n_layers, 0, INT_MAX, &window, &n_window, err);

    static const char *const scale_keys[] = {"q_scale", "k_scale", "v_scale"};
    enum { N_SCALES = sizeof scale_keys / sizeof scale_keys[0] };
    const meta_entry *ms_scale[N_SCALES];
    float *scales[N_SCALES] = {NULL};
    int n_present = 0;
    for (int s = 0; s < N_SCALES; s++) n_present += (ms_scale[s] = meta_find(ms, scale_keys[s])) != NULL;
    if (st == PG_OK && n_present != 0 && n_present != N_SCALES) {
        const meta_entry *some = NULL;
        char missing[PHRASE_MAX] = "";
        for (int s = 0; s < N_SCALES; s++) {
            if (ms_scale[s] != NULL && some == NULL) some = ms_scale[s];
            if (ms_scale[s] == NULL)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s'%s'",
                         missing[0] ? " and " : "", scale_keys[s]);
        }
        st = pg_fail(err, PG_ERR_FORMAT,
                     "%s: metadata has '%s' but not %s (give q_scale, k_scale and v_scale, or none)",
                     some->file, some->key, missing);
    }
    for (int s = 0; st == PG_OK && n_present == N_SCALES && s < N_SCALES; s++)
        st = meta_scale_array(ms_scale[s], c->n_layers, &scales[s], err);

    for (int l = 0; st == PG_OK && l < c->n_layers; l++) {
        capture_layer *L = &c->layers[l];
        L->window = window ? (int)window[l] : 0;
        L->sm_scale = has_sm ? sm_scale : (float)(1.0 / sqrt((double)L->d));
        L->has_scales = n_present == N_SCALES;
        if (L->has_scales) {
            L->q_scale = scales[0][l];
            L->k_scale = scales[1][l];
            L->v_scale = scales[2][l];
        }
    }
    free(window);
    for (int s = 0; s < N_SCALES; s++) free(scales[s]);
    return st;
}

/* ------------------------------------------------------------------------ */
/* tensor names                                                             */
/* ------------------------------------------------------------------------ */

/* True for the characters an external output's NAME may use. */
static bool ext_name_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '_' || ch == '.' || ch == '-';
}

/* Parses "layers.L.{q,k,v,sinks,out.NAME}" into *layer (capped at
 * CAPTURE_MAX_LAYERS), *kind and, for TK_OUT, *ext (pointing into name);
 * false for any other name. */
static bool parse_tensor_name(const char *name, int *layer, tensor_kind *kind, const char **ext)
{
    size_t plen = strlen(LAYER_PREFIX);
    if (strncmp(name, LAYER_PREFIX, plen) != 0) return false;
    const char *p = name + plen;
    if (!isdigit((unsigned char)p[0]) || (p[0] == '0' && isdigit((unsigned char)p[1]))) return false;
    int l = 0;
    for (; isdigit((unsigned char)*p); p++)
        l = l >= CAPTURE_MAX_LAYERS ? CAPTURE_MAX_LAYERS : l * 10 + (*p - '0');
    *layer = l < CAPTURE_MAX_LAYERS ? l : CAPTURE_MAX_LAYERS;
    if (*p++ != '.') return false;
    for (int k = TK_Q; k <= TK_SINKS; k++) {
        if (strcmp(p, k_kind_names[k]) == 0) {
            *kind = (tensor_kind)k;
            return true;
        }
    }
    size_t elen = strlen(EXT_PREFIX);
    if (strncmp(p, EXT_PREFIX, elen) != 0 || p[elen] == '\0') return false;
    if (strlen(p + elen) > CAPTURE_EXT_NAME_MAX) return false;
    for (const char *s = p + elen; *s; s++)
        if (!ext_name_char(*s)) return false;
    *kind = TK_OUT;
    *ext = p + elen;
    return true;
}

/* Frees n layer_refs and the array. */
static void free_refs(layer_refs *refs, int n)
{
    if (refs == NULL) return;
    for (int i = 0; i < n; i++) free(refs[i].ext);
    free(refs);
}

/* Records tensor t of shard f as layer l's tensor of kind (ext for TK_OUT);
 * a tensor already recorded under that name is a duplicate across shards. */
static pg_status add_ref(layer_refs *r, tensor_kind kind, const char *ext, const st_tensor *t,
                         const st_file *f, pg_err *err)
{
    tref *slot = NULL;
    switch (kind) {
    case TK_Q: slot = &r->q; break;
    case TK_K: slot = &r->k; break;
    case TK_V: slot = &r->v; break;
    case TK_SINKS: slot = &r->sinks; break;
    case TK_OUT:
        for (int i = 0; i < r->n_ext; i++)
            if (strcmp(r->ext[i].name, ext) == 0) slot = &r->ext[i].r;
        if (slot == NULL) {
            if (r->n_ext == r->cap_ext) {
                int cap = r->cap_ext ? r->cap_ext * 2 : 4;
                ext_ref *p = realloc(r->ext, (size_t)cap * sizeof *p);
                if (p == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", f->path);
                r->ext = p;
                r->cap_ext = cap;
            }
            r->ext[r->n_ext] = (ext_ref){.name = ext};
            slot = &r->ext[r->n_ext++].r;
        }
        break;
    }
    if (slot->t != NULL)
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s' also appears in %s (shards must not repeat tensors)",
                       f->path, t->name, slot->f->path);
    *slot = (tref){.t = t, .f = f};
    r->any = true;
    return PG_OK;
}

/* qsort comparator ordering external outputs by NAME. */
static int cmp_ext(const void *a, const void *b)
{
    return strcmp(((const ext_ref *)a)->name, ((const ext_ref *)b)->name);
}

/* Sorts every shard tensor into *refs by layer (n_layers = highest + 1) and
 * checks that layers 0..n_layers-1 all exist with q, k and v. */
static pg_status collect_tensors(const char *path, const capture_impl *impl, layer_refs **refs_out,
                                 int *n_layers, pg_err *err)
{
    int max_layer = -1;
    for (int i = 0; i < impl->n_shards; i++) {
        const st_file *f = impl->shards[i];
        for (int j = 0; j < f->n_tensors; j++) {
            int l;
            tensor_kind kind;
            const char *ext;
            if (!parse_tensor_name(f->tensors[j].name, &l, &kind, &ext))
                return pg_fail(err, PG_ERR_FORMAT,
                               "%s: tensor '%s': name is not layers.L.{q,k,v,sinks,out.NAME}, "
                               "NAME up to %d of A-Za-z0-9_.- (a capture holds no other tensors)",
                               f->path, f->tensors[j].name, CAPTURE_EXT_NAME_MAX);
            if (l >= CAPTURE_MAX_LAYERS)
                return pg_fail(err, PG_ERR_FORMAT,
                               "%s: tensor '%s': layer number is at least %d (CAPTURE_MAX_LAYERS)",
                               f->path, f->tensors[j].name, CAPTURE_MAX_LAYERS);
            if (l > max_layer) max_layer = l;
        }
    }
    if (max_layer < 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: no layers.L.* tensors (an empty capture)", path);

    layer_refs *refs = calloc((size_t)max_layer + 1, sizeof *refs);
    if (refs == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    pg_status st = PG_OK;
    for (int i = 0; st == PG_OK && i < impl->n_shards; i++) {
        const st_file *f = impl->shards[i];
        for (int j = 0; st == PG_OK && j < f->n_tensors; j++) {
            int l;
            tensor_kind kind;
            const char *ext = NULL;
            parse_tensor_name(f->tensors[j].name, &l, &kind, &ext);
            st = add_ref(&refs[l], kind, ext, &f->tensors[j], f, err);
        }
    }
    for (int l = 0; st == PG_OK && l <= max_layer; l++) {
        const layer_refs *r = &refs[l];
        if (!r->any)
            st = pg_fail(err, PG_ERR_FORMAT,
                         "%s: layer %d has no tensors, but layers.%d.* exist (layers must run 0..n-1 without gaps)",
                         path, l, max_layer);
        else if (r->q.t == NULL || r->k.t == NULL || r->v.t == NULL)
            st = pg_fail(err, PG_ERR_FORMAT, "%s: layers.%d.%s is missing (every layer needs q, k and v)",
                         path, l, r->q.t == NULL ? "q" : r->k.t == NULL ? "k" : "v");
        else if (r->n_ext > 1)
            qsort(refs[l].ext, (size_t)r->n_ext, sizeof *r->ext, cmp_ext);
    }
    if (st != PG_OK) {
        free_refs(refs, max_layer + 1);
        return st;
    }
    *refs_out = refs;
    *n_layers = max_layer + 1;
    return PG_OK;
}

/* ------------------------------------------------------------------------ */
/* layer tensors                                                            */
/* ------------------------------------------------------------------------ */

/* Checks that r has dtype want. */
static pg_status check_dtype(const tref *r, st_dtype want, pg_err *err)
{
    if (r->t->dtype != want)
        return pg_fail(err, PG_ERR_FORMAT, "%s: tensor '%s': dtype %s, expected %s", r->f->path,
                       r->t->name, st_dtype_name(r->t->dtype), st_dtype_name(want));
    return PG_OK;
}

/* Checks that r has ndim dimensions; layout names them for the message. */
static pg_status check_ndim(const tref *r, int ndim, const char *layout, pg_err *err)
{
    if (r->t->ndim == ndim) return PG_OK;
    char shape[PHRASE_MAX];
    st_shape_str(shape, sizeof shape, r->t->ndim, r->t->shape);
    return pg_fail(err, PG_ERR_SHAPE, "%s: tensor '%s': shape %s has %d dimensions, expected %d %s",
                   r->f->path, r->t->name, shape, r->t->ndim, ndim, layout);
}

/* Checks that dimension i (called what) of r is in 1..INT_MAX and stores it in *out. */
static pg_status read_count_dim(const tref *r, int i, const char *what, int *out, pg_err *err)
{
    int64_t v = r->t->shape[i];
    if (v < 1 || v > INT_MAX)
        return pg_fail(err, PG_ERR_SHAPE, "%s: tensor '%s': dimension %d (%s) is %" PRId64 ", expected 1..%d",
                       r->f->path, r->t->name, i, what, v, INT_MAX);
    *out = (int)v;
    return PG_OK;
}

/* Checks dimension i (called what) of r against want; why says where want comes from. */
static pg_status check_dim(const tref *r, int i, const char *what, int64_t want, const char *why,
                           pg_err *err)
{
    if (r->t->shape[i] != want)
        return pg_fail(err, PG_ERR_SHAPE,
                       "%s: tensor '%s': dimension %d (%s) is %" PRId64 ", expected %" PRId64 " (%s)",
                       r->f->path, r->t->name, i, what, r->t->shape[i], want, why);
    return PG_OK;
}

/* Checks that r is [Tq, hq, d] like layer l's q (for out.NAME). */
static pg_status check_like_q(const capture *c, const tref *r, int l, int hq, int d, pg_err *err)
{
    char why_h[PHRASE_MAX], why_d[PHRASE_MAX];
    snprintf(why_h, sizeof why_h, "query heads of layers.%d.q", l);
    snprintf(why_d, sizeof why_d, "head_dim of layers.%d.q", l);
    pg_status st = check_ndim(r, 3, "[tokens, heads, head_dim]", err);
    if (st == PG_OK) st = check_dim(r, 0, "tokens", c->tq, "sum of seq_q", err);
    if (st == PG_OK) st = check_dim(r, 1, "heads", hq, why_h, err);
    if (st == PG_OK) st = check_dim(r, 2, "head_dim", d, why_d, err);
    return st;
}

/* Checks the dtypes and shapes of layer l's tensors and fills hq, hkv, d. */
static pg_status check_layer_shapes(const capture *c, const layer_refs *r, int l, capture_layer *L,
                                    pg_err *err)
{
    pg_status st = check_dtype(&r->q, ST_BF16, err);
    if (st == PG_OK) st = check_dtype(&r->k, ST_BF16, err);
    if (st == PG_OK) st = check_dtype(&r->v, ST_BF16, err);
    if (st == PG_OK && r->sinks.t) st = check_dtype(&r->sinks, ST_F32, err);
    for (int i = 0; st == PG_OK && i < r->n_ext; i++) st = check_dtype(&r->ext[i].r, ST_BF16, err);

    /* q: [Tq, Hq, D] */
    if (st == PG_OK) st = check_ndim(&r->q, 3, "[tokens, heads, head_dim]", err);
    if (st == PG_OK) st = check_dim(&r->q, 0, "tokens", c->tq, "sum of seq_q", err);
    if (st == PG_OK) st = read_count_dim(&r->q, 1, "heads", &L->hq, err);
    if (st == PG_OK) st = read_count_dim(&r->q, 2, "head_dim", &L->d, err);
    if (st != PG_OK) return st;

    /* k, v: [Tkv, Hkv, D], Hkv dividing Hq */
    char why_d[PHRASE_MAX], why_h[PHRASE_MAX];
    snprintf(why_d, sizeof why_d, "head_dim of layers.%d.q", l);
    snprintf(why_h, sizeof why_h, "kv heads of layers.%d.k", l);
    st = check_ndim(&r->k, 3, "[tokens, kv_heads, head_dim]", err);
    if (st == PG_OK) st = check_dim(&r->k, 0, "tokens", c->tkv, "sum of seq_kv", err);
    if (st == PG_OK) st = read_count_dim(&r->k, 1, "kv_heads", &L->hkv, err);
    if (st == PG_OK) st = check_dim(&r->k, 2, "head_dim", L->d, why_d, err);
    if (st == PG_OK && L->hq % L->hkv != 0)
        st = pg_fail(err, PG_ERR_SHAPE,
                     "%s: tensor '%s': dimension 1 (kv_heads) is %d, which does not divide the %d "
                     "query heads of layers.%d.q",
                     r->k.f->path, r->k.t->name, L->hkv, L->hq, l);
    if (st == PG_OK) st = check_ndim(&r->v, 3, "[tokens, kv_heads, head_dim]", err);
    if (st == PG_OK) st = check_dim(&r->v, 0, "tokens", c->tkv, "sum of seq_kv", err);
    if (st == PG_OK) st = check_dim(&r->v, 1, "kv_heads", L->hkv, why_h, err);
    if (st == PG_OK) st = check_dim(&r->v, 2, "head_dim", L->d, why_d, err);

    /* sinks: [Hq]; out.NAME: [Tq, Hq, D] */
    if (st == PG_OK && r->sinks.t) {
        snprintf(why_h, sizeof why_h, "query heads of layers.%d.q", l);
        st = check_ndim(&r->sinks, 1, "[heads]", err);
        if (st == PG_OK) st = check_dim(&r->sinks, 0, "heads", L->hq, why_h, err);
    }
    for (int i = 0; st == PG_OK && i < r->n_ext; i++)
        st = check_like_q(c, &r->ext[i].r, l, L->hq, L->d, err);
    return st;
}

/* A pointer to r's data aligned to its element size: the mapping itself when
 * it already is, else an owned copy recorded in impl. */
static pg_status aligned_view(capture_impl *impl, const tref *r, const void **out, pg_err *err)
{
    size_t align = st_dtype_size(r->t->dtype);
    if ((uintptr_t)r->t->data % align == 0) {
        *out = r->t->data;
        return PG_OK;
    }
    if (impl->n_copies == impl->cap_copies) {
        int cap = impl->cap_copies ? impl->cap_copies * 2 : 8;
        void **p = realloc(impl->copies, (size_t)cap * sizeof *p);
        if (p == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", r->f->path);
        impl->copies = p;
        impl->cap_copies = cap;
    }
    void *copy = malloc(r->t->nbytes); /* malloc's alignment covers every dtype */
    if (copy == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: tensor '%s': out of memory for an aligned copy of %zu bytes",
                       r->f->path, r->t->name, r->t->nbytes);
    memcpy(copy, r->t->data, r->t->nbytes);
    impl->copies[impl->n_copies++] = copy;
    *out = copy;
    return PG_OK;
}

/* The largest magnitude bits (BF16_MAGNITUDE_MASK) among n bf16 values, 0
 * for n = 0: one branch-free pass that gives both the tensor's amax and
 * whether it holds an Inf or NaN (a result >= BF16_EXP_MASK). */
static unsigned bf16_max_magnitude_bits(const uint16_t *x, int64_t n)
{
    uint16_t m = 0;
    int64_t i = 0;
    for (; n - i >= SCAN_BLOCK; i += SCAN_BLOCK)
        for (int j = 0; j < SCAN_BLOCK; j++) {
            const uint16_t a = x[i + j] & BF16_MAGNITUDE_MASK;
            m = a > m ? a : m;
        }
    for (; i < n; i++) {
        const uint16_t a = x[i] & BF16_MAGNITUDE_MASK;
        m = a > m ? a : m;
    }
    return m;
}

/* Index of the first of n bf16 values whose exponent is all ones (Inf or
 * NaN), or -1. */
static int64_t bf16_first_nonfinite(const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((x[i] & BF16_EXP_MASK) == BF16_EXP_MASK) return i;
    return -1;
}

/* Index of the first of n floats that is Inf or NaN (by its bits), or -1. */
static int64_t f32_first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        if ((b & F32_EXP_MASK) == F32_EXP_MASK) return i;
    }
    return -1;
}

/* "NaN", "+Inf" or "-Inf" for a value whose exponent field is all ones. */
static const char *nonfinite_name(bool mantissa_nonzero, bool negative)
{
    return mantissa_nonzero ? "NaN" : negative ? "-Inf" : "+Inf";
}

/* Fails with PG_ERR_NUMERIC naming element i of bf16 tensor r ([tokens,
 * heads, dim], data at x), which is Inf or NaN. */
static pg_status report_bf16(const tref *r, const uint16_t *x, int64_t i, pg_err *err)
{
    int64_t h = r->t->shape[1], d = r->t->shape[2];
    return pg_fail(err, PG_ERR_NUMERIC,
                   "%s: tensor '%s': %s at token %" PRId64 ", head %" PRId64 ", dim %" PRId64
                   " (element %" PRId64 ")",
                   r->f->path, r->t->name,
                   nonfinite_name(x[i] & BF16_MANT_MASK, x[i] & BF16_SIGN_MASK), i / (h * d),
                   i / d % h, i % d, i);
}

/* Fails with PG_ERR_NUMERIC when the sinks r (data at x) hold Inf or NaN. */
static pg_status scan_sinks(const tref *r, const float *x, pg_err *err)
{
    int64_t i = f32_first_nonfinite(x, r->t->numel);
    if (i < 0) return PG_OK;
    uint32_t b;
    memcpy(&b, &x[i], sizeof b);
    return pg_fail(err, PG_ERR_NUMERIC, "%s: tensor '%s': %s at head %" PRId64, r->f->path,
                   r->t->name, nonfinite_name(b & F32_MANT_MASK, b & F32_SIGN_MASK), i);
}

/* Makes aligned views of layer l's tensors in L (scan_capture checks them). */
static pg_status load_layer_data(capture_impl *impl, const layer_refs *r, capture_layer *L,
                                 pg_err *err)
{
    const void *q = NULL, *k = NULL, *v = NULL, *sinks = NULL;
    pg_status st = aligned_view(impl, &r->q, &q, err);
    if (st == PG_OK) st = aligned_view(impl, &r->k, &k, err);
    if (st == PG_OK) st = aligned_view(impl, &r->v, &v, err);
    if (st == PG_OK && r->sinks.t) st = aligned_view(impl, &r->sinks, &sinks, err);
    if (st != PG_OK) return st;
    L->q = q;
    L->k = k;
    L->v = v;
    L->sinks = sinks;

    L->ext = calloc(r->n_ext > 0 ? (size_t)r->n_ext : 1, sizeof *L->ext);
    if (L->ext == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", r->q.f->path);
    for (int i = 0; st == PG_OK && i < r->n_ext; i++) {
        capture_ext_output *e = &L->ext[i];
        if ((e->name = strdup(r->ext[i].name)) == NULL)
            return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", r->q.f->path);
        L->n_ext++;
        const void *out = NULL;
        st = aligned_view(impl, &r->ext[i].r, &out, err);
        /* Not scanned: a NaN from an external implementation is what the
         * sweep must record (nan_count / inf_count), not a malformed file. */
        if (st == PG_OK) e->out = out;
    }
    return st;
}

/* bf16 values one scan work item reads: 4 MiB, so that a 3 GB capture is
 * ~700 items over the threads (one thread scanned 12.5 GB/s on the H200
 * machine's host: 0.24 s of a GPU sweep's 1.8 s). */
#define SCAN_CHUNK ((int64_t)1 << 21)
/* Bytes of one work item; the digest hashes each item's bytes on its own, so
 * this is part of the digest's definition (CAPTURE_DIGEST_DOMAIN). */
#define SCAN_CHUNK_BYTES (SCAN_CHUNK * (int64_t)sizeof(uint16_t))
/* Values of an item scanned and then hashed while they are still in the
 * core's cache (64 KiB: well inside any L2). */
#define SCAN_PIECE ((int64_t)1 << 15)
/* Names the digest's definition: the hash, the item size and the layout of
 * what is hashed (digest_capture). A change to any of them changes this. */
#define CAPTURE_DIGEST_DOMAIN "precgate.capture.digest.v1 xxh3 chunk=4194304"

/* What a scanned tensor is within its layer. */
typedef enum scan_kind { SK_Q, SK_K, SK_V, SK_SINKS, SK_EXT } scan_kind;

/* One tensor the scan reads: q, k and v are scanned for Inf/NaN and their
 * amax, and hashed; sinks are checked after the parallel pass; every tensor
 * is hashed (external outputs only hashed: see load_layer_data). */
typedef struct scan_tensor {
    const tref *r;           /* name, dtype, shape and file, for the digest and messages */
    const uint8_t *data;     /* its aligned view */
    int64_t bytes;
    int layer;
    scan_kind kind;
} scan_tensor;

typedef struct scan_job {
    scan_tensor *t;          /* layer by layer: q, k, v, sinks (if any), outputs by NAME */
    int n_t;
    int64_t *item0;          /* [n_t + 1]: first item of each tensor */
    uint16_t *max_bits;      /* per item of q, k, v: bf16_max_magnitude_bits of its values */
    int64_t *first;          /* per item of q, k, v: its first Inf/NaN within the tensor, or -1 */
    uint64_t *hash;          /* per item: XXH3_64bits of its bytes */
} scan_job;

static void scan_item(void *ctx, int item, int thread)
{
    (void)thread;
    const scan_job *j = ctx;
    int lo = 0, hi = j->n_t;  /* tensor t: item0[t] <= item < item0[t+1] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (j->item0[mid] <= item) lo = mid;
        else hi = mid;
    }
    const scan_tensor *t = &j->t[lo];
    const int64_t start = (item - j->item0[lo]) * SCAN_CHUNK_BYTES;
    const int64_t len = t->bytes - start < SCAN_CHUNK_BYTES ? t->bytes - start : SCAN_CHUNK_BYTES;
    const uint8_t *p = t->data + start;
    if (t->kind > SK_V) {
        j->hash[item] = XXH3_64bits(p, (size_t)len);
        return;
    }
    /* Piece by piece, the hash reads what the scan just brought into the
     * cache: the data crosses the memory bus once for both. */
    XXH3_state_t hs;
    XXH3_INITSTATE(&hs);
    XXH3_64bits_reset(&hs);
    const uint16_t *x = (const uint16_t *)p;
    const int64_t n = len / (int64_t)sizeof(uint16_t);
    unsigned m = 0;
    for (int64_t i = 0; i < n; i += SCAN_PIECE) {
        const int64_t k = n - i < SCAN_PIECE ? n - i : SCAN_PIECE;
        const unsigned pm = bf16_max_magnitude_bits(x + i, k);
        m = pm > m ? pm : m;
        XXH3_64bits_update(&hs, x + i, (size_t)k * sizeof(uint16_t));
    }
    j->hash[item] = XXH3_64bits_digest(&hs);
    j->max_bits[item] = (uint16_t)m;
    j->first[item] = m >= BF16_EXP_MASK ? start / 2 + bf16_first_nonfinite(x, n) : -1;
}

/* Appends v to the digest's input as 8 little-endian bytes (the same digest
 * on any host). */
static void digest_u64(XXH3_state_t *s, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    XXH3_128bits_update(s, b, sizeof b);
}

/* Appends the C string text and its NUL (so that no two lists of strings
 * give the same bytes). */
static void digest_str(XXH3_state_t *s, const char *text)
{
    XXH3_128bits_update(s, text, strlen(text) + 1);
}

/* qsort comparator of meta_entry pointers by key. */
static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp((*(const meta_entry *const *)a)->key, (*(const meta_entry *const *)b)->key);
}

/* c->digest: XXH3-128 over CAPTURE_DIGEST_DOMAIN, every metadata key and
 * value in key order, and each tensor (j's order: by layer, q, k, v, sinks,
 * outputs by NAME) as name, dtype, shape and its items' hashes. Only content
 * counts: the same tensors and metadata give the same digest whether they
 * are one file or shards, wherever and whenever they were written. */
static pg_status digest_capture(capture *c, const meta_set *ms, const scan_job *j, pg_err *err)
{
    const meta_entry **keys = calloc(ms->n > 0 ? (size_t)ms->n : 1, sizeof *keys);
    if (keys == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    for (int i = 0; i < ms->n; i++) keys[i] = &ms->e[i];
    qsort(keys, (size_t)ms->n, sizeof *keys, cmp_meta_key);
    XXH3_state_t s;
    XXH3_INITSTATE(&s);
    XXH3_128bits_reset(&s);
    digest_str(&s, CAPTURE_DIGEST_DOMAIN);
    digest_u64(&s, (uint64_t)ms->n);
    for (int i = 0; i < ms->n; i++) {
        digest_str(&s, keys[i]->key);
        digest_str(&s, keys[i]->value);
    }
    free(keys);
    digest_u64(&s, (uint64_t)j->n_t);
    for (int t = 0; t < j->n_t; t++) {
        const st_tensor *tt = j->t[t].r->t;
        digest_str(&s, tt->name);
        digest_str(&s, st_dtype_name(tt->dtype));
        digest_u64(&s, (uint64_t)tt->ndim);
        for (int d = 0; d < tt->ndim; d++) digest_u64(&s, (uint64_t)tt->shape[d]);
        for (int64_t it = j->item0[t]; it < j->item0[t + 1]; it++) digest_u64(&s, j->hash[it]);
    }
    const XXH128_hash_t h = XXH3_128bits_digest(&s);
    snprintf(c->digest, sizeof c->digest, "%s%016" PRIx64 "%016" PRIx64, CAPTURE_DIGEST_PREFIX,
             (uint64_t)h.high64, (uint64_t)h.low64);
    return PG_OK;
}

/* j's tensors, by layer: q, k, v, sinks when present, outputs by NAME. */
static pg_status scan_tensors(const capture *c, const layer_refs *refs, scan_job *j, pg_err *err)
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += 3 + (refs[l].sinks.t != NULL) + refs[l].n_ext;
    if ((j->t = calloc((size_t)n, sizeof *j->t)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    for (int l = 0; l < c->n_layers; l++) {
        const capture_layer *L = &c->layers[l];
        const layer_refs *r = &refs[l];
        const struct { const tref *r; const void *data; scan_kind kind; } fixed[] = {
            {&r->q, L->q, SK_Q}, {&r->k, L->k, SK_K}, {&r->v, L->v, SK_V},
            {&r->sinks, L->sinks, SK_SINKS}};
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            if (fixed[i].r->t != NULL)
                j->t[j->n_t++] = (scan_tensor){fixed[i].r, fixed[i].data,
                                               (int64_t)fixed[i].r->t->nbytes, l, fixed[i].kind};
        for (int e = 0; e < r->n_ext; e++)
            j->t[j->n_t++] = (scan_tensor){&r->ext[e].r, (const uint8_t *)L->ext[e].out,
                                           (int64_t)r->ext[e].r.t->nbytes, l, SK_EXT};
    }
    return PG_OK;
}

/* Scans every layer's q, k and v (on n_threads threads) and sinks for Inf/NaN,
 * failing on the first one (layer order; q, k, v, sinks within a layer), and
 * records each tensor's amax in its layer and the capture's content digest
 * (digest_capture): one pass over the data serves all three. */
static pg_status scan_capture(capture *c, const layer_refs *refs, const meta_set *ms,
                               int n_threads, pg_err *err)
{
    scan_job j = {0};
    pg_status st = scan_tensors(c, refs, &j, err);
    if (st == PG_OK && (j.item0 = calloc((size_t)j.n_t + 1, sizeof *j.item0)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    for (int t = 0; st == PG_OK && t < j.n_t; t++)
        j.item0[t + 1] = j.item0[t] + (j.t[t].bytes + SCAN_CHUNK_BYTES - 1) / SCAN_CHUNK_BYTES;
    if (st == PG_OK && j.item0[j.n_t] > INT_MAX)
        st = pg_fail(err, PG_ERR_SHAPE, "%s: too large to scan (%" PRId64 " chunks)", c->path,
                     j.item0[j.n_t]);
    const size_t items = st == PG_OK ? (size_t)j.item0[j.n_t] + 1 : 0;
    if (st == PG_OK && ((j.first = malloc(items * sizeof *j.first)) == NULL ||
                        (j.max_bits = malloc(items * sizeof *j.max_bits)) == NULL ||
                        (j.hash = malloc(items * sizeof *j.hash)) == NULL))
        st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
    if (st == PG_OK)
        st = parallel_for((int)j.item0[j.n_t], n_threads, scan_item, &j, err);
    for (int t = 0; st == PG_OK && t < j.n_t; t++) {
        const scan_tensor *s = &j.t[t];
        capture_layer *L = &c->layers[s->layer];
        if (s->kind == SK_SINKS) st = scan_sinks(s->r, L->sinks, err);
        if (s->kind > SK_V) continue;
        unsigned m = 0;
        for (int64_t it = j.item0[t]; st == PG_OK && it < j.item0[t + 1]; it++) {
            if (j.first[it] >= 0) st = report_bf16(s->r, (const uint16_t *)s->data, j.first[it], err);
            m = j.max_bits[it] > m ? j.max_bits[it] : m;
        }
        float *amax[] = {[SK_Q] = &L->q_amax, [SK_K] = &L->k_amax, [SK_V] = &L->v_amax};
        *amax[s->kind] = bf16_to_f32((uint16_t)m);
    }
    if (st == PG_OK) st = digest_capture(c, ms, &j, err);
    free(j.hash);
    free(j.max_bits);
    free(j.first);
    free(j.item0);
    free(j.t);
    return st;
}

/* ------------------------------------------------------------------------ */
/* open / close                                                             */
/* ------------------------------------------------------------------------ */

/* Every stage of capture_open after the shards are open, filling c (the scan
 * on n_threads threads). */
static pg_status load_capture(capture *c, capture_impl *impl, int n_threads, pg_err *err)
{
    meta_set ms = {0};
    layer_refs *refs = NULL;
    pg_status st = merge_metadata(impl, &ms, err);
    if (st == PG_OK) st = load_format_model(c, &ms, err);
    if (st == PG_OK) st = load_sequences(c, &ms, err);
    if (st == PG_OK) st = load_block_size(c, &ms, err);
    int n_layers = 0;
    if (st == PG_OK) st = collect_tensors(c->path, impl, &refs, &n_layers, err);
    if (st == PG_OK) {
        c->layers = calloc((size_t)n_layers, sizeof *c->layers);
        if (c->layers == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", c->path);
        else c->n_layers = n_layers;
    }
    for (int l = 0; st == PG_OK && l < n_layers; l++)
        st = check_layer_shapes(c, &refs[l], l, &c->layers[l], err);
    if (st == PG_OK) st = load_layer_metadata(c, &ms, err);
    for (int l = 0; st == PG_OK && l < n_layers; l++)
        st = load_layer_data(impl, &refs[l], &c->layers[l], err);
    if (st == PG_OK) st = scan_capture(c, refs, &ms, n_threads, err);
    free_refs(refs, n_layers);
    free(ms.e);
    return st;
}

pg_status capture_open(const char *path, capture **out, pg_err *err)
{
    return capture_open_threads(path, parallel_default_threads(), out, err);
}

pg_status capture_open_threads(const char *path, int n_threads, capture **out, pg_err *err)
{
    *out = NULL;
    capture *c = calloc(1, sizeof *c);
    capture_impl *impl = calloc(1, sizeof *impl);
    if (c == NULL || impl == NULL || (c->path = strdup(path)) == NULL) {
        free(c);
        free(impl);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    }
    c->impl = impl;
    pg_status st = open_shards(path, impl, err);
    if (st == PG_OK) st = load_capture(c, impl, n_threads, err);
    if (st != PG_OK) {
        capture_close(c);
        return st;
    }
    *out = c;
    return PG_OK;
}

void capture_close(capture *c)
{
    if (c == NULL) return;
    for (int l = 0; c->layers && l < c->n_layers; l++) {
        for (int i = 0; i < c->layers[l].n_ext; i++) free(c->layers[l].ext[i].name);
        free(c->layers[l].ext);
    }
    free(c->layers);
    capture_impl *impl = c->impl;
    if (impl != NULL) {
        for (int i = 0; i < impl->n_shards; i++) st_close(impl->shards[i]);
        free(impl->shards);
        for (int i = 0; i < impl->n_copies; i++) free(impl->copies[i]);
        free(impl->copies);
        free(impl);
    }
    free(c->seq_q);
    free(c->seq_kv);
    free(c->model);
    free(c->path);
    free(c);
}
