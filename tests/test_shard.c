/*
 * test_shard.c: run/eval --shard I/N and `precgate merge`: the split of a
 * job into parts (every unit in exactly one part, balanced, the same in
 * every process), merged shards equal to an unsharded run row for row, and
 * every refusal of merge leaving the database exactly as it was.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "harness/shard.h"
#include "fake_openai_server.h"
#include "testutil.h"

TestSuite(shard, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 120);

/* A gpt-oss-shaped capture of 6 layers, about 10 ms a layer on the CPU; the
 * even layers slide a 8-key window so that layers differ in cost. */
#define SYNTH_OPTS "--layers 6 --seqs 1 --seq-len 16 --window 8"
#define N_LAYERS 6
/* Sweep options every run of one job shares (--attribute fills attribution). */
#define RUN_OPTS "--no-progress --threads 2 --backend cpu --attribute"
/* The tables a merged run must hold exactly as an unsharded one. */
static const char *const data_tables[] = {"layer_metrics", "quant_stats", "layer_shapes",
                                          "attribution",   "ext_diagnosis", "kv_format_stats",
                                          "eval_samples",
                                          "eval_scores",   "eval_pairs"};
#define N_DATA_TABLES (sizeof data_tables / sizeof data_tables[0])
#define DEMO_TRACES PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl"

/* ---- the partition ------------------------------------------------------ */

Test(shard, greedy_puts_every_unit_in_one_part_within_the_bound)
{
    enum { N_UNITS = 13 };
    shard_unit u[N_UNITS];
    double total = 0, largest = 0;
    for (int i = 0; i < N_UNITS; i++) {
        /* Costs with ties (i % 4) and a spread of 1 .. 40. */
        u[i] = (shard_unit){i % 2 ? "b.safetensors" : "a.safetensors", i,
                            (double)(1 + (i % 4) * 13)};
        total += u[i].cost;
        if (u[i].cost > largest) largest = u[i].cost;
    }
    for (int count = 1; count <= N_UNITS + 1; count++) {
        int owner[N_UNITS], again[N_UNITS];
        pg_err err = {0};
        cr_assert_eq(shard_assign(u, N_UNITS, count, owner, &err), PG_OK, "%s", err.msg);
        cr_assert_eq(shard_assign(u, N_UNITS, count, again, &err), PG_OK);
        double load[N_UNITS + 1] = {0};
        for (int i = 0; i < N_UNITS; i++) {
            cr_assert(owner[i] >= 0 && owner[i] < count, "unit %d in part %d of %d", i,
                      owner[i], count);
            cr_assert_eq(owner[i], again[i], "the split must be the same in every process");
            load[owner[i]] += u[i].cost;
        }
        for (int s = 0; s < count; s++)
            cr_assert_leq(load[s], total / count + largest, "part %d of %d: load %g > %g + %g",
                          s, count, load[s], total / count, largest);
    }
}

Test(shard, problems_split_by_id_whole_and_in_order)
{
    const char *ids[] = {"p3", "p10", "p1", "p7", "p2", "p5", "p9"};
    enum { N = 7 };
    for (int count = 1; count <= N + 1; count++) {
        int times[N] = {0};
        for (int s = 0; s < count; s++) {
            unsigned char keep[N];
            pg_err err = {0};
            cr_assert_eq(shard_problems(ids, N, (shard_spec){s, count}, keep, &err), PG_OK);
            int n_kept = 0;
            for (int i = 0; i < N; i++) {
                times[i] += keep[i];
                n_kept += keep[i];
            }
            cr_assert(n_kept == N / count || n_kept == N / count + 1,
                      "part %d of %d holds %d problems", s, count, n_kept);
        }
        for (int i = 0; i < N; i++)
            cr_assert_eq(times[i], 1, "problem %s is in %d parts of %d", ids[i], times[i], count);
    }
    /* By id, not by file order: part 0 of 2 holds the 3 smallest ids
     * (strcmp: p1, p10, p2), whatever their places in the file. */
    unsigned char keep[N];
    pg_err err = {0};
    cr_assert_eq(shard_problems(ids, N, (shard_spec){0, 2}, keep, &err), PG_OK);
    const unsigned char want[N] = {0, 1, 1, 0, 1, 0, 0};  /* p10, p1, p2 */
    cr_assert_arr_eq(keep, want, N);
}

Test(shard, shard_option_is_checked)
{
    const char *bad[] = {"0/0", "3/3", "-1/2", "1", "a/2", "1/2x", "1/200000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shard_spec s;
        pg_err err = {0};
        cr_assert_eq(shard_parse("run", bad[i], &s, &err), PG_ERR_USAGE, "%s", bad[i]);
        cr_assert(strstr(err.msg, bad[i]) != NULL, "%s", err.msg);
    }
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "run --capture x --shard 2/2"), 2, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "run --capture x --job K"), 2, "%s", out);
    cr_assert(strstr(out, "--shard") != NULL, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "run --capture x --shard 0/2 --job 'a b'"), 2, "%s", out);
    free(out);
}

/* ---- helpers ------------------------------------------------------------ */

/* Runs precgate with the printf-style args, asserting exit status want. */
static char *precgate_expect(int want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *precgate_expect(int want, const char *fmt, ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out = NULL;
    const int rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, want, "precgate %s: exit %d, not %d:\n%s", args, rc, want, out);
    return out;
}

/* Writes the test capture and sweeps it unsharded into A.db and as parts
 * of count shards into s0.db .. s{count-1}.db (extra: more run options for
 * the parts). */
static void sweep_parts(int count, const char *extra)
{
    free(precgate_expect(0, "synth -o '%s' " SYNTH_OPTS, tu_in_dir("cap.safetensors")));
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("A.db")));
    for (int i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        free(precgate_expect(0, "run --capture '%s' --db '%s' --shard %d/%d " RUN_OPTS " %s",
                             tu_in_dir("cap.safetensors"), tu_in_dir(name), i, count, extra));
    }
}

