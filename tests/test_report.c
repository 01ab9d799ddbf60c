/*
 * test_report.c: `precgate report` end to end. A database is built by the
 * real binary (a synthetic 3-layer capture swept twice with one label, and a
 * replay of the shipped demo eval); the sweep runs' label is then set to one
 * holding HTML metacharacters. The HTML report must have every section, no
 * script and no URL, escape the label, draw its charts with non-finite values
 * skipped and said so; the Markdown report must have a row per layer; bad
 * arguments and unwritable outputs are errors naming the file. Last, the HTML
 * page is rendered by headless Chromium and must not come out blank
 * (PRECGATE_SKIP_BROWSER=1 skips that test visibly; without chromium it fails).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* The label the sweep runs get, and how each report format must show it. */
#define NASTY_LABEL "nightly <b>&\"'x"
#define NASTY_LABEL_SQL "nightly <b>&\"''x"
#define NASTY_LABEL_HTML "nightly &lt;b&gt;&amp;&quot;&#39;x"
#define NASTY_LABEL_MD "nightly &lt;b&gt;&amp;\"'x"
/* Layers of the synthetic capture. */
#define N_LAYERS 3
/* Chromium's window, and how much larger than a blank page's the report's PNG must be. */
#define SHOT_W 1200
#define SHOT_H 2000
#define SHOT_MIN_RATIO 3
#define SHOT_MIN_BYTES (40 * 1024)
/* Seconds chromium may take for one screenshot. */
#define CHROMIUM_TIMEOUT_S 120

static char g_db[512];

/* Runs precgate with args; asserts exit status want, returns the output (caller frees). */
static char *run_ok(const char *args, int want)
{
    char *out = NULL;
    const int rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, want, "precgate %s: exit %d, want %d:\n%s", args, rc, want, out);
    return out;
}

/* Executes sql on the database at path. */
static void db_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    tu_sql_exec(db, sql);
    sqlite3_close(db);
}

/* Whether the database at path has a table of that name. */
static int db_has_table(const char *path, const char *name)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    const int has = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return has;
}

/* The whole file at path, NUL-terminated (caller frees); *len gets its size. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len != NULL) *len = (size_t)n;
    return buf;
}

/* Writes run's report to <dir>/name and returns its text (caller frees). */
static char *report(int run, const char *name)
{
    char args[2048], path[600];
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    snprintf(args, sizeof args, "report --run %d --db '%s' -o '%s'", run, g_db, path);
    char *out = run_ok(args, 0);
    cr_assert(strstr(out, path) != NULL, "the message names the file: %s", out);
    free(out);
    return slurp(path, NULL);
}

/* Offset of needle in hay; fails the test when absent. */
static size_t offset_of(const char *hay, const char *needle)
{
    const char *p = strstr(hay, needle);
    cr_assert_not_null(p, "missing '%s'", needle);
    return (size_t)(p - hay);
}

/* The text of the <section id="id"> element (caller frees). */
static char *section(const char *html, const char *id)
{
    char open[64];
    snprintf(open, sizeof open, "<section id=\"%s\">", id);
    const char *a = strstr(html, open);
    cr_assert_not_null(a, "no section %s", id);
    const char *b = strstr(a, "</section>");
    cr_assert_not_null(b, "section %s is not closed", id);
    return strndup(a, (size_t)(b - a));
}

/* Whether needle occurs in hay ignoring ASCII case (needle in lower case). */
static int contains_ci(const char *hay, const char *needle)
{
    const size_t n = strlen(needle);
    for (; *hay != '\0'; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return 0;
}

/* How many times needle occurs in hay. */
static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Builds the database: 3-layer capture swept twice (label nightly), the demo
 * eval replayed, then the sweep runs relabelled with NASTY_LABEL. */
static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/d.db", tu_dir);
    char args[1024];
    snprintf(args, sizeof args, "synth -o '%s/x' --layers %d --seqs 1 --seq-len 32", tu_dir, N_LAYERS);
    free(run_ok(args, 0));
    snprintf(args, sizeof args, "run --capture '%s/x' --db '%s' --label nightly --no-progress",
             tu_dir, g_db);
    free(run_ok(args, 0));
    free(run_ok(args, 0));
    snprintf(args, sizeof args,
             "eval --traces '%s/evals/demo/aime-style-demo.jsonl' --replay --db '%s' --no-progress",
             PRECGATE_SOURCE_DIR, g_db);
    free(run_ok(args, 0));
    db_exec(g_db, "UPDATE runs SET label = '" NASTY_LABEL_SQL "' WHERE kind = 'sweep'");
}

