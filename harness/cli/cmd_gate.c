/* cmd_gate.c: `precgate gate`: compare a run with its baseline and decide pass or regression. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "db/store.h"
#include "harness/cli/cli.h"
#include "harness/gate_config.h"
#include "harness/gate_lifecycle.h"
#include "harness/regress.h"

const char cmd_gate_usage[] =
    "usage: precgate gate --run N [--baseline B] [--require-baseline] [--config FILE]\n"
    "                     [--junit FILE] [--db PATH]\n\n"
    "Compares run N with a baseline run and stores every verdict in the flags table\n"
    "(gating a run again replaces its flags):\n"
    "  layer      each (capture, layer, variant) against the baseline run: a metric\n"
    "             worse than baseline x (1 + rel_tol) (lower-is-worse metrics: 1 - rel_tol),\n"
    "             or a configured absolute bound, or a layer the baseline has and the run\n"
    "             lacks (an error); NaN/Inf output in any variant, with or without a baseline.\n"
    "             A variant, ext:NAME or layer the baseline run lacks is an error in layer\n"
    "             and mode_pair unless --config bounds it (or baseline set a run with it)\n"
    "  mode_pair  each profile and ext:NAME against bf16 in the same run: the gap\n"
    "             rel_l2(V) - rel_l2(bf16) may grow at most rel_tol (10%) over the\n"
    "             baseline run's gap; without a baseline the gap is recorded (inconclusive,\n"
    "             the gate passes). Always a regression: NaN/Inf, or rel_l2 >= 1 (no closer\n"
    "             to the fp64 reference than an all-zero output)\n"
    "  scale_bug  (layer scope) each external output's scale-plumbing diagnosis\n"
    "             (precgate run stores it): a regression when it matches a known scale\n"
    "             misapplication 4x nearer than every intended computation; inconclusive\n"
    "             when the hypotheses coincide (unit scales) or none matches; an error\n"
    "             when an ext:NAME output has no diagnosis rows (sweep it again)\n"
    "  eval       end-task accuracy: each mode against bf16 (paired) and each\n"
    "             (mode, effort) against the baseline run, paired problem by problem\n"
    "             when both ran the same problems (same traces digest and --limit, the\n"
    "             same problem ids), else two-sample with the message saying why:\n"
    "             regression, improvement, no change (only if the design's MDE <=\n"
    "             min_effect) or inconclusive (a paired regression or improvement\n"
    "             also needs sign-test p <= 0.05),\n"
    "             with the MDE stated; an error when a mode has no correct answer, more\n"
    "             than half its samples truncated, or <= 5 problems (no p < 0.05 possible),\n"
    "             and when two modes' samples are identical (same outcomes, byte-identical\n"
    "             completions: one server or one recording; the message names the\n"
    "             endpoints or traces), unless eval.identical_modes in --config lists them\n"
    "  divergence a diverge run: each mode's mean KLD and same-top against the\n"
    "             budgets of --config's \"divergence\" (by their 95% intervals, the MDE\n"
    "             stated), and against the baseline run (same sequences, reference and\n"
    "             K), paired over the sequences, at min effect kld_rel_effect (0.25) x the\n"
    "             baseline's KLD (never below the noise floor) and same_top_effect (0.01);\n"
    "             neither budget nor baseline, too few sequences, a median tail mass\n"
    "             above max_tail_mass, a mode the baseline lacks, or a noise floor\n"
    "             missing or not below the budget is an error\n"
    "  complete   every run: a sweep must hold each layer's rows as its config's\n"
    "             layer_rows records them, an eval every (problem, mode, effort, sample)\n"
    "             of its plan; a missing row, or a config that records neither (an older\n"
    "             run), is one error naming the missing units and the resume command\n"
    "  supported  (layer scope) each variant's cells its kernel cannot compute (no\n"
    "             sinks, no window: precgate run stores them with the reason): one\n"
    "             flag per variant and reason, skipped, never a pass (JUnit <skipped>)\n"
    "Regressions are printed first, then the counts. A PASS without a baseline run\n"
    "(a first run) says so on its own line, and the JUnit file has a skipped\n"
    "testcase \"baseline comparison\" saying it.\n\n"
    "  --run N          the run to gate (required; it must be complete)\n"
    "  --baseline B     a baseline name (precgate baseline list) or a run id; default:\n"
    "                   the newest older complete run of the same kind, label and content\n"
    "                   (an eval's traces digest, replay/live, --limit; a sweep's run\n"
    "                   --scales policy and its variants, the full profile names; a\n"
    "                   diverge run's sequences digest, reference and K) that\n"
    "                   passed its gate, else the newest older complete one of that\n"
    "                   content. A baseline of other content is an error verdict (exit\n"
    "                   2); one of other profiles is compared, and each variant it\n"
    "                   lacks is an error. A sweep of a capture recorded again is\n"
    "                   compared, with a note\n"
    "  --require-baseline  no baseline run is an error verdict (exit 2; for CI), of\n"
    "                   a sweep and of an eval; the checks that need none are still made\n"
    "  --config FILE    thresholds as JSON (harness/gate_config.h documents the keys\n"
    "                   and every default); absolute budgets (layer.abs, mode_pair.abs,\n"
    "                   mode_pair.ratio) exist only here, none is built in\n"
    "  --junit FILE     also write the verdicts as JUnit XML (one testsuite per scope)\n"
    "  --db PATH        database (default $PRECGATE_DB, else ./precgate.db); one this\n"
    "                   user cannot write is read-only: the verdicts are printed and\n"
    "                   set the exit status, but not stored (a note says so)\n\n"
    "exit status: 0 pass (inconclusive, no change and skipped included; also without\n"
    "a baseline run unless --require-baseline); 1 regression; 2 an error verdict (e.g.\n"
    "a layer missing from the run, a degenerate eval, no baseline under\n"
    "--require-baseline), a run that is running, failed or incomplete, or any other\n"
    "error.\n";

/* What gate parses argv into: the lifecycle's request and the database. */
typedef struct gate_args {
    gate_request rq;
    const char *db;  /* --db, else $PRECGATE_DB, else ./precgate.db */
} gate_args;

