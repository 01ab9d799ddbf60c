/* gate_config.c: the regression gate's thresholds and their JSON file (see gate_config.h). */
#include "gate_config.h"

#include "base/variant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest key path kept for messages ("layer.metric_abs.p99_abs.ext:..."). */
#define GATE_PATH_MAX 192
/* What a variant map's key may be. */
typedef enum bound_keys {
    KEYS_ANY_VARIANT,   /* layer scope: profiles, PROFILE~spec, ext:NAME */
    KEYS_VS_REFERENCE,  /* mode_pair abs: profiles and ext:NAME (no ~spec) */
    KEYS_PAIRED_MODE,   /* mode_pair ratio: as above, bf16 excluded */
    KEYS_SERVED_MODE    /* divergence: the mode names of --endpoint MODE=URL, as given */
} bound_keys;


double gate_bound_find(const gate_bounds *b, const char *variant)
{
    for (size_t i = 0; b != NULL && variant != NULL && i < b->n; i++)
        if (strcmp(b->b[i].variant, variant) == 0) return b->b[i].value;
    return NAN;
}

pg_status gate_bound_set(gate_bounds *b, const char *variant, double value, pg_err *err)
{
    if (b == NULL || variant == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_bound_set: NULL argument");
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->b[i].variant, variant) == 0) {
            b->b[i].value = value;
            return PG_OK;
        }
    if (strlen(variant) >= GATE_VARIANT_MAX)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_bound_set: variant name longer than %d",
                       GATE_VARIANT_MAX - 1);
    if (b->n == GATE_MAX_BOUNDS)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_bound_set: more than %d variants",
                       GATE_MAX_BOUNDS);
    snprintf(b->b[b->n].variant, GATE_VARIANT_MAX, "%s", variant);
    b->b[b->n++].value = value;
    return PG_OK;
}

void gate_bound_remove(gate_bounds *b, const char *variant)
{
    for (size_t i = 0; b != NULL && variant != NULL && i < b->n; i++)
        if (strcmp(b->b[i].variant, variant) == 0) {
            memmove(&b->b[i], &b->b[i + 1], (b->n - i - 1) * sizeof b->b[0]);
            b->n--;
            return;
        }
}

void gate_config_default(gate_config *c)
{
    memset(c, 0, sizeof *c);
    c->layer.rel_tol = GATE_DEFAULT_REL_TOL;
    c->layer.metrics = GATE_DEFAULT_LAYER_METRICS;
    c->mode_pair.rel_tol = GATE_DEFAULT_REL_TOL;
    c->eval.min_effect = GATE_DEFAULT_MIN_EFFECT;
    c->divergence.max_tail_mass = GATE_DEFAULT_MAX_TAIL_MASS;
    c->divergence.min_sequences = GATE_DEFAULT_MIN_SEQUENCES;
    c->divergence.kld_rel_effect = GATE_DEFAULT_KLD_REL_EFFECT;
    c->divergence.same_top_effect = GATE_DEFAULT_SAME_TOP_EFFECT;
}

/* Parsing context: where messages say the error is. */
typedef struct parse_ctx {
    const char *source;
    pg_err *err;
} parse_ctx;

