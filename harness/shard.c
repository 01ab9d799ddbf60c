/* shard.c: the parts of a sharded job and its job key (see shard.h). */
#include "shard.h"

#include "db/run_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* FLOPs per (query, key seen, head dim element): a multiply-add in QK^T and
 * one in PV. */
#define SHARD_FLOPS_PER_MAC_PAIR 4.0
/* What a default job key is made of, so that a key from another scheme
 * (another hash, other fields) can never collide with one of these. */
#define SHARD_JOB_DOMAIN "precgate.job.v1 xxh3-128"

const char *const shard_config_local_keys[] = {
    RUN_CONFIG_SHARD,          /* this part's index (the count is in the job key) */
    RUN_CONFIG_SHARD_LAYERS,   /* the layers this sweep part owns */
    RUN_CONFIG_SHARD_PROBLEMS, /* the problems this eval part owns */
    RUN_CONFIG_SHARD_SEQUENCES,/* the sequences this diverge part owns */
    RUN_CONFIG_THREADS,        /* CPU threads: speed only */
    RUN_CONFIG_TRACES,         /* the traces' path: their content is traces_digest */
    RUN_CONFIG_ENDPOINTS,      /* server URLs: a mode's server may move (eval --resume) */
    RUN_CONFIG_API_KEY_ENV,    /* the variable holding the key */
    NULL,
};

pg_status shard_parse(const char *cmd, const char *text, shard_spec *out, pg_err *err)
{
    long i = -1, n = -1;
    int used = 0;
    if (sscanf(text, "%ld/%ld%n", &i, &n, &used) != 2 || text[used] != '\0' ||
        strspn(text, "0123456789/") != strlen(text) || n < 1 || n > SHARD_MAX_COUNT || i < 0 ||
        i >= n)
        return pg_fail(err, PG_ERR_USAGE,
                       "%s: --shard '%s' is not I/N with 0 <= I < N <= %d (I counts from 0)", cmd,
                       text, SHARD_MAX_COUNT);
    *out = (shard_spec){.index = (int)i, .count = (int)n};
    return PG_OK;
}

pg_status shard_job_check(const char *cmd, const char *key, pg_err *err)
{
    const char *ok = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    const size_t len = strlen(key);
    if (len == 0 || len >= SHARD_JOB_MAX || strspn(key, ok) != len)
        return pg_fail(err, PG_ERR_USAGE,
                       "%s: --job '%s' is not 1 to %d characters of A-Z a-z 0-9 . _ -", cmd, key,
                       SHARD_JOB_MAX - 1);
    return PG_OK;
}

/* The units being sorted, for the qsort comparator. */
typedef struct ranked {
    const shard_unit *u;
    int at;   /* its position in the caller's array */
} ranked;

/* Largest cost first, then name, then index: the greedy's order. */
static int by_cost_desc(const void *pa, const void *pb)
{
    const shard_unit *a = ((const ranked *)pa)->u, *b = ((const ranked *)pb)->u;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    const int c = strcmp(a->name, b->name);
    if (c != 0) return c;
    return (a->index > b->index) - (a->index < b->index);
}

pg_status shard_assign(const shard_unit *units, int n, int count, int *owner, pg_err *err)
{
    if (count < 1) return pg_fail(err, PG_ERR_USAGE, "shard: %d parts: need at least 1", count);
    if (n <= 0) return PG_OK;
    ranked *order = malloc((size_t)n * sizeof *order);
    double *load = calloc((size_t)count, sizeof *load);
    if (order == NULL || load == NULL) {
        free(order);
        free(load);
        return pg_fail(err, PG_ERR_NOMEM, "shard: out of memory for %d units", n);
    }
    for (int i = 0; i < n; i++) order[i] = (ranked){&units[i], i};
    qsort(order, (size_t)n, sizeof *order, by_cost_desc);
    for (int i = 0; i < n; i++) {
        int least = 0;
        for (int s = 1; s < count; s++)
            if (load[s] < load[least]) least = s;
        load[least] += order[i].u->cost;
        owner[order[i].at] = least;
    }
    free(order);
    free(load);
    return PG_OK;
}