TestSuite(report, .init = setup, .fini = tu_scratch_teardown, .timeout = 300);

Test(report, html_has_every_section_in_order_and_nothing_external)
{
    char *html = report(2, "r.html");
    cr_assert_eq(strncmp(html, "<!DOCTYPE html>", 15), 0);
    const char *ids[] = {"<header id=\"run\">",  "<section id=\"regressions\">",
                         "<section id=\"layers\">", "<section id=\"heads\">",
                         "<section id=\"quant\">", "<section id=\"evals\">",
                         "<section id=\"trend\">"};
    size_t prev = 0;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        const size_t at = offset_of(html, ids[i]);
        cr_assert_gt(at, prev, "%s is out of order", ids[i]);
        prev = at;
    }
    cr_assert(strstr(html, "<h2>Regressions</h2>") != NULL);
    /* Self-contained: no script, no URL, nothing loaded; links only to its own sections. */
    cr_assert(!contains_ci(html, "<script"));
    cr_assert_null(strstr(html, "http://"));
    cr_assert_null(strstr(html, "https://"));
    cr_assert(!contains_ci(html, "<link"));
    cr_assert(!contains_ci(html, "<img"));
    cr_assert_null(strstr(html, " src="));
    cr_assert_null(strstr(html, "url("));
    for (const char *h = strstr(html, "href=\""); h != NULL; h = strstr(h + 1, "href=\""))
        cr_assert_eq(h[6], '#', "external link: %.40s", h);
    /* The label is escaped everywhere it appears. */
    cr_assert(strstr(html, NASTY_LABEL_HTML) != NULL);
    cr_assert_null(strstr(html, NASTY_LABEL));
    cr_assert_null(strstr(html, "<b>&"));
    /* No flags for this run: not gated. */
    char *reg = section(html, "regressions");
    cr_assert(strstr(reg, "not gated") != NULL, "%s", reg);
    free(reg);
    /* Layers: a log chart with a decade tick, one series per mode, a row per layer. */
    char *lay = section(html, "layers");
    cr_assert_eq(count(lay, "<svg"), 1);
    cr_assert(strstr(lay, ">0.01</text>") != NULL || strstr(lay, ">0.1</text>") != NULL,
              "no decade tick label");
    cr_assert_eq(count(lay, "<polyline"), 3, "one line per mode");
    cr_assert_eq(count(lay, "<circle"), 3 * N_LAYERS);
    for (int l = 0; l < N_LAYERS; l++) {
        char row[32];
        snprintf(row, sizeof row, "<tr><td>%d</td>", l);
        cr_assert(strstr(lay, row) != NULL, "no table row for layer %d", l);
    }
    free(lay);
    /* Heads: a heatmap of 3 layers x 64 heads with a legend. */
    char *heads = section(html, "heads");
    cr_assert(strstr(heads, "<svg") != NULL);
    cr_assert(strstr(heads, "log scale") != NULL);
    cr_assert_geq(count(heads, "<rect"), 3 * 64);
    cr_assert(strstr(heads, "fp8") != NULL);
    free(heads);
    /* fp8 statistics per layer; no evals in a sweep run; trend over both sweeps. */
    char *quant = section(html, "quant");
    cr_assert(strstr(quant, "amax") != NULL);
    free(quant);
    char *evals = section(html, "evals");
    cr_assert(strstr(evals, "No end-task evals") != NULL);
    free(evals);
    char *trend = section(html, "trend");
    cr_assert(strstr(trend, "<svg") != NULL);
    cr_assert(strstr(trend, "last 2 complete runs") != NULL, "%s", trend);
    cr_assert(strstr(trend, "#1") != NULL && strstr(trend, "#2") != NULL);
    free(trend);
    free(html);
}

/* Writes run's report with --config cfg (written to g.json) to <dir>/name;
 * returns its text (caller frees). */
