/* diverge_config.c: a diverge run's runs.config_json, written and read in one place (see diverge_config.h). */
#include "diverge_config.h"

#include <stdlib.h>
#include <string.h>

cJSON *diverge_config_write(const diverge_run_config *c)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL && cJSON_AddStringToObject(o, RUN_CONFIG_KIND, DIVERGE_CONFIG_KIND) &&
             cJSON_AddStringToObject(o, RUN_CONFIG_REFERENCE, c->reference) &&
             cJSON_AddNumberToObject(o, RUN_CONFIG_TOP_K, c->top_k) &&
             cJSON_AddBoolToObject(o, RUN_CONFIG_NOISE_FLOOR, c->noise_floor) &&
             cJSON_AddStringToObject(o, RUN_CONFIG_SEQUENCES_DIGEST, c->sequences_digest) &&
             run_config_add_sorted(o, RUN_CONFIG_MODES, c->modes, c->n_modes);
    if (ok && c->part.count > 0)
        ok = run_config_add_part_owning(o, &c->part, RUN_CONFIG_SHARD_SEQUENCES,
                                        c->shard_sequences, c->n_shard_sequences);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

pg_status diverge_config_read(const char *json, diverge_config_doc *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (json == NULL || (out->tree = cJSON_Parse(json)) == NULL || !cJSON_IsObject(out->tree))
        return pg_fail(err, PG_ERR_USAGE, "the run has no readable config_json");
    const cJSON *t = out->tree;
    diverge_run_config *c = &out->c;
    c->kind = run_config_string(t, RUN_CONFIG_KIND);
    c->reference = run_config_string(t, RUN_CONFIG_REFERENCE);
    c->top_k_known = run_config_int(t, RUN_CONFIG_TOP_K, &c->top_k);
    const cJSON *floor_on = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_NOISE_FLOOR);
    c->noise_floor_known = cJSON_IsBool(floor_on);
    c->noise_floor = cJSON_IsTrue(floor_on);
    c->sequences_digest = run_config_string(t, RUN_CONFIG_SEQUENCES_DIGEST);
    run_config_read_part(t, &c->part);
    pg_status st = run_config_read_strings(t, RUN_CONFIG_MODES, &out->storage[0], &c->modes,
                                           &c->n_modes, err);
    if (st == PG_OK)
        st = run_config_read_strings(t, RUN_CONFIG_SHARD_SEQUENCES, &out->storage[1],
                                     &c->shard_sequences, &c->n_shard_sequences, err);
    return st;
}

void diverge_config_doc_free(diverge_config_doc *d)
{
    if (d == NULL) return;
    cJSON_Delete(d->tree);
    for (size_t i = 0; i < sizeof d->storage / sizeof d->storage[0]; i++) free(d->storage[i]);
    memset(d, 0, sizeof *d);
}
