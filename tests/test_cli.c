/*
 * test_cli.c: the precgate binary end to end: --version / help, the usage
 * errors of `run` and `synth`, a whole `run` into SQLite (what it prints and
 * every table it fills), where the database goes, and failing captures.
 *
 * Every test works in its own temporary directory on tiny synthetic
 * captures (2 layers, 2 sequences of 8 context + 24 new tokens), so the file
 * runs in a few seconds.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reports/sweep_table.h"
#include "kernels/attn_profile.h"
#include "harness/capture/capture.h"
#include "harness/capture/safetensors.h"
#include "kernels/numerics.h"
#include "testutil.h"

/* The tiny capture every test sweeps: its synth options and shape. */
#define SYNTH_SMALL "--layers 2 --seqs 2 --seq-len 24 --context 8"
#define SMALL_LAYERS 2
#define SMALL_HQ 64        /* gpt-oss-120b, the default preset */
#define N_MODES 3          /* bf16, fp8kv@fixed, fp8qkv@fa3: one profile per mode */
/* Length of "YYYY-MM-DDTHH:MM:SS.sssZ". */
#define ISO_MS_LEN 24

/* Defined in harness/cmd_run.c (linked through precgate_core). */
extern const char cmd_run_usage[];

TestSuite(cli, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 60);

/* ---- running the binary -------------------------------------------------- */

/* What one shell command did: exit status (128 if killed) and its stdout and
 * stderr, separately, as malloc'd strings. */
typedef struct proc {
    int rc;
    char *out, *err;
} proc;

/* Reads a whole file into a malloc'd NUL-terminated string ("" if absent). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return strdup("");
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* Runs the shell command line given printf-style (the caller quotes paths;
 * the binary is PRECGATE_BIN, see BIN_Q) with stdout and stderr captured
 * into files of the scratch directory, which are removed again. */
static proc sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static proc sh(const char *fmt, ...)
{
    char cmd[8192], full[8192 + 2 * PATH_MAX + 64], outp[PATH_MAX + 16], errp[PATH_MAX + 16];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof cmd, "command too long");
    snprintf(outp, sizeof outp, "%s/.stdout", tu_dir);
    snprintf(errp, sizeof errp, "%s/.stderr", tu_dir);
    snprintf(full, sizeof full, "( %s ) >'%s' 2>'%s'", cmd, outp, errp);
    int st = system(full);
    cr_assert_neq(st, -1, "system() failed");
    proc p = {WIFEXITED(st) ? WEXITSTATUS(st) : 128, slurp(outp), slurp(errp)};
    unlink(outp);
    unlink(errp);
    return p;
}

static void proc_free(proc *p)
{
    free(p->out);
    free(p->err);
}

/* Runs `precgate ARGS` with the scratch directory as working directory. */
#define PG_IN_DIR(args_fmt, ...) sh("cd '%s' && '%s' " args_fmt, tu_dir, PRECGATE_BIN, ##__VA_ARGS__)

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Writes the tiny capture `name` into the scratch directory with `precgate
 * synth` plus extra options; asserts success and that the file exists. */
static void synth_small(const char *name, const char *extra)
{
    proc p = PG_IN_DIR("synth -o '%s' " SYNTH_SMALL " %s", name, extra);
    cr_assert_eq(p.rc, 0, "synth failed (%d): %s%s", p.rc, p.out, p.err);
    cr_assert(file_exists(tu_in_dir(name)), "synth wrote no %s", name);
    proc_free(&p);
}

/* The last non-empty line of s (copied into buf). */
static void last_line(const char *s, char *buf, size_t len)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n') n--;
    size_t start = n;
    while (start > 0 && s[start - 1] != '\n') start--;
    snprintf(buf, len, "%.*s", (int)(n - start), s + start);
}

/* ---- SQLite ------------------------------------------------------------ */

static sqlite3 *db_open(const char *path)
{
    sqlite3 *db = NULL;
    cr_assert(file_exists(path), "no database at %s", path);
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK,
                 "cannot open %s", path);
    return db;
}

/* Like tu_sql_int, with the double x bound to ?1 (exactly, unlike text in SQL). */
static long long db_int_d(sqlite3 *db, double x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *s = tu_sql_vprepare(db, fmt, ap);
    va_end(ap);
    cr_assert_eq(sqlite3_bind_double(s, 1, x), SQLITE_OK);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "no row for %s", fmt);
    long long v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* The whole-layer rel_l2 of (run, layer, variant), asserting exactly one row. */
static double whole_rel_l2(sqlite3 *db, long long run, int layer, const char *variant)
{
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = %lld AND layer = %d "
                                "AND head = -1 AND variant = %Q AND rel_l2 IS NOT NULL",
                            run, layer, variant),
                 1, "run %lld layer %d %s: not exactly one whole-layer row", run, layer, variant);
    return tu_sql_double(db, "SELECT rel_l2 FROM layer_metrics WHERE run_id = %lld AND "
                             "layer = %d AND head = -1 AND variant = %Q",
                         run, layer, variant);
}

/* Opens the capture at path through the library, asserting success. */
static capture *open_capture(const char *path)
{
    capture *c = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(path, &c, &err), PG_OK, "capture_open: %s", err.msg);
    return c;
}

/* ---- version and help ---------------------------------------------------- */

Test(cli, version_prints_name_and_version)
{
    char *out = NULL;
    cr_assert_eq(tu_run_precgate("--version", &out), 0);
    cr_assert_str_eq(out, "precgate " PRECGATE_VERSION "\n");
    free(out);
    cr_assert_eq(tu_run_precgate("-V", &out), 0);
    cr_assert_str_eq(out, "precgate " PRECGATE_VERSION "\n");
    free(out);
}