static char *report_with_config(int run, const char *name, const char *cfg)
{
    char args[2048], path[600], cfg_path[600];
    snprintf(cfg_path, sizeof cfg_path, "%s/g.json", tu_dir);
    tu_write_file(cfg_path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "%s/%s", tu_dir, name);
    snprintf(args, sizeof args, "report --run %d --db '%s' -o '%s' --config '%s'", run, g_db,
             path, cfg_path);
    free(run_ok(args, 0));
    return slurp(path, NULL);
}

Test(report, a_sweep_carries_the_kv_advice_at_the_configs_bounds)
{
    /* rel_l2 budget 0: every layer keeps bf16; cos_sim 0: none does */
    char *html = report_with_config(2, "a.html", "{\"layer\": {\"abs\": {\"fp8kv\": 0}, "
                                    "\"metric_abs\": {\"cos_sim\": {\"fp8kv\": 0}}}}");
    cr_assert_gt(offset_of(html, "<section id=\"advice\">"), offset_of(html, "<section id=\"quant\">"));
    char *adv = section(html, "advice");
    cr_assert(strstr(adv, "<tr><td class=\"t\">fp8kv@fixed</td><td class=\"t\">rel_l2</td>"
                          "<td>0</td><td class=\"t\">0, 1, 2</td><td class=\"t\">"
                          "--kv-cache-dtype-skip-layers 0 1 2</td><td>0</td><td>none</td>"
                          "<td>NaN</td></tr>") != NULL, "%s", adv);
    cr_assert(strstr(adv, "<tr><td class=\"t\">fp8kv@fixed</td><td class=\"t\">cos_sim</td>"
                          "<td>0</td><td class=\"t\">none</td><td class=\"t\">no flag needed"
                          "</td><td>0.5</td>") != NULL, "%s", adv);
    cr_assert(strstr(adv, "has no layer bound for fp8qkv@fa3") != NULL, "%s", adv);
    cr_assert(strstr(adv, "a per-token-head cache&#39;s inline scales, not per-tensor scales") !=
                  NULL, "%s", adv);
    free(adv);
    free(html);
    char *md = report_with_config(2, "a.md", "{\"layer\": {\"abs\": {\"fp8kv\": 0}}}");
    cr_assert(strstr(md, "### KV cache policy advice") != NULL, "%s", md);
    cr_assert(strstr(md, "| fp8kv@fixed | rel\\_l2 | 0 | 0, 1, 2 | "
                         "`--kv-cache-dtype-skip-layers 0 1 2` | 0 | none | NaN |") != NULL,
              "%s", md);
    free(md);
}

Test(report, without_a_config_or_shapes_the_advice_says_why_and_invents_no_budget)
{
    char *html = report(2, "n.html");
    char *adv = section(html, "advice");
    cr_assert(strstr(adv, "No budget: give report --config FILE") != NULL, "%s", adv);
    cr_assert_null(strstr(adv, "<table>"));
    free(adv);
    free(html);
    char *md = report(2, "n.md");
    cr_assert(strstr(md, "No budget: give report --config FILE") != NULL, "%s", md);
    free(md);
    /* an eval run has no fp8 profile: no advice section */
    html = report(3, "e.html");
    cr_assert_null(strstr(html, "<section id=\"advice\">"));
    free(html);
    /* a sweep from before layer_shapes: the missing evidence is named */
    db_exec(g_db, "DELETE FROM layer_shapes WHERE run_id = 2");
    html = report_with_config(2, "s.html", "{\"layer\": {\"abs\": {\"fp8kv\": 0.1}}}");
    adv = section(html, "advice");
    cr_assert(strstr(adv, "colspan=\"5\">no layer shapes (layer_shapes): the run was swept before "
                          "schema version 12") != NULL, "%s", adv);
    free(adv);
    free(html);
}

