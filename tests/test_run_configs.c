/*
 * test_run_configs.c: the sweep, eval and diverge configs' one writer and one
 * reader (db/eval_config.h, db/diverge_config.h): what is written reads
 * back as the same fields, the keys come in the order runs have always
 * recorded them, and a missing or mistyped key reads as unknown.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "db/diverge_config.h"
#include "db/eval_config.h"
#include "db/run_config.h"

/* A seed beyond a double's 53 bits: only its text keeps it exact. */
#define BIG_SEED 18446744073709551557ULL

static const char *const modes_given[] = {"fp8kv", "bf16", "fp8kv"};
static const eval_config_pair servers[] = {
    {"fp8kv", "http://a:1"}, {"bf16", "http://b:2"}, {"fp8kv", "http://c:3"}};
static const eval_config_pair served[] = {{"bf16", "m-bf16"}, {"fp8kv", "m-fp8"}};
static const char *const efforts_given[] = {"low", "high"};
static const char *const owned[] = {"p2", "p1"};

/* A live part of a sharded eval, every field set. */
static eval_run_config live_config(void)
{
    return (eval_run_config){.config_version = 2, .traces = "t.jsonl", .traces_digest = "d1",
                             .eval = "aime", .extractor = "boxed", .limit = 4,
                             .prompt_template = "tmpl", .modes = modes_given, .n_modes = 3,
                             .endpoints = servers, .n_endpoints = 3, .models = served,
                             .n_models = 2, .efforts = efforts_given, .n_efforts = 2,
                             .samples = 3, .temperature = 0.5, .top_p = 0.9, .seed = BIG_SEED,
                             .max_tokens = 100, .model = "served", .api_key_env = "KEY",
                             .plan_known = 1, .plan_problems = 4, .plan_modes = modes_given,
                             .n_plan_modes = 3, .plan_efforts = efforts_given,
                             .n_plan_efforts = 2, .plan_samples = 3, 
                             .part = {.job = "jx", .index = 1, .count = 2}, .shard_problems = owned,
                             .n_shard_problems = 2};
}

/* c written and read back into d (asserting both work). */
static void write_read(const eval_run_config *c, eval_config_doc *d)
{
    cJSON *o = eval_config_write(c);
    cr_assert_not_null(o);
    char *text = cJSON_PrintUnformatted(o);
    pg_err err = {0};
    cr_assert_eq(eval_config_read(text, d, &err), PG_OK, "%s", err.msg);
    free(text);
    cJSON_Delete(o);
}

static void expect_strings(const char *const *got, int n_got, const char *const *want, int n)
{
    cr_assert_eq(n_got, n);
    for (int i = 0; i < n; i++) cr_expect_str_eq(got[i], want[i], "entry %d", i);
}

Test(run_configs, eval_written_reads_back_the_same_fields)
{
    const eval_run_config c = live_config();
    eval_config_doc d;
    write_read(&c, &d);
    const eval_run_config *r = &d.c;
    cr_expect(r->config_version_known && r->config_version == 2);
    cr_expect_str_eq(r->traces, "t.jsonl");
    cr_expect_str_eq(r->traces_digest, "d1");
    cr_expect_str_eq(r->eval, "aime");
    cr_expect(r->source_known && !r->replay);
    cr_expect_str_eq(r->extractor, "boxed");
    cr_expect(r->limit_known && r->limit == 4);
    cr_expect_str_eq(r->prompt_template, "tmpl");
    /* Lists whose order defines nothing are recorded distinct and sorted. */
    static const char *const modes_sorted[] = {"bf16", "fp8kv"};
    static const char *const efforts_sorted[] = {"high", "low"};
    expect_strings(r->modes, r->n_modes, modes_sorted, 2);
    expect_strings(r->efforts, r->n_efforts, efforts_sorted, 2);
    cr_assert(r->endpoints_known);
    cr_assert_eq(r->n_endpoints, 3);
    /* A mode's servers together, modes in the order of their first server. */
    static const eval_config_pair grouped[] = {
        {"fp8kv", "http://a:1"}, {"fp8kv", "http://c:3"}, {"bf16", "http://b:2"}};
    for (int i = 0; i < 3; i++) {
        cr_expect_str_eq(r->endpoints[i].mode, grouped[i].mode);
        cr_expect_str_eq(r->endpoints[i].value, grouped[i].value);
    }
    cr_assert(r->models_known);
    cr_assert_eq(r->n_models, 2);
    cr_expect_str_eq(r->models[1].mode, "fp8kv");
    cr_expect_str_eq(r->models[1].value, "m-fp8");
    cr_expect(r->samples_known && r->samples == 3);
    cr_expect(r->temperature_known && r->temperature == 0.5);
    cr_expect(r->top_p_known && r->top_p == 0.9);
    cr_expect(r->seed_known && r->seed == BIG_SEED);
    cr_expect(r->max_tokens_known && r->max_tokens == 100);
    cr_expect_str_eq(r->model, "served");
    cr_expect_str_eq(r->api_key_env, "KEY");
    cr_expect(r->plan_known && r->plan_problems_known && r->plan_problems == 4);
    expect_strings(r->plan_modes, r->n_plan_modes, modes_sorted, 2);
    expect_strings(r->plan_efforts, r->n_plan_efforts, efforts_sorted, 2);
    cr_expect(r->plan_samples_known && r->plan_samples == 3);
    cr_expect(r->part.known && r->part.readable);
    cr_expect_str_eq(r->part.job, "jx");
    cr_expect(r->part.index == 1 && r->part.count == 2);
    cr_expect(r->shard_problems_known);
    expect_strings(r->shard_problems, r->n_shard_problems, owned, 2);
    eval_config_doc_free(&d);
}