Test(cli, help_and_dash_help_list_every_command)
{
    proc a = sh("'%s' --help", PRECGATE_BIN);
    proc b = sh("'%s' help", PRECGATE_BIN);
    cr_assert_eq(a.rc, 0);
    cr_assert_eq(b.rc, 0);
    cr_assert_str_empty(a.err);
    cr_assert_str_empty(b.err);
    const char *cmds[] = {"\n  run ", "\n  synth ", "\n  help "};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        cr_assert_not_null(strstr(a.out, cmds[i]), "--help lacks '%s':\n%s", cmds[i] + 1, a.out);
    cr_assert_str_eq(a.out, b.out, "help and --help differ");
    cr_assert_not_null(strstr(a.out, "usage: precgate COMMAND"));
    proc_free(&a);
    proc_free(&b);
}

Test(cli, help_run_and_run_help_print_the_run_usage)
{
    proc a = sh("'%s' help run", PRECGATE_BIN);
    proc b = sh("'%s' run --help", PRECGATE_BIN);
    cr_assert_eq(a.rc, 0);
    cr_assert_eq(b.rc, 0);
    cr_assert_str_eq(a.out, cmd_run_usage);
    cr_assert_str_eq(b.out, cmd_run_usage);
    const char *opts[] = {"--capture", "--variants", "--backend", "--db"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        cr_assert_not_null(strstr(a.out, opts[i]), "run usage lacks %s", opts[i]);
    /* --help wins even after other (valid or not) options */
    proc c = sh("'%s' run --capture x --help", PRECGATE_BIN);
    cr_assert_eq(c.rc, 0);
    cr_assert_str_eq(c.out, cmd_run_usage);
    proc_free(&a);
    proc_free(&b);
    proc_free(&c);
}

Test(cli, help_of_unknown_command_is_a_usage_error)
{
    proc p = sh("'%s' help nosuch", PRECGATE_BIN);
    cr_assert_eq(p.rc, 2);
    cr_assert_str_empty(p.out);
    cr_assert_not_null(strstr(p.err, "precgate: error:"), "%s", p.err);
    cr_assert_not_null(strstr(p.err, "'nosuch'"), "%s", p.err);
    proc_free(&p);
}

Test(cli, unknown_command_and_no_arguments_exit_2)
{
    proc p = sh("'%s' frobnicate", PRECGATE_BIN);
    cr_assert_eq(p.rc, 2);
    cr_assert_not_null(strstr(p.err, "precgate: error:"), "%s", p.err);
    cr_assert_not_null(strstr(p.err, "'frobnicate'"), "%s", p.err);
    proc_free(&p);

    proc q = sh("'%s'", PRECGATE_BIN);
    cr_assert_eq(q.rc, 2);
    cr_assert_str_empty(q.out, "the overview belongs on stderr here");
    cr_assert_not_null(strstr(q.err, "usage: precgate COMMAND"), "%s", q.err);
    proc_free(&q);
}

/* ---- run usage errors ---------------------------------------------------- */

/* Asserts that `precgate run ARGS` (in the scratch directory) exits 2 with
 * "precgate: error:" naming every needle, before it touches a database. */
static void expect_run_usage_error(const char *args, const char *needle1, const char *needle2)
{
    proc p = PG_IN_DIR("run %s", args);
    cr_assert_eq(p.rc, 2, "run %s: exit %d, want 2 (%s)", args, p.rc, p.err);
    cr_assert_not_null(strstr(p.err, "precgate: error:"), "run %s: %s", args, p.err);
    cr_assert_not_null(strstr(p.err, needle1), "run %s: error lacks '%s': %s", args, needle1, p.err);
    if (needle2 != NULL)
        cr_assert_not_null(strstr(p.err, needle2), "run %s: error lacks '%s': %s", args, needle2,
                           p.err);
    cr_assert_str_empty(p.out, "run %s printed on stdout: %s", args, p.out);
    cr_assert_not(file_exists(tu_in_dir("precgate.db")), "run %s created a database", args);
    proc_free(&p);
}

Test(cli, run_usage_errors_name_the_option)
{
    expect_run_usage_error("--no-progress", "--capture", NULL);
    expect_run_usage_error("--capture c.st --variants bf16,nope", "--variants", "'nope'");
    expect_run_usage_error("--capture c.st --backend tpu", "--backend", "'tpu'");
    expect_run_usage_error("--capture c.st --threads 0", "--threads", "0");
    expect_run_usage_error("--capture c.st --threads 2x", "--threads", "'2x'");
    expect_run_usage_error("--capture c.st --bogus", "'--bogus'", NULL);
    expect_run_usage_error("--capture c.st stray", "'stray'", NULL);
    expect_run_usage_error("--capture c.st --seed -1", "--seed", NULL);
    expect_run_usage_error("--capture c.st --scales calibrated", "--scales", "'calibrated'");
}

/* --p-rounding is gone (profiles replaced it): an unknown option. */
Test(cli, run_p_rounding_is_an_unknown_option)
{
    expect_run_usage_error("--capture c.st --p-rounding e4m3", "unknown option '--p-rounding'",
                           NULL);
}

/* --variants: duplicates after expansion and unknown names exit 2 naming
 * the entry and the choices, before a database exists. */
Test(cli, run_variants_refuses_duplicates_and_unknown_profiles)
{
    expect_run_usage_error("--capture c.st --variants fp8kv,fp8kv@fixed",
                           "'fp8kv' and 'fp8kv@fixed' are both fp8kv@fixed", NULL);
    expect_run_usage_error("--capture c.st --variants bf16,fp8qkv@fa4", "'fp8qkv@fa4'",
                           "fp8qkv@fa3, fp8qkv@fa3-1level");
    expect_run_usage_error("--capture c.st --variants fp8kv~spec", "'fp8kv~spec' is not a kernel "
                           "profile", NULL);
}

/* An option given without its value says so rather than calling it unknown
 * (cmd_run.c has a case ':' with "requires a value" for this). */
Test(cli, run_option_missing_its_value_says_so)
{
    expect_run_usage_error("--capture c.st --db", "--db", "requires a value");
}

/* ---- a whole run --------------------------------------------------------- */

/* The table header line of out with runs of spaces collapsed to one, malloc'd
 * ("" when there is no line starting with "capture "). */
static char *table_header(const char *out)
{
    const char *line = strstr(out, "\ncapture ");
    char *h = calloc(1, 512);
    cr_assert_not_null(h);
    if (line == NULL) return h;
    line++;
    size_t n = 0;
    for (; *line != '\0' && *line != '\n' && n < 510; line++)
        if (*line != ' ' || (n > 0 && h[n - 1] != ' ')) h[n++] = *line;
    return h;
}

Test(cli, run_happy_path_fills_every_table)
{
    synth_small("c.safetensors", "");
    proc p = PG_IN_DIR("run --capture c.safetensors --db d.db --label L --no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    cr_assert_null(strstr(p.err, "error"), "stderr: %s", p.err);

    /* stdout: run line, table header, one row per layer, worst line, complete */
    const char *first = "run 1: c.safetensors, 2 layers, backend cpu\n";
    cr_assert_eq(strncmp(p.out, first, strlen(first)), 0, "stdout starts:\n%s", p.out);
    char *hdr = table_header(p.out);
    cr_assert_str_eq(hdr, "capture layer bf16 fp8kv@fixed fp8qkv@fa3 (rel_l2 vs fp64 reference, "
                          "whole layer)", "no table header:\n%s", p.out);
    free(hdr);
    char last[512];
    last_line(p.out, last, sizeof last);
    cr_assert(strncmp(last, "run 1 complete: d.db (", strlen("run 1 complete: d.db (")) == 0, "last line: %s", last);

    sqlite3 *db = db_open(tu_in_dir("d.db"));
    capture *cap = open_capture(tu_in_dir("c.safetensors"));
    cr_assert_eq(cap->n_layers, SMALL_LAYERS);
    const int hq = cap->layers[0].hq;
    cr_assert_eq(hq, SMALL_HQ);

    /* runs */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1);
    char *s = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(s, "complete");
    free(s);
    s = tu_sql_text(db, "SELECT label FROM runs WHERE id = 1");
    cr_assert_str_eq(s, "L");
    free(s);
    s = tu_sql_text(db, "SELECT kind FROM runs WHERE id = 1");
    cr_assert_str_eq(s, "sweep");
    free(s);
    char *started = tu_sql_text(db, "SELECT started_at FROM runs WHERE id = 1");
    char *finished = tu_sql_text(db, "SELECT finished_at FROM runs WHERE id = 1");
    cr_assert_not_null(started);
    cr_assert_not_null(finished);
    cr_assert_eq(strlen(started), ISO_MS_LEN, "started_at '%s'", started);
    cr_assert_eq(strlen(finished), ISO_MS_LEN, "finished_at '%s'", finished);
    cr_assert_eq(started[ISO_MS_LEN - 1], 'Z');
    cr_assert_leq(strcmp(started, finished), 0, "finished %s before started %s", finished, started);
    free(started);
    free(finished);

    char *config = tu_sql_text(db, "SELECT config_json FROM runs WHERE id = 1");
    cr_assert_not_null(config);
    cJSON *cj = cJSON_Parse(config);
    cr_assert_not_null(cj, "config_json is not JSON: %s", config);
    const cJSON *capj = cJSON_GetObjectItemCaseSensitive(cj, "capture");
    cr_assert(cJSON_IsString(capj), "%s", config);
    cr_assert_str_eq(capj->valuestring, "c.safetensors");
    const cJSON *vars = cJSON_GetObjectItemCaseSensitive(cj, "variants");
    cr_assert(cJSON_IsArray(vars), "%s", config);
    cr_assert_eq(cJSON_GetArraySize(vars), N_MODES);
    const char *want_vars[N_MODES] = {"bf16", "fp8kv@fixed", "fp8qkv@fa3"};
    for (int i = 0; i < N_MODES; i++)
        cr_assert_str_eq(cJSON_GetArrayItem(vars, i)->valuestring, want_vars[i]);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(cj, "layers");
    cr_assert(cJSON_IsNumber(layers));
    cr_assert_eq(layers->valueint, SMALL_LAYERS);
    cJSON_Delete(cj);
    free(config);

    /* layer_metrics: n_layers x 3 modes x (hq + 1) rows, all on cpu */
    const long long want_rows = (long long)SMALL_LAYERS * N_MODES * (hq + 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), want_rows);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 1 AND backend = 'cpu' "
                                "AND capture = 'c.safetensors'"),
                 want_rows);
    for (int l = 0; l < SMALL_LAYERS; l++)
        for (int v = 0; v < N_MODES; v++)
            cr_assert_eq(tu_sql_int(db, "SELECT count(DISTINCT head) FROM layer_metrics WHERE layer = %d "
                                        "AND variant = %Q AND head BETWEEN -1 AND %d",
                                    l, want_vars[v], hq - 1),
                         hq + 1, "layer %d %s: heads missing", l, want_vars[v]);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE nan_count != 0 OR "
                                "inf_count != 0 OR rel_l2 IS NULL OR cos_sim IS NULL"),
                 0);

    /* every rel_l2 finite and positive */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT rel_l2 FROM layer_metrics", -1, &st, NULL),
                 SQLITE_OK);
    long long seen = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        double r = sqlite3_column_double(st, 0);
        cr_assert(isfinite(r) && r > 0, "rel_l2 %g", r);
        seen++;
    }
    sqlite3_finalize(st);
    cr_assert_eq(seen, want_rows);

    /* precision order per layer, and the printed table rows, in layer order */
    const char *prev_row = strstr(p.out, "\ncapture ");
    for (int l = 0; l < SMALL_LAYERS; l++) {
        const double b = whole_rel_l2(db, 1, l, "bf16");
        const double k = whole_rel_l2(db, 1, l, "fp8kv@fixed");
        const double q = whole_rel_l2(db, 1, l, "fp8qkv@fa3");
        cr_assert_lt(b, k, "layer %d: bf16 %g !< fp8kv %g", l, b, k);
        cr_assert_lt(k, q, "layer %d: fp8kv %g !< fp8qkv %g", l, k, q);
        char cb[32], ck[32], cq[32], row[256];
        snprintf(cb, sizeof cb, "%.3e", b);
        snprintf(ck, sizeof ck, "%.3e", k);
        snprintf(cq, sizeof cq, "%.3e", q);
        snprintf(row, sizeof row, "\n%-*s %5d %*s %*s %*s\n", TABLE_CAPTURE_WIDTH,
                 "c.safetensors", l, TABLE_COL_WIDTH, cb, TABLE_COL_WIDTH, ck, TABLE_COL_WIDTH, cq);
        const char *at = strstr(p.out, row);
        cr_assert_not_null(at, "no table row '%s' in:\n%s", row + 1, p.out);
        cr_assert_gt(at, prev_row, "layer %d's row is out of order:\n%s", l, p.out);
        prev_row = at;
    }
    const char *worst = strstr(p.out, "\nworst layer ");
    cr_assert_not_null(worst, "no worst-layer line:\n%s", p.out);
    cr_assert_gt(worst, prev_row, "worst-layer line before the rows:\n%s", p.out);

    /* quant_stats: q, k, v per layer, the default without scales: amax / 448 */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats"), SMALL_LAYERS * 3);
    const char *tensors[3] = {"q", "k", "v"};
    for (int l = 0; l < SMALL_LAYERS; l++) {
        const capture_layer *L = &cap->layers[l];
        const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
        const size_t nkv = (size_t)cap->tkv * (size_t)L->hkv * (size_t)L->d;
        const float want[3] = {fp8_e4m3_calibrated_scale(bf16_amax(L->q, nq)),
                               fp8_e4m3_calibrated_scale(bf16_amax(L->k, nkv)),
                               fp8_e4m3_calibrated_scale(bf16_amax(L->v, nkv))};
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(db_int_d(db, (double)want[t],
                                  "SELECT count(*) FROM quant_stats WHERE run_id = 1 AND layer = %d "
                                  "AND tensor = %Q AND scale_source = 'amax' AND scale > 0 "
                                  "AND scale = ?1",
                                  l, tensors[t]),
                         1, "layer %d %s: no amax row with scale %.9g", l, tensors[t],
                         (double)want[t]);
        }
    }
    capture_close(cap);
    sqlite3_close(db);
    proc_free(&p);
}

