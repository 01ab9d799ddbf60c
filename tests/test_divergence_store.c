/* test_divergence_store.c: Criterion tests of the divergence tables (migration 16,
 * db/divergence_store.h): round trips of sequences, packed positions and
 * summaries, the blob layout on disk, replacement on a second put, and the
 * refusal of a damaged blob. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/divergence_store.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"

static char g_db[PATH_MAX + 16];

static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/precgate.db", tu_dir);
}

TestSuite(divergence_store, .init = setup, .fini = tu_scratch_teardown);

static pg_store *open_ok(void)
{
    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(g_db, &s, &err), PG_OK, "store_open: %s", err.msg);
    return s;
}

static int64_t begin_run(pg_store *s)
{
    store_run_info info = {.kind = "diverge"};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    return id;
}

static void exec_ok(pg_store *s, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(store_handle(s), sql, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
}

Test(divergence_store, sequence_round_trip_and_little_endian_blob)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    const int32_t toks[] = {1, 0x01020304, -2, 200000};
    cr_assert_eq(divergence_store_put_sequence(s, run, "b", "seqs.jsonl:2", toks, 4, 2, &err),
                 PG_OK, "%s", err.msg);
    const int32_t toks_a[] = {7, 8};
    cr_assert_eq(divergence_store_put_sequence(s, run, "a", "seqs.jsonl:1", toks_a, 2, 1, &err),
                 PG_OK, "%s", err.msg);

    /* The bytes on disk: int32 little-endian whatever the host. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(store_handle(s),
                                    "SELECT tokens FROM div_sequences WHERE seq_id = 'b'", -1,
                                    &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *b = sqlite3_column_blob(st, 0);
    cr_assert_eq(sqlite3_column_bytes(st, 0), 16);
    const unsigned char want[16] = {1, 0, 0, 0, 4, 3, 2, 1, 0xfe, 0xff, 0xff, 0xff,
                                    0x40, 0x0d, 0x03, 0x00};
    cr_assert_arr_eq(b, want, 16);
    sqlite3_finalize(st);

    div_sequence_stored *rows = NULL;
    size_t n = 0;
    cr_assert_eq(divergence_store_read_sequences(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(rows[0].seq_id, "a");
    cr_assert_str_eq(rows[1].seq_id, "b");
    cr_assert_str_eq(rows[1].source, "seqs.jsonl:2");
    cr_assert_eq(rows[1].n_tokens, 4);
    cr_assert_eq(rows[1].score_from, 2);
    cr_assert_arr_eq(rows[1].tokens, toks, sizeof toks);
    divergence_store_sequences_free(rows, n);

    /* A second put replaces the row. */
    const int32_t toks2[] = {5, 6, 7};
    cr_assert_eq(divergence_store_put_sequence(s, run, "a", "other", toks2, 3, 1, &err), PG_OK,
                 "%s", err.msg);
    cr_assert_eq(divergence_store_read_sequences(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_eq(rows[0].n_tokens, 3);
    cr_assert_str_eq(rows[0].source, "other");
    cr_assert_arr_eq(rows[0].tokens, toks2, sizeof toks2);
    divergence_store_sequences_free(rows, n);

    /* Out of range: refused before SQL. */
    cr_assert_eq(divergence_store_put_sequence(s, run, "c", "x", toks, 4, 4, &err),
                 PG_ERR_INTERNAL);
    cr_assert_eq(divergence_store_put_sequence(s, run, "c", "x", toks, 1, 0, &err),
                 PG_ERR_INTERNAL);
    store_close(s);
}

Test(divergence_store, damaged_sequence_blob_is_refused_by_name)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    const int32_t toks[] = {1, 2, 3};
    cr_assert_eq(divergence_store_put_sequence(s, run, "dmg", "f", toks, 3, 1, &err), PG_OK);
    /* The CHECK holds length = 4 n: damage it past the CHECK. */
    exec_ok(s, "PRAGMA ignore_check_constraints = ON");
    exec_ok(s, "UPDATE div_sequences SET tokens = x'0102' WHERE seq_id = 'dmg'");
    div_sequence_stored *rows = NULL;
    size_t n = 0;
    cr_assert_eq(divergence_store_read_sequences(s, run, &rows, &n, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "div_sequences 'dmg'") && strstr(err.msg, "2 bytes"), "%s",
              err.msg);
    divergence_store_sequences_free(rows, n);
    store_close(s);
}

/* Positions with every field distinct, NaN where a side did not report. */
static div_position pos_at(int i)
{
    div_position p = {.kld_lb = 0.125 * i, .tail_p = 0.01 * i, .lp = -1.0 - i, .lq = -1.5 - i,
                      .top_p = 100 + i, .top_q = i % 2 ? 100 + i : -7};
    p.dlogprob = p.lq - p.lp;
    p.dp = exp(p.lq) - exp(p.lp);
    p.same_top = p.top_p == p.top_q;
    if (i == 2) p.lp = p.lq = p.dlogprob = p.dp = NAN;
    return p;
}

