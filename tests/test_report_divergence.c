/* test_report_divergence.c: Criterion tests of a diverge run in `precgate report` (HTML
 * and Markdown) and `precgate diff` (terminal and --json), on real diverge runs made
 * through the CLI against the loopback fake servers (tests/fake_divergence_server.h):
 * every number asserted is read back from the store the runs wrote. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/divergence_store.h"
#include "db/store.h"
#include "fake_divergence_server.h"
#include "harness/div_curves.h"
#include "lifecycle_util.h"
#include "testutil.h"

/* Room for one expected table row or chart point. */
#define ROW_MAX 2048
/* Percent per unit, as the tables show same top and delta p. */
#define PERCENT 100.0
/* The reference's second scoring differs this much (a noise floor above 0). */
#define FLOOR_JITTER 0.05

static char g_db[PATH_MAX + 16];
static char g_seqs[PATH_MAX + 16];
static char g_other[PATH_MAX + 16];

static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/precgate.db", tu_dir);
    snprintf(g_seqs, sizeof g_seqs, "%s/seqs.jsonl", tu_dir);
    snprintf(g_other, sizeof g_other, "%s/other.jsonl", tu_dir);
}

TestSuite(report_divergence, .init = setup, .fini = tu_scratch_teardown, .timeout = 120);

/* The servers of the runs: the reference (its second scoring jittered),
 * fp8kv, fp8kv twice as perturbed, and fp8qkv. */
typedef struct servers {
    fake_model ref, kv, kv_worse, qkv;
    fake_server s_ref, s_kv, s_kv_worse, s_qkv;
} servers;

/* Starts the four servers of sv. */
static void servers_start(servers *sv)
{
    sv->ref = (fake_model){.shift = 0, .floor_jitter = FLOOR_JITTER};
    sv->kv = (fake_model){.shift = 0.8};
    sv->kv_worse = (fake_model){.shift = 1.6};
    sv->qkv = (fake_model){.shift = 1.2};
    serve(&sv->s_ref, &sv->ref);
    serve(&sv->s_kv, &sv->kv);
    serve(&sv->s_kv_worse, &sv->kv_worse);
    serve(&sv->s_qkv, &sv->qkv);
}

/* Stops the servers of sv. */
static void servers_stop(servers *sv)
{
    fs_stop(&sv->s_ref);
    fs_stop(&sv->s_kv);
    fs_stop(&sv->s_kv_worse);
    fs_stop(&sv->s_qkv);
}

/* Runs diverge of seqs with label "nightly" and the given --endpoint list into g_db. */
static void diverge(const char *endpoints, const char *seqs)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "diverge %s --label nightly --no-progress --top-k %d "
                                    "--ready-timeout 5 --sequences '%s' --db '%s'", endpoints,
                                    FAKE_DIV_V, seqs, g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* Run 1: bf16, fp8kv, fp8qkv; run 2: the same with fp8kv worse; run 3:
 * bf16 and fp8kv of other sequences; run 4: an eval (replayed demo traces). */
static void make_runs(servers *sv)
{
    servers_start(sv);
    fake_div_write_sequences(g_seqs);
    const char *other = "{\"id\":\"s1\",\"tokens\":[1,5,9,13,2,30,7,7,21,0,39,4],"
                        "\"score_from\":3}\n{\"id\":\"s9\",\"tokens\":[3,3,8,1,17,25,6,11,2]}\n";
    tu_write_file(g_other, other, strlen(other));
    char e[512];
    snprintf(e, sizeof e, "--endpoint bf16=http://127.0.0.1:%d --endpoint fp8kv=http://127.0.0.1:%d "
             "--endpoint fp8qkv=http://127.0.0.1:%d", sv->s_ref.port, sv->s_kv.port, sv->s_qkv.port);
    diverge(e, g_seqs);
    snprintf(e, sizeof e, "--endpoint bf16=http://127.0.0.1:%d --endpoint fp8kv=http://127.0.0.1:%d "
             "--endpoint fp8qkv=http://127.0.0.1:%d", sv->s_ref.port, sv->s_kv_worse.port,
             sv->s_qkv.port);
    diverge(e, g_seqs);
    snprintf(e, sizeof e, "--endpoint bf16=http://127.0.0.1:%d --endpoint fp8kv=http://127.0.0.1:%d",
             sv->s_ref.port, sv->s_kv.port);
    diverge(e, g_other);
    lu_replay_ok(PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl", g_db, NULL, NULL);
}

/* The stored summary of (mode, role) in run. */
static div_summary_stored summary_of(int64_t run, const char *mode, const char *role)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(g_db, &s, &err), PG_OK, "%s", err.msg);
    div_summary_stored *rows = NULL;
    size_t n = 0;
    cr_assert_eq(divergence_store_read_summaries(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    div_summary_stored out = {0};
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].mode, mode) == 0 && strcmp(rows[i].role, role) == 0) {
            out = rows[i];
            out.mode = out.role = out.reference = NULL;  /* freed below */
            found = 1;
        }
    divergence_store_summaries_free(rows, n);
    store_close(s);
    cr_assert(found, "run %lld has no %s summary of %s", (long long)run, role, mode);
    return out;
}