Test(run_configs, eval_keys_come_in_the_recorded_order)
{
    eval_run_config c = live_config();
    c.top_p = -1;
    c.max_tokens = 0;
    c.seed = 7;
    c.n_models = 0;
    c.part.count = 0;
    c.plan_known = 0;
    cJSON *o = eval_config_write(&c);
    char *text = cJSON_PrintUnformatted(o);
    cr_expect_str_eq(text,
                     "{\"config_version\":2,\"traces\":\"t.jsonl\",\"traces_digest\":\"d1\","
                     "\"eval\":\"aime\",\"source\":\"live\",\"extractor\":\"boxed\",\"limit\":4,"
                     "\"prompt_template\":\"tmpl\",\"modes\":[\"bf16\",\"fp8kv\"],"
                     "\"endpoints\":{\"fp8kv\":[\"http://a:1\",\"http://c:3\"],"
                     "\"bf16\":\"http://b:2\"},\"models\":{},\"efforts\":[\"high\",\"low\"],"
                     "\"samples\":3,\"temperature\":0.5,\"top_p\":null,\"seed\":\"7\","
                     "\"max_tokens\":null,\"model\":\"served\",\"api_key_env\":\"KEY\"}");
    free(text);
    cJSON_Delete(o);
    /* A replay records no server settings. */
    const eval_run_config r = {.config_version = 2, .traces = "t", .traces_digest = "d",
                               .eval = "e", .replay = 1, .extractor = "x"};
    o = eval_config_write(&r);
    text = cJSON_PrintUnformatted(o);
    cr_expect_str_eq(text, "{\"config_version\":2,\"traces\":\"t\",\"traces_digest\":\"d\","
                           "\"eval\":\"e\",\"source\":\"replay\",\"extractor\":\"x\"}");
    free(text);
    cJSON_Delete(o);
}

Test(run_configs, eval_missing_or_mistyped_keys_read_as_unknown)
{
    eval_config_doc d;
    pg_err err = {0};
    cr_assert_eq(eval_config_read("{\"config_version\":\"2\",\"source\":\"elsewhere\","
                                  "\"samples\":2.5,\"temperature\":null,\"top_p\":\"x\","
                                  "\"seed\":\"-1\",\"models\":[],\"endpoints\":7,"
                                  "\"modes\":[1,\"bf16\"],\"efforts\":\"low\","
                                  "\"plan\":{\"problems\":\"4\"},\"shard\":{\"index\":0},"
                                  "\"shard_problems\":{}}",
                                  &d, &err),
                 PG_OK, "%s", err.msg);
    const eval_run_config *r = &d.c;
    cr_expect(!r->config_version_known);
    cr_expect(!r->source_known);
    cr_expect(!r->samples_known);
    cr_expect(!r->temperature_known);
    cr_expect(!r->top_p_known);
    cr_expect(!r->seed_known);
    cr_expect(!r->max_tokens_known);
    cr_expect(!r->models_known);
    cr_expect(!r->endpoints_known);
    cr_assert_eq(r->n_modes, 2);
    cr_expect_null(r->modes[0], "a number in the modes reads as no name");
    cr_expect_str_eq(r->modes[1], "bf16");
    cr_expect_eq(r->n_efforts, -1);
    cr_expect(r->plan_known && !r->plan_problems_known && !r->plan_samples_known);
    cr_expect_eq(r->n_plan_modes, -1);
    cr_expect(r->part.known && !r->part.readable);
    cr_expect(r->shard_problems_known);
    cr_expect_eq(r->n_shard_problems, -1);
    cr_expect_null(r->traces);
    eval_config_doc_free(&d);
    cr_expect_eq(eval_config_read("[1]", &d, &err), PG_ERR_USAGE);
    eval_config_doc_free(&d);
    cr_expect_eq(eval_config_read("not json", &d, &err), PG_ERR_USAGE);
    eval_config_doc_free(&d);
    cr_expect_eq(eval_config_read(NULL, &d, &err), PG_ERR_USAGE);
    eval_config_doc_free(&d);
}