/* The paths of s0.db .. s{n-1}.db as one shell string. */
static const char *parts_list(int n)
{
    static char list[4096];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        at += (size_t)snprintf(list + at, sizeof list - at, "'%s' ", tu_in_dir(name));
    }
    return list;
}

/* Asserts that run_a of database a and run_b of database b hold the same
 * rows in every data table, every column but run_id and those named in
 * skip (a SQL list of quoted names, "''" for none; REAL compared exactly;
 * EXCEPT treats NULLs as equal), and that both hold rows_min rows at least. */
static void expect_same_rows_but(const char *a, long long run_a, const char *b, long long run_b,
                                 long long rows_min, const char *skip)
{
    sqlite3 *db = tu_db_open(a);
    char *attach = sqlite3_mprintf("ATTACH %Q AS other", tu_in_dir(b));
    tu_sql_exec(db, attach);
    sqlite3_free(attach);
    long long total = 0;
    for (size_t t = 0; t < N_DATA_TABLES; t++) {
        char *cols = tu_sql_text(db, "SELECT group_concat(quote(name), ', ') FROM "
                                     "pragma_table_info('%s') WHERE name <> 'run_id' AND "
                                     "name NOT IN (%s)",
                                 data_tables[t], skip);
        const long long na = tu_sql_int(db, "SELECT count(*) FROM main.%s WHERE run_id = %lld",
                                        data_tables[t], run_a);
        const long long nb = tu_sql_int(db, "SELECT count(*) FROM other.%s WHERE run_id = %lld",
                                        data_tables[t], run_b);
        cr_assert_eq(na, nb, "%s: %lld rows in %s run %lld, %lld in %s run %lld", data_tables[t],
                     na, a, run_a, nb, b, run_b);
        const long long differ = tu_sql_int(
            db, "SELECT count(*) FROM (SELECT %s FROM main.%s WHERE run_id = %lld EXCEPT "
                "SELECT %s FROM other.%s WHERE run_id = %lld)",
            cols, data_tables[t], run_a, cols, data_tables[t], run_b);
        cr_assert_eq(differ, 0, "%s: %lld rows of %s run %lld are not in %s run %lld",
                     data_tables[t], differ, a, run_a, b, run_b);
        total += na;
        free(cols);
    }
    cr_assert_geq(total, rows_min, "only %lld rows compared", total);
    sqlite3_close(db);
}

/* expect_same_rows_but with every column compared. */
static void expect_same_rows(const char *a, long long run_a, const char *b, long long run_b,
                             long long rows_min)
{
    expect_same_rows_but(a, run_a, b, run_b, rows_min, "''");
}

/* A malloc'd copy of the scratch file name's bytes, its length to *len. */
static unsigned char *file_bytes(const char *name, size_t *len)
{
    FILE *f = fopen(tu_in_dir(name), "rb");
    cr_assert_not_null(f, "open %s", name);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* Asserts that merging args into B.db exits with want and leaves B.db byte
 * for byte as it was; returns what it printed (caller frees). */
static char *refused_output(int want, const char *args)
{
    size_t n0 = 0, n1 = 0;
    unsigned char *before = file_bytes("B.db", &n0);
    char *out = precgate_expect(want, "merge --into '%s' %s", tu_in_dir("B.db"), args);
    unsigned char *after = file_bytes("B.db", &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "B.db changed:\n%s", out);
    free(before);
    free(after);
    return out;
}

/* Asserts that merging args into B.db exits with want, prints a message
 * holding needle, and leaves B.db byte for byte as it was. */
static void expect_refused(int want, const char *needle, const char *args)
{
    char *out = refused_output(want, args);
    cr_assert(strstr(out, needle) != NULL, "the refusal should name '%s':\n%s", needle, out);
    free(out);
}

/* Copies scratch file from to scratch file to. */
static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    unsigned char *b = file_bytes(from, &n);
    tu_write_file(tu_in_dir(to), b, n);
    free(b);
}

/* The merged run id a merge printed ("run R: job ..."). */
static long long merged_run(const char *out)
{
    const char *at = strstr(out, "run ");
    cr_assert_not_null(at, "%s", out);
    return atoll(at + 4);
}

/* ---- sweeps ------------------------------------------------------------- */

Test(shard, merged_sweep_equals_the_unsharded_run)
{
    sweep_parts(3, "");
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    const long long run = merged_run(out);
    free(out);
    /* Per layer: 3 variants x 65 rows, 3 quant rows, 1 shape, 12 attribution. */
    expect_same_rows("A.db", 1, "B.db", run, N_LAYERS * (3 * 65 + 3 + 1));
    sqlite3 *db = tu_db_open("B.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1, "no shard run is copied");
    char *status = tu_sql_text(db, "SELECT status || ' ' || kind || ' ' || "
                                   "json_extract(config_json, '$.shard.count') || ' ' || "
                                   "(json_type(config_json, '$.shard_layers') IS NULL) "
                                   "FROM runs WHERE id = %lld", run);
    cr_assert_str_eq(status, "complete sweep 3 1");
    free(status);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM merged_shards WHERE run_id = %lld", run), 3);
    /* Every part's layers: all layers, each in one part. */
    sqlite3_close(db);
    long long owned = 0;
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        sqlite3 *s = tu_db_open(name);
        owned += tu_sql_int(s, "SELECT json_array_length(config_json, '$.shard_layers') FROM runs");
        sqlite3_close(s);
    }
    cr_assert_eq(owned, N_LAYERS);
}

Test(shard, empty_parts_are_valid_and_merge)
{
    sweep_parts(N_LAYERS + 1, "");
    int empty = 0;
    for (int i = 0; i < N_LAYERS + 1; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        sqlite3 *s = tu_db_open(name);
        empty += tu_sql_int(s, "SELECT count(*) FROM layer_metrics") == 0;
        cr_assert_eq(tu_sql_int(s, "SELECT count(*) FROM runs WHERE status = 'complete'"), 1);
        sqlite3_close(s);
    }
    cr_assert_eq(empty, 1, "with one part more than layers, one part is empty");
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"),
                                parts_list(N_LAYERS + 1));
    const long long run = merged_run(out);
    free(out);
    expect_same_rows("A.db", 1, "B.db", run, N_LAYERS * (3 * 65 + 3 + 1));
}