Test(divergence_store, positions_round_trip_bit_exact_with_nan)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    div_position in[5];
    for (int i = 0; i < 5; i++) in[i] = pos_at(i);
    cr_assert_eq(divergence_store_put_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", in, 5,
                                                &err), PG_OK, "%s", err.msg);
    /* Another role, same key otherwise: a row of its own. */
    cr_assert_eq(divergence_store_put_positions(s, run, "bf16", DIV_ROLE_FLOOR, "s1", in, 2,
                                                &err), PG_OK, "%s", err.msg);
    div_position *out = NULL;
    size_t n = 0;
    cr_assert_eq(divergence_store_read_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", &out, &n,
                                                 &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(memcmp(&out[i].kld_lb, &in[i].kld_lb, sizeof(double)), 0, "kld %d", i);
        cr_assert_eq(out[i].tail_p, in[i].tail_p);
        cr_assert_eq(out[i].top_p, in[i].top_p);
        cr_assert_eq(out[i].top_q, in[i].top_q);
        cr_assert_eq(out[i].same_top, in[i].same_top, "same_top %d", i);
        if (i == 2) {
            cr_assert(isnan(out[i].lp) && isnan(out[i].lq) && isnan(out[i].dlogprob) &&
                      isnan(out[i].dp));
        } else {
            cr_assert_eq(out[i].lp, in[i].lp);
            cr_assert_eq(out[i].lq, in[i].lq);
            cr_assert_eq(out[i].dlogprob, in[i].dlogprob);
            cr_assert_eq(out[i].dp, in[i].dp);
        }
    }
    free(out);
    cr_assert_eq(divergence_store_read_positions(s, run, "bf16", DIV_ROLE_FLOOR, "s1", &out, &n,
                                                 &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    free(out);

    /* The blob's first 8 bytes are kld_lb of position 0 (0.0) and the
     * second position's starts at byte 56 with 0.125 = 0x3fc0000000000000. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(store_handle(s),
                                    "SELECT length(packed), substr(packed, 57, 8) FROM "
                                    "div_positions WHERE mode = 'fp8kv'", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 5 * DIV_POSITION_BYTES);
    const unsigned char want[8] = {0, 0, 0, 0, 0, 0, 0xc0, 0x3f};
    cr_assert_eq(sqlite3_column_bytes(st, 1), 8);
    cr_assert_arr_eq(sqlite3_column_blob(st, 1), want, 8);
    sqlite3_finalize(st);

    /* Not scored yet: none. */
    cr_assert_eq(divergence_store_read_positions(s, run, "fp8qkv", DIV_ROLE_MODE, "s1", &out, &n,
                                                 &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 0);
    cr_assert_null(out);

    /* Put again: replaced, not added. */
    cr_assert_eq(divergence_store_put_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", in, 3,
                                                &err), PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_read_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", &out, &n,
                                                 &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    free(out);

    /* Damage the blob past its CHECK: refused naming the row. */
    exec_ok(s, "PRAGMA ignore_check_constraints = ON");
    exec_ok(s, "UPDATE div_positions SET packed = substr(packed, 1, 100) WHERE mode = 'fp8kv'");
    cr_assert_eq(divergence_store_read_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", &out, &n,
                                                 &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "mode 'fp8kv'") && strstr(err.msg, "sequence 's1'") &&
              strstr(err.msg, "100 bytes"), "%s", err.msg);
    cr_assert_null(out);
    store_close(s);
}

Test(divergence_store, mode_positions_read_every_sequence_in_seq_id_order_in_one_query)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    div_position in[7];
    for (int i = 0; i < 7; i++) in[i] = pos_at(i);
    /* Stored out of order, and another role and mode beside them. */
    cr_assert_eq(divergence_store_put_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s3", in + 4, 3,
                                                &err), PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_put_positions(s, run, "fp8kv", DIV_ROLE_MODE, "s1", in, 4, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_put_positions(s, run, "fp8kv", DIV_ROLE_FLOOR, "s2", in, 1, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_put_positions(s, run, "bf16", DIV_ROLE_MODE, "s2", in, 2, &err),
                 PG_OK, "%s", err.msg);
    div_mode_positions p;
    cr_assert_eq(divergence_store_read_mode_positions(s, run, "fp8kv", DIV_ROLE_MODE, &p, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(p.n, 7);
    cr_assert_eq(p.n_seq, 2);
    cr_assert_eq(p.seq_at[0], 0);
    cr_assert_eq(p.seq_at[1], 4, "s1 first: its 4 positions");
    cr_assert_eq(p.seq_at[2], 7);
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(memcmp(&p.pos[i].kld_lb, &in[i].kld_lb, sizeof(double)), 0, "kld %d", i);
        cr_assert_eq(p.pos[i].top_q, in[i].top_q, "top_q %d", i);
    }
    div_mode_positions_free(&p);
    cr_assert_eq(divergence_store_read_mode_positions(s, run, "fp8qkv", DIV_ROLE_MODE, &p, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(p.n, 0);
    cr_assert_eq(p.n_seq, 0);
    /* A damaged blob is refused naming its sequence, nothing kept. */
    exec_ok(s, "PRAGMA ignore_check_constraints = ON");
    exec_ok(s, "UPDATE div_positions SET packed = substr(packed, 1, 100) WHERE seq_id = 's3'");
    cr_assert_eq(divergence_store_read_mode_positions(s, run, "fp8kv", DIV_ROLE_MODE, &p, &err),
                 PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "sequence 's3'") != NULL, "%s", err.msg);
    cr_assert_null(p.pos);
    cr_assert_eq(p.n, 0);
    store_close(s);
}

Test(divergence_store, summaries_round_trip_with_null_statistics)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    div_summary a = {.n_sequences = 3, .n_positions = 300, .n_given = 299, .kld_mean = 0.0123,
                     .kld_mean_se = 0.001, .kld_ci_low = 0.0103, .kld_ci_high = 0.0143,
                     .kld_percentile = {0.001, 0.02, 0.03, 0.09, 0.4, 1.25}, .same_top = 0.97,
                     .same_top_se = 0.01, .mean_dp = -0.002, .rms_dp = 0.03,
                     .mean_dlogprob = -0.004, .ppl_ratio = 1.004008, .tail_mass_median = 0.02};
    div_summary f = a;
    f.n_sequences = 1;
    f.kld_mean_se = NAN;   /* one sequence: no SE */
    f.same_top_se = NAN;
    f.kld_ci_low = f.kld_ci_high = NAN;
    cr_assert_eq(divergence_store_put_summary(s, run, "fp8kv", DIV_ROLE_MODE, "bf16", 20, &a,
                                              &err), PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_put_summary(s, run, "bf16", DIV_ROLE_FLOOR, "bf16", 20, &f,
                                              &err), PG_OK, "%s", err.msg);
    div_summary inf = a;
    inf.ppl_ratio = INFINITY;
    cr_assert_eq(divergence_store_put_summary(s, run, "fp8qkv", DIV_ROLE_MODE, "bf16", 20, &inf,
                                              &err), PG_ERR_NUMERIC);
    cr_assert(strstr(err.msg, "ppl_ratio is infinite"), "%s", err.msg);

    div_summary_stored *rows = NULL;
    size_t n = 0;
    cr_assert_eq(divergence_store_read_summaries(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    /* ORDER BY role, mode: 'floor' before 'mode'. */
    cr_assert_str_eq(rows[0].role, "floor");
    cr_assert_str_eq(rows[1].mode, "fp8kv");
    cr_assert_str_eq(rows[1].reference, "bf16");
    cr_assert_eq(rows[1].top_k, 20);
    cr_assert_eq(rows[1].s.n_sequences, 3);
    cr_assert_eq(rows[1].s.n_positions, 300);
    cr_assert_eq(rows[1].s.n_given, 299);
    cr_assert_eq(memcmp(rows[1].s.kld_percentile, a.kld_percentile, sizeof a.kld_percentile), 0);
    cr_assert_eq(rows[1].s.kld_mean, a.kld_mean);
    cr_assert_eq(rows[1].s.ppl_ratio, a.ppl_ratio);
    cr_assert_eq(rows[1].s.tail_mass_median, a.tail_mass_median);
    cr_assert_eq(rows[1].s.mean_dp, a.mean_dp);
    cr_assert(isnan(rows[0].s.kld_mean_se) && isnan(rows[0].s.same_top_se));
    cr_assert_eq(rows[0].s.n_sequences, 1);
    divergence_store_summaries_free(rows, n);

    /* Replaced on a second put. */
    a.kld_mean = 0.5;
    cr_assert_eq(divergence_store_put_summary(s, run, "fp8kv", DIV_ROLE_MODE, "bf16", 20, &a,
                                              &err), PG_OK, "%s", err.msg);
    cr_assert_eq(divergence_store_read_summaries(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert_eq(rows[1].s.kld_mean, 0.5);
    divergence_store_summaries_free(rows, n);

    /* Another run has none. */
    int64_t other = begin_run(s);
    cr_assert_eq(divergence_store_read_summaries(s, other, &rows, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(n, 0);
    cr_assert_null(rows);
    store_close(s);
}
