/* cmd_diff.c: `precgate diff`: per-layer and end-task deltas, two runs or two modes of one run. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/gate_store.h"
#include "db/run_config.h"
#include "evals/diverge_run.h"
#include "reports/diff.h"
#include "harness/cli/cli.h"
#include "base/variant.h"

/* Longest --modes value kept (two mode names and a comma). */
#define DIFF_MODES_MAX 256

const char cmd_diff_usage[] =
    "usage: precgate diff RUN_A RUN_B [--metric NAME] [--db PATH] [--json]\n"
    "       precgate diff --run N --modes MODE,BASE [--metric NAME] [--db PATH] [--json]\n\n"
    "Compares two runs, or two precision modes of one run. A is the baseline and B the\n"
    "candidate: RUN_A against RUN_B, or BASE (A) against MODE (B) in run N, the way the\n"
    "eval's paired rows read (MODE - BASE, e.g. --modes fp8kv,bf16). Layer rows are\n"
    "matched on the full variant name (a mode alone is its default profile: fp8kv is\n"
    "fp8kv@fixed; precgate help profiles), eval rows on the mode as given.\n\n"
    "Layers: each whole-layer value of the metric in A and B, B-A and B/A, worst first\n"
    "(largest relative growth of the error: B/A for error metrics, (1-cos B)/(1-cos A)\n"
    "for cos_sim, the drop in dB for sqnr_db). Two runs are matched on capture, layer and\n"
    "variant (runs of one capture each are matched by layer even when the capture paths\n"
    "differ); two modes on capture, layer and backend. A layer found on one side only is\n"
    "listed as such. On a terminal, worse is red and better green (NO_COLOR turns colour\n"
    "off).\n\n"
    "End task, when the runs have eval_scores: accuracy in A and B per eval, effort and\n"
    "mode, B-A and a 95% interval: for two runs (B-A) +/- 1.96*sqrt(seA^2 + seB^2), which\n"
    "assumes the runs are independent; for two modes the stored paired interval, and the\n"
    "stored eval_pairs rows themselves.\n\n"
    "Attribution, when both sides have rows (run --attribute): each fp8 variant's\n"
    "rel_l2 with one tensor alone quantized (none, q, k, v, p, all), matched on capture,\n"
    "layer, variant and tensor (two modes: the two variants' rows of each tensor); the\n"
    "table gives the layer means of A and B and the layer with the largest B/A.\n\n"
    "Divergence, when both runs are diverge runs (a diverge run against a run of\n"
    "another kind is a usage error): per mode and the noise floor, mean KLD in A and B,\n"
    "B-A and B/A, same top in A and B and B-A, PPL ratio in A and B; a mode in one run\n"
    "only is listed as such. When both runs scored the same sequences (config\n"
    "sequences_digest, reference and top_k equal, and the stored sequences' tokens),\n"
    "each mode's change is paired over the sequences (the per-sequence differences, SE\n"
    "clustered by sequence, as the gate's): its 95% interval of B-A for mean KLD and\n"
    "same top; otherwise \"unpaired: <reason>\" and the summaries alone.\n\n"
    "  --metric NAME   rel_l2 (default), max_abs, mean_abs, p99_abs, cos_sim, sqnr_db,\n"
    "                  nan_count or inf_count\n"
    "  --run N         the run whose modes --modes compares\n"
    "  --modes M,BASE  the candidate mode and its baseline\n"
    "  --db PATH       database (default $PRECGATE_DB, else ./precgate.db); never created\n"
    "  --json          one JSON array of objects (\"type\": \"layer\", \"attribution\"\n"
    "                  (one per matched row), \"eval\", \"eval_pair\" or \"divergence\"\n"
    "                  (the table's numbers, \"paired\", \"unpaired\": the reason,\n"
    "                  \"paired_kld_delta\", \"paired_kld_ci_low\"/\"_high\", ...)); a NaN or\n"
    "                  infinite number is null, with a sibling \"<field>_nonfinite\":\n"
    "                  \"nan\", \"inf\" or \"-inf\"\n\n"
    "exit status: 0 success; 1 failure (no such run, nothing to compare, database error);\n"
    "2 usage error.\n";