Test(run_configs, eval_update_replaces_keys_in_place_and_appends_the_rest)
{
    eval_config_doc d;
    pg_err err = {0};
    cr_assert_eq(eval_config_read("{\"config_version\":2,\"source\":\"live\",\"other\":1,"
                                  "\"models\":{\"bf16\":\"m\"}}", &d, &err), PG_OK);
    eval_run_config c = d.c;
    const eval_config_pair more[] = {{"bf16", "m"}, {"fp8kv", "n"}};
    c.models = more;
    c.n_models = 2;
    c.plan_known = 1;
    c.plan_problems = 1;
    c.plan_samples = 1;
    const char *const keys[] = {RUN_CONFIG_MODELS, RUN_CONFIG_PLAN};
    cr_assert_eq(eval_config_doc_update(&d, &c, keys, 2, &err), PG_OK, "%s", err.msg);
    char *text = cJSON_PrintUnformatted(d.tree);
    cr_expect_str_eq(text, "{\"config_version\":2,\"source\":\"live\",\"other\":1,"
                           "\"models\":{\"bf16\":\"m\",\"fp8kv\":\"n\"},\"plan\":{\"problems\":1,"
                           "\"modes\":[],\"efforts\":[],\"samples\":1}}");
    free(text);
    cr_expect_eq(d.c.n_models, 2, "the fields are read again");
    cr_expect(d.c.plan_known);
    eval_config_doc_free(&d);
}

Test(run_configs, diverge_written_reads_back_the_same_fields)
{
    static const char *const seqs[] = {"s2", "s1"};
    const diverge_run_config c = {.reference = "bf16", .top_k = 20, .noise_floor = 1,
                                  .sequences_digest = "sd", .modes = modes_given, .n_modes = 3,
                                  .part = {.job = "j", .index = 0, .count = 3},
                                  .shard_sequences = seqs, .n_shard_sequences = 2};
    cJSON *o = diverge_config_write(&c);
    cr_assert_not_null(o);
    char *text = cJSON_PrintUnformatted(o);
    cr_expect_str_eq(text, "{\"kind\":\"diverge\",\"reference\":\"bf16\",\"top_k\":20,"
                           "\"noise_floor\":true,\"sequences_digest\":\"sd\","
                           "\"modes\":[\"bf16\",\"fp8kv\"],\"job\":\"j\","
                           "\"shard\":{\"index\":0,\"count\":3},\"shard_sequences\":[\"s2\",\"s1\"]}");
    diverge_config_doc d;
    pg_err err = {0};
    cr_assert_eq(diverge_config_read(text, &d, &err), PG_OK, "%s", err.msg);
    const diverge_run_config *r = &d.c;
    cr_expect_str_eq(r->kind, DIVERGE_CONFIG_KIND);
    cr_expect_str_eq(r->reference, "bf16");
    cr_expect(r->top_k_known && r->top_k == 20);
    cr_expect(r->noise_floor_known && r->noise_floor);
    cr_expect_str_eq(r->sequences_digest, "sd");
    static const char *const modes_sorted[] = {"bf16", "fp8kv"};
    expect_strings(r->modes, r->n_modes, modes_sorted, 2);
    cr_expect(r->part.known && r->part.readable && r->part.count == 3);
    cr_expect_str_eq(r->part.job, "j");
    expect_strings(r->shard_sequences, r->n_shard_sequences, seqs, 2);
    free(text);
    cJSON_Delete(o);
    diverge_config_doc_free(&d);
}