Test(shard, merge_refusals_leave_the_database_as_it_was)
{
    sweep_parts(3, "");
    /* B.db holds an earlier, unrelated run: refusals must not touch it. */
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("B.db")));
    /* A different job (another --seed: another default key). */
    free(precgate_expect(0, "run --capture '%s' --db '%s' --shard 1/3 --seed 7 " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("other.db")));
    char args[8192];
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("other.db"),
             tu_in_dir("s2.db"));
    expect_refused(2, "shard 1 of 3 missing", args);
    expect_refused(2, "hold parts of 2 jobs", args);
    /* The same job key, another config: the refusal names the field. */
    sqlite3 *s1 = tu_db_open("s1.db");
    char *job = tu_sql_text(s1, "SELECT json_extract(config_json, '$.job') FROM runs");
    sqlite3_close(s1);
    free(precgate_expect(0, "run --capture '%s' --db '%s' --shard 1/3 --seed 7 --job %s " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("samejob.db"), job));
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("samejob.db"),
             tu_in_dir("s2.db"));
    expect_refused(2, "differ in config \"page_seed\": 24301 vs 7", args);
    free(job);
    /* Missing and duplicated parts. */
    snprintf(args, sizeof args, "'%s'", tu_in_dir("s1.db"));
    expect_refused(2, "shards 0, 2 of 3 missing", args);
    copy_file("s1.db", "s1copy.db");
    snprintf(args, sizeof args, "%s '%s'", parts_list(3), tu_in_dir("s1copy.db"));
    expect_refused(2, "shard 1 of 3 given twice", args);
    /* A part that did not finish. */
    copy_file("s2.db", "failed.db");
    sqlite3 *f = tu_db_open("failed.db");
    tu_sql_exec(f, "UPDATE runs SET status = 'failed', error = 'x'");
    sqlite3_close(f);
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("s1.db"),
             tu_in_dir("failed.db"));
    expect_refused(2, "is failed (its last run stopped: x), not a finished part", args);
    /* The parts of one job under two labels (gate baselines and history
     * --label pick runs by it). */
    copy_file("s2.db", "labelled.db");
    sqlite3 *l = tu_db_open("labelled.db");
    tu_sql_exec(l, "UPDATE runs SET label = 'night1'");
    sqlite3_close(l);
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("s1.db"),
             tu_in_dir("labelled.db"));
    expect_refused(2, "has no --label, shard 2 (", args);
    /* A damaged shard file: cut to half, and garbage. */
    size_t n = 0;
    unsigned char *b = file_bytes("s1.db", &n);
    tu_write_file(tu_in_dir("cut.db"), b, n / 2);
    free(b);
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("cut.db"),
             tu_in_dir("s2.db"));
    expect_refused(1, "cut.db", args);
    tu_write_file(tu_in_dir("junk.db"), "not a database, not at all, no.......................",
                  54);
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("s1.db"),
             tu_in_dir("junk.db"));
    expect_refused(1, "junk.db", args);
    snprintf(args, sizeof args, "%s '%s'", parts_list(3), tu_in_dir("B.db"));
    expect_refused(2, "is the database merged into", args);
    /* After all that, the set still merges. */
    free(precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3)));
}

/* A shard that failed and was run again into the same database: the file
 * holds the failed run and the finished one; merge takes the finished one. */
Test(shard, a_failed_run_superseded_in_its_own_file_is_left_out)
{
    sweep_parts(3, "");
    sqlite3 *f = tu_db_open("s2.db");
    tu_sql_exec(f, "UPDATE runs SET status = 'failed', error = 'killed'");
    sqlite3_close(f);
    free(precgate_expect(0, "run --capture '%s' --db '%s' --shard 2/3 " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("s2.db")));
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    cr_assert(strstr(out, "run 1 (job ") != NULL && strstr(out, "is failed; a finished run of "
                                                                "that shard in the same file is "
                                                                "taken instead") != NULL,
              "%s", out);
    const long long run = merged_run(strstr(out, "\nrun ") + 1);
    free(out);
    expect_same_rows("A.db", 1, "B.db", run, 1);
}

Test(shard, merging_again_changes_nothing_and_other_content_is_refused)
{
    sweep_parts(3, "");
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    free(out);
    size_t n0 = 0, n1 = 0;
    unsigned char *before = file_bytes("B.db", &n0);
    out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    cr_assert(strstr(out, "already merged") != NULL, "%s", out);
    free(out);
    /* One part alone, merged again: also nothing to do. */
    out = precgate_expect(0, "merge --into '%s' '%s'", tu_in_dir("B.db"), tu_in_dir("s2.db"));
    free(out);
    unsigned char *after = file_bytes("B.db", &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "a second merge changed B.db");
    free(before);
    free(after);
    /* The same index with other rows: refused. */
    copy_file("s2.db", "edited.db");
    sqlite3 *e = tu_db_open("edited.db");
    tu_sql_exec(e, "UPDATE layer_metrics SET rel_l2 = rel_l2 * 2 WHERE head = -1");
    sqlite3_close(e);
    char args[4096];
    snprintf(args, sizeof args, "'%s'", tu_in_dir("edited.db"));
    expect_refused(2, "holds other rows than the shard 2 merged", args);
}

