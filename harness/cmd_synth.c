/* cmd_synth.c: `precgate synth`, write a synthetic capture (see synth.h). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "synth.h"

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

/* getopt_long codes of the long-only options. */
enum {
    OPT_PRESET = 256, OPT_LAYERS, OPT_SEQS, OPT_SEQ_LEN, OPT_CONTEXT, OPT_SEED,
    OPT_BLOCK_SIZE, OPT_WINDOW, OPT_NO_SINKS, OPT_SCALES, OPT_MODEL
};

/* An integer option that overrides the preset when given. */
typedef struct int_override {
    int given;
    long value;
} int_override;

int cmd_synth(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"preset", required_argument, NULL, OPT_PRESET},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"seqs", required_argument, NULL, OPT_SEQS},
        {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"no-sinks", no_argument, NULL, OPT_NO_SINKS},
        {"scales", no_argument, NULL, OPT_SCALES},
        {"model", required_argument, NULL, OPT_MODEL},
        {NULL, 0, NULL, 0},
    };
    pg_err err = {0};
    const char *output = NULL, *preset = SYNTH_DEFAULT_PRESET, *model = NULL;
    int_override layers = {0}, seqs = {0}, seq_len = {0}, context = {0}, block = {0},
                 window = {0};
    unsigned long long seed = 0;
    int seed_given = 0, no_sinks = 0, scales = 0;

    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":o:", opts, NULL)) != -1) {
        pg_status st = PG_OK;
        switch (ch) {
        case 'o': output = optarg; break;
        case OPT_PRESET: preset = optarg; break;
        case OPT_MODEL: model = optarg; break;
        case OPT_LAYERS:
            st = cli_parse_int("--layers", optarg, 1, SYNTH_MAX_LAYERS, &layers.value, &err);
            layers.given = 1;
            break;
        case OPT_SEQS:
            st = cli_parse_int("--seqs", optarg, 1, INT_MAX, &seqs.value, &err);
            seqs.given = 1;
            break;
        case OPT_SEQ_LEN:
            st = cli_parse_int("--seq-len", optarg, 1, INT_MAX, &seq_len.value, &err);
            seq_len.given = 1;
            break;
        case OPT_CONTEXT:
            st = cli_parse_int("--context", optarg, 0, INT_MAX, &context.value, &err);
            context.given = 1;
            break;
        case OPT_BLOCK_SIZE:
            st = cli_parse_int("--block-size", optarg, 1, INT_MAX, &block.value, &err);
            block.given = 1;
            break;
        case OPT_WINDOW:
            st = cli_parse_int("--window", optarg, 0, INT_MAX, &window.value, &err);
            window.given = 1;
            break;
        case OPT_SEED:
            st = cli_parse_u64("--seed", optarg, &seed, &err);
            seed_given = 1;
            break;
        case OPT_NO_SINKS: no_sinks = 1; break;
        case OPT_SCALES: scales = 1; break;
        case ':':
            st = pg_fail(&err, PG_ERR_USAGE, "synth: option '%s' needs a value",
                         argv[optind - 1]);
            break;
        default:
            st = pg_fail(&err, PG_ERR_USAGE,
                         "synth: unknown option '%s' (see 'precgate help synth')",
                         argv[optind - 1]);
            break;
        }
        if (st != PG_OK) return cli_report(&err);
    }
    if (optind < argc) {
        pg_fail(&err, PG_ERR_USAGE, "synth: unexpected argument '%s'", argv[optind]);
        return cli_report(&err);
    }
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

    if (synth_write(&cfg, output, &err) != PG_OK) return cli_report(&err);

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
