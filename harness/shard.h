/*
 * shard.h: splitting one job into N parts that separate processes compute
 * independently (run --shard I/N, eval --shard I/N), and the job key that
 * ties the parts together for `precgate merge`.
 *
 * A sweep's unit is one (capture, layer); an eval's is one problem (all its
 * samples, modes and efforts). Every shard computes the same assignment on
 * its own from the same inputs, so no coordinator is needed: the split is a
 * pure function of the units and N. A shard owning no unit (N larger than
 * the units) is valid: it stores a complete run with no rows.
 */
#ifndef PG_SHARD_H
#define PG_SHARD_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "base/status.h"
#include "harness/capture/capture.h"

/* Most parts one job may be split into (far above any cluster's array). */
#define SHARD_MAX_COUNT 100000
/* Longest job key (--job KEY or the default digest), NUL included. */
#define SHARD_JOB_MAX 65

/* Which part of a job this process computes; count 0: not sharded. */
typedef struct shard_spec {
    int index;   /* 0 .. count-1 */
    int count;   /* N */
} shard_spec;

/* Parses "I/N" (decimal, 0 <= I < N <= SHARD_MAX_COUNT) into *out;
 * PG_ERR_USAGE "CMD: --shard 'TEXT' is not I/N with 0 <= I < N <= MAX". */
pg_status shard_parse(const char *cmd, const char *text, shard_spec *out, pg_err *err);

/* Checks a --job KEY: 1 .. SHARD_JOB_MAX-1 characters of [A-Za-z0-9._-]
 * (it names files and Slurm jobs); PG_ERR_USAGE naming it otherwise. */
pg_status shard_job_check(const char *cmd, const char *key, pg_err *err);

/* One unit of work to place: a name and an index (capture path and layer;
 * eval: problem id and 0) and its cost (>= 0). */
typedef struct shard_unit {
    const char *name;
    int index;
    double cost;
} shard_unit;

/* The deterministic greedy split (longest processing time first): units by
 * cost, largest first, ties by name (strcmp) then index; each goes to the
 * shard with the least cost so far, ties to the lowest shard. owner[i] gets
 * unit i's shard. Every shard's load is at most total/count + the largest
 * cost. PG_ERR_USAGE when count < 1, PG_ERR_NOMEM. */
pg_status shard_assign(const shard_unit *units, int n, int count, int *owner, pg_err *err);

/* Attention FLOPs of layer li of cap for one variant (QK^T and PV: 4 x
 * query heads x head dim per (query, key seen), keys seen counting the
 * causal mask, the sequence's context and the layer's window), times
 * (n_variants + 1: the fp64 reference). */
double shard_layer_flops(const capture *cap, int li, int n_variants);

/* Marks in owned[0 .. n_layers-1] the layers of cap that shard s owns
 * (shard_assign over the layers' shard_layer_flops, the unit's name the
 * capture path as given); *n_owned counts them. */
pg_status shard_capture_layers(const capture *cap, const char *capture_name, int n_variants,
                               shard_spec s, unsigned char *owned, int *n_owned, pg_err *err);

/* Marks in keep[0 .. n-1] the problems shard s owns: ids sorted (strcmp),
 * shard s takes the s-th of count contiguous runs of floor or ceil(n/count)
 * ids, so all samples, modes and efforts of a problem land in one shard. */
pg_status shard_problems(const char *const *ids, int n, shard_spec s, unsigned char *keep,
                         pg_err *err);

/* The default job key: "j" and 32 hex digits of XXH3-128 over text (the
 * options that define the job's numbers, as canonical JSON) and count. */
void shard_job_key(const char *text, int count, char out[SHARD_JOB_MAX]);

/* The default job key of a part whose run config is config: shard_job_key
 * over config's defining fields (every key but shard_config_local_keys) as
 * unformatted JSON, and count. PG_ERR_NOMEM. */
pg_status shard_default_job(const cJSON *config, int count, char out[SHARD_JOB_MAX], pg_err *err);

/* Keys of a shard's config_json that differ between the parts of one job
 * by design (the shard's own place, threads, paths and URLs that do not
 * define the numbers); merge compares every other key. NULL-terminated. */
extern const char *const shard_config_local_keys[];

#endif /* PG_SHARD_H */