Test(shard, a_resumed_part_computes_only_its_own_layers)
{
    sweep_parts(2, "");
    /* Part 1 loses its last layer's rows and is marked interrupted. */
    sqlite3 *s = tu_db_open("s1.db");
    const long long last = tu_sql_int(s, "SELECT max(value) FROM runs, "
                                         "json_each(runs.config_json, '$.shard_layers')");
    for (size_t t = 0; t < 6; t++) { /* the per-layer tables */
        char *sql = sqlite3_mprintf("DELETE FROM %s WHERE layer = %lld", data_tables[t], last);
        tu_sql_exec(s, sql);
        sqlite3_free(sql);
    }
    tu_sql_exec(s, "UPDATE runs SET status = 'interrupted', error = 'test'");
    sqlite3_close(s);
    char *out = precgate_expect(2, "run --resume 1 --capture '%s' --db '%s' --shard 0/2 "
                                   "--no-progress", tu_in_dir("cap.safetensors"),
                                tu_in_dir("s1.db"));
    cr_assert(strstr(out, "shard (--shard) differs") != NULL, "%s", out);
    free(out);
    out = precgate_expect(0, "run --resume 1 --capture '%s' --db '%s' --no-progress",
                          tu_in_dir("cap.safetensors"), tu_in_dir("s1.db"));
    cr_assert(strstr(out, "1 to compute") != NULL, "%s", out);
    free(out);
    out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(2));
    const long long run = merged_run(out);
    free(out);
    expect_same_rows("A.db", 1, "B.db", run, N_LAYERS * (3 * 65 + 3 + 1));
}

/* ---- evals -------------------------------------------------------------- */

/* The demo's problems, samples per (problem, mode), modes. */
#define DEMO_PROBLEMS 12
#define DEMO_SAMPLES 3
#define DEMO_MODES 3

/* Replays the demo unsharded into eA.db and as count parts into s0.db ... */
static void eval_parts(int count)
{
    free(precgate_expect(0, "eval --traces '%s' --replay --no-progress --db '%s'", DEMO_TRACES,
                         tu_in_dir("eA.db")));
    for (int i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        free(precgate_expect(0, "eval --traces '%s' --replay --no-progress --db '%s' --shard %d/%d",
                             DEMO_TRACES, tu_in_dir(name), i, count));
    }
}

Test(shard, merged_eval_equals_the_unsharded_run)
{
    eval_parts(3);
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    /* The scores come first, then "run R: job ..., 3 shards merged". */
    const char *line = strstr(out, "\nrun ");
    cr_assert_not_null(line, "%s", out);
    const long long run = merged_run(line);
    free(out);
    sqlite3 *db = tu_db_open("B.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_pairs WHERE run_id = %lld", run), 2);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_scores WHERE run_id = %lld", run),
                 DEMO_MODES);
    sqlite3_close(db);
    /* Samples, scores (bootstrap intervals included) and pairs, every column. */
    expect_same_rows("eA.db", 1, "B.db", run,
                     DEMO_PROBLEMS * DEMO_SAMPLES * DEMO_MODES + DEMO_MODES + 2);
    /* Each part scored only its own problems. */
    sqlite3 *s = tu_db_open("s0.db");
    cr_assert_eq(tu_sql_int(s, "SELECT max(n_problems) FROM eval_scores"), DEMO_PROBLEMS / 3);
    sqlite3_close(s);
}

Test(shard, eval_parts_beyond_the_problems_are_empty_and_merge)
{
    eval_parts(DEMO_PROBLEMS + 1);
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"),
                                parts_list(DEMO_PROBLEMS + 1));
    const long long run = merged_run(out);
    free(out);
    expect_same_rows("eA.db", 1, "B.db", run,
                     DEMO_PROBLEMS * DEMO_SAMPLES * DEMO_MODES + DEMO_MODES + 2);
}

/* An eval part whose --resume stopped on an error is 'incomplete' (a
 * resumable run keeps that status) with problems missing: merge refuses it;
 * one that finished with failed samples (error NULL) is merged. */
Test(shard, an_eval_part_whose_resume_stopped_is_refused)
{
    eval_parts(3);
    copy_file("eA.db", "B.db");   /* B.db holds an unrelated run */
    copy_file("s1.db", "stopped.db");
    sqlite3 *f = tu_db_open("stopped.db");
    tu_sql_exec(f, "UPDATE runs SET status = 'incomplete', error = 'servers down'");
    sqlite3_close(f);
    char args[8192];
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("stopped.db"),
             tu_in_dir("s2.db"));
    expect_refused(2, "is incomplete (its last run stopped: servers down), not a finished part: "
                      "resume it (precgate eval --resume", args);
    f = tu_db_open("stopped.db");
    tu_sql_exec(f, "UPDATE runs SET error = NULL");
    sqlite3_close(f);
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), args);
    cr_assert(strstr(out, "incomplete") != NULL, "%s", out);
    free(out);
}

Test(shard, eval_job_needs_shard)
{
    char *out = precgate_expect(2, "eval --traces '%s' --replay --job K --db '%s'", DEMO_TRACES,
                                tu_in_dir("x.db"));
    cr_assert(strstr(out, "--shard") != NULL, "%s", out);
    free(out);
}

Test(shard, a_failure_after_some_writes_leaves_the_database_as_it_was)
{
    /* Two jobs in one merge: a sweep and an eval whose parts name no eval
     * (config "eval" removed), so the check of their rows (run_complete.h)
     * fails after their rows and maybe the sweep's were written: the
     * transaction must take all back. */
    sweep_parts(2, "");
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "e%d.db", i);
        free(precgate_expect(0, "eval --traces '%s' --replay --no-progress --db '%s' --shard %d/2",
                             DEMO_TRACES, tu_in_dir(name), i));
        sqlite3 *e = tu_db_open(name);
        tu_sql_exec(e, "UPDATE runs SET config_json = json_remove(config_json, '$.eval')");
        sqlite3_close(e);
    }
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("B.db")));
    char args[8192];
    snprintf(args, sizeof args, "%s '%s' '%s'", parts_list(2), tu_in_dir("e0.db"),
             tu_in_dir("e1.db"));
    expect_refused(2, "e0.db: run 1 (job ", args);
    expect_refused(2, "its config_json records no plan (problems, modes, efforts, samples)", args);
}

