/*
 * test_diagnose.c: the scale-plumbing diagnosis of external outputs (issue
 * #16 part 1): the verdict rules (harness/diag_verdict.h), the ext_diagnosis
 * rows (db/diagnosis_store.h) the sweep stores and --resume counts, and,
 * end to end through the binary, captures whose external output is each
 * hypothesis's own output (built here with attn_hypothesis_run from the
 * sweep's fp8 options) recognised as itself at calibrated scales, reported
 * indistinguishable (never a bug) at unit scales, a noisy output
 * unexplained, and a run without diagnosis rows an error in the gate.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mode.h"
#include "db/diagnosis_store.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "harness/capture/capture.h"
#include "harness/diag_verdict.h"
#include "harness/diagnose.h"
#include "harness/regress.h"
#include "harness/capture/safetensors.h"
#include "harness/sweep.h"
#include "reports/junit.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/numerics.h"
#include "lifecycle_util.h"
#include "testutil.h"

/* Room for every hypothesis of the table, per layer, in the span tests. */
#define T_HYPOTHESES_MAX 64

TestSuite(diagnose, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

static uint16_t gen(uint64_t key, uint64_t i, double amax);

/* ---- the verdict, a pure function ---------------------------------------- */

/* Entries for intended-fp8kv (I) and kv-scales-twice (B) at distances di, db. */
static diag_judgement judge2(double di, double db)
{
    const diag_entry e[2] = {{"intended-fp8kv", 1, di, NULL}, {"kv-scales-twice", 0, db, NULL}};
    return diag_judge(e, 2);
}

Test(diagnose, verdict_bug_needs_the_margin_and_a_match)
{
    diag_judgement j = judge2(4e-3, 1e-3);  /* exactly DIAG_MARGIN apart */
    cr_expect_eq(j.verdict, DIAG_BUG);
    cr_expect_eq(j.nearest, 1);
    cr_expect_eq(j.intended, 0);
    cr_expect_eq(j.bug, 1);
    cr_expect_eq(judge2(3.9e-3, 1e-3).verdict, DIAG_INDISTINGUISHABLE);
    cr_expect_eq(judge2(1e-3, 4e-3).verdict, DIAG_INTENDED);
    cr_expect_eq(judge2(1e-3, 3.9e-3).verdict, DIAG_INDISTINGUISHABLE);
    /* the nearest beyond DIAG_MATCH_REL_L2: no hypothesis matches */
    cr_expect_eq(judge2(1.0, DIAG_MATCH_REL_L2 * 1.01).verdict, DIAG_UNEXPLAINED);
    cr_expect_eq(judge2(1.0, DIAG_MATCH_REL_L2).verdict, DIAG_BUG);
}

Test(diagnose, verdict_tie_at_zero_is_indistinguishable_never_a_bug)
{
    /* at unit scales kv-scales-twice equals intended-fp8kv bit for bit */
    const diag_judgement j = judge2(0.0, 0.0);
    cr_expect_eq(j.verdict, DIAG_INDISTINGUISHABLE);
    cr_expect_eq(j.within, 3u);
    cr_expect_eq(j.coincide, 1);
    const diag_judgement k = judge2(2e-3, 2e-3);
    cr_expect_eq(k.verdict, DIAG_INDISTINGUISHABLE);
    cr_expect_eq(k.coincide, 1);
}

Test(diagnose, verdict_leaves_out_what_did_not_run)
{
    /* the nearest intended did not run: the bug is judged against the next one */
    const diag_entry e[3] = {{"intended-fp8kv", 1, NAN, "refused"},
                             {"intended-bf16", 1, 0.5, NULL},
                             {"kv-scales-twice", 0, 1e-3, NULL}};
    diag_judgement j = diag_judge(e, 3);
    cr_expect_eq(j.verdict, DIAG_BUG);
    cr_expect_eq(j.intended, 1);
    cr_expect_eq(j.not_run, 1u);
    /* no bug hypothesis ran: an intended verdict cannot be said */
    const diag_entry f[2] = {{"intended-fp8kv", 1, 1e-3, NULL}, {"kv-scales-twice", 0, NAN, "x"}};
    cr_expect_eq(diag_judge(f, 2).verdict, DIAG_INDISTINGUISHABLE);
    const diag_entry g[1] = {{"intended-fp8kv", 1, NAN, "x"}};
    cr_expect_eq(diag_judge(g, 1).verdict, DIAG_NO_EVIDENCE);
    cr_expect_eq(diag_judge(g, 1).nearest, -1);
}

/* A diagnosis_row of layer L, ext "vllm", capture "c" (strings borrowed). */
static diagnosis_row drow(int layer, const char *h, double d, const char *why)
{
    return (diagnosis_row){(char *)"c", layer, (char *)"vllm", (char *)h, d, (char *)why};
}

Test(diagnose, spans_join_consecutive_layers_and_say_what_did_not_run)
{
    const size_t nh = attn_hypothesis_count();
    diagnosis_row rows[3 * T_HYPOTHESES_MAX];
    cr_assert_leq(nh, T_HYPOTHESES_MAX);
    size_t n = 0;
    for (int l = 0; l < 3; l++)
        for (size_t h = 0; h < nh; h++) {
            const char *name = attn_hypothesis_name(attn_hypothesis_at(h));
            static const double fp8kv_d[3] = {0.98, 0.97, 0.96};
            double d = 1.5;
            if (strcmp(name, "kv-scales-twice") == 0) d = l == 1 ? 2e-3 : 1.9e-3;
            if (strcmp(name, "intended-fp8kv") == 0) d = fp8kv_d[l];
            /* layer 2: q-cast-unscaled refuses the layer */
            const int refused = l == 2 && strcmp(name, "q-cast-unscaled") == 0;
            rows[n++] = drow(l, name, refused ? NAN : d, refused ? "no sinks" : NULL);
        }
    diag_span *s = NULL;
    size_t ns = 0;
    pg_err err = {0};
    cr_assert_eq(diag_spans(rows, n, &s, &ns, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(ns, 2);  /* layer 2's refusal makes a span of its own */
    cr_expect_eq(s[0].verdict, DIAG_BUG);
    cr_expect_eq(s[0].first_layer, 0);
    cr_expect_eq(s[0].last_layer, 1);
    cr_expect_str_eq(s[0].hypothesis, "kv-scales-twice");
    cr_expect_eq(s[0].d_max, 2e-3);
    cr_expect_str_eq(s[0].other, "intended-fp8kv");
    cr_expect_eq(s[0].d_other_min, 0.97);
    cr_expect_null(s[0].not_run);
    char line[1024];
    diag_span_message(&s[0], line, sizeof line);
    cr_expect_str_eq(line, "ext:vllm, layers 0-1: matches kv-scales-twice (rel_l2 0.002), not "
                           "intended-fp8kv (0.97): k/v scales applied twice");
    diag_span_message(&s[1], line, sizeof line);
    cr_expect(strstr(line, "ext:vllm, layer 2: matches kv-scales-twice") == line, "%s", line);
    cr_expect(strstr(line, "; not run: q-cast-unscaled (no sinks)") != NULL, "%s", line);
    diag_spans_free(s, ns);

    /* a stored hypothesis this binary does not know is refused, not dropped */
    rows[0].hypothesis = (char *)"from-the-future";
    cr_expect_eq(diag_spans(rows, n, &s, &ns, &err), PG_ERR_DB);
    cr_expect(strstr(err.msg, "'from-the-future'") != NULL, "%s", err.msg);
    diag_spans_free(s, ns);
    /* a table hypothesis without a row counts as not run, said */
    rows[0].hypothesis = (char *)"intended-bf16";
    cr_assert_eq(diag_spans(rows + 1, nh - 1, &s, &ns, &err), PG_OK, "%s", err.msg);
    diag_span_message(&s[0], line, sizeof line);
    cr_expect(strstr(line, "not run: intended-bf16 (no stored row)") != NULL, "%s", line);
    diag_spans_free(s, ns);
}

Test(diagnose, spans_split_where_the_coinciding_hypotheses_change)
{
    /* two layers, both indistinguishable with intended-fp8kv nearest, but
     * intended-bf16 within the margin on layer 0 only */
    const size_t nh = attn_hypothesis_count();
    diagnosis_row rows[2 * T_HYPOTHESES_MAX];
    cr_assert_leq(nh, T_HYPOTHESES_MAX);
    size_t n = 0;
    for (int l = 0; l < 2; l++)
        for (size_t h = 0; h < nh; h++) {
            const char *name = attn_hypothesis_name(attn_hypothesis_at(h));
            double d = 1.5;
            if (strcmp(name, "intended-fp8kv") == 0) d = 1e-3;
            if (strcmp(name, "kv-scales-twice") == 0) d = 2e-3;
            if (strcmp(name, "intended-bf16") == 0) d = l == 0 ? 2e-3 : 9e-3;
            rows[n++] = drow(l, name, d, NULL);
        }
    diag_span *s = NULL;
    size_t ns = 0;
    pg_err err = {0};
    cr_assert_eq(diag_spans(rows, n, &s, &ns, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(ns, 2);
    cr_expect_eq(s[0].verdict, DIAG_INDISTINGUISHABLE);
    cr_expect_str_eq(s[0].within, "intended-bf16, intended-fp8kv, kv-scales-twice");
    cr_expect_eq(s[0].coincide, 0);
    cr_expect_eq(s[1].verdict, DIAG_INDISTINGUISHABLE);
    cr_expect_str_eq(s[1].within, "intended-fp8kv, kv-scales-twice");
    char line[1024];
    diag_span_message(&s[0], line, sizeof line);
    cr_expect_str_eq(line, "ext:vllm, layer 0: indistinguishable: intended-bf16, intended-fp8kv, "
                           "kv-scales-twice lie within 4x of the nearest, intended-fp8kv (rel_l2 "
                           "0.001): no hypothesis is 4x nearer than the other side (not a bug "
                           "verdict)");
    diag_spans_free(s, ns);
}

Test(diagnose, distance_takes_the_hypothesis_as_the_reference)
{
    /* ext = 2 H (exact in bf16): ||2H - H|| / ||H|| = 1, where ext as the
     * reference would give 0.5 */
    static const int32_t sq[1] = {8};
    static uint16_t q[8 * 2 * 16], k[8 * 16], v[8 * 16], h[8 * 2 * 16], twice[8 * 2 * 16];
    for (size_t i = 0; i < sizeof q / 2; i++) q[i] = gen(1, i, 1.0);
    for (size_t i = 0; i < sizeof k / 2; i++) k[i] = gen(2, i, 1.0);
    for (size_t i = 0; i < sizeof v / 2; i++) v[i] = gen(3, i, 1.0);
    const attn_batch b = {1, sq, sq, 2, 1, 16, 0, 0.25f, NULL};
    const attn_quant_options fo = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                 .block_size = 16};
    pg_err err = {0};
    cr_assert_eq(attn_hypothesis_run(attn_hypothesis_find("intended-bf16"), &b, q, k, v, &fo, h, 1,
                                     &err), PG_OK, "%s", err.msg);
    for (size_t i = 0; i < sizeof h / 2; i++) twice[i] = bf16_from_f32(2 * bf16_to_f32(h[i]));
    const capture_ext_output ext = {(char *)"x", twice};
    diag_layer d;
    attn_backend *cpu = NULL;
    cr_assert_eq(attn_backend_open("cpu", 1, &cpu, NULL, 0, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(diag_layer_run(cpu, cpu, &b, q, k, v, &fo, 0, 1, &ext, &d, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(d.n_hyp, (int)attn_hypothesis_count());
    cr_expect_eq(d.rel_l2[0], 1.0);  /* intended-bf16 is the table's first */
    cr_expect_str_eq(d.why[0], "");
    diag_layer_free(&d);
    cr_expect_eq(metrics_rel_l2_bf16(twice, h, sizeof h / 2), 1.0);
    /* options no stack quantizes with are a caller's bug, never a hypothesis "not run" */
    attn_quant_options bad = fo;
    bad.keep_bf16 = ATTN_TENSOR_Q;
    cr_expect_eq(diag_layer_run(cpu, cpu, &b, q, k, v, &bad, 0, 1, &ext, &d, &err),
                 PG_ERR_INTERNAL);
    diag_layer_free(&d);
    attn_backend_close(cpu);
}

Test(diagnose, junit_leads_a_testcase_with_its_scale_bug)
{
    /* a rel_l2 regression first, then the scale bug of the same key */
    gate_flags f = {0};
    gate_flag v[2] = {
        {.scope = GATE_SCOPE_LAYER, .capture = (char *)"c", .layer = 0,
         .variant = (char *)"ext:vllm", .metric = (char *)"rel_l2", .value = 1, .baseline_value = 0,
         .threshold = 0, .verdict = GATE_VERDICT_REGRESSION, .message = (char *)"rel_l2 grew"},
        {.scope = GATE_SCOPE_LAYER, .capture = (char *)"c", .layer = 0,
         .variant = (char *)"ext:vllm", .metric = (char *)GATE_METRIC_SCALE_BUG,
         .value = 1e-3, .baseline_value = 1, .threshold = DIAG_MATCH_REL_L2,
         .verdict = GATE_VERDICT_REGRESSION,
         .message = (char *)"scale bug: ext:vllm, layer 0: matches kv-scales-twice"}};
    f.v = v;
    f.n = 2;
    pg_err err = {0};
    cr_assert_eq(junit_write(tu_in_dir("j.xml"), 1, -1, &f, &err), PG_OK, "%s", err.msg);
    char *xml = tu_slurp("j.xml");
    cr_expect(strstr(xml, "<failure type=\"regression\" message=\"scale bug: ext:vllm, layer 0: "
                          "matches kv-scales-twice\">") != NULL, "%s", xml);
    free(xml);
}

/* ---- captures with external outputs ---------------------------------------- */

#define T_LAYERS 2
#define T_SEQS 2
#define T_HQ 4
#define T_HKV 2
#define T_D 64
#define T_TQ 40 /* seq_q [24, 16], no context */
/* Queries reach past e4m3's largest finite value (448), as real queries with
 * outlier channels do, so that casting them unscaled (q-cast-unscaled)
 * saturates and shows; keys and values modest. sm_scale brings the logits
 * back to a few units. */
#define T_Q_AMAX 1000.0
#define T_K_AMAX 4.0
#define T_V_AMAX 2.0
#define T_SM_SCALE "0.0005"


/* Uniform value in [-amax, amax] from a hash of (key, i), as bf16. */
static uint16_t gen(uint64_t key, uint64_t i, double amax)
{
    uint64_t z = key * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    const double u = (double)(z >> 11) / 9007199254740992.0;  /* [0, 1) */
    return bf16_from_f32((float)((2 * u - 1) * amax));
}

/* Whether the next test capture has sinks in layer 0 (1 but for a
 * hypothesis whose mode's kernel has none: TurboQuant's decode kernel
 * refuses them; t_set_sinks_for). The sweeps leave out the modes whose
 * kernel cannot run on it. */
static int t_sinks = 1;

/* 1 when mode m's default profile runs on a capture with sinks as t_sinks says. */
static int t_mode_runs(pg_mode m)
{
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find(pg_mode_name(m), &p, &err), PG_OK, "%s", err.msg);
    return !t_sinks || attn_profile_takes_sinks(p);
}

/* Sinks in the next capture unless hypothesis h's mode cannot take them. */
static void t_set_sinks_for(const attn_hypothesis *h)
{
    t_sinks = 1;
    t_sinks = t_mode_runs(attn_hypothesis_mode(h));
}

/* Writes dir/a.safetensors: the q/k/v (and layer 0's sinks) of the test capture. */
static void write_inputs(const char *dir)
{
    static uint16_t q[T_TQ * T_HQ * T_D], k[T_TQ * T_HKV * T_D], v[T_TQ * T_HKV * T_D];
    static const float sinks[T_HQ] = {0.5f, -1.0f, 2.0f, 0.25f};
    pg_err err = {0};
    st_writer *w = NULL;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "model", "diagnose-test", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_q", "[24, 16]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_kv", "[24, 16]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "sm_scale", T_SM_SCALE, &err), PG_OK);
    const int64_t qs[3] = {T_TQ, T_HQ, T_D}, kvs[3] = {T_TQ, T_HKV, T_D}, ss[1] = {T_HQ};
    char name[64];
    for (int l = 0; l < T_LAYERS; l++) {
        for (size_t i = 0; i < sizeof q / 2; i++) q[i] = gen(3 * l + 1, i, T_Q_AMAX);
        for (size_t i = 0; i < sizeof k / 2; i++) k[i] = gen(3 * l + 2, i, T_K_AMAX);
        for (size_t i = 0; i < sizeof v / 2; i++) v[i] = gen(3 * l + 3, i, T_V_AMAX);
        snprintf(name, sizeof name, "layers.%d.q", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, qs, q, &err), PG_OK, "%s", err.msg);
        snprintf(name, sizeof name, "layers.%d.k", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvs, k, &err), PG_OK, "%s", err.msg);
        snprintf(name, sizeof name, "layers.%d.v", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvs, v, &err), PG_OK, "%s", err.msg);
    }
    if (t_sinks)
        cr_assert_eq(st_writer_add_tensor(w, "layers.0.sinks", ST_F32, 1, ss, sinks, &err),
                     PG_OK);
    char *path = tu_join(dir, "a.safetensors");
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK, "%s", err.msg);
    free(path);
    st_writer_free(w);
}

/* What an external output is made of. */
typedef struct ext_spec {
    const char *name;          /* NAME of layers.L.out.NAME */
    const char *hypothesis;    /* its output under the sweep's options */
    double noise;              /* each element times 1 + noise * u, u uniform in [-1, 1) */
} ext_spec;

/* Makes the capture directory dir (inputs in a.safetensors, the external
 * outputs in b.safetensors): each of ext[0..n) on every layer, computed with
 * the quantized-mode options a sweep under scales gives (sweep_layer_quant_options). */
static void make_capture(const char *dir, sweep_scales scales, const ext_spec *ext, int n)
{
    mkdir(dir, 0755);
    write_inputs(dir);
    pg_err err = {0};
    capture *cap = NULL;
    cr_assert_eq(capture_open(dir, &cap, &err), PG_OK, "%s", err.msg);
    const sweep_options so = {.n_threads = 1, .scales = scales};
    st_writer *w = NULL;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    const int64_t qs[3] = {T_TQ, T_HQ, T_D};
    static uint16_t out[T_LAYERS][8][T_TQ * T_HQ * T_D];
    cr_assert_leq(n, 8);
    for (int l = 0; l < T_LAYERS; l++) {
        const capture_layer *L = &cap->layers[l];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                              L->window, L->sm_scale, L->sinks};
        attn_quant_options fo;
        sweep_layer_quant_options(cap, l, &so, &fo);
        for (int e = 0; e < n; e++) {
            const attn_hypothesis *h = attn_hypothesis_find(ext[e].hypothesis);
            cr_assert_not_null(h, "%s", ext[e].hypothesis);
            cr_assert_eq(attn_hypothesis_run(h, &b, L->q, L->k, L->v, &fo, out[l][e], 1, &err),
                         PG_OK, "%s", err.msg);
            for (size_t i = 0; ext[e].noise > 0 && i < sizeof out[l][e] / 2; i++)
                out[l][e][i] = bf16_from_f32(bf16_to_f32(out[l][e][i]) *
                                             (float)(1 + bf16_to_f32(gen(100 + l, i,
                                                                         ext[e].noise))));
            char name[96];
            snprintf(name, sizeof name, "layers.%d.out.%s", l, ext[e].name);
            cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, qs, out[l][e], &err), PG_OK,
                         "%s", err.msg);
        }
    }
    capture_close(cap);
    char *path = tu_join(dir, "b.safetensors");
    cr_assert_eq(st_writer_write(w, path, &err), PG_OK, "%s", err.msg);
    free(path);
    st_writer_free(w);
}

