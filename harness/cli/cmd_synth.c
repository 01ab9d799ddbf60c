/* cmd_synth.c: `precgate synth`, write a synthetic capture (see synth.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/cli/cli.h"
#include "harness/capture/synth.h"

/* Preset used when --preset is not given. */
#define SYNTH_DEFAULT_PRESET "gpt-oss-120b"

const char cmd_synth_usage[] =
    "usage: precgate synth -o FILE [--preset NAME] [--layers N] [--seqs N]\n"
    "                      [--seq-len N] [--context N] [--seed N] [--block-size N]\n"
    "                      [--window N] [--no-sinks] [--scales] [--model TEXT]\n\n"
    "Writes a synthetic capture (precgate.capture.v1) with the structure of real\n"
    "activations: RoPE at absolute positions, a few large-magnitude key channels,\n"
    "a massive first token that is an attention sink, queries correlated with keys.\n"
    "The same options and seed give a byte-identical file. Layers are generated in\n"
    "parallel on $PRECGATE_THREADS threads (default: all CPUs); the file does not\n"
    "depend on the thread count.\n\n"
    "options:\n"
    "  -o, --output FILE   where to write the .safetensors file (required)\n"
    "  --preset NAME       model shape (default gpt-oss-120b):\n"
    "                        gpt-oss-120b  36 layers, 64 q / 8 kv heads, D 64,\n"
    "                                      window 128 on even layers, sinks\n"
    "                        llama-3-8b    32 layers, 32 q / 8 kv heads, D 128,\n"
    "                                      full attention, no sinks\n"
    "  --layers N          layers to generate (default: the preset's)\n"
    "  --seqs N            sequences (default 2)\n"
    "  --seq-len N         new (query) tokens per sequence (default 256)\n"
    "  --context N         cached tokens before them, chunked prefill (default 0)\n"
    "  --seed N            random seed (default 0)\n"
    "  --block-size N      KV page size: 16, 32 or 64 (default 16)\n"
    "  --window N          sliding window on the preset's windowed layers\n"
    "                      (all layers for a preset without one); 0 = none\n"
    "  --no-sinks          leave out the per-head sink logits\n"
    "  --scales            write calibrated q/k/v_scale (amax / 448) metadata\n"
    "  --model TEXT        metadata \"model\" (default synth:PRESET)\n";

/* An integer option that overrides the preset when given. */
typedef struct int_override {
    int given;
    long value;
} int_override;

/* cli_refusal in synth's own words. */
static pg_status synth_refused(const char *cmd, int c, const char *arg, pg_err *err)
{
    if (c == ':') return pg_fail(err, PG_ERR_USAGE, "%s: option '%s' needs a value", cmd, arg);
    return pg_fail(err, PG_ERR_USAGE, "%s: unknown option '%s' (see 'precgate help %s')", cmd, arg,
                   cmd);
}

int cmd_synth(int argc, char **argv)
{
    pg_err err = {0};
    const char *output = NULL, *preset = SYNTH_DEFAULT_PRESET, *model = NULL;
    int_override layers = {0}, seqs = {0}, seq_len = {0}, context = {0}, block = {0},
                 window = {0};
    unsigned long long seed = 0;
    int seed_given = 0, no_sinks = 0, scales = 0;
    const cli_option opts[] = {
        {"output", CLI_TEXT, .to = &output, .short_name = 'o'},
        {"preset", CLI_TEXT, .to = &preset},
        {"layers", CLI_LONG, .to = &layers.value, .min = 1, .max = SYNTH_MAX_LAYERS,
         .given = &layers.given},
        {"seqs", CLI_LONG, .to = &seqs.value, .min = 1, .max = INT_MAX, .given = &seqs.given},
        {"seq-len", CLI_LONG, .to = &seq_len.value, .min = 1, .max = INT_MAX,
         .given = &seq_len.given},
        {"context", CLI_LONG, .to = &context.value, .min = 0, .max = INT_MAX,
         .given = &context.given},
        {"seed", CLI_U64, .to = &seed, .given = &seed_given},
        {"block-size", CLI_LONG, .to = &block.value, .min = 1, .max = INT_MAX,
         .given = &block.given},
        {"window", CLI_LONG, .to = &window.value, .min = 0, .max = INT_MAX,
         .given = &window.given},
        {"no-sinks", CLI_FLAG, .to = &no_sinks},
        {"scales", CLI_FLAG, .to = &scales},
        {"model", CLI_TEXT, .to = &model},
        {NULL},
    };
    if (cli_parse_options_worded("synth", argc, argv, opts, NULL, synth_refused, &err) != PG_OK)
        return cli_report(&err);
    if (output == NULL) {
        pg_fail(&err, PG_ERR_USAGE, "synth: no output file (-o FILE)");
        return cli_report(&err);
    }

    synth_config cfg;
    if (synth_preset(preset, &cfg, &err) != PG_OK) return cli_report(&err);
    if (layers.given) cfg.n_layers = (int)layers.value;
    if (seqs.given) cfg.n_seqs = (int)seqs.value;
    if (seq_len.given) cfg.seq_len = (int)seq_len.value;
    if (context.given) cfg.context = (int)context.value;
    if (block.given) cfg.block_size = (int)block.value;
    if (window.given) cfg.window = (int)window.value;
    if (seed_given) cfg.seed = seed;
    if (no_sinks) cfg.sinks = 0;
    if (scales) cfg.write_scales = 1;
    if (model != NULL) cfg.model = model;

    /* synth_write's checks come first: a bad $PRECGATE_THREADS is reported
     * only for a capture that is written. */
    if (synth_check(&cfg, output, &err) != PG_OK ||
        synth_write(&cfg, output, cli_default_threads(), &err) != PG_OK)
        return cli_report(&err);

    struct stat sb;
    long long bytes = stat(output, &sb) == 0 ? (long long)sb.st_size : -1;
    const long long tkv = (long long)cfg.n_seqs * ((long long)cfg.context + cfg.seq_len);
    const long long tq = (long long)cfg.n_seqs * cfg.seq_len;
    printf("%s: %s, %d layers, %d seqs x (%d context + %d new), q [%lld,%d,%d] "
           "k/v [%lld,%d,%d] bf16%s, %lld bytes\n",
           output, cfg.preset, cfg.n_layers, cfg.n_seqs, cfg.context, cfg.seq_len, tq,
           cfg.hq, cfg.d, tkv, cfg.hkv, cfg.d, cfg.sinks ? " + sinks" : "", bytes);
    return 0;
}