Test(shard, layer_cost_counts_the_keys_each_query_sees)
{
    free(precgate_expect(0, "synth -o '%s' " SYNTH_OPTS, tu_in_dir("cap.safetensors")));
    capture *cap = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(tu_in_dir("cap.safetensors"), &cap, &err), PG_OK, "%s", err.msg);
    /* 16 new tokens, no context: query j sees j + 1 keys, at most 8 on a
     * windowed layer: 1 + ... + 8 + 8 x 8 = 100 keys; 1 + ... + 16 = 136. */
    int windowed = -1, full = -1;
    for (int l = 0; l < cap->n_layers; l++) {
        if (cap->layers[l].window == 8) windowed = l;
        if (cap->layers[l].window == 0) full = l;
    }
    cr_assert(windowed >= 0 && full >= 0, "the capture has windowed and full layers");
    const double per_key = 4.0 * cap->layers[0].hq * cap->layers[0].d * (3 + 1);
    cr_assert_eq(shard_layer_flops(cap, windowed, 3), per_key * 100);
    cr_assert_eq(shard_layer_flops(cap, full, 3), per_key * 136);
    capture_close(cap);
}

/* A live eval's problems, samples, and the reply every chat request gets. */
#define LIVE_PROBLEMS 7
#define LIVE_SAMPLES 2
#define CHAT "/v1/chat/completions"
#define REPLY7                                                                                \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"            \
    "\"so \\\\boxed{7}\"},\"finish_reason\":\"stop\"}],"                                       \
    "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"

Test(shard, live_eval_parts_send_only_their_problems_and_merge_as_unsharded)
{
    /* Problems p0 .. p6; the answer is 7 except for every third, so the
     * modes' scores are not all 1. */
    char traces[LIVE_PROBLEMS * 80 + 1];
    size_t len = 0;
    for (int i = 0; i < LIVE_PROBLEMS; i++)
        len += (size_t)sprintf(traces + len, "{\"id\":\"p%d\",\"problem\":\"%d?\",\"answer\":%d}\n",
                               i, i, i % 3 == 0 ? 8 : 7);
    tu_write_file(tu_in_dir("t.jsonl"), traces, len);
    fake_server srv[2];
    const fs_reply health = {200, "", NULL, NULL, 0, 0};
    const fs_reply models = {200, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL,
                             NULL, 0, 0};
    const fs_reply chat = {200, REPLY7, NULL, NULL, 0, 0};
    for (int k = 0; k < 2; k++) {
        fs_init(&srv[k]);
        fs_route(&srv[k], "/health", &health, 1);
        fs_route(&srv[k], "/v1/models", &models, 1);
        fs_route(&srv[k], CHAT, &chat, 1);
        cr_assert(fs_start(&srv[k]));
    }
    char common[512];
    snprintf(common, sizeof common, "eval --traces '%s' --endpoint bf16=http://127.0.0.1:%d "
             "--endpoint fp8kv=http://127.0.0.1:%d --samples %d --no-progress",
             tu_in_dir("t.jsonl"), srv[0].port, srv[1].port, LIVE_SAMPLES);
    free(precgate_expect(0, "%s --db '%s'", common, tu_in_dir("eA.db")));
    const int unsharded = fs_hits(&srv[0], CHAT) + fs_hits(&srv[1], CHAT);
    cr_assert_eq(unsharded, LIVE_PROBLEMS * LIVE_SAMPLES * 2);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        free(precgate_expect(0, "%s --db '%s' --shard %d/3", common, tu_in_dir(name), i));
    }
    /* The parts together sent each request once. */
    cr_assert_eq(fs_hits(&srv[0], CHAT) + fs_hits(&srv[1], CHAT), 2 * unsharded);
    fs_stop(&srv[0]);
    fs_stop(&srv[1]);
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3));
    const char *line = strstr(out, "\nrun ");
    cr_assert_not_null(line, "%s", out);
    const long long run = merged_run(line);
    free(out);
    /* Every column but the latency, which no two live runs share. */
    expect_same_rows_but("eA.db", 1, "B.db", run, LIVE_PROBLEMS * LIVE_SAMPLES * 2 + 2 + 1,
                         "'latency_ms'");
}

Test(shard, a_part_of_another_count_is_refused_before_and_after_the_merge)
{
    /* Parts 0 .. 2 of 3 under --job K, merged; then part 0 of 4 under K. */
    sweep_parts(3, "--job K");
    free(precgate_expect(0, "run --capture '%s' --db '%s' --shard 0/4 --job K " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("four.db")));
    char args[8192];
    snprintf(args, sizeof args, "%s '%s'", parts_list(3), tu_in_dir("four.db"));
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("B.db")));
    expect_refused(2, "job K: shard count 4 in", args);
    free(precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(3)));
    snprintf(args, sizeof args, "'%s'", tu_in_dir("four.db"));
    expect_refused(2, "a merged job takes no parts later", args);
}

/* ---- a part's config and values ---------------------------------------- */

/* Copies scratch file from to to and runs sql on the copy with the CHECK
 * constraints off (a shard damaged or edited by hand need not obey them). */
static void corrupt_copy(const char *from, const char *to, const char *sql)
{
    copy_file(from, to);
    sqlite3 *db = tu_db_open(to);
    tu_sql_exec(db, "PRAGMA ignore_check_constraints = ON");
    tu_sql_exec(db, sql);
    sqlite3_close(db);
}

