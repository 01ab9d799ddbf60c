/* cmd_convert.c: `precgate convert-aime`: public AIME JSONL files to precgate traces. */
#include <stdio.h>

#include "evals/traces.h"
#include "harness/cli/cli.h"

const char cmd_convert_aime_usage[] =
    "usage: precgate convert-aime IN.jsonl OUT.jsonl\n\n"
    "Converts a public AIME 2024/2025 JSONL file (fields question/answer or\n"
    "problem/answer, optional id/ID/url) into precgate's traces format for\n"
    "`precgate eval --traces OUT.jsonl`. Ids are kept, or made as aime-<n>.\n"
    "OUT is written through a temporary file; on error it is left untouched.\n";

int cmd_convert_aime(int argc, char **argv)
{
    pg_err err = {0};
    if (argc != 3) {
        pg_fail(&err, PG_ERR_USAGE, "convert-aime: needs IN.jsonl and OUT.jsonl (see "
                                    "precgate help convert-aime)");
        return cli_report(&err);
    }
    if (traces_convert_aime(argv[1], argv[2], &err) != PG_OK) return cli_report(&err);
    eval_traces *t = NULL;
    if (traces_load(argv[2], &t, &err) != PG_OK) return cli_report(&err);
    printf("%s: %d problems from %s\n", argv[2], t->n, argv[1]);
    traces_free(t);
    return 0;
}