Test(run_configs, diverge_missing_or_mistyped_keys_read_as_unknown)
{
    diverge_config_doc d;
    pg_err err = {0};
    cr_assert_eq(diverge_config_read("{\"reference\":3,\"top_k\":2.5,\"noise_floor\":1,"
                                     "\"modes\":\"bf16\",\"shard_sequences\":[\"a\",2]}",
                                     &d, &err),
                 PG_OK, "%s", err.msg);
    const diverge_run_config *r = &d.c;
    cr_expect_null(r->reference);
    cr_expect(!r->top_k_known);
    cr_expect(!r->noise_floor_known);
    cr_expect_null(r->sequences_digest);
    cr_expect_eq(r->n_modes, -1);
    cr_expect(!r->part.known);
    cr_assert_eq(r->n_shard_sequences, 2);
    cr_expect_null(r->shard_sequences[1]);
    diverge_config_doc_free(&d);
    cr_expect_eq(diverge_config_read("\"diverge\"", &d, &err), PG_ERR_USAGE);
    diverge_config_doc_free(&d);
}

/* The part fields every kind shares (run_config_part), through the sweep's
 * writer and reader: what is written reads back, and a "shard" without a
 * job string, or without "shard_layers" as an array, is known but not a
 * part a resume can take. */
Test(run_configs, sweep_part_reads_back_and_an_incomplete_part_is_unreadable)
{
    static const int layers[] = {3, 1};
    const run_config c = {.capture = "c.pgcap", .model = "m",
                          .part = {.job = "jobk", .index = 2, .count = 4},
                          .shard_layers = layers, .n_shard_layers = 2};
    cJSON *o = run_config_write(&c);
    cr_assert_not_null(o);
    char *text = cJSON_PrintUnformatted(o);
    cr_assert_not_null(strstr(text, "\"job\":\"jobk\",\"shard\":{\"index\":2,\"count\":4},"
                                    "\"shard_layers\":[3,1]"), "%s", text);
    run_config_doc d;
    pg_err err = {0};
    cr_assert_eq(run_config_read(text, &d, &err), PG_OK, "%s", err.msg);
    cr_expect(d.c.part.known && d.c.part.readable);
    cr_expect_str_eq(d.c.part.job, "jobk");
    cr_expect(d.c.part.index == 2 && d.c.part.count == 4);
    cr_assert_eq(d.c.n_shard_layers, 2);
    cr_expect(d.c.shard_layers[0] == 3 && d.c.shard_layers[1] == 1);
    run_config_doc_free(&d);
    free(text);
    cJSON_Delete(o);

    cr_assert_eq(run_config_read("{\"shard\":{\"index\":0,\"count\":2},\"shard_layers\":[0]}", &d,
                                 &err),
                 PG_OK, "%s", err.msg);
    cr_expect(d.c.part.known && !d.c.part.readable);  /* no job */
    run_config_doc_free(&d);
    cr_assert_eq(run_config_read("{\"job\":\"j\",\"shard\":{\"index\":0,\"count\":2}}", &d, &err),
                 PG_OK, "%s", err.msg);
    cr_expect(d.c.part.readable);
    cr_expect_eq(d.c.n_shard_layers, -1);  /* no shard_layers */
    run_config_doc_free(&d);
}

/* The sweep's "variants": a non-empty list of strings reads as it is; an
 * empty list, or one with an entry that is no string, reads as unknown. */
Test(run_configs, sweep_variants_read_only_as_a_list_of_strings)
{
    run_config_doc d;
    pg_err err = {0};
    cr_assert_eq(run_config_read("{\"variants\":[\"bf16\",\"fp8kv@fixed\"]}", &d, &err), PG_OK,
                 "%s", err.msg);
    cr_assert_eq(d.c.n_variants, 2);
    cr_expect_str_eq(d.c.variants[1], "fp8kv@fixed");
    run_config_doc_free(&d);
    static const char *const unknown[] = {"{\"variants\":[\"bf16\",3]}", "{\"variants\":[]}",
                                          "{\"variants\":\"bf16\"}", "{}"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        cr_assert_eq(run_config_read(unknown[i], &d, &err), PG_OK, "%s", err.msg);
        cr_expect_eq(d.c.n_variants, -1, "%s", unknown[i]);
        cr_expect_null(d.c.variants, "%s", unknown[i]);
        run_config_doc_free(&d);
    }
}