Test(shard, a_part_whose_config_cannot_be_read_is_refused_naming_file_run_and_field)
{
    sweep_parts(3, "");
    copy_file("A.db", "B.db");   /* B.db holds an unrelated run */
    static const struct { const char *sql, *says; } bad[] = {
        {"UPDATE runs SET config_json = NULL", "run 1 (sweep, complete): config_json is NULL"},
        {"UPDATE runs SET config_json = 'not json {'", "run 1: config_json is not JSON"},
        {"UPDATE runs SET config_json = config_json || 'x'", "run 1: config_json is not JSON"},
        {"UPDATE runs SET config_json = '[1, 2]'", "run 1: config_json is no JSON object"},
        {"UPDATE runs SET config_json = json_remove(config_json, '$.job')",
         "run 1: config_json \"job\" is missing, not a string"},
        {"UPDATE runs SET config_json = json_set(config_json, '$.job', 5)",
         "run 1: config_json \"job\" is a number, not a string"},
        {"UPDATE runs SET config_json = json_set(config_json, '$.job', 'a b')",
         "run 1: config_json \"job\" is no job key"},
        {"UPDATE runs SET config_json = json_remove(config_json, '$.shard')",
         "run 1: config_json \"shard\" is missing, not an object"},
        {"UPDATE runs SET config_json = json_set(config_json, '$.shard', 1)",
         "run 1: config_json \"shard\" is a number, not an object"},
        {"UPDATE runs SET config_json = json_remove(config_json, '$.shard.index')",
         "run 1: config_json \"shard\".\"index\" is missing, not an integer"},
        {"UPDATE runs SET config_json = json_set(config_json, '$.shard.index', '1')",
         "run 1: config_json \"shard\".\"index\" is a string, not an integer"},
        {"UPDATE runs SET config_json = json_set(config_json, '$.shard.count', 1.5)",
         "run 1: config_json \"shard\".\"count\" is a number that is no integer"},
    };
    char args[8192], says[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        corrupt_copy("s1.db", "bad.db", bad[i].sql);
        snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("bad.db"),
                 tu_in_dir("s2.db"));
        snprintf(says, sizeof says, "%s: %s", tu_in_dir("bad.db"), bad[i].says);
        expect_refused(1, says, args);
    }
    /* A run that failed before its config was written (cmd_run records one
     * for a capture that does not validate) is no part: its file still
     * gives the part run again into it. */
    corrupt_copy("s1.db", "rerun.db", "INSERT INTO runs (kind, status, started_at, finished_at, "
                                      "error) VALUES ('sweep', 'failed', "
                                      "'2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z', "
                                      "'bad capture')");
    snprintf(args, sizeof args, "'%s' '%s' '%s'", tu_in_dir("s0.db"), tu_in_dir("rerun.db"),
             tu_in_dir("s2.db"));
    char *out = precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), args);
    expect_same_rows("A.db", 1, "B.db", merged_run(out), N_LAYERS * (3 * 65 + 3 + 1));
    free(out);
}

/* Merges bad.db (a corrupted copy of a one-part job) into B.db and asserts
 * a refusal (exit 1, B.db unchanged) naming the file, the run, the table
 * and the column. */
static void expect_value_refused(const char *table, const char *column, const char *what)
{
    char args[4096], needle[1024];
    snprintf(args, sizeof args, "'%s'", tu_in_dir("bad.db"));
    char *out = refused_output(1, args);
    snprintf(needle, sizeof needle, "%s: run 1: %s row (rowid ", tu_in_dir("bad.db"), table);
    cr_assert(strstr(out, needle) != NULL, "%s: the refusal should name '%s':\n%s", what, needle,
              out);
    snprintf(needle, sizeof needle, "): column %s holds ", column);
    cr_assert(strstr(out, needle) != NULL, "%s: the refusal should name '%s':\n%s", what, needle,
              out);
    free(out);
}

/* One-part jobs: a sweep into f0.db and a replayed eval into f1.db; B.db
 * holds an unrelated run. Both parts merge as they are (into ok.db). */
static void one_part_jobs(void)
{
    free(precgate_expect(0, "synth -o '%s' " SYNTH_OPTS, tu_in_dir("cap.safetensors")));
    free(precgate_expect(0, "run --capture '%s' --db '%s' --shard 0/1 " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("f0.db")));
    free(precgate_expect(0, "eval --traces '%s' --replay --no-progress --db '%s' --shard 0/1",
                         DEMO_TRACES, tu_in_dir("f1.db")));
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("B.db")));
    free(precgate_expect(0, "merge --into '%s' '%s' '%s'", tu_in_dir("ok.db"), tu_in_dir("f0.db"),
                         tu_in_dir("f1.db")));
}