Test(cli, run_uses_the_captures_scales_when_it_has_them)
{
    synth_small("s.safetensors", "--scales");
    proc p = PG_IN_DIR("run --capture s.safetensors --db d.db --backend cpu --no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    cr_assert_str_empty(p.err, "--backend cpu says nothing on stderr");
    capture *cap = open_capture(tu_in_dir("s.safetensors"));
    cr_assert(cap->layers[0].has_scales);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats"), SMALL_LAYERS * 3);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE scale_source = 'capture'"),
                 SMALL_LAYERS * 3);
    for (int l = 0; l < SMALL_LAYERS; l++) {
        const capture_layer *L = &cap->layers[l];
        const float want[3] = {L->q_scale, L->k_scale, L->v_scale};
        const char *tensors[3] = {"q", "k", "v"};
        for (int t = 0; t < 3; t++)
            cr_assert_eq(db_int_d(db, (double)want[t],
                                  "SELECT count(*) FROM quant_stats WHERE layer = %d AND "
                                  "tensor = %Q AND scale = ?1",
                                  l, tensors[t]),
                         1, "layer %d %s: scale is not the capture's %.9g", l, tensors[t],
                         (double)want[t]);
    }
    /* The default it took is recorded in the run's config. */
    char *scales = tu_sql_text(db, "SELECT json_extract(config_json, '$.scales') FROM runs");
    cr_assert_str_eq(scales, "capture");
    free(scales);
    capture_close(cap);
    sqlite3_close(db);
    proc_free(&p);
}