/* Runs `precgate run` on capture dir into db under scales ("amax", "unit");
 * returns the run's output. */
/* The variants the diagnosis sweeps run: bf16 and every mode whose
 * hypotheses only a sweep of it asks (base/mode.h always_diagnosed), read
 * from the mode table so that every hypothesis of the table runs, a new
 * format's included; t_swept_modes() their bits. */
static const char *t_swept_variants(void)
{
    static char list[512];
    size_t used = (size_t)snprintf(list, sizeof list, "%s", PG_MODE_BASELINE_NAME);
    for (int m = 0; m < PG_MODE_COUNT; m++)
        if (!pg_mode_traits_of((pg_mode)m)->always_diagnosed && t_mode_runs((pg_mode)m))
            used += (size_t)snprintf(list + used, sizeof list - used, ",%s",
                                     pg_mode_name((pg_mode)m));
    cr_assert_lt(used, sizeof list);
    return list;
}

static unsigned t_swept_modes(void)
{
    unsigned bits = 1u << PG_MODE_BF16;
    for (int m = 0; m < PG_MODE_COUNT; m++)
        if (!pg_mode_traits_of((pg_mode)m)->always_diagnosed && t_mode_runs((pg_mode)m))
            bits |= 1u << m;
    return bits;
}

static char *sweep_cli(const char *dir, const char *db, const char *scales)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "run --capture '%s' --db '%s' --variants %s "
                                    "--threads 1 --scales %s", dir, db, t_swept_variants(),
                                    scales);
    cr_assert_eq(rc, 0, "run: %s", out);
    return out;
}