double shard_layer_flops(const capture *cap, int li, int n_variants)
{
    const capture_layer *L = &cap->layers[li];
    double keys_seen = 0;
    for (int s = 0; s < cap->n_seqs; s++) {
        const int64_t context = cap->seq_kv[s] - cap->seq_q[s];
        for (int64_t j = 0; j < cap->seq_q[s]; j++) {
            const int64_t seen = context + j + 1;
            keys_seen += (double)(L->window > 0 && seen > L->window ? L->window : seen);
        }
    }
    return SHARD_FLOPS_PER_MAC_PAIR * L->hq * L->d * keys_seen * (n_variants + 1);
}

pg_status shard_capture_layers(const capture *cap, const char *capture_name, int n_variants,
                               shard_spec s, unsigned char *owned, int *n_owned, pg_err *err)
{
    const int n = cap->n_layers;
    shard_unit *u = calloc((size_t)n + 1, sizeof *u);
    int *owner = malloc((size_t)n * sizeof *owner);
    pg_status st = u != NULL && owner != NULL
                       ? PG_OK
                       : pg_fail(err, PG_ERR_NOMEM, "shard: out of memory for %d layers", n);
    for (int l = 0; st == PG_OK && l < n; l++)
        u[l] = (shard_unit){capture_name, l, shard_layer_flops(cap, l, n_variants)};
    if (st == PG_OK) st = shard_assign(u, n, s.count, owner, err);
    *n_owned = 0;
    for (int l = 0; st == PG_OK && l < n; l++) {
        owned[l] = owner[l] == s.index;
        *n_owned += owned[l];
    }
    free(u);
    free(owner);
    return st;
}

/* qsort order of the id pointers. */
static int by_id(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

pg_status shard_problems(const char *const *ids, int n, shard_spec s, unsigned char *keep,
                         pg_err *err)
{
    if (s.count < 1 || s.index < 0 || s.index >= s.count)
        return pg_fail(err, PG_ERR_INTERNAL, "shard_problems: shard %d/%d", s.index, s.count);
    if (n <= 0) return PG_OK;
    const char *const **sorted = malloc((size_t)n * sizeof *sorted);
    if (sorted == NULL) return pg_fail(err, PG_ERR_NOMEM, "shard: out of memory for %d ids", n);
    for (int i = 0; i < n; i++) sorted[i] = &ids[i];
    qsort(sorted, (size_t)n, sizeof *sorted, by_id);
    /* Shard k takes sorted positions [k*n/count, (k+1)*n/count). */
    const int64_t lo = (int64_t)s.index * n / s.count, hi = (int64_t)(s.index + 1) * n / s.count;
    memset(keep, 0, (size_t)n);
    for (int64_t r = lo; r < hi; r++) keep[sorted[r] - ids] = 1;
    free(sorted);
    return PG_OK;
}

void shard_job_key(const char *text, int count, char out[SHARD_JOB_MAX])
{
    XXH3_state_t hs;
    XXH3_INITSTATE(&hs);
    XXH3_128bits_reset(&hs);
    XXH3_128bits_update(&hs, SHARD_JOB_DOMAIN, sizeof SHARD_JOB_DOMAIN);
    char n[32];
    const int len = snprintf(n, sizeof n, "count=%d;", count);
    XXH3_128bits_update(&hs, n, (size_t)len);
    XXH3_128bits_update(&hs, text, strlen(text));
    const XXH128_hash_t h = XXH3_128bits_digest(&hs);
    snprintf(out, SHARD_JOB_MAX, "j%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

pg_status shard_default_job(const cJSON *config, int count, char out[SHARD_JOB_MAX], pg_err *err)
{
    cJSON *defining = cJSON_Duplicate(config, 1);
    for (int i = 0; defining != NULL && shard_config_local_keys[i] != NULL; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(defining, shard_config_local_keys[i]);
    char *text = defining != NULL ? cJSON_PrintUnformatted(defining) : NULL;
    cJSON_Delete(defining);
    if (text == NULL) return pg_fail(err, PG_ERR_NOMEM, "shard: out of memory for the job key");
    shard_job_key(text, count, out);
    free(text);
    return PG_OK;
}