/* PG_ERR_FORMAT "<source>: <path>: <what>". */
__attribute__((format(printf, 3, 4)))
static pg_status bad(const parse_ctx *p, const char *path, const char *fmt, ...)
{
    char what[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pg_fail(p->err, PG_ERR_FORMAT, "%s: %s: %s", p->source, path, what);
}

/* why (a parser's failure, which names the key) as the file's PG_ERR_FORMAT:
 * "<source>: <why>". */
static pg_status in_file(const parse_ctx *p, const pg_err *why)
{
    return pg_fail(p->err, PG_ERR_FORMAT, "%s: %s", p->source, why->msg);
}

/* parent.key into buf. */
static void join(char *buf, size_t len, const char *parent, const char *key)
{
    if (parent[0] == '\0') snprintf(buf, len, "%s", key);
    else snprintf(buf, len, "%s.%s", parent, key);
}

/* Checks that obj (at path) is an object whose keys are unique and among
 * allowed (NULL-terminated; NULL allowed = any key), naming the first bad one. */
static pg_status check_object(const parse_ctx *p, const cJSON *obj, const char *path,
                              const char *const *allowed, const char *expected)
{
    if (!cJSON_IsObject(obj)) return bad(p, path[0] ? path : "(top level)", "expected an object");
    for (const cJSON *k = obj->child; k != NULL; k = k->next) {
        char kp[GATE_PATH_MAX];
        join(kp, sizeof kp, path, k->string);
        for (const cJSON *e = obj->child; e != k; e = e->next)
            if (strcmp(e->string, k->string) == 0) return bad(p, kp, "duplicate key");
        if (allowed == NULL) continue;
        int ok = 0;
        for (const char *const *a = allowed; *a != NULL && !ok; a++) ok = strcmp(*a, k->string) == 0;
        if (!ok) return bad(p, kp, "unknown key (expected %s)", expected);
    }
    return PG_OK;
}

/* A finite number in [lo, hi] at path into *out. */
static pg_status get_number(const parse_ctx *p, const cJSON *v, const char *path, double lo,
                            double hi, double *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi) {
        if (isinf(hi)) return bad(p, path, "expected a number >= %g", lo);
        return bad(p, path, "expected a number in [%g, %g]", lo, hi);
    }
    *out = v->valuedouble;
    return PG_OK;
}

/* Applies a variant -> number|null map at path onto b. A key is a variant
 * name (harness/variant_name.h); the bound is kept under its full name, so
 * "fp8kv" bounds fp8kv@fixed, and two keys of one full name are refused. */
static pg_status apply_bounds(const parse_ctx *p, const cJSON *obj, const char *path,
                              bound_keys keys, gate_bounds *b)
{
    pg_status st = check_object(p, obj, path, NULL, NULL);
    for (const cJSON *k = st == PG_OK ? obj->child : NULL; k != NULL && st == PG_OK; k = k->next) {
        char kp[GATE_PATH_MAX];
        join(kp, sizeof kp, path, k->string);
        if (keys == KEYS_SERVED_MODE) {
            /* A served mode is a server's name for itself, not a kernel profile. */
            if (k->string[0] == '\0' || strlen(k->string) >= GATE_VARIANT_MAX)
                return bad(p, kp, "a mode name of 1 to %d characters", GATE_VARIANT_MAX - 1);
            if (cJSON_IsNull(k)) {
                gate_bound_remove(b, k->string);
                continue;
            }
            if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble) || k->valuedouble < 0)
                return bad(p, kp, "expected a number >= 0 or null");
            if (b->n == GATE_MAX_BOUNDS && isnan(gate_bound_find(b, k->string)))
                return bad(p, kp, "more than %d modes in one map", GATE_MAX_BOUNDS);
            st = gate_bound_set(b, k->string, k->valuedouble, p->err);
            continue;
        }
        variant_name vn;
        pg_err why = {0};
        if (variant_name_parse(kp, k->string, &vn, &why) != PG_OK)
            return bad(p, kp, "unknown variant (expected %s)", variant_name_choices());
        if (strlen(vn.full) >= GATE_VARIANT_MAX)
            return bad(p, kp, "a variant name longer than %d characters", GATE_VARIANT_MAX - 1);
        for (const cJSON *e = obj->child; e != k; e = e->next) {
            variant_name en;
            if (variant_name_parse(kp, e->string, &en, &why) == PG_OK &&
                strcmp(en.full, vn.full) == 0)
                return bad(p, kp, "the same variant as key '%s' (both are %s)", e->string,
                           vn.full);
        }
        const char *v = vn.full;
        const int spec = vn.kind == VARIANT_SPEC;
        if (keys != KEYS_ANY_VARIANT && spec)
            return bad(p, kp, "a ~spec variant is not measured against the fp64 reference; "
                              "bound it under layer");
        if (keys == KEYS_PAIRED_MODE && strcmp(v, PG_MODE_BASELINE_NAME) == 0)
            return bad(p, kp, "bf16 is the reference of every pair; it takes no ratio");
        if (cJSON_IsNull(k)) {
            gate_bound_remove(b, v);
            continue;
        }
        if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble) || k->valuedouble < 0)
            return bad(p, kp, "expected a number >= 0 or null");
        if (b->n == GATE_MAX_BOUNDS && isnan(gate_bound_find(b, v)))
            return bad(p, kp, "more than %d variants in one map", GATE_MAX_BOUNDS);
        st = gate_bound_set(b, v, k->valuedouble, p->err);
    }
    return st;
}

