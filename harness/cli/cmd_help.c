/* cmd_help.c: `precgate help [COMMAND | TOPIC]`. */
#include <stdio.h>
#include <string.h>

#include "kernels/attn_backend.h"
#include "kernels/attn_profile.h"
#include "harness/cli/cli.h"

const char cmd_help_usage[] =
    "usage: precgate help [COMMAND | TOPIC]\n\n"
    "Without an argument, lists the commands and topics; with a command, prints its usage;\n"
    "with a topic, prints it.\n\n"
    "topics:\n"
    "  profiles      every kernel profile (run --variants): name, default marker, summary,\n"
    "                and the rules it rounds by, with their sources\n";

/* Writes every line of text to out indented by indent spaces. */
static void put_indented(FILE *out, const char *text, int indent)
{
    while (text != NULL && *text != '\0') {
        const size_t n = strcspn(text, "\n");
        fprintf(out, "%*s%.*s\n", n > 0 ? indent : 0, "", (int)n, text);
        text += n;
        if (*text == '\n') text++;
    }
}

/* Head dims the GPU kernels are built for (kernels/cuda_backend.cu gpu_kind_of). */
static const int gpu_head_dims[] = {64, 128};

/* Where `--backend cuda` runs profile p (attn_backend_gpu_runs), one line. */
static void put_gpu_placement(FILE *out, const attn_profile *p)
{
    const char *why = NULL;
    int runs = 1;
    for (size_t i = 0; runs && i < sizeof gpu_head_dims / sizeof gpu_head_dims[0]; i++)
        runs = attn_backend_gpu_runs(p, gpu_head_dims[i], 0, &why);
    if (runs) {
        fprintf(out, "  GPU (--backend cuda): its CUDA kernel at head dims %d and %d; other head "
                "dims on the CPU specification\n", gpu_head_dims[0], gpu_head_dims[1]);
        /* attribution's rows keep every tensor but one bf16: K alone stands for them */
        if (pg_mode_quantizes(attn_profile_mode(p))) {
            const unsigned k_alone = ATTN_TENSORS_ALL & ~(unsigned)ATTN_TENSOR_K;
            if (attn_backend_gpu_runs(p, gpu_head_dims[0], k_alone, &why))
                fputs("  GPU --attribute: its rows with tensors kept bf16 run on the GPU too\n",
                      out);
            else
                fprintf(out, "  GPU --attribute: %s\n", why != NULL ? why : "no reason given");
        }
    } else
        fprintf(out, "  GPU (--backend cuda): the CPU specification runs it beside the GPU: %s\n",
                why != NULL ? why : "no reason given");
}

/* `help profiles`: the profile table, in its order. */
static void help_profiles(FILE *out)
{
    fputs("Kernel profiles: where one real kernel rounds. A variant is written MODE@PROFILE;\n"
          "a mode alone (fp8kv, fp8qkv, ...) is its default profile. The store, diff, gate,\n"
          "history, baselines and reports always carry the full name.\n", out);
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const attn_profile *p = attn_profile_at(i);
        fprintf(out, "\n%s%s\n", attn_profile_variant(p),
                attn_profile_is_default(p) ? " (default)" : "");
        put_indented(out, attn_profile_summary(p), 2);
        const pg_mode_traits *t = pg_mode_traits_of(attn_profile_mode(p));
        if (t->k_format == t->v_format)
            fprintf(out, "  mode %s: vLLM --kv-cache-dtype %s; KV %s, %s scales\n", t->name,
                    t->vllm_kv_cache_dtype, pg_number_format_name(t->k_format),
                    pg_scale_granularity_name(t->kv_scales));
        else
            fprintf(out, "  mode %s: vLLM --kv-cache-dtype %s; K %d-bit %s, V %d-bit %s, %s "
                    "scales\n", t->name, t->vllm_kv_cache_dtype, t->k_element_bits,
                    pg_number_format_name(t->k_format), t->v_element_bits,
                    pg_number_format_name(t->v_format), pg_scale_granularity_name(t->kv_scales));
        put_indented(out, attn_profile_rules(p), 4);
        put_gpu_placement(out, p);
    }
}

/* A help topic: a name that is no command, and what prints it. */
typedef struct help_topic {
    const char *name;
    void (*print)(FILE *out);
} help_topic;

static const help_topic help_topics[] = {
    {"profiles", help_profiles},
};
#define N_HELP_TOPICS (sizeof help_topics / sizeof help_topics[0])

int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        cli_print_overview(stdout);
        return 0;
    }
    if (argc > 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(cmd_help_usage, argc > 2 ? stderr : stdout);
        return argc > 2 ? cli_exit_code(PG_ERR_USAGE) : 0;
    }
    for (size_t i = 0; i < N_HELP_TOPICS; i++)
        if (strcmp(argv[1], help_topics[i].name) == 0) {
            help_topics[i].print(stdout);
            return 0;
        }
    const cli_command *c = cli_find(argv[1]);
    if (c == NULL) {
        pg_err err = {0};
        pg_fail(&err, PG_ERR_USAGE,
                "help: unknown command or topic '%s' (try 'precgate help')", argv[1]);
        return cli_report(&err);
    }
    fputs(c->usage, stdout);
    return 0;
}