/* Parsed command line. */
typedef struct diff_args {
    long run_a, run_b, run;
    const char *metric_name;  /* --metric as given */
    pg_metric metric;         /* ... parsed */
    char mode_b[DIFF_MODES_MAX], mode_a[DIFF_MODES_MAX];  /* --modes MODE,BASE */
    char variant_b[VARIANT_NAME_MAX], variant_a[VARIANT_NAME_MAX]; /* the same as layer variants */
    int have_modes, json;
} diff_args;

/* Splits --modes MODE,BASE into a->mode_b (MODE) and a->mode_a (BASE); to is
 * the diff_args (a cli_option parse). */
static pg_status parse_modes(char *v, void *to, pg_err *err)
{
    diff_args *a = to;
    const char *comma = strchr(v, ',');
    if (comma == NULL || strchr(comma + 1, ',') != NULL || comma == v || comma[1] == '\0')
        return pg_fail(err, PG_ERR_USAGE,
                       "diff: --modes '%s' must be two modes, MODE,BASE (e.g. fp8kv,bf16)", v);
    const size_t n = (size_t)(comma - v);
    if (n >= sizeof a->mode_b || strlen(comma + 1) >= sizeof a->mode_a)
        return pg_fail(err, PG_ERR_USAGE, "diff: --modes '%s' is too long", v);
    memcpy(a->mode_b, v, n);
    a->mode_b[n] = '\0';
    snprintf(a->mode_a, sizeof a->mode_a, "%s", comma + 1);
    /* Layer rows are matched on the full variant name ("fp8kv" is fp8kv@fixed);
     * eval rows on the mode as given (an eval's modes are its servers', not
     * kernel profiles). A name that is no variant matches no layer row. */
    char *const modes[2] = {a->mode_b, a->mode_a}, *const vars[2] = {a->variant_b, a->variant_a};
    for (int i = 0; i < 2; i++) {
        variant_name vn;
        pg_err ignored = {0};
        snprintf(vars[i], VARIANT_NAME_MAX, "%s",
                 variant_name_parse("diff: --modes", modes[i], &vn, &ignored) == PG_OK ? vn.full
                                                                                      : modes[i]);
    }
    if (strcmp(a->mode_a, a->mode_b) == 0 || strcmp(a->variant_a, a->variant_b) == 0)
        return pg_fail(err, PG_ERR_USAGE, "diff: --modes names '%s' twice", a->variant_a);
    a->have_modes = 1;
    return PG_OK;
}

/* Parses argv into the diff_args args; PG_ERR_USAGE on anything unknown, missing or mixed. */
static pg_status diff_parse(int argc, char **argv, void *args, const char **db_option,
                            pg_err *err)
{
    diff_args *a = args;
    memset(a, 0, sizeof *a);
    a->metric_name = pg_metric_name(DIFF_DEFAULT_METRIC);
    a->run = -1;
    const cli_option opts[] = {
        {"metric", CLI_TEXT, .to = &a->metric_name},
        {"run", CLI_LONG, .to = &a->run, .min = 1, .max = LONG_MAX},
        {"modes", CLI_CALL, .to = a, .parse = parse_modes},
        {"db", CLI_TEXT, .to = db_option},
        {"json", CLI_FLAG, .to = &a->json},
        {NULL},
    };
    int first = 0;
    if (cli_parse_options("diff", argc, argv, opts, &first, err) != PG_OK) return err->code;
    if (diff_metric_parse("diff", a->metric_name, &a->metric, err) != PG_OK) return err->code;
    const int positional = argc - first;
    if (a->run >= 0 || a->have_modes) {
        if (positional > 0)
            return pg_fail(err, PG_ERR_USAGE,
                           "diff: give RUN_A RUN_B or --run N --modes MODE,BASE, not both");
        if (a->run < 0) return pg_fail(err, PG_ERR_USAGE, "diff: --modes needs --run N");
        if (!a->have_modes)
            return pg_fail(err, PG_ERR_USAGE, "diff: --run needs --modes MODE,BASE");
        a->run_a = a->run_b = a->run;
        return PG_OK;
    }
    if (positional != 2)
        return pg_fail(err, PG_ERR_USAGE,
                       "diff: give two runs, RUN_A RUN_B, or --run N --modes MODE,BASE");
    if (cli_parse_int("RUN_A", argv[first], 1, LONG_MAX, &a->run_a, err) != PG_OK ||
        cli_parse_int("RUN_B", argv[first + 1], 1, LONG_MAX, &a->run_b, err) != PG_OK)
        return err->code;
    return PG_OK;
}