/* The "layer" object. */
static pg_status apply_layer(const parse_ctx *p, const cJSON *o, gate_config *c)
{
    static const char *const keys[] = {"rel_tol", "metrics", "abs", "metric_abs", NULL};
    pg_status st = check_object(p, o, "layer", keys, "rel_tol, metrics, abs, metric_abs");
    const cJSON *v;
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "rel_tol")) != NULL)
        st = get_number(p, v, "layer.rel_tol", 0, INFINITY, &c->layer.rel_tol);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "metrics")) != NULL) {
        if (!cJSON_IsArray(v)) return bad(p, "layer.metrics", "expected an array of metric names");
        unsigned set = 0;
        int i = 0;
        for (const cJSON *e = v->child; e != NULL; e = e->next, i++) {
            char ep[GATE_PATH_MAX];
            snprintf(ep, sizeof ep, "layer.metrics[%d]", i);
            pg_metric m;
            pg_err why = {0};   /* pg_metric_parse's wording, then the file named */
            if (pg_metric_parse(ep, cJSON_IsString(e) ? e->valuestring : NULL,
                                PG_METRIC_VALUE_COUNT, &m, &why) != PG_OK)
                return in_file(p, &why);
            set |= 1u << m;
        }
        c->layer.metrics = set;
    }
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "abs")) != NULL)
        st = apply_bounds(p, v, "layer.abs", KEYS_ANY_VARIANT, &c->layer.abs[PG_METRIC_REL_L2]);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "metric_abs")) != NULL) {
        st = check_object(p, v, "layer.metric_abs", NULL, NULL);
        for (const cJSON *k = st == PG_OK ? v->child : NULL; k != NULL && st == PG_OK;
             k = k->next) {
            char kp[GATE_PATH_MAX];
            join(kp, sizeof kp, "layer.metric_abs", k->string);
            pg_metric m;
            pg_err why = {0};   /* pg_metric_parse's wording, then the file named */
            if (pg_metric_parse(kp, k->string, PG_METRIC_VALUE_COUNT, &m, &why) != PG_OK)
                return in_file(p, &why);
            if (m == PG_METRIC_REL_L2) return bad(p, kp, "rel_l2's bounds are layer.abs");
            st = apply_bounds(p, k, kp, KEYS_ANY_VARIANT, &c->layer.abs[m]);
        }
    }
    return st;
}

/* The "mode_pair" object. */
static pg_status apply_mode_pair(const parse_ctx *p, const cJSON *o, gate_config *c)
{
    static const char *const keys[] = {"rel_tol", "abs", "ratio", NULL};
    pg_status st = check_object(p, o, "mode_pair", keys, "rel_tol, abs, ratio");
    const cJSON *v;
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "rel_tol")) != NULL)
        st = get_number(p, v, "mode_pair.rel_tol", 0, INFINITY, &c->mode_pair.rel_tol);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "abs")) != NULL)
        st = apply_bounds(p, v, "mode_pair.abs", KEYS_VS_REFERENCE, &c->mode_pair.abs);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "ratio")) != NULL)
        st = apply_bounds(p, v, "mode_pair.ratio", KEYS_PAIRED_MODE, &c->mode_pair.ratio);
    return st;
}