/* v as the reports print it ("%.3g", svg_fmt_num). */
static const char *g3(char *buf, double v)
{
    snprintf(buf, 32, "%.3g", v);
    return buf;
}

/* Appends to row (ROW_MAX) one cell: open, the text, close. */
static void add_cell(char *row, const char *open, const char *text, const char *close)
{
    const size_t at = strlen(row);
    snprintf(row + at, ROW_MAX - at, "%s%s%s", open, text, close);
}

/* The table row the report must hold for (mode, role) of run, in Markdown
 * (md) or HTML, from the stored summary. */
static void expected_row(char *row, int64_t run, const char *mode, const char *role, int md)
{
    const div_summary_stored st = summary_of(run, mode, role);
    const div_summary *s = &st.s;
    const char *num = md ? " " : "<td>", *text = md ? " " : "<td class=\"t\">",
               *end = md ? " |" : "</td>";
    snprintf(row, ROW_MAX, "%s", md ? "|" : "<tr>");
    char b[80], lo[32], hi[32];
    if (strcmp(role, "floor") == 0) snprintf(b, sizeof b, "noise floor (%s again)", mode);
    else snprintf(b, sizeof b, "%s", mode);
    add_cell(row, text, b, end);
    snprintf(b, sizeof b, "%zu", s->n_sequences);
    add_cell(row, num, b, end);
    snprintf(b, sizeof b, "%zu", s->n_positions);
    add_cell(row, num, b, end);
    add_cell(row, num, g3(b, s->kld_mean), end);
    add_cell(row, num, g3(b, s->kld_mean_se), end);
    snprintf(b, sizeof b, "[%s, %s]", g3(lo, s->kld_ci_low), g3(hi, s->kld_ci_high));
    add_cell(row, num, b, end);
    const double v[] = {s->kld_percentile[0], s->kld_percentile[1], s->kld_percentile[3],
                        s->kld_percentile[5], s->same_top * PERCENT, s->mean_dp * PERCENT,
                        s->rms_dp * PERCENT, s->ppl_ratio, s->tail_mass_median};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) add_cell(row, num, g3(b, v[i]), end);
}

/* The report of run as file name in the scratch directory, its text malloc'd. */
static char *report(int run, const char *name)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "report --run %d -o '%s' --db '%s'", run,
                                    tu_in_dir(name), g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return tu_slurp(name);
}

/* How many times needle occurs in hay[0 .. len). */
static size_t count_in(const char *hay, size_t len, const char *needle)
{
    size_t n = 0;
    const size_t m = strlen(needle);
    for (const char *p = hay; (p = strstr(p, needle)) != NULL && (size_t)(p - hay) + m <= len; p += m)
        n++;
    return n;
}

/* The mean KLD of (run, mode, role) at scored position 0 over every sequence. */
static double kld_at_first(int64_t run, const char *mode, div_role role)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(g_db, &s, &err), PG_OK, "%s", err.msg);
    double sum = 0;
    size_t n = 0;
    static const char *const ids[] = {"s1", "s2", "s3"};
    for (size_t q = 0; q < 3; q++) {
        div_position *pos = NULL;
        size_t np = 0;
        cr_assert_eq(divergence_store_read_positions(s, run, mode, role, ids[q], &pos, &np, &err),
                     PG_OK, "%s", err.msg);
        cr_assert(np > 0);
        sum += pos[0].kld_lb;
        n++;
        free(pos);
    }
    store_close(s);
    return sum / (double)n;
}