Test(report, eval_run_html_shows_accuracy_with_error_bars)
{
    char *html = report(3, "e.html");
    char *evals = section(html, "evals");
    cr_assert(strstr(evals, "<svg") != NULL);
    cr_assert_eq(count(evals, "<circle"), 3, "one point per mode");
    cr_assert_geq(count(evals, "<line"), 3 * 3, "a bar and two caps per mode");
    cr_assert(strstr(evals, "0.917") != NULL, "bf16 accuracy 33/36");
    cr_assert(strstr(evals, "0.75") != NULL, "fp8qkv accuracy 27/36");
    cr_assert(strstr(evals, "fp8qkv &minus; bf16") != NULL, "paired differences");
    free(evals);
    char *lay = section(html, "layers");
    cr_assert(strstr(lay, "No layer metrics") != NULL);
    free(lay);
    free(html);
}

Test(report, markdown_has_verdicts_and_a_row_per_layer)
{
    char *md = report(2, "r.md");
    cr_assert(strstr(md, "**Gate:** not gated") != NULL, "%s", md);
    cr_assert(strstr(md, NASTY_LABEL_MD) != NULL, "%s", md);
    cr_assert_null(strstr(md, "<b>"));
    const size_t table = offset_of(md, "### Per-layer rel_l2");
    const size_t next = offset_of(md + table, "\n### ") + table;
    cr_assert(strstr(md + table, "| layer | bf16 | fp8kv@fixed | fp8qkv@fa3 |") != NULL);
    for (int l = 0; l < N_LAYERS; l++) {
        char row[16];
        snprintf(row, sizeof row, "\n| %d | ", l);
        const char *r = strstr(md + table, row);
        cr_assert(r != NULL && (size_t)(r - md) < next, "no row for layer %d:\n%s", l, md);
        /* bf16, fp8kv and fp8qkv values, each a %.3g number. */
        char *line = strndup(r + 1, strcspn(r + 1, "\n"));
        cr_assert_eq(count(line, "|"), 5, "%s", line);
        free(line);
    }
    const char *heads[] = {"### Regressions", "### Per-head error", "### fp8 saturation",
                           "### End-task accuracy", "### Trend"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) offset_of(md, heads[i]);
    cr_assert(!contains_ci(md, "<svg"));
    free(md);

    char *emd = report(3, "e.md");
    cr_assert(strstr(emd, "| aime-style-demo | fp8qkv | medium | 0.75 |") != NULL, "%s", emd);
    free(emd);
}

Test(report, regressions_come_first_with_escaped_messages)
{
    if (!db_has_table(g_db, "flags")) {
        /* A schema without the gate: every report says so. */
        char *html = report(2, "g.html");
        cr_assert(strstr(html, "not gated") != NULL);
        free(html);
        cr_log_warn("no flags table in this schema: only 'not gated' checked");
        return;
    }
    db_exec(g_db,
            "INSERT INTO flags (run_id, baseline_run_id, scope, capture, layer, variant, metric, "
            "value, baseline_value, threshold, verdict, message) VALUES "
            "(2, 1, 'layer', 'x', 1, 'fp8qkv@fa3', 'rel_l2', 0.5, 0.07, 0.1, 'regression', "
            "'rel_l2 <i>jumped</i> & \"more\"'), "
            "(2, 1, 'layer', 'x', 0, 'fp8qkv@fa3', 'rel_l2', 0.07, 0.07, 0.1, 'pass', 'fine')");
    char *html = report(2, "g.html");
    char *reg = section(html, "regressions");
    cr_assert(strstr(reg, "1 of 2 checks failed against baseline run 1") != NULL, "%s", reg);
    cr_assert(strstr(reg, "rel_l2 &lt;i&gt;jumped&lt;/i&gt; &amp; &quot;more&quot;") != NULL, "%s", reg);
    cr_assert_null(strstr(reg, "<i>"));
    /* The failing row comes before the passing one, and before any chart. */
    cr_assert_lt(offset_of(reg, "regression</span>"), offset_of(reg, "pass</span>"));
    cr_assert_lt(offset_of(html, "jumped"), offset_of(html, "<svg"));
    free(reg);
    free(html);
    char *md = report(2, "g.md");
    cr_assert(strstr(md, "**FAIL**: 1 of 2 checks failed") != NULL, "%s", md);
    cr_assert(strstr(md, "&lt;i&gt;jumped") != NULL, "%s", md);
    free(md);
}