/* gate_job's context: the request, and what the gate decided. */
typedef struct gate_job_ctx {
    const gate_request *rq;
    gate_result res;
} gate_job_ctx;

/* cli_store_job: the gate's lifecycle on the open database. */
static pg_status gate_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    gate_job_ctx *job = ctx;
    return gate_lifecycle_run(store, db_path, job->rq, &job->res, err);
}

/* Parses argv into a; PG_ERR_USAGE on anything unknown or missing. */
static pg_status gate_parse(int argc, char **argv, gate_args *a, pg_err *err)
{
    memset(a, 0, sizeof *a);
    a->rq.run = -1;
    const cli_option opts[] = {
        {"run", CLI_LONG, .to = &a->rq.run, .min = 1, .max = LONG_MAX},
        {"baseline", CLI_TEXT, .to = &a->rq.baseline},
        {"config", CLI_TEXT, .to = &a->rq.config},
        {"junit", CLI_TEXT, .to = &a->rq.junit},
        {"db", CLI_TEXT, .to = &a->db},
        {"require-baseline", CLI_FLAG, .to = &a->rq.require_baseline},
        {NULL},
    };
    if (cli_parse_options("gate", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (a->rq.run < 0) return pg_fail(err, PG_ERR_USAGE, "gate: --run N is required");
    return PG_OK;
}

int cmd_gate(int argc, char **argv)
{
    pg_err err = {0};
    gate_args a;
    gate_config cfg;
    pg_status st = gate_parse(argc, argv, &a, &err);
    if (st == PG_OK)
        st = a.rq.config != NULL ? gate_config_load(a.rq.config, &cfg, &err)
                                 : (gate_config_default(&cfg), PG_OK);
    if (st != PG_OK) {
        cli_report(&err);
        return GATE_EXIT_ERROR;
    }
    a.rq.cfg = &cfg;
    a.rq.out = stdout;
    /* Every failure is exit status 2, whatever its code: 1 means a regression. */
    gate_job_ctx job = {&a.rq, {.exit_status = GATE_EXIT_ERROR}};
    return cli_with_store("gate", a.db, CLI_STORE_CREATE, gate_job, &job) == 0
               ? job.res.exit_status : GATE_EXIT_ERROR;
}