/* --scales unit on a capture with scales: 1.0 for every tensor, recorded as
 * the policy; the default without scales is recorded as amax. */
Test(cli, run_scales_unit_overrides_the_captures_and_is_recorded)
{
    synth_small("s.safetensors", "--scales");
    proc p = PG_IN_DIR("run --capture s.safetensors --db d.db --backend cpu --no-progress "
                       "--scales unit");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    proc_free(&p);
    synth_small("n.safetensors", "");
    p = PG_IN_DIR("run --capture n.safetensors --db d.db --backend cpu --no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    proc_free(&p);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = 1 AND "
                                "scale_source = 'unit' AND scale = 1.0"), SMALL_LAYERS * 3);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = 2 AND "
                                "scale_source = 'amax'"), SMALL_LAYERS * 3);
    char *scales = tu_sql_text(db, "SELECT group_concat(json_extract(config_json, '$.scales'))"
                                   " FROM (SELECT * FROM runs ORDER BY id)");
    cr_assert_str_eq(scales, "unit,amax");
    free(scales);
    sqlite3_close(db);
}

/* --scales capture on a capture without scales: a usage error naming the
 * capture, before anything is swept. */
Test(cli, run_scales_capture_without_scales_is_refused_naming_the_capture)
{
    synth_small("n.safetensors", "");
    proc p = PG_IN_DIR("run --capture n.safetensors --db d.db --backend cpu --no-progress "
                       "--scales capture");
    cr_assert_eq(p.rc, 2, "exit %d: %s", p.rc, p.err);
    cr_assert_not_null(strstr(p.err, "--scales capture: capture 'n.safetensors' has no q_scale"),
                       "stderr: %s", p.err);
    proc_free(&p);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT (SELECT count(*) FROM quant_stats) +"
                                " (SELECT count(*) FROM layer_metrics)"), 0);
    sqlite3_close(db);
}