Test(report, nonfinite_values_are_text_and_skipped_in_log_charts)
{
    /* Layer 1 of fp8qkv produced NaNs (rel_l2 +inf); one head is inf, one 0, one missing. */
    db_exec(g_db, "UPDATE layer_metrics SET rel_l2 = 9e999, nan_count = 4 WHERE run_id = 2 "
                  "AND layer = 1 AND head = -1 AND variant = 'fp8qkv@fa3';"
                  "UPDATE layer_metrics SET rel_l2 = 9e999 WHERE run_id = 2 AND layer = 1 "
                  "AND head = 5 AND variant = 'fp8qkv@fa3';"
                  "UPDATE layer_metrics SET rel_l2 = 0 WHERE run_id = 2 AND layer = 2 "
                  "AND head = 7 AND variant = 'fp8qkv@fa3';"
                  "DELETE FROM layer_metrics WHERE run_id = 2 AND layer = 0 AND head = 9 "
                  "AND variant = 'fp8qkv@fa3';"
                  "UPDATE quant_stats SET saturated_frac = NULL WHERE run_id = 2 AND layer = 0;");
    char *html = report(2, "n.html");
    char *lay = section(html, "layers");
    cr_assert(strstr(lay, "1 point not drawn") != NULL, "%s", lay);
    cr_assert(strstr(lay, ">inf <small>(4 NaN, 0 inf outputs)</small>") != NULL, "%s", lay);
    cr_assert_eq(count(lay, "<circle"), 3 * N_LAYERS - 1);
    free(lay);
    char *heads = section(html, "heads");
    cr_assert(strstr(heads, "2 heads are off the log colour scale") != NULL, "%s", heads);
    cr_assert(strstr(heads, "NaN/inf") != NULL && strstr(heads, "no data") != NULL);
    free(heads);
    char *quant = section(html, "quant");
    cr_assert(strstr(quant, ">NaN<") != NULL);
    free(quant);
    char *trend = section(html, "trend");
    cr_assert(strstr(trend, "1 point not drawn") != NULL, "%s", trend);
    free(trend);
    /* No coordinate anywhere is NaN or infinite. */
    const char *bad[] = {"=\"nan", "=\"-nan", "=\"inf", "=\"-inf", ",nan", ",inf", ",-nan",
                         "nan,", "inf,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_null(strstr(html, bad[i]), "a coordinate is '%s'", bad[i]);
    free(html);
    char *md = report(2, "n.md");
    cr_assert(strstr(md, "| 1 | 0.00187 | 0.059 | **inf** (4 NaN, 0 inf outputs) |") != NULL, "%s", md);
    free(md);
}

Test(report, usage_and_io_errors_name_the_file)
{
    char args[2048], path[600];
    char *out;
    snprintf(args, sizeof args, "report --db '%s' -o '%s/a.html'", g_db, tu_dir);
    out = run_ok(args, 2);
    cr_assert(strstr(out, "--run") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof args, "report --run 2 --db '%s' -o '%s/a.pdf'", g_db, tu_dir);
    out = run_ok(args, 2);
    cr_assert(strstr(out, "a.pdf") != NULL && strstr(out, ".html") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof args, "report --run 99 --db '%s' -o '%s/a.html'", g_db, tu_dir);
    out = run_ok(args, 2);
    cr_assert(strstr(out, "no run 99") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof args, "report --run 2 --trend 0 --db '%s' -o '%s/a.html'", g_db, tu_dir);
    free(run_ok(args, 2));
    /* An output directory that does not exist: exit 1 naming the file. */
    snprintf(path, sizeof path, "%s/nodir/a.html", tu_dir);
    snprintf(args, sizeof args, "report --run 2 --db '%s' -o '%s'", g_db, path);
    out = run_ok(args, 1);
    cr_assert(strstr(out, path) != NULL, "%s", out);
    free(out);
    /* A database that does not exist is named and not created. */
    snprintf(path, sizeof path, "%s/none.db", tu_dir);
    snprintf(args, sizeof args, "report --run 1 --db '%s' -o '%s/a.html'", path, tu_dir);
    out = run_ok(args, 1);
    cr_assert(strstr(out, path) != NULL, "%s", out);
    free(out);
    cr_assert_neq(access(path, F_OK), 0, "the report created %s", path);
    /* A good report replaces an old file and leaves no temporary file behind. */
    snprintf(path, sizeof path, "%s/a.html", tu_dir);
    tu_write_file(path, "old", 3);
    snprintf(args, sizeof args, "report --run 2 --db '%s' -o '%s'", g_db, path);
    free(run_ok(args, 0));
    size_t len = 0;
    free(slurp(path, &len));
    cr_assert_gt(len, 3);
    DIR *dir = opendir(tu_dir);
    cr_assert_not_null(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        cr_assert_null(strstr(e->d_name, ".tmp."), "left behind: %s", e->d_name);
    closedir(dir);
}

/* The path of the chromium binary, or NULL when it is not installed. */
static const char *find_chromium(void)
{
    static const char *const candidates[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], X_OK) == 0) return candidates[i];
    return NULL;
}