Test(report_divergence, html_charts_have_a_line_per_mode_and_the_floor_and_tables_the_stored_numbers)
{
    servers sv;
    make_runs(&sv);
    char *html = report(1, "r1.html");
    const char *sec = strstr(html, "<section id=\"divergence\">");
    cr_assert(sec != NULL, "no divergence section");
    const char *sec_end = strstr(sec, "</section>");
    const size_t len = (size_t)(sec_end - sec);
    cr_assert(strstr(html, "<a href=\"#divergence\">") != NULL, "no nav link");
    /* Three charts, each a polyline per mode (fp8kv, fp8qkv) and one for the floor, dashed. */
    cr_assert_eq(count_in(sec, len, "<svg"), 3, "charts");
    const char *svg = sec;
    for (int c = 0; c < 3; c++) {
        svg = strstr(svg, "<svg");
        const char *svg_end = strstr(svg, "</svg>");
        const size_t sl = (size_t)(svg_end - svg);
        cr_assert_eq(count_in(svg, sl, "<polyline"), 3, "chart %d: polylines", c);
        cr_assert_eq(count_in(svg, sl, "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"#777777\" "
                                       "stroke-dasharray"), 1, "chart %d: the floor's dashed line", c);
        cr_assert(count_in(svg, sl, "noise floor (bf16 again)") > 0, "chart %d: floor legend", c);
        svg = svg_end;
    }
    /* The first point of fp8kv along the sequence: the mean over the sequences' first positions. */
    char want[ROW_MAX], num[32];
    snprintf(want, sizeof want, "<title>fp8kv, scored position in the sequence 0: %s</title>",
             g3(num, kld_at_first(1, "fp8kv", DIV_ROLE_MODE)));
    cr_assert(strstr(sec, want) != NULL, "no %s", want);
    snprintf(want, sizeof want, "<title>noise floor (bf16 again), scored position in the sequence 0: "
             "%s</title>", g3(num, kld_at_first(1, "bf16", DIV_ROLE_FLOOR)));
    cr_assert(strstr(sec, want) != NULL, "no %s", want);
    /* The table: each mode and the floor, every number the stored summary's. */
    const char *rows[][2] = {{"fp8kv", "mode"}, {"fp8qkv", "mode"}, {"bf16", "floor"}};
    for (size_t i = 0; i < 3; i++) {
        expected_row(want, 1, rows[i][0], rows[i][1], 0);
        cr_assert(strstr(sec, want) != NULL, "no row\n%s\nin\n%.*s", want, (int)len, sec);
    }
    cr_assert(strstr(sec, "KLD is a top-K lower bound (K = 40)") != NULL);
    free(html);
    servers_stop(&sv);
}