Test(cli, run_variants_bf16_stores_only_bf16)
{
    synth_small("c.safetensors", "");
    proc p = PG_IN_DIR("run --capture c.safetensors --db d.db --variants bf16 --no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    char *hdr = table_header(p.out);
    cr_assert_str_eq(hdr, "capture layer bf16 (rel_l2 vs fp64 reference, whole layer)",
                     "table should have only the bf16 column:\n%s", p.out);
    free(hdr);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), SMALL_LAYERS * (SMALL_HQ + 1));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant != 'bf16'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE tensor = 'q'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats"), 0, "bf16 quantizes nothing");
    char *cfg = tu_sql_text(db, "SELECT config_json FROM runs WHERE id = 1");
    cr_assert_not_null(strstr(cfg, "\"variants\":[\"bf16\"]"), "%s", cfg);
    free(cfg);
    sqlite3_close(db);
    proc_free(&p);
}

Test(cli, run_variants_fp8kv_has_k_v_stats_but_no_q)
{
    synth_small("c.safetensors", "");
    proc p = PG_IN_DIR("run --capture c.safetensors --db d.db --variants fp8kv --no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant = 'fp8kv@fixed'"),
                 SMALL_LAYERS * (SMALL_HQ + 1));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant != "
                                "'fp8kv@fixed'"), 0);
    char *cfg = tu_sql_text(db, "SELECT config_json FROM runs WHERE id = 1");
    cr_assert_not_null(strstr(cfg, "\"variants\":[\"fp8kv@fixed\"]"), "%s", cfg);
    cr_assert_null(strstr(cfg, "p_rounding"), "%s", cfg);
    free(cfg);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE tensor = 'q'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE tensor IN ('k', 'v')"),
                 SMALL_LAYERS * 2);
    sqlite3_close(db);
    proc_free(&p);
}

/* Two profiles of one mode in one run: both stored under their full names,
 * both columns printed. */
Test(cli, run_variants_two_fp8qkv_profiles_stores_both)
{
    synth_small("c.safetensors", "");
    proc p = PG_IN_DIR("run --capture c.safetensors --db d.db --variants fp8qkv@ideal,fp8qkv@fa3 "
                       "--no-progress");
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    char *hdr = table_header(p.out);
    cr_assert_str_eq(hdr, "capture layer fp8qkv@fa3 fp8qkv@ideal (rel_l2 vs fp64 reference, "
                          "whole layer)", "%s", p.out);
    free(hdr);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    for (int l = 0; l < SMALL_LAYERS; l++) {
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = %d AND "
                                    "variant = 'fp8qkv@ideal'", l), SMALL_HQ + 1);
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = %d AND "
                                    "variant = 'fp8qkv@fa3'", l), SMALL_HQ + 1);
    }
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"),
                 SMALL_LAYERS * 2 * (SMALL_HQ + 1));
    char *cfg = tu_sql_text(db, "SELECT config_json FROM runs WHERE id = 1");
    cr_assert_not_null(strstr(cfg, "\"variants\":[\"fp8qkv@fa3\",\"fp8qkv@ideal\"]"), "%s", cfg);
    free(cfg);
    sqlite3_close(db);
    proc_free(&p);
}

/* `help profiles` lists every profile of the table, each with its summary
 * and its rules, the defaults marked. */
Test(cli, help_profiles_names_every_profile)
{
    proc p = sh("'%s' help profiles", PRECGATE_BIN);
    cr_assert_eq(p.rc, 0, "%s", p.err);
    cr_assert_str_empty(p.err);
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const attn_profile *pr = attn_profile_at(i);
        char head[128];
        snprintf(head, sizeof head, "\n%s%s\n", attn_profile_variant(pr),
                 attn_profile_is_default(pr) ? " (default)" : "");
        const char *at = strstr(p.out, head);
        cr_assert_not_null(at, "no '%s' heading in:\n%s", head + 1, p.out);
        /* the summary's first line follows the heading, then the rules' */
        char first[256];
        const char *sum = attn_profile_summary(pr), *rules = attn_profile_rules(pr);
        snprintf(first, sizeof first, "%.*s", (int)strcspn(sum, "\n"), sum);
        cr_assert_not_null(strstr(at, first), "%s: summary '%s' missing", head + 1, first);
        snprintf(first, sizeof first, "%.*s", (int)strcspn(rules, "\n"), rules);
        cr_assert_not_null(strstr(at, first), "%s: rules '%s' missing", head + 1, first);
    }
    proc_free(&p);
    proc o = sh("'%s' help", PRECGATE_BIN);
    cr_assert_not_null(strstr(o.out, "\n  profiles "), "help lists no profiles topic:\n%s", o.out);
    proc_free(&o);
}