/* The single span of run 1's diagnosis in db (asserting there is one, over
 * every layer), into *s; its line into line. */
static void one_span(const char *db_path, diag_span **s, char *line, size_t len)
{
    pg_store *db = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(db_path, &db, &err), PG_OK, "%s", err.msg);
    diagnosis_row *rows = NULL;
    size_t n = 0, ns = 0;
    cr_assert_eq(diagnosis_store_load(db, 1, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, (size_t)diag_layer_rows(1, t_swept_modes()) * T_LAYERS);
    cr_assert_eq(diag_spans(rows, n, s, &ns, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(ns, 1, "%zu spans", ns);
    cr_assert_eq((*s)[0].first_layer, 0);
    cr_assert_eq((*s)[0].last_layer, T_LAYERS - 1);
    diag_span_message(&(*s)[0], line, len);
    diagnosis_rows_free(rows, n);
    store_close(db);
}

Test(diagnose, each_hypothesis_recognised_as_itself_at_calibrated_scales, .timeout = 300)
{
    for (size_t h = 0; h < attn_hypothesis_count(); h++) {
        const attn_hypothesis *hy = attn_hypothesis_at(h);
        const char *name = attn_hypothesis_name(hy);
        char dir[256], db[256], junit[32], md[32], html[32];
        snprintf(dir, sizeof dir, "%s/cap-%zu", tu_dir, h);
        snprintf(db, sizeof db, "%s/d-%zu.db", tu_dir, h);
        snprintf(junit, sizeof junit, "j-%zu.xml", h);  /* in tu_dir */
        snprintf(md, sizeof md, "r-%zu.md", h);
        snprintf(html, sizeof html, "r-%zu.html", h);
        const ext_spec ext = {"stack", name, 0};
        t_set_sinks_for(hy);
        make_capture(dir, SWEEP_SCALES_AMAX, &ext, 1);
        char *run_out = sweep_cli(dir, db, "amax");

        diag_span *s = NULL;
        char line[1024];
        one_span(db, &s, line, sizeof line);
        const int intended = attn_hypothesis_is_intended(hy);
        cr_expect_eq(s[0].verdict, intended ? DIAG_INTENDED : DIAG_BUG, "%s: %s", name, line);
        cr_expect_str_eq(s[0].hypothesis, name, "%s: %s", name, line);
        cr_expect_eq(s[0].d_max, 0.0, "%s: its own output", name);
        /* the run prints the line */
        cr_expect(strstr(run_out, line) != NULL, "%s: run output lacks '%s':\n%s", name, line,
                  run_out);
        char want[256];
        snprintf(want, sizeof want, "ext:stack, layers 0-1: matches %s (rel_l2 0), not ", name);
        cr_expect(strstr(line, want) == line, "%s", line);
        cr_expect(strstr(line, attn_hypothesis_meaning(hy)) != NULL, "%s", line);

        char *gate_out = NULL;
        const int rc = lu_gate_exit(db, 1, &(lu_gate_opts){.junit = tu_in_dir(junit)}, &gate_out);
        char *xml = tu_slurp(junit);
        cr_assert_eq(tu_run_precgatef(NULL, "report --run 1 --db '%s' -o '%s'", db,
                                      tu_in_dir(md)), 0);
        cr_assert_eq(tu_run_precgatef(NULL, "report --run 1 --db '%s' -o '%s'", db,
                                      tu_in_dir(html)), 0);
        char *mdt = tu_slurp(md), *htmlt = tu_slurp(html);
        if (intended) {
            cr_expect_eq(rc, GATE_EXIT_PASS, "%s: gate %d:\n%s", name, rc, gate_out);
            cr_expect(strstr(xml, "<failure") == NULL, "%s:\n%s", name, xml);
            cr_expect(strstr(mdt, "SCALE BUG") == NULL, "%s", name);
            cr_expect(strstr(htmlt, "id=\"scale-bug\"") == NULL, "%s", name);
        } else {
            cr_expect_eq(rc, GATE_EXIT_REGRESSION, "%s: gate %d:\n%s", name, rc, gate_out);
            cr_expect(strstr(gate_out, "REGRESSION layer     scale bug: ext:stack, layers 0-1: "
                                       "matches ") != NULL, "%s:\n%s", name, gate_out);
            /* JUnit: a failing testcase whose message names the hypothesis */
            const char *tc = strstr(xml, "name=\"");
            cr_expect_not_null(tc);
            const char *fail = strstr(xml, "<failure type=\"regression\" message=\"scale bug: "
                                           "ext:stack, layers 0-1: matches ");
            cr_expect_not_null(fail, "%s:\n%s", name, xml);
            if (fail != NULL) cr_expect(strncmp(strstr(fail, "matches ") + 8, name,
                                                strlen(name)) == 0, "%s", fail);
            cr_expect(strstr(xml, "regression: scale_bug: ") != NULL, "%s", xml);
            /* the report leads with it, before everything else */
            cr_expect(strncmp(mdt, "> **SCALE BUG**", 15) == 0, "%s:\n%.300s", name, mdt);
            char want_md[256];  /* Markdown escapes the underscore */
            snprintf(want_md, sizeof want_md, "ext:stack, layers 0-1: matches %s (rel\\_l2 0), "
                     "not ", name);
            cr_expect(strstr(mdt, want_md) != NULL, "%s: %s", name, mdt);
            const char *body = strstr(htmlt, "<body>\n");
            cr_assert_not_null(body);
            cr_expect(strncmp(body + 7, "<section id=\"scale-bug\">", 24) == 0, "%.200s", body);
        }
        /* and every report has the table of distances */
        cr_expect(strstr(mdt, "### Scale-plumbing diagnosis") != NULL, "%s", name);
        cr_expect(strstr(htmlt, "<section id=\"diagnosis\">") != NULL, "%s", name);
        free(mdt);
        free(htmlt);
        free(xml);
        free(gate_out);
        free(run_out);
        diag_spans_free(s, 1);
    }
}

/* A stack's kernel rounds otherwise than our emulation of it: noise that
 * puts the output about 6e-3 (0.01 / sqrt(3)) from the hypothesis, a
 * quarter of the profile-to-profile distance DIAG_MATCH_REL_L2 rests on. */
#define T_KERNEL_NOISE 0.01

Test(diagnose, a_bug_is_still_named_through_a_kernels_rounding_mismatch, .timeout = 120)
{
    for (size_t h = 0; h < attn_hypothesis_count(); h++) {
        const attn_hypothesis *hy = attn_hypothesis_at(h);
        if (attn_hypothesis_is_intended(hy)) continue;
        char dir[256], db[256];
        snprintf(dir, sizeof dir, "%s/noisy-%zu", tu_dir, h);
        snprintf(db, sizeof db, "%s/noisy-%zu.db", tu_dir, h);
        const ext_spec ext = {"stack", attn_hypothesis_name(hy), T_KERNEL_NOISE};
        t_set_sinks_for(hy);
        make_capture(dir, SWEEP_SCALES_AMAX, &ext, 1);
        free(sweep_cli(dir, db, "amax"));
        diag_span *s = NULL;
        char line[1024];
        one_span(db, &s, line, sizeof line);
        cr_expect_eq(s[0].verdict, DIAG_BUG, "%s: %s", attn_hypothesis_name(hy), line);
        cr_expect_str_eq(s[0].hypothesis, attn_hypothesis_name(hy), "%s", line);
        cr_expect_gt(s[0].d_max, 0.0);
        diag_spans_free(s, 1);
    }
}

Test(diagnose, at_unit_scales_the_coinciding_hypotheses_are_indistinguishable, .timeout = 120)
{
    /* Every misapplication equals an intended hypothesis at scale 1.0. */
    static const char *const bugs[] = {"kv-scales-twice", "kv-scales-missing", "k-scale-on-bf16",
                                       "q-scale-on-bf16-q", "q-cast-unscaled"};
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char dir[256], db[256];
        snprintf(dir, sizeof dir, "%s/unit-%zu", tu_dir, i);
        snprintf(db, sizeof db, "%s/unit-%zu.db", tu_dir, i);
        const ext_spec ext = {"stack", bugs[i], 0};
        make_capture(dir, SWEEP_SCALES_UNIT, &ext, 1);
        free(sweep_cli(dir, db, "unit"));
        diag_span *s = NULL;
        char line[1024];
        one_span(db, &s, line, sizeof line);
        cr_expect_eq(s[0].verdict, DIAG_INDISTINGUISHABLE, "%s: %s", bugs[i], line);
        cr_expect_eq(s[0].coincide, 1, "%s: %s", bugs[i], line);
        cr_expect(strstr(s[0].within, bugs[i]) != NULL, "%s: %s", bugs[i], s[0].within);
        cr_expect(strstr(s[0].within, "intended-") != NULL, "%s: %s", bugs[i], s[0].within);
        cr_expect(strstr(line, "the hypotheses coincide at these scales; record with "
                               "calibrated scales to tell them apart") != NULL, "%s", line);
        char *out = NULL;
        const int rc = lu_gate_exit(db, 1, NULL, &out);
        cr_expect_eq(rc, GATE_EXIT_PASS, "%s: %d\n%s", bugs[i], rc, out);
        cr_expect(strstr(out, "inconclusive layer     ext:stack, layers 0-1: indistinguishable")
                  != NULL, "%s", out);
        free(out);
        diag_spans_free(s, 1);
    }
}

/* Noise that puts an output about 0.29 (0.5 / sqrt(3)) from what it was:
 * nearer the fp64 reference than an all-zero output (the gate's mode_pair
 * check), far beyond DIAG_MATCH_REL_L2 from every hypothesis. */
#define T_UNEXPLAINED_NOISE 0.5

Test(diagnose, a_random_output_is_unexplained_and_no_bug)
{
    char dir[256], db[256];
    snprintf(dir, sizeof dir, "%s/random", tu_dir);
    snprintf(db, sizeof db, "%s/random.db", tu_dir);
    const ext_spec ext = {"noise", "intended-fp8kv", T_UNEXPLAINED_NOISE};
    make_capture(dir, SWEEP_SCALES_AMAX, &ext, 1);
    char *run_out = sweep_cli(dir, db, "amax");
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_expect_gt(tu_sql_double(h, "SELECT min(rel_l2) FROM ext_diagnosis"), DIAG_MATCH_REL_L2);
    sqlite3_close(h);
    cr_expect(strstr(run_out, "unexplained: no hypothesis matches within rel_l2 0.05; the "
                              "nearest is ") != NULL, "%s", run_out);
    char *out = NULL;
    cr_expect_eq(lu_gate_exit(db, 1, NULL, &out), GATE_EXIT_PASS, "%s", out);
    cr_expect(strstr(out, "inconclusive layer     ext:noise, layer") != NULL, "%s", out);
    free(out);
    free(run_out);
}

Test(diagnose, missing_diagnosis_rows_are_a_gate_error)
{
    char dir[256], db[256];
    snprintf(dir, sizeof dir, "%s/old", tu_dir);
    snprintf(db, sizeof db, "%s/old.db", tu_dir);
    const ext_spec ext = {"vllm", "kv-scales-twice", 0};
    make_capture(dir, SWEEP_SCALES_AMAX, &ext, 1);
    free(sweep_cli(dir, db, "amax"));
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    tu_sql_exec(h, "DELETE FROM ext_diagnosis WHERE layer = 1");
    char *out = NULL;
    cr_expect_eq(lu_gate_exit(db, 1, NULL, &out), GATE_EXIT_ERROR, "%s", out);
    cr_expect(strstr(out, "ERROR      layer     ext:vllm, layer 1: no ext_diagnosis rows") != NULL,
              "%s", out);
    cr_expect(strstr(out, "REGRESSION layer     scale bug: ext:vllm, layer 0: matches "
                          "kv-scales-twice") != NULL, "%s", out);
    free(out);
    tu_sql_exec(h, "DELETE FROM ext_diagnosis");  /* as a run swept before migration 13 */
    sqlite3_close(h);
    cr_expect_eq(lu_gate_exit(db, 1, NULL, &out), GATE_EXIT_ERROR, "%s", out);
    cr_expect(strstr(out, "ERROR      layer     ext:vllm, layers 0-1: no ext_diagnosis rows") !=
              NULL, "%s", out);
    cr_expect(strstr(out, "sweep the capture again") != NULL, "%s", out);
    free(out);
}

Test(diagnose, gate_errors_span_the_undiagnosed_layers)
{
    /* ext:vllm on layers 0, 2, 3 without diagnosis rows; bf16 rows are not ext */
    layer_metric_row run[5] = {{.capture = "c", .layer = 3, .variant = "ext:vllm"},
                               {.capture = "c", .layer = 0, .variant = "ext:vllm"},
                               {.capture = "c", .layer = 2, .variant = "ext:vllm"},
                               {.capture = "c", .layer = 1, .variant = "bf16"},
                               {.capture = "c", .layer = 0, .variant = "bf16"}};
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_diagnosis(NULL, 0, run, 5, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 2);
    cr_expect_eq(f.v[0].verdict, GATE_VERDICT_ERROR);
    cr_expect_str_eq(f.v[0].metric, GATE_METRIC_SCALE_BUG);
    cr_expect_eq(f.v[0].layer, 0);
    cr_expect(strncmp(f.v[0].message, "ext:vllm, layer 0: no ext_diagnosis rows", 40) == 0, "%s",
              f.v[0].message);
    cr_expect_eq(f.v[1].layer, 2);
    cr_expect(strncmp(f.v[1].message, "ext:vllm, layers 2-3: no ext_diagnosis rows", 43) == 0,
              "%s", f.v[1].message);
    gate_flags_free(&f);
}

/* ---- the stored rows ------------------------------------------------------- */

Test(diagnose, rows_round_trip_and_refuse_a_nan)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(tu_in_dir("rt.db"), &s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "sweep"};
    int64_t run = 0;
    cr_assert_eq(store_run_begin(s, &info, &run, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(diagnosis_store_put(s, run, "c", 1, "vllm", "kv-scales-twice", 1.9e-3, NULL,
                                     &err), PG_OK, "%s", err.msg);
    cr_assert_eq(diagnosis_store_put(s, run, "c", 1, "vllm", "q-cast-unscaled", NAN,
                                     "no sinks", &err), PG_OK, "%s", err.msg);
    cr_assert_eq(diagnosis_store_put(s, run, "c", 0, "vllm", "intended-bf16", INFINITY, NULL,
                                     &err), PG_OK, "%s", err.msg);
    cr_expect_eq(diagnosis_store_put(s, run, "c", 0, "vllm", "intended-fp8kv", NAN, NULL, &err),
                 PG_ERR_NUMERIC);
    pg_err dup = {0};  /* pg_fail keeps an err's first code: a fresh one per failure */
    cr_expect_eq(diagnosis_store_put(s, run, "c", 1, "vllm", "kv-scales-twice", 1.0, NULL, &dup),
                 PG_ERR_DB);  /* the key twice */
    err = (pg_err){0};
    diagnosis_row *rows = NULL;
    size_t n = 0;
    cr_assert_eq(diagnosis_store_load(s, run, &rows, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(n, 3);
    cr_expect_eq(rows[0].layer, 0);
    cr_expect_str_eq(rows[0].hypothesis, "intended-bf16");
    cr_expect(isinf(rows[0].rel_l2));
    cr_expect_str_eq(rows[1].capture, "c");
    cr_expect_str_eq(rows[1].ext_name, "vllm");
    cr_expect_str_eq(rows[1].hypothesis, "kv-scales-twice");
    cr_expect_eq(rows[1].rel_l2, 1.9e-3);
    cr_expect_null(rows[1].not_run);
    cr_expect(isnan(rows[2].rel_l2));
    cr_expect_str_eq(rows[2].not_run, "no sinks");
    diagnosis_rows_free(rows, n);
    int64_t counts[3];
    cr_assert_eq(diagnosis_store_count_layers(s, run, "c", 3, counts, &err), PG_OK);
    cr_expect_eq(counts[0], 1);
    cr_expect_eq(counts[1], 2);
    cr_expect_eq(counts[2], 0);
    pg_err out_of_range = {0};
    cr_expect_eq(diagnosis_store_count_layers(s, run, "c", 1, counts, &out_of_range), PG_ERR_DB);
    cr_expect(strstr(out_of_range.msg, "ext_diagnosis rows for layer 1") != NULL, "%s",
              out_of_range.msg);
    store_close(s);
}

Test(diagnose, the_sweep_stores_every_hypothesis_once_per_output_and_resume_counts_them,
     .timeout = 120)
{
    char dir[256], db[256];
    snprintf(dir, sizeof dir, "%s/two", tu_dir);
    snprintf(db, sizeof db, "%s/two.db", tu_dir);
    const ext_spec ext[2] = {{"vllm", "kv-scales-twice", 0}, {"sglang", "intended-fp8kv", 0}};
    make_capture(dir, SWEEP_SCALES_AMAX, ext, 2);
    pg_err err = {0};
    capture *cap = NULL;
    cr_assert_eq(capture_open(dir, &cap, &err), PG_OK, "%s", err.msg);
    pg_store *s = NULL;
    cr_assert_eq(store_open(db, &s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "sweep"};
    int64_t run = 0;
    cr_assert_eq(store_run_begin(s, &info, &run, &err), PG_OK, "%s", err.msg);
    sweep_options so = {.n_threads = 1, .scales = SWEEP_SCALES_AMAX};
    cr_assert_eq(sweep_variants_parse("bf16", &so.variants, &err), PG_OK);
    sweep_stats stats = {0};
    so.stats = &stats;
    cr_assert_eq(sweep_run(s, run, cap, "two", &so, &err), PG_OK, "%s", err.msg);
    cr_expect_gt(stats.diagnose_s, 0);
    /* A bf16 sweep asks the hypotheses of the always-diagnosed modes
     * (bf16, fp8kv, fp8qkv: eight), not those of the modes added since. */
    int64_t nh = 0;
    for (size_t i = 0; i < attn_hypothesis_count(); i++)
        nh += attn_hypothesis_is_asked(attn_hypothesis_at(i), 1u << PG_MODE_BF16);
    cr_assert_eq(nh, 8);
    store_layer_rows rows[T_LAYERS];
    cr_assert_eq(store_sweep_layer_rows(s, run, "two", T_LAYERS, rows, &err), PG_OK, "%s",
                 err.msg);
    for (int l = 0; l < T_LAYERS; l++) {
        store_layer_rows want;
        sweep_layer_rows(cap, l, &so, &want);
        cr_expect_eq(want.diagnosis, 2 * nh);
        cr_expect_eq(rows[l].diagnosis, want.diagnosis, "layer %d", l);
        cr_expect_eq(rows[l].metrics, want.metrics, "layer %d", l);
    }
    sqlite3 *h = store_handle(s);
    cr_expect_eq(tu_sql_int(h, "SELECT count(DISTINCT hypothesis) FROM ext_diagnosis"), nh);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM ext_diagnosis WHERE not_run IS NOT NULL"),
                 0);
    cr_expect_eq(tu_sql_double(h, "SELECT rel_l2 FROM ext_diagnosis WHERE ext_name = 'vllm' "
                                  "AND hypothesis = 'kv-scales-twice' AND layer = 1"), 0.0);
    cr_expect_gt(tu_sql_double(h, "SELECT rel_l2 FROM ext_diagnosis WHERE ext_name = 'vllm' "
                                  "AND hypothesis = 'intended-fp8kv' AND layer = 1"), 0.5);
    store_close(s);
    capture_close(cap);

    /* a resumed run of a complete sweep finds both layers whole */
    snprintf(db, sizeof db, "%s/two-cli.db", tu_dir);
    free(sweep_cli(dir, db, "amax"));
    char *out = NULL;
    run_sweep_result res;
    err = (pg_err){0};
    cr_assert_eq(lu_sweep(dir, db, &(lu_sweep_opts){.resume = 1}, &res, &out, &err), PG_OK,
                 "%s\n%s", err.msg, out);
    cr_expect(strstr(out, "2 layers (2 stored, 0 to compute)") != NULL, "%s", out);
    free(out);
    /* a layer missing its diagnosis rows is not whole: refused, named */
    sqlite3 *h2 = NULL;
    cr_assert_eq(sqlite3_open(db, &h2), SQLITE_OK);
    tu_sql_exec(h2, "DELETE FROM ext_diagnosis WHERE layer = 1");
    sqlite3_close(h2);
    cr_expect_neq(lu_sweep(dir, db, &(lu_sweep_opts){.resume = 1}, &res, NULL, &err), PG_OK);
    char want_rows[64]; /* two outputs x the hypotheses the sweep asked */
    snprintf(want_rows, sizeof want_rows, "0 of its %lld ext_diagnosis rows",
             (long long)diag_layer_rows(2, t_swept_modes()));
    cr_expect(strstr(err.msg, want_rows) != NULL, "%s: %s", want_rows, err.msg);
}