int gate_config_expects_identical(const gate_config *c, const char *a, const char *b)
{
    if (c == NULL || a == NULL || b == NULL || strcmp(a, b) == 0) return 0;
    int ga = -1, gb = -1;
    for (size_t i = 0; i < c->eval.n_identical; i++) {
        if (strcmp(c->eval.identical[i].mode, a) == 0) ga = c->eval.identical[i].group;
        if (strcmp(c->eval.identical[i].mode, b) == 0) gb = c->eval.identical[i].group;
    }
    return ga >= 0 && ga == gb;
}

/* The "eval.identical_modes" array (replacing any groups set before). */
static pg_status apply_identical(const parse_ctx *p, const cJSON *v, gate_config *c)
{
    static const char path[] = "eval.identical_modes";
    if (!cJSON_IsArray(v)) return bad(p, path, "expected an array of groups of mode names");
    c->eval.n_identical = 0;
    int g = 0;
    for (const cJSON *grp = v->child; grp != NULL; grp = grp->next, g++) {
        char gp[GATE_PATH_MAX];
        snprintf(gp, sizeof gp, "%s[%d]", path, g);
        if (!cJSON_IsArray(grp) || cJSON_GetArraySize(grp) < 2)
            return bad(p, gp, "expected an array of at least 2 mode names");
        int j = 0;
        for (const cJSON *e = grp->child; e != NULL; e = e->next, j++) {
            char ep[GATE_PATH_MAX];
            snprintf(ep, sizeof ep, "%s[%d][%d]", path, g, j);
            if (!cJSON_IsString(e) || e->valuestring[0] == '\0')
                return bad(p, ep, "expected a non-empty mode name");
            if (strlen(e->valuestring) >= GATE_VARIANT_MAX)
                return bad(p, ep, "a mode name longer than %d characters", GATE_VARIANT_MAX - 1);
            for (size_t i = 0; i < c->eval.n_identical; i++)
                if (strcmp(c->eval.identical[i].mode, e->valuestring) == 0)
                    return bad(p, ep, c->eval.identical[i].group == g
                                          ? "'%s' twice in one group"
                                          : "'%s' is in an earlier group already (a mode "
                                            "belongs to one group)", e->valuestring);
            if (c->eval.n_identical == GATE_MAX_IDENTICAL)
                return bad(p, ep, "more than %d modes in all", GATE_MAX_IDENTICAL);
            snprintf(c->eval.identical[c->eval.n_identical].mode, GATE_VARIANT_MAX, "%s",
                     e->valuestring);
            c->eval.identical[c->eval.n_identical++].group = g;
        }
    }
    return PG_OK;
}

/* The "eval" object. */
static pg_status apply_eval(const parse_ctx *p, const cJSON *o, gate_config *c)
{
    static const char *const keys[] = {"min_effect", "identical_modes", NULL};
    pg_status st = check_object(p, o, "eval", keys, "min_effect, identical_modes");
    const cJSON *v;
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "min_effect")) != NULL)
        st = get_number(p, v, "eval.min_effect", 0, 1, &c->eval.min_effect);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "identical_modes")) != NULL)
        st = apply_identical(p, v, c);
    return st;
}