/* ---- where the database goes ------------------------------------------- */

Test(cli, run_uses_PRECGATE_DB_when_no_db_option)
{
    synth_small("c.safetensors", "");
    const char *envdb = tu_in_dir("env.db");
    proc p = sh("cd '%s' && PRECGATE_DB='%s' '%s' run --capture c.safetensors --no-progress", tu_dir,
                envdb, PRECGATE_BIN);
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    char last[PATH_MAX + 64], want[PATH_MAX + 64];
    last_line(p.out, last, sizeof last);
    snprintf(want, sizeof want, "run 1 complete: %s (", envdb);
    cr_assert(strncmp(last, want, strlen(want)) == 0, "last line: %s", last);
    cr_assert_not(file_exists(tu_in_dir("precgate.db")), "default database created despite PRECGATE_DB");
    sqlite3 *db = db_open(envdb);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'complete'"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"),
                 SMALL_LAYERS * N_MODES * (SMALL_HQ + 1));
    sqlite3_close(db);
    proc_free(&p);

    /* --db wins over the environment */
    proc q = sh("cd '%s' && PRECGATE_DB='%s' '%s' run --capture c.safetensors --db opt.db "
                "--no-progress",
                tu_dir, envdb, PRECGATE_BIN);
    cr_assert_eq(q.rc, 0, "run failed: %s", q.err);
    cr_assert(file_exists(tu_in_dir("opt.db")));
    db = db_open(envdb);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1, "--db run went into $PRECGATE_DB");
    sqlite3_close(db);
    proc_free(&q);
}

Test(cli, run_default_database_is_precgate_db_in_working_dir)
{
    synth_small("c.safetensors", "");
    proc p = sh("cd '%s' && env -u PRECGATE_DB '%s' run --capture c.safetensors --no-progress", tu_dir,
                PRECGATE_BIN);
    cr_assert_eq(p.rc, 0, "run failed: %s", p.err);
    char last[256];
    last_line(p.out, last, sizeof last);
    cr_assert(strncmp(last, "run 1 complete: precgate.db (", strlen("run 1 complete: precgate.db (")) == 0, "last line: %s", last);
    sqlite3 *db = db_open(tu_in_dir("precgate.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'complete'"), 1);
    sqlite3_close(db);
    proc_free(&p);

    /* an empty PRECGATE_DB counts as unset */
    proc q = sh("cd '%s' && PRECGATE_DB= '%s' run --capture c.safetensors --no-progress", tu_dir,
                PRECGATE_BIN);
    cr_assert_eq(q.rc, 0, "run failed: %s", q.err);
    last_line(q.out, last, sizeof last);
    cr_assert(strncmp(last, "run 2 complete: precgate.db (", strlen("run 2 complete: precgate.db (")) == 0, "last line: %s", last);
    proc_free(&q);
}

/* ---- failing captures ---------------------------------------------------- */

/* Copies src to dst inside the scratch directory and truncates the copy to
 * half its size; returns the original size. */
static off_t copy_truncated_half(const char *src, const char *dst)
{
    struct stat sb;
    cr_assert_eq(stat(tu_in_dir(src), &sb), 0);
    char *data = slurp(tu_in_dir(src));
    tu_write_file(tu_in_dir(dst), data, (size_t)sb.st_size);
    free(data);
    cr_assert_eq(truncate(tu_in_dir(dst), sb.st_size / 2), 0);
    struct stat tb;
    cr_assert_eq(stat(tu_in_dir(dst), &tb), 0);
    cr_assert_eq(tb.st_size, sb.st_size / 2);
    return sb.st_size;
}

Test(cli, truncated_capture_fails_and_leaves_earlier_runs_alone)
{
    synth_small("c.safetensors", "");
    proc good = PG_IN_DIR("run --capture c.safetensors --db d.db --no-progress");
    cr_assert_eq(good.rc, 0, "first run failed: %s", good.err);
    proc_free(&good);

    sqlite3 *db = db_open(tu_in_dir("d.db"));
    const long long rows1 = tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 1");
    const long long qs1 = tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = 1");
    char *sum1 = tu_sql_text(db, "SELECT printf('%%!.20e', sum(rel_l2) + sum(max_abs)) FROM layer_metrics "
                             "WHERE run_id = 1");
    cr_assert_eq(rows1, SMALL_LAYERS * N_MODES * (SMALL_HQ + 1));
    sqlite3_close(db);

    copy_truncated_half("c.safetensors", "t.safetensors");
    proc bad = PG_IN_DIR("run --capture t.safetensors --db d.db --no-progress");
    cr_assert_eq(bad.rc, 1, "truncated capture: exit %d (%s)", bad.rc, bad.err);
    cr_assert_not_null(strstr(bad.err, "precgate: error: t.safetensors"), "%s", bad.err);
    cr_assert_not_null(strstr(bad.err, "run 2 marked failed in d.db"), "%s", bad.err);
    cr_assert_null(strstr(bad.out, "complete"), "%s", bad.out);
    char *bad_err = strdup(bad.err);
    proc_free(&bad);

    db = db_open(tu_in_dir("d.db"));
    char *st2 = tu_sql_text(db, "SELECT status FROM runs WHERE id = 2");
    cr_assert_str_eq(st2, "failed");
    free(st2);
    cr_assert_eq(tu_sql_int(db, "SELECT finished_at IS NOT NULL FROM runs WHERE id = 2"), 1);
    /* the failure's message is kept with the run; a complete run has none */
    char *why = tu_sql_text(db, "SELECT error FROM runs WHERE id = 2");
    cr_assert_not_null(why, "failed run 2 has no error");
    cr_assert_eq(strncmp(why, "t.safetensors: ", 15), 0, "error '%s'", why);
    cr_assert_not_null(strstr(bad_err, why), "stderr does not carry '%s'", why);
    free(why);
    cr_assert_eq(tu_sql_int(db, "SELECT error IS NULL FROM runs WHERE id = 1"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 2"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = 2"), 0);
    sqlite3_close(db);

    proc again = PG_IN_DIR("run --capture c.safetensors --db d.db --no-progress");
    cr_assert_eq(again.rc, 0, "run after the failure: %s", again.err);
    cr_assert_eq(strncmp(again.out, "run 3: ", 7), 0, "%s", again.out);
    char last[256];
    last_line(again.out, last, sizeof last);
    cr_assert(strncmp(last, "run 3 complete: d.db (", strlen("run 3 complete: d.db (")) == 0, "last line: %s", last);
    proc_free(&again);

    db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 3);
    char *st1 = tu_sql_text(db, "SELECT group_concat(status, ',') FROM (SELECT status FROM runs ORDER BY id)");
    cr_assert_str_eq(st1, "complete,failed,complete");
    free(st1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 1"), rows1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = 1"), qs1);
    char *sum1b = tu_sql_text(db, "SELECT printf('%%!.20e', sum(rel_l2) + sum(max_abs)) FROM layer_metrics "
                              "WHERE run_id = 1");
    cr_assert_str_eq(sum1b, sum1, "run 1's metrics changed");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 3"), rows1);
    free(sum1);
    free(sum1b);
    free(bad_err);
    sqlite3_close(db);
}