/* What two diverge runs must share for a mode to be paired over their
 * sequences: the sequences' content, the mode the KLD is against and K
 * (the gate's content rule for a diverge baseline, db/gate_store.h). */
static const char *const PAIR_FIELDS[] = {RUN_CONFIG_SEQUENCES_DIGEST, RUN_CONFIG_REFERENCE,
                                           RUN_CONFIG_TOP_K};
#define N_PAIR_FIELDS ((int)(sizeof PAIR_FIELDS / sizeof PAIR_FIELDS[0]))

/* Pairs each mode of r's two diverge runs that both hold over the same
 * sequences (diverge_pair_runs, B against A), or says why not. */
static pg_status pair_divergence(pg_store *store, diff_result *r, pg_err *err)
{
    gate_content_diff cd;
    pg_status st = gate_store_content_diff(store, r->run_b.id, r->run_a.id, PAIR_FIELDS,
                                           N_PAIR_FIELDS, &cd, err);
    for (size_t i = 0; st == PG_OK && i < r->n_div; i++) {
        diff_div *d = &r->div[i];
        if (d->presence != DIFF_BOTH || d->floor) continue;
        if (cd.field != NULL) {
            snprintf(d->unpaired, sizeof d->unpaired, "%s differs (A %s, B %s): not the same "
                     "sequences and measure", cd.field, cd.other_value, cd.run_value);
            continue;
        }
        div_paired p;
        char why[DIV_UNPAIRED_MAX] = "";
        st = diverge_pair_runs(store, r->run_b.id, r->run_a.id, d->mode, &p, why, err);
        if (st != PG_OK) break;
        if (why[0] != '\0') {
            snprintf(d->unpaired, sizeof d->unpaired, "%s", why);
            continue;
        }
        d->paired = 1;
        d->pair = (diff_div_paired){p.n_sequences,     p.n_positions,      p.kld_diff,
                                    p.kld_diff_se,     p.kld_diff_low,     p.kld_diff_high,
                                    p.same_top_diff,   p.same_top_diff_se, p.same_top_diff_low,
                                    p.same_top_diff_high};
    }
    return st;
}

/* cli_store_job: the diff of the diff_args ctx, printed to stdout. */
static pg_status diff_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    const diff_args *a = ctx;
    const diff_request req = {a->run_a, a->run_b, a->have_modes ? a->mode_a : NULL,
                              a->have_modes ? a->mode_b : NULL, a->have_modes ? a->variant_a : NULL,
                              a->have_modes ? a->variant_b : NULL, a->metric,
                              db_path};
    diff_result *r = NULL;
    pg_status st = diff_compute(store, &req, &r, err);
    if (st == PG_OK && r->divergence) st = pair_divergence(store, r, err);
    if (st == PG_OK && r->n_layers == 0 && r->n_evals == 0 && r->n_pairs == 0 && r->n_div == 0) {
        if (a->have_modes)
            st = pg_fail(err, PG_ERR_DB,
                         "diff: nothing to compare: run %ld has no layer metrics or eval scores "
                         "for mode '%s' or '%s'", a->run, a->mode_b, a->mode_a);
        else
            st = pg_fail(err, PG_ERR_DB,
                         "diff: nothing to compare: runs %ld and %ld have no layer metrics, "
                         "eval scores or divergence summaries", a->run_a, a->run_b);
    }
    if (st == PG_OK) {
        if (a->json) st = diff_print_json(r, stdout, err);
        else diff_print_table(r, stdout, cli_use_colour(stdout));
    }
    diff_result_free(r);
    return st;
}

/* `precgate diff`: the cli_commands row runs it. */
const cli_store_command cmd_diff_store = {CLI_STORE_EXISTING_HINT, sizeof(diff_args),
                                          diff_parse, diff_job};