Test(report_divergence, markdown_tables_trend_and_gate_flags_hold_the_stored_numbers)
{
    servers sv;
    make_runs(&sv);
    char *out = NULL;
    /* Run 2 against run 1 (automatic baseline): fp8kv's KLD grew, a regression
     * (the gate lifecycle called directly). */
    cr_assert_eq(lu_gate_exit(g_db, 2, NULL, &out), GATE_EXIT_REGRESSION, "%s", out);
    free(out);
    char *md = report(2, "r2.md");
    cr_assert(strstr(md, "### Teacher-forced divergence") != NULL);
    char want[ROW_MAX];
    const char *rows[][2] = {{"fp8kv", "mode"}, {"fp8qkv", "mode"}, {"bf16", "floor"}};
    for (size_t i = 0; i < 3; i++) {
        expected_row(want, 2, rows[i][0], rows[i][1], 1);
        cr_assert(strstr(md, want) != NULL, "no row\n%s\nin\n%s", want, md);
    }
    cr_assert(strstr(md, "KLD is a top-K lower bound (K = 40)") != NULL);
    /* The gate's divergence flags head the report. */
    cr_assert(strstr(md, "**Gate:** **FAIL**") != NULL, "%s", md);
    cr_assert(strstr(md, "| **regression** | divergence | fp8kv / fp8kv | "
                         "kld\\_mean\\_vs\\_baseline |") != NULL, "%s", md);
    /* The trend follows mean KLD per mode over runs 1 and 2 (run 3 has other sequences
     * but the same label: it is newer than run 2, so not among them). */
    cr_assert(strstr(md, "Mean KLD per mode against the reference over the last 2 complete runs")
              != NULL, "%s", md);
    char a[32], b[32];
    for (int run = 1; run <= 2; run++) {
        snprintf(want, sizeof want, "\n| %d |", run);
        const char *line = strstr(strstr(md, "### Trend"), want);
        cr_assert(line != NULL, "no trend row of run %d", run);
        const char *eol = strchr(line + 1, '\n');
        snprintf(want, sizeof want, "| %s | %s |", g3(a, summary_of(run, "fp8kv", "mode").s.kld_mean),
                 g3(b, summary_of(run, "fp8qkv", "mode").s.kld_mean));
        cr_assert(strstr(line, want) != NULL && strstr(line, want) < eol, "trend row %d: want %s in %.*s",
                  run, want, (int)(eol - line), line);
    }
    free(md);
    char *html = report(2, "r2.html");
    const char *trend = strstr(html, "<section id=\"trend\">");
    cr_assert(trend != NULL && strstr(trend, "mean KLD per run (log scale)") != NULL);
    cr_assert_eq(count_in(trend, strlen(trend), "<polyline"), 2, "a trend line per mode");
    const char *reg = strstr(html, "<section id=\"regressions\">");
    cr_assert(strstr(reg, "kld_mean_vs_baseline") != NULL && strstr(reg, "divergence") != NULL);
    free(html);
    servers_stop(&sv);
}

/* The "divergence" object of mode and role in diff --json's array doc. */
static const cJSON *div_row(const cJSON *doc, const char *mode, const char *role)
{
    const cJSON *o = NULL;
    cJSON_ArrayForEach(o, doc)
    {
        const cJSON *t = cJSON_GetObjectItem(o, "type"), *m = cJSON_GetObjectItem(o, "mode"),
                    *r = cJSON_GetObjectItem(o, "role");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "divergence") == 0 && cJSON_IsString(m) &&
            strcmp(m->valuestring, mode) == 0 && strcmp(r->valuestring, role) == 0)
            return o;
    }
    cr_assert_fail("no divergence row of %s %s", mode, role);
    return NULL;
}

/* Relative error a number may have after cJSON's printing (15 significant
 * digits when they read back within its epsilon). */
#define JSON_REL_TOL 1e-14

/* Asserts that JSON number got is want within JSON_REL_TOL. */
static void assert_json_eq(double got, double want, const char *what)
{
    cr_assert(fabs(got - want) <= JSON_REL_TOL * fabs(want), "%s: %.17g, want %.17g", what, got,
              want);
}

/* The number under key in o (asserted to be one). */
static double num_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