Test(cli, missing_capture_path_fails_naming_it)
{
    proc p = PG_IN_DIR("run --capture no/such/file.safetensors --db d.db --no-progress");
    cr_assert_eq(p.rc, 1, "exit %d (%s)", p.rc, p.err);
    cr_assert_not_null(strstr(p.err, "precgate: error: no/such/file.safetensors"), "%s", p.err);
    cr_assert_str_empty(p.out);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    char *s = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(s, "failed");
    free(s);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), 0);
    sqlite3_close(db);
    proc_free(&p);
}

/* Copies capture src to dst (both in the scratch directory) without tensor
 * `drop`: e.g. one layer's sinks, so that only the other layers have them. */
static void copy_capture_without(const char *src, const char *dst, const char *drop)
{
    st_file *f = NULL;
    st_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(st_open(tu_in_dir(src), &f, &err), PG_OK, "%s", err.msg);
    cr_assert_not_null(st_find(f, drop), "%s has no tensor %s", src, drop);
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < f->n_meta; i++)
        cr_assert_eq(st_writer_add_meta(w, f->meta[i].key, f->meta[i].value, &err), PG_OK, "%s",
                     err.msg);
    /* The mapping may leave a tensor unaligned: each is handed over as a copy. */
    void **copies = calloc((size_t)f->n_tensors, sizeof *copies);
    cr_assert_not_null(copies);
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (strcmp(t->name, drop) == 0) continue;
        copies[i] = malloc(t->nbytes > 0 ? t->nbytes : 1);
        cr_assert_not_null(copies[i]);
        memcpy(copies[i], t->data, t->nbytes);
        cr_assert_eq(st_writer_add_tensor(w, t->name, t->dtype, t->ndim, t->shape, copies[i], &err),
                     PG_OK, "%s", err.msg);
    }
    cr_assert_eq(st_writer_write(w, tu_in_dir(dst), &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    for (int i = 0; i < f->n_tensors; i++) free(copies[i]);
    free(copies);
    st_close(f);
}

/* A cell the kernel cannot compute is data (issue #31): fp8qkv@flashinfer-fa3
 * has no attention sinks; layer 1 has them, layer 0 not. The run completes
 * (exit 0) with layer 0's rows of both variants and layer 1's bf16 rows, and
 * layer 1's cell stored as not supported with the reason; --resume counts
 * the layer done; the gate says skipped (never a pass) and exits 0; the
 * reports show it; a sharded job's merge carries it. */
Test(cli, a_variant_unsupported_on_a_layer_is_stored_as_not_computed_and_the_run_completes)
{
    synth_small("s.safetensors", "");
    copy_capture_without("s.safetensors", "c.safetensors", "layers.0.sinks");
    proc p = PG_IN_DIR("run --capture c.safetensors --variants bf16,fp8qkv@flashinfer-fa3 "
                       "--backend cpu --db d.db --no-progress");
    cr_assert_eq(p.rc, 0, "exit %d (%s)", p.rc, p.err);
    cr_assert_not_null(strstr(p.err, "precgate: fp8qkv@flashinfer-fa3 cannot compute 1 of the 2 "
                                     "layers (first layer: the kernel has no attention sinks, "
                                     "and this layer has them): those cells are stored as not "
                                     "supported, with the reason"), "%s", p.err);
    cr_assert_not_null(strstr(p.out, "\nnot computed: fp8qkv@flashinfer-fa3 on 1 layer of "
                                     "c.safetensors (1): the kernel has no attention sinks, and "
                                     "this layer has them\n"), "%s", p.out);
    sqlite3 *db = db_open(tu_in_dir("d.db"));
    char *status = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
    char *why = tu_sql_text(db, "SELECT reason FROM unsupported_cells WHERE run_id = 1 AND "
                                "layer = 1 AND variant = 'fp8qkv@flashinfer-fa3'");
    cr_assert_str_eq(why, "the kernel has no attention sinks, and this layer has them");
    free(why);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM unsupported_cells"), 1);
    /* layer 0 (no sinks): both variants, whole layer and every head */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 1 AND layer = 0"),
                 2 * (SMALL_HQ + 1));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = 1 AND layer = 0 "
                                "AND variant = 'fp8qkv@flashinfer-fa3' AND head = -1 AND "
                                "rel_l2 > 0"), 1);
    /* layer 1: bf16 only */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 1"), SMALL_HQ + 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 1 AND "
                                "variant <> 'bf16'"), 0);
    sqlite3_close(db);
    proc_free(&p);

    proc r = PG_IN_DIR("run --capture c.safetensors --variants bf16,fp8qkv@flashinfer-fa3 "
                       "--backend cpu --db d.db --no-progress --resume 1");
    cr_assert_eq(r.rc, 0, "exit %d (%s)", r.rc, r.err);
    cr_assert_not_null(strstr(r.out, "0 layers computed, 2 were stored"), "%s", r.out);
    proc_free(&r);

    proc g = PG_IN_DIR("gate --db d.db --run 1 --junit j.xml");
    cr_assert_eq(g.rc, 0, "exit %d (%s %s)", g.rc, g.out, g.err);
    cr_assert_not_null(strstr(g.out, "skipped    layer     c.safetensors fp8qkv@flashinfer-fa3 "
                                     "layer 1: not computed, the kernel has no attention sinks, "
                                     "and this layer has them: skipped, never a pass"), "%s", g.out);
    cr_assert_not_null(strstr(g.out, "1 skipped (not computed)"), "%s", g.out);
    proc_free(&g);
    db = db_open(tu_in_dir("d.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = "
                                "'skipped' AND metric = 'supported' AND layer = 1 AND variant = "
                                "'fp8qkv@flashinfer-fa3' AND value = 1"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM flags WHERE run_id = 1 AND layer = 1 AND "
                                "variant = 'fp8qkv@flashinfer-fa3' AND verdict <> 'skipped'"), 0);
    sqlite3_close(db);
    char *junit = slurp(tu_in_dir("j.xml"));
    cr_assert_not_null(junit);
    cr_assert_not_null(strstr(junit, "name=\"c.safetensors layer 1 fp8qkv@flashinfer-fa3\">\n"
                                     "      <skipped message="), "%s", junit);
    /* the layer suite counts it, beside the "baseline comparison" testcase */
    const char *suite = strstr(junit, "<testsuite name=\"layer\"");
    cr_assert_not_null(suite, "%s", junit);
    cr_assert_not_null(strstr(suite, " errors=\"0\" skipped=\"2\">"), "%s", junit);
    free(junit);

    proc m = PG_IN_DIR("report --db d.db --run 1 -o r.md");
    cr_assert_eq(m.rc, 0, "exit %d (%s)", m.rc, m.err);
    char *md = slurp(tu_in_dir("r.md"));
    cr_assert_not_null(strstr(md, "### Not computed"), "%s", md);
    cr_assert_not_null(strstr(md, "| c.safetensors | fp8qkv@flashinfer-fa3 | 1: 1 | the kernel "
                                  "has no attention sinks, and this layer has them |"), "%s", md);
    free(md);
    proc_free(&m);

    /* a sharded job: the part owning layer 1 holds the cell, the merge carries it */
    for (int i = 0; i < 2; i++) {
        proc s = PG_IN_DIR("run --capture c.safetensors --variants bf16,fp8qkv@flashinfer-fa3 "
                           "--backend cpu --db p%d.db --shard %d/2 --no-progress", i, i);
        cr_assert_eq(s.rc, 0, "exit %d (%s)", s.rc, s.err);
        proc_free(&s);
    }
    proc mg = PG_IN_DIR("merge --into m.db p0.db p1.db");
    cr_assert_eq(mg.rc, 0, "exit %d (%s)", mg.rc, mg.err);
    proc_free(&mg);
    db = db_open(tu_in_dir("m.db"));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM unsupported_cells WHERE layer = 1 AND "
                                "variant = 'fp8qkv@flashinfer-fa3'"), 1);
    sqlite3_close(db);
    proc gm = PG_IN_DIR("gate --db m.db --run 1");
    cr_assert_eq(gm.rc, 0, "exit %d (%s %s)", gm.rc, gm.out, gm.err);
    cr_assert_not_null(strstr(gm.out, "1 skipped (not computed)"), "%s", gm.out);
    proc_free(&gm);
}