/* The "divergence" object. */
static pg_status apply_divergence(const parse_ctx *p, const cJSON *o, gate_config *c)
{
    static const char *const keys[] = {"kld_mean",       "same_top_min",    "max_tail_mass",
                                       "min_sequences",  "kld_rel_effect",  "same_top_effect",
                                       NULL};
    pg_status st = check_object(p, o, "divergence", keys,
                                "kld_mean, same_top_min, max_tail_mass, min_sequences, "
                                "kld_rel_effect, same_top_effect");
    const cJSON *v;
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "kld_mean")) != NULL)
        st = apply_bounds(p, v, "divergence.kld_mean", KEYS_SERVED_MODE, &c->divergence.kld_mean);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "same_top_min")) != NULL)
        st = apply_bounds(p, v, "divergence.same_top_min", KEYS_SERVED_MODE,
                          &c->divergence.same_top_min);
    for (size_t i = 0; st == PG_OK && i < c->divergence.same_top_min.n; i++)
        if (c->divergence.same_top_min.b[i].value > 1)
            return bad(p, "divergence.same_top_min", "'%s': a fraction in [0, 1]",
                       c->divergence.same_top_min.b[i].variant);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "max_tail_mass")) != NULL)
        st = get_number(p, v, "divergence.max_tail_mass", 0, 1, &c->divergence.max_tail_mass);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "kld_rel_effect")) != NULL)
        st = get_number(p, v, "divergence.kld_rel_effect", 0, GATE_MAX_KLD_REL_EFFECT,
                        &c->divergence.kld_rel_effect);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "same_top_effect")) != NULL)
        st = get_number(p, v, "divergence.same_top_effect", 0, 1,
                        &c->divergence.same_top_effect);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(o, "min_sequences")) != NULL) {
        double d = 0;
        st = get_number(p, v, "divergence.min_sequences", GATE_DEFAULT_MIN_SEQUENCES,
                        GATE_MAX_MIN_SEQUENCES, &d);
        if (st == PG_OK && floor(d) != d)
            return bad(p, "divergence.min_sequences", "expected an integer");
        c->divergence.min_sequences = (int)d;
    }
    return st;
}

pg_status gate_config_parse(const char *text, const char *source, gate_config *c, pg_err *err)
{
    if (text == NULL || source == NULL || c == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_config_parse: NULL argument");
    gate_config_default(c);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (root == NULL) {
        const size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
        return pg_fail(err, PG_ERR_FORMAT, "%s: not valid JSON (at byte %zu)", source, at);
    }
    const parse_ctx p = {source, err};
    static const char *const keys[] = {"layer", "mode_pair", "eval", "divergence", NULL};
    pg_status st = check_object(&p, root, "", keys, "layer, mode_pair, eval, divergence");
    const cJSON *v;
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(root, "layer")) != NULL)
        st = apply_layer(&p, v, c);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(root, "mode_pair")) != NULL)
        st = apply_mode_pair(&p, v, c);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(root, "eval")) != NULL)
        st = apply_eval(&p, v, c);
    if (st == PG_OK && (v = cJSON_GetObjectItemCaseSensitive(root, "divergence")) != NULL)
        st = apply_divergence(&p, v, c);
    cJSON_Delete(root);
    return st;
}

pg_status gate_config_load(const char *path, gate_config *c, pg_err *err)
{
    if (path == NULL || c == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_config_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (f == NULL) return pg_fail(err, PG_ERR_IO, "%s: cannot open the gate config", path);
    char *buf = malloc(GATE_CONFIG_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory reading the gate config", path);
    }
    const size_t n = fread(buf, 1, GATE_CONFIG_MAX_BYTES + 1, f);
    const int failed = ferror(f);
    fclose(f);
    pg_status st = PG_OK;
    if (failed) st = pg_fail(err, PG_ERR_IO, "%s: cannot read the gate config", path);
    else if (n > GATE_CONFIG_MAX_BYTES)
        st = pg_fail(err, PG_ERR_IO, "%s: gate config larger than %u bytes", path,
                     GATE_CONFIG_MAX_BYTES);
    if (st == PG_OK) {
        buf[n] = '\0';
        if (strlen(buf) != n) st = pg_fail(err, PG_ERR_FORMAT, "%s: holds a NUL byte", path);
    }
    if (st == PG_OK) st = gate_config_parse(buf, path, c, err);
    free(buf);
    return st;
}