Test(report_divergence, diff_gives_the_stored_difference_and_the_paired_interval)
{
    servers sv;
    make_runs(&sv);
    const double a = summary_of(1, "fp8kv", "mode").s.kld_mean;
    const double b = summary_of(2, "fp8kv", "mode").s.kld_mean;
    cr_assert(b > a, "the worse server diverges more: %g vs %g", b, a);
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --db '%s'", g_db), 0, "%s", out);
    char want[ROW_MAX];
    snprintf(want, sizeof want, "%.4e", a);
    cr_assert(strstr(out, want) != NULL, "no KLD A %s in\n%s", want, out);
    snprintf(want, sizeof want, "%+.3e", b - a);
    cr_assert(strstr(out, want) != NULL, "no B-A %s in\n%s", want, out);
    cr_assert(strstr(out, "fp8kv: paired over 3 sequences (27 positions)") != NULL, "%s", out);
    cr_assert(strstr(out, "noise floor (bf16 again)") != NULL, "%s", out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --json --db '%s'", g_db), 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert(cJSON_IsArray(doc), "not JSON: %s", out);
    const cJSON *kv = div_row(doc, "fp8kv", "mode");
    assert_json_eq(num_of(kv, "kld_mean_a"), a, "kld_mean_a");
    assert_json_eq(num_of(kv, "kld_mean_b"), b, "kld_mean_b");
    assert_json_eq(num_of(kv, "kld_delta"), b - a, "kld_delta");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(kv, "paired")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(kv, "unpaired")));
    cr_assert_eq(num_of(kv, "paired_sequences"), 3);
    const double pd = num_of(kv, "paired_kld_delta");
    cr_assert(fabs(pd - (b - a)) <= 1e-12 * fabs(b - a), "paired %g vs %g", pd, b - a);
    cr_assert(num_of(kv, "paired_kld_ci_low") > 0, "the interval lies above 0: B is worse");
    cr_assert(num_of(kv, "paired_kld_ci_high") > num_of(kv, "paired_kld_ci_low"));
    cr_assert(num_of(kv, "paired_same_top_delta") <= 0);
    const cJSON *fl = div_row(doc, "bf16", "floor");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(fl, "paired")));
    assert_json_eq(num_of(fl, "kld_mean_a"), summary_of(1, "bf16", "floor").s.kld_mean, "floor");
    div_row(doc, "fp8qkv", "mode");
    cJSON_Delete(doc);
    free(out);
    servers_stop(&sv);
}

Test(report_divergence, diff_of_other_sequences_is_unpaired_and_of_another_kind_a_usage_error)
{
    servers sv;
    make_runs(&sv);
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 3 --db '%s'", g_db), 0, "%s", out);
    cr_assert(strstr(out, "fp8kv: unpaired: sequences_digest differs") != NULL, "%s", out);
    cr_assert(strstr(out, "only in A") != NULL, "fp8qkv is in run 1 alone:\n%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 3 --json --db '%s'", g_db), 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert(cJSON_IsArray(doc), "not JSON: %s", out);
    const cJSON *kv = div_row(doc, "fp8kv", "mode");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(kv, "paired")));
    const cJSON *why = cJSON_GetObjectItem(kv, "unpaired");
    cr_assert(cJSON_IsString(why) && strncmp(why->valuestring, "sequences_digest differs", 24) == 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(kv, "paired_kld_delta")));
    assert_json_eq(num_of(kv, "kld_delta"), summary_of(3, "fp8kv", "mode").s.kld_mean -
                                                summary_of(1, "fp8kv", "mode").s.kld_mean,
                   "kld_delta");
    const cJSON *q = div_row(doc, "fp8qkv", "mode");
    cr_assert_str_eq(cJSON_GetObjectItem(q, "presence")->valuestring, "only_a");
    cJSON_Delete(doc);
    free(out);
    /* A diverge run against an eval run, either way round: exit 2 naming both kinds. */
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 4 --db '%s'", g_db), 2, "%s", out);
    cr_assert(strstr(out, "run 1 is of kind diverge and run 4 of kind eval") != NULL, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "diff 4 1 --json --db '%s'", g_db), 2, "%s", out);
    cr_assert(strstr(out, "run 4 is of kind eval and run 1 of kind diverge") != NULL, "%s", out);
    free(out);
    servers_stop(&sv);
}

Test(report_divergence, long_sequences_are_binned_into_at_most_64_bins)
{
    /* A bin a position while they fit, then the narrowest width that fits. */
    const size_t n[] = {1, 10, 64, 65, 128, 129, 1000, 30000};
    const size_t width[] = {1, 1, 1, 2, 2, 3, 16, 469};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        const size_t w = div_curves_bin_width(n[i]);
        cr_assert_eq(w, width[i], "n %zu: width %zu", n[i], w);
        const size_t bins = (n[i] + w - 1) / w;
        cr_assert(bins <= REPORT_DIV_MAX_BINS, "n %zu: %zu bins", n[i], bins);
        cr_assert(w == 1 || (n[i] + w - 2) / (w - 1) > REPORT_DIV_MAX_BINS,
                  "n %zu: width %zu is not the narrowest", n[i], w);
    }
}