/* Screenshots file:// html into png with headless chromium; asserts it exits 0. */
static void screenshot(const char *chromium, const char *html, const char *png, const char *tag)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout %d '%s' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
             "--no-first-run --disable-background-networking --disable-component-update "
             "--disable-sync --user-data-dir='%s/chromium-%s' --screenshot='%s' "
             "--window-size=%d,%d 'file://%s' >'%s/chromium-%s.log' 2>&1",
             CHROMIUM_TIMEOUT_S, chromium, tu_dir, tag, png, SHOT_W, SHOT_H, html, tu_dir, tag);
    const int rc = system(cmd);
    if (rc != 0) {
        char log[600];
        snprintf(log, sizeof log, "%s/chromium-%s.log", tu_dir, tag);
        char *text = slurp(log, NULL);
        cr_assert_fail("chromium failed (status %d) on %s:\n%s", rc, html, text);
    }
}

/* Reads png's size and checks its signature and IHDR dimensions. */
static size_t check_png(const char *png)
{
    size_t len = 0;
    char *b = slurp(png, &len);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    cr_assert_gt(len, 24, "%s is too short", png);
    cr_assert_eq(memcmp(b, sig, sizeof sig), 0, "%s has no PNG signature", png);
    cr_assert_eq(memcmp(b + 12, "IHDR", 4), 0);
    const unsigned char *u = (const unsigned char *)b;
    const unsigned w = (unsigned)u[16] << 24 | (unsigned)u[17] << 16 | (unsigned)u[18] << 8 | u[19];
    const unsigned h = (unsigned)u[20] << 24 | (unsigned)u[21] << 16 | (unsigned)u[22] << 8 | u[23];
    cr_assert_eq(w, SHOT_W, "%s is %u wide", png, w);
    cr_assert_eq(h, SHOT_H, "%s is %u high", png, h);
    free(b);
    return len;
}

Test(report, html_renders_in_headless_chromium)
{
    const char *skip = getenv("PRECGATE_SKIP_BROWSER");
    if (skip != NULL && strcmp(skip, "1") == 0)
        cr_skip_test("PRECGATE_SKIP_BROWSER=1: headless Chromium rendering not checked");
    const char *chromium = find_chromium();
    cr_assert_not_null(chromium, "chromium is not installed (/usr/bin/chromium): it is a test "
                                 "dependency, install it with scripts/deps.sh, or set "
                                 "PRECGATE_SKIP_BROWSER=1 to skip this test");
    char html[600], empty[600], shot[600], blank[600];
    free(report(2, "r.html"));
    snprintf(html, sizeof html, "%s/r.html", tu_dir);
    snprintf(empty, sizeof empty, "%s/empty.html", tu_dir);
    static const char empty_page[] = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head>"
                                     "<body></body></html>\n";
    tu_write_file(empty, empty_page, sizeof empty_page - 1);
    snprintf(shot, sizeof shot, "%s/shot.png", tu_dir);
    snprintf(blank, sizeof blank, "%s/blank.png", tu_dir);
    screenshot(chromium, empty, blank, "blank");
    screenshot(chromium, html, shot, "report");
    const size_t n_blank = check_png(blank), n_shot = check_png(shot);
    cr_assert_gt(n_shot, SHOT_MIN_BYTES, "the report's screenshot is only %zu bytes", n_shot);
    cr_assert_gt(n_shot, SHOT_MIN_RATIO * n_blank,
                 "the report's screenshot (%zu bytes) is hardly larger than a blank page's (%zu)",
                 n_shot, n_blank);
}