Test(shard, a_value_its_column_cannot_hold_is_refused)
{
    one_part_jobs();
    static const struct { const char *file, *table, *column, *sql; } bad[] = {
        /* a text in a numeric column ('x' >= 0 passes the CHECK) */
        {"f0.db", "layer_metrics", "layer", "UPDATE layer_metrics SET layer = 'x3' WHERE rowid = 5"},
        {"f0.db", "layer_metrics", "rel_l2", "UPDATE layer_metrics SET rel_l2 = 'abc' WHERE rowid = 7"},
        /* NaN as text, and NaN as SQLite stores it (NULL) where none may be */
        {"f0.db", "layer_metrics", "max_abs", "UPDATE layer_metrics SET max_abs = 'NaN' WHERE rowid = 2"},
        {"f0.db", "layer_metrics", "rel_l2", "UPDATE layer_metrics SET rel_l2 = NULL WHERE rowid = 3"},
        /* out of range */
        {"f0.db", "layer_metrics", "rel_l2", "UPDATE layer_metrics SET rel_l2 = -0.5 WHERE rowid = 9"},
        /* each other kind of metric column (its rule comes from base/metric.h) */
        {"f0.db", "layer_metrics", "cos_sim", "UPDATE layer_metrics SET cos_sim = 1.5 WHERE rowid = 4"},
        {"f0.db", "layer_metrics", "sqnr_db", "UPDATE layer_metrics SET sqnr_db = NULL WHERE rowid = 6"},
        {"f0.db", "layer_metrics", "inf_count",
         "UPDATE layer_metrics SET inf_count = 0.5 WHERE rowid = 8"},
        {"f0.db", "quant_stats", "saturated_frac",
         "UPDATE quant_stats SET saturated_frac = 1.5 WHERE rowid = 1"},
        {"f0.db", "layer_shapes", "hq", "UPDATE layer_shapes SET hq = 0 WHERE rowid = 1"},
        {"f1.db", "eval_samples", "sample", "UPDATE eval_samples SET sample = -1 WHERE rowid = 4"},
        /* invalid UTF-8 in a name, a label; a variant outside the grammar */
        {"f0.db", "quant_stats", "capture",
         "UPDATE quant_stats SET capture = CAST(X'6361FF70' AS TEXT) WHERE rowid = 2"},
        {"f0.db", "runs", "label", "UPDATE runs SET label = CAST(X'C0AF' AS TEXT)"},
        {"f1.db", "eval_samples", "problem_id",
         "UPDATE eval_samples SET problem_id = CAST(X'EDA080' AS TEXT) WHERE rowid = 6"},
        {"f0.db", "layer_metrics", "variant",
         "UPDATE layer_metrics SET variant = 'fp8kv@nope' WHERE rowid = 1"},
        {"f1.db", "eval_samples", "correct", "UPDATE eval_samples SET correct = 0.5 WHERE rowid = 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        corrupt_copy(bad[i].file, "bad.db", bad[i].sql);
        expect_value_refused(bad[i].table, bad[i].column, bad[i].sql);
    }
    /* The whole message for one. */
    corrupt_copy("f0.db", "bad.db", "UPDATE layer_metrics SET rel_l2 = -0.5 WHERE rowid = 9");
    char args[4096], needle[1024];
    snprintf(args, sizeof args, "'%s'", tu_in_dir("bad.db"));
    snprintf(needle, sizeof needle, "%s: run 1: layer_metrics row (rowid 9): column rel_l2 holds "
             "REAL -0.5, not a REAL in [0, inf] (not NULL: no NaN)", tu_in_dir("bad.db"));
    expect_refused(1, needle, args);
}

/* Seeds and count of the corruptions, and the one-part files they start from. */
#define FUZZ_SEED 27
#define FUZZ_CASES 300
static const char *const fuzz_files[] = {"f0.db", "f1.db"};

/* A value column (table, its declared type) of a part. */
typedef struct fuzz_column {
    char table[32], column[32], type[16];
    int not_null;   /* NOT NULL declared: SQLite refuses a NULL even so */
} fuzz_column;

/* Whether the test's corruption value (SQL) is one column c may hold, so
 * that it would be no corruption (the few columns whose domain takes it),
 * or one SQLite itself refuses to store (NULL in a NOT NULL column). */
static int fuzz_value_is_valid(const fuzz_column *c, const char *value)
{
    const int nan_ok = strcmp(c->column, "cos_sim") == 0 || strstr(c->column, "_frac") != NULL ||
                       strcmp(c->column, "latency_ms") == 0;
    if (strcmp(value, "NULL") == 0) return nan_ok || c->not_null;
    if (strcmp(value, "-2.5") == 0) return strcmp(c->column, "sqnr_db") == 0;
    if (strcmp(value, "-2") == 0) return strcmp(c->column, "extracted") == 0;
    return 0;
}

Test(shard, randomly_corrupted_values_are_never_merged_as_they_are)
{
    one_part_jobs();
    /* Invalid for a column of each declared type (fuzz_value_is_valid drops
     * the few a column's domain takes); declared TEXT columns that hold any
     * bytes (error, content, not_run, config_json) get only a blob. */
    static const char *const for_integer[] = {"'x7'", "0.5", "-2", "X'0102'"};
    static const char *const for_real[] = {"'NaN'", "'abc'", "X'01'", "NULL", "-2.5"};
    static const char *const for_name[] = {"CAST(X'61FF62' AS TEXT)", "CAST(X'C0AF' AS TEXT)",
                                           "CAST(X'EDA080' AS TEXT)", "CAST(X'F4908080' AS TEXT)",
                                           "X'6162'"};
    static const char *const for_any_text[] = {"X'6162'"};
    /* Token id blobs (int32 arrays): text, a number, a length no multiple of 4. */
    static const char *const for_ids[] = {"'abcd'", "7", "X'010203'"};
    uint64_t rng = FUZZ_SEED;
    int refused = 0;
    for (int k = 0; k < FUZZ_CASES; k++) {
        const char *file = fuzz_files[rng_below(&rng, 2)];
        sqlite3 *db = tu_db_open(file);
        /* Every column of the runs row and the data tables that has rows. */
        fuzz_column cols[128];
        int n = 0;
        sqlite3_stmt *st = NULL;
        const int prc = sqlite3_prepare_v2(
            db, "SELECT m.name, p.name, p.type, p.\"notnull\" FROM sqlite_schema m, pragma_table_info(m.name) p"
                " WHERE m.type = 'table' AND m.name IN ('runs', 'layer_metrics', 'quant_stats',"
                " 'layer_shapes', 'attribution', 'ext_diagnosis', 'eval_samples')"
                " AND p.name NOT IN ('id', 'run_id') ORDER BY m.name, p.cid", -1, &st, NULL);
        cr_assert_eq(prc, SQLITE_OK, "%s", sqlite3_errmsg(db));
        while (sqlite3_step(st) == SQLITE_ROW && n < 128) {
            fuzz_column *c = &cols[n];
            snprintf(c->table, sizeof c->table, "%s", sqlite3_column_text(st, 0));
            snprintf(c->column, sizeof c->column, "%s", sqlite3_column_text(st, 1));
            snprintf(c->type, sizeof c->type, "%s", sqlite3_column_text(st, 2));
            c->not_null = sqlite3_column_int(st, 3);
            if (tu_sql_int(db, "SELECT count(*) FROM %s", c->table) > 0) n++;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        cr_assert_gt(n, 10, "%s: only %d columns with rows", file, n);
        const fuzz_column *c = &cols[rng_below(&rng, (uint64_t)n)];
        const int any_text = strcmp(c->column, "error") == 0 || strcmp(c->column, "content") == 0 ||
                             strcmp(c->column, "not_run") == 0 ||
                             strcmp(c->column, "config_json") == 0 ||
                             strcmp(c->column, "token_ids_error") == 0;
        const char *const *values = for_name;
        size_t n_values = sizeof for_name / sizeof for_name[0];
        if (strcmp(c->type, "INTEGER") == 0) {
            values = for_integer;
            n_values = sizeof for_integer / sizeof for_integer[0];
        } else if (strcmp(c->type, "REAL") == 0) {
            values = for_real;
            n_values = sizeof for_real / sizeof for_real[0];
        } else if (strcmp(c->type, "BLOB") == 0) {
            values = for_ids;
            n_values = sizeof for_ids / sizeof for_ids[0];
        } else if (any_text) {
            values = for_any_text;
            n_values = 1;
        }
        const char *value = values[rng_below(&rng, n_values)];
        if (fuzz_value_is_valid(c, value)) value = values[0];
        char sql[1024];
        snprintf(sql, sizeof sql, "UPDATE %s SET \"%s\" = %s WHERE rowid = (SELECT rowid FROM %s "
                 "ORDER BY rowid LIMIT 1 OFFSET %llu %% (SELECT count(*) FROM %s))",
                 c->table, c->column, value, c->table,
                 (unsigned long long)rng_below(&rng, 1u << 20), c->table);
        corrupt_copy(file, "bad.db", sql);
        expect_value_refused(c->table, c->column, sql);
        refused++;
    }
    cr_assert_eq(refused, FUZZ_CASES);
}

/* ---- completeness (issue #27) ------------------------------------------- */

/* Copies s0.db to bad.db, runs sql on it, and asserts that merging bad.db
 * with s1.db .. s{count-1}.db is refused naming bad.db's part, needle (the
 * missing units) and the command that resumes it, B.db unchanged. */
static void expect_part_refused(int count, const char *sql, const char *needle,
                                const char *resume)
{
    copy_file("s0.db", "bad.db");
    sqlite3 *b = tu_db_open("bad.db");
    tu_sql_exec(b, sql);
    cr_assert_gt(sqlite3_changes(b), 0, "%s changed nothing", sql);
    sqlite3_close(b);
    char args[8192];
    size_t at = (size_t)snprintf(args, sizeof args, "'%s'", tu_in_dir("bad.db"));
    for (int i = 1; i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.db", i);
        at += (size_t)snprintf(args + at, sizeof args - at, " '%s'", tu_in_dir(name));
    }
    char part[600];
    snprintf(part, sizeof part, "%s: run 1 (job ", tu_in_dir("bad.db"));
    expect_refused(2, part, args);
    expect_refused(2, needle, args);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s --db %s", resume, tu_in_dir("bad.db"));
    expect_refused(2, cmd, args);
}

Test(shard, a_sweep_part_lacking_rows_of_its_own_layers_is_refused)
{
    sweep_parts(2, "");
    free(precgate_expect(0, "run --capture '%s' --db '%s' " RUN_OPTS,
                         tu_in_dir("cap.safetensors"), tu_in_dir("B.db")));
    char resume[600];
    snprintf(resume, sizeof resume, "precgate run --resume 1 --capture %s",
             tu_in_dir("cap.safetensors"));
    /* The reproduction of the issue: the part's first layer deleted. */
    sqlite3 *s0 = tu_db_open("s0.db");
    const long long first = tu_sql_int(s0, "SELECT min(layer) FROM layer_metrics");
    sqlite3_close(s0);
    char sql[300], needle[300];
    snprintf(sql, sizeof sql, "DELETE FROM layer_metrics WHERE layer = %lld", first);
    snprintf(needle, sizeof needle, "lacks rows that its own layers imply (1 of its 3 layers): "
                                    "layer %lld (layer_metrics 0 of 195)", first);
    expect_part_refused(2, sql, needle, resume);
    /* One variant of one layer. */
    snprintf(sql, sizeof sql, "DELETE FROM layer_metrics WHERE layer = %lld AND variant = "
                              "'fp8kv@fixed'", first);
    snprintf(needle, sizeof needle, "layer %lld (layer_metrics 130 of 195)", first);
    expect_part_refused(2, sql, needle, resume);
    /* One head row. */
    snprintf(sql, sizeof sql, "DELETE FROM layer_metrics WHERE layer = %lld AND variant = "
                              "'bf16' AND head = 3", first);
    snprintf(needle, sizeof needle, "layer %lld (layer_metrics 194 of 195)", first);
    expect_part_refused(2, sql, needle, resume);
    /* One quant row. */
    snprintf(sql, sizeof sql, "DELETE FROM quant_stats WHERE layer = %lld AND tensor = 'q'",
             first);
    snprintf(needle, sizeof needle, "layer %lld (quant_stats 2 of 3)", first);
    expect_part_refused(2, sql, needle, resume);
    /* The whole set still merges. */
    free(precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(2)));
}

Test(shard, an_eval_part_lacking_samples_of_its_own_problems_is_refused)
{
    eval_parts(2);
    copy_file("eA.db", "B.db");   /* B.db holds an unrelated run */
    const char *resume = "precgate eval --resume 1";
    /* The second reproduction: one problem's samples deleted. */
    expect_part_refused(2, "DELETE FROM eval_samples WHERE problem_id = 'demo-01'",
                        "(9 of its 54 samples): problem demo-01 (bf16, medium): no sample",
                        resume);
    /* One sample. */
    expect_part_refused(2, "DELETE FROM eval_samples WHERE problem_id = 'demo-02' AND "
                           "mode = 'fp8kv' AND sample = 1",
                        "(1 of its 54 samples): problem demo-02 (fp8kv, medium): sample 1 of 3",
                        resume);
    free(precgate_expect(0, "merge --into '%s' %s", tu_in_dir("B.db"), parts_list(2)));
}