/* ---- synth usage errors -------------------------------------------------- */

Test(cli, synth_usage_errors_exit_2)
{
    proc a = PG_IN_DIR("synth -o x.safetensors --preset nosuch");
    cr_assert_eq(a.rc, 2, "exit %d", a.rc);
    cr_assert_not_null(strstr(a.err, "precgate: error: --preset: unknown preset 'nosuch'"), "%s",
                       a.err);
    cr_assert_not(file_exists(tu_in_dir("x.safetensors")));
    proc_free(&a);

    proc b = PG_IN_DIR("synth --layers 2");
    cr_assert_eq(b.rc, 2, "exit %d", b.rc);
    cr_assert_not_null(strstr(b.err, "precgate: error:"), "%s", b.err);
    cr_assert_not_null(strstr(b.err, "-o FILE"), "%s", b.err);
    proc_free(&b);

    proc c = PG_IN_DIR("synth -o x.safetensors --layers 0");
    cr_assert_eq(c.rc, 2, "exit %d", c.rc);
    cr_assert_not_null(strstr(c.err, "--layers"), "%s", c.err);
    cr_assert_not(file_exists(tu_in_dir("x.safetensors")));
    proc_free(&c);

    proc d = PG_IN_DIR("synth -o x.safetensors --bogus");
    cr_assert_eq(d.rc, 2, "exit %d", d.rc);
    cr_assert_not_null(strstr(d.err, "'--bogus'"), "%s", d.err);
    proc_free(&d);
}
