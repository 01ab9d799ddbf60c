/* test_traces.c: the eval trace loader, the AIME converter and the shipped demo set. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evals/grade.h"
#include "testutil.h"
#include "evals/traces.h"

/* The demo set shipped with the sources. */
#define DEMO_PATH PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl"

/* A valid problem line, used around the line under test. */
#define GOOD_LINE "{\"id\": \"ok\", \"problem\": \"p\", \"answer\": 1}"



/* Writes text to dir/name; returns the malloc'd path. */
static char *write_text(const char *dir, const char *name, const char *text)
{
    char *path = tu_join(dir, name);
    tu_write_file(path, text, strlen(text));
    return path;
}

/* The whole file at path as a malloc'd string. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf);
        }
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
}

/* Loads path expecting failure with code, no result, and a message holding
 * "path:line:" (line > 0) and want. */
static void expect_load_fail(const char *path, pg_status code, int line, const char *want)
{
    pg_err err = {0};
    eval_traces *t = (eval_traces *)1;
    pg_status st = traces_load(path, &t, &err);
    cr_assert_eq(st, code, "status %d (%s), expected %d; message: %s", st, pg_status_str(st),
                 code, err.msg);
    cr_assert_eq(err.code, code);
    cr_assert_null(t, "nothing is returned on failure");
    cr_log_info("%s", err.msg);
    if (line > 0) {
        char where[600];
        snprintf(where, sizeof where, "%s:%d: ", path, line);
        cr_assert_not_null(strstr(err.msg, where), "message \"%s\" lacks \"%s\"", err.msg, where);
    }
    cr_assert_not_null(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

/* Loads path expecting success. */
static eval_traces *load_ok(const char *path)
{
    pg_err err = {0};
    eval_traces *t = NULL;
    pg_status st = traces_load(path, &t, &err);
    cr_assert_eq(st, PG_OK, "%s", err.msg);
    cr_assert_not_null(t);
    return t;
}

Test(traces, valid_file_all_fields)
{
    char *dir = tu_tempdir();
    char *path = write_text(
        dir, "t.jsonl",
        "\n"
        "{\"id\": \"p-1\", \"problem\": \"Find x.\", \"answer\": \"070\", \"url\": \"ignored\", "
        "\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
        "{\"role\": \"user\", \"content\": \"Find x.\"}], "
        "\"completions\": ["
        "{\"mode\": \"bf16\", \"effort\": \"medium\", \"sample\": 0, \"content\": \"\\\\boxed{70}\", "
        "\"reasoning\": \"think\", \"finish_reason\": \"stop\", \"completion_tokens\": 1234}, "
        "{\"mode\": \"bf16\", \"effort\": \"medium\", \"sample\": 1, \"content\": null, "
        "\"reasoning\": null, \"finish_reason\": \"length\", \"completion_tokens\": null}, "
        "{\"mode\": \"fp8kv\", \"effort\": \"medium\", \"sample\": 0, \"content\": \"\"}, "
        "{\"mode\": \"bf16\", \"effort\": \"high\", \"sample\": 0, \"content\": \"x\"}]}\n"
        "   \t \r\n"
        "{\"id\": 17, \"prompt\": \"Second.\", \"answer\": 999}\r\n"
        "{\"id\": \"z\", \"problem\": \"Third.\", \"answer\": 0.0}");
    eval_traces *t = load_ok(path);
    cr_assert_str_eq(t->path, path);
    cr_assert_eq(t->n, 3);

    const eval_problem *p = &t->problems[0];
    cr_assert_str_eq(p->id, "p-1");
    cr_assert_str_eq(p->problem, "Find x.");
    cr_assert_eq(p->answer, 70);
    cr_assert_eq(p->line, 2);
    cr_assert_str_eq(p->messages_json, "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                       "{\"role\":\"user\",\"content\":\"Find x.\"}]");
    cr_assert_eq(p->n_completions, 4);
    const eval_completion *c = &p->completions[0];
    cr_assert_str_eq(c->mode, "bf16");
    cr_assert_str_eq(c->effort, "medium");
    cr_assert_eq(c->sample, 0);
    cr_assert_str_eq(c->content, "\\boxed{70}");
    cr_assert_str_eq(c->reasoning, "think");
    cr_assert_str_eq(c->finish_reason, "stop");
    cr_assert_eq(c->completion_tokens, 1234);
    c = &p->completions[1];
    cr_assert_eq(c->sample, 1);
    cr_assert_null(c->content);
    cr_assert_null(c->reasoning);
    cr_assert_str_eq(c->finish_reason, "length");
    cr_assert_eq(c->completion_tokens, -1);
    c = &p->completions[2];
    cr_assert_str_eq(c->mode, "fp8kv");
    cr_assert_str_eq(c->content, "");
    cr_assert_null(c->reasoning);
    cr_assert_null(c->finish_reason);
    cr_assert_eq(c->completion_tokens, -1);
    cr_assert_str_eq(p->completions[3].effort, "high");

    p = &t->problems[1];
    cr_assert_str_eq(p->id, "17");
    cr_assert_str_eq(p->problem, "Second.");
    cr_assert_eq(p->answer, 999);
    cr_assert_eq(p->line, 4);
    cr_assert_null(p->messages_json);
    cr_assert_eq(p->n_completions, 0);
    cr_assert_null(p->completions);

    p = &t->problems[2];
    cr_assert_str_eq(p->id, "z");
    cr_assert_eq(p->answer, 0);
    cr_assert_eq(p->line, 5);
    traces_free(t);
    traces_free(NULL);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* One malformed line (written as line 3, after a valid line and a blank
 * one) and a substring that its message must hold, naming the field. */
typedef struct bad_case {
    const char *line;
    const char *want;
} bad_case;

#define C0 "{\"id\":\"a\",\"problem\":\"p\",\"answer\":1,\"completions\":["
#define M0 "{\"id\":\"a\",\"problem\":\"p\",\"answer\":1,\"messages\":"
#define OKC "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"c\"}"

static const bad_case k_bad_cases[] = {
    {"{\"problem\":\"p\",\"answer\":1}", "'id' is missing"},
    {"{\"id\":\"\",\"problem\":\"p\",\"answer\":1}", "'id' is empty"},
    {"{\"id\":1.5,\"problem\":\"p\",\"answer\":1}", "'id' is a non-integer number"},
    {"{\"id\":[1],\"problem\":\"p\",\"answer\":1}", "'id' is an array"},
    {"{\"id\":\"a\",\"answer\":1}", "'problem' is missing"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"prompt\":\"q\",\"answer\":1}", "'problem' and 'prompt'"},
    {"{\"id\":\"a\",\"problem\":\"\",\"answer\":1}", "'problem' is empty"},
    {"{\"id\":\"a\",\"prompt\":7,\"answer\":1}", "'prompt' is a number"},
    {"{\"id\":\"a\",\"problem\":\"p\"}", "'answer' is missing"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":1000}", "'answer' is 1000, expected an integer in 0..999"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":\"1000\"}", "'answer' is \"1000\""},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":-1}", "'answer' is -1"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":12.5}", "'answer' is 12.5"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":\"12a\"}", "'answer' is \"12a\""},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":\"\"}", "'answer' is \"\""},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":\" 70\"}", "'answer' is \" 70\""},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":true}", "'answer' is a boolean"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":1,\"answer\":2}", "'answer' appears more than once"},
    {"{\"id\": \"a\",", "invalid JSON at column"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":1} x", "invalid JSON at column"},
    {"[1, 2]", "the line is an array, expected a JSON object"},
    {C0 "1]}", "'completions[0]' is a number"},
    {"{\"id\":\"a\",\"problem\":\"p\",\"answer\":1,\"completions\":{}}", "'completions' is an object"},
    {C0 OKC ",{\"effort\":\"low\",\"sample\":0,\"content\":\"c\"}]}", "'completions[1].mode' is missing"},
    {C0 "{\"mode\":\"\",\"effort\":\"low\",\"sample\":0,\"content\":\"c\"}]}", "'completions[0].mode' is empty"},
    {C0 "{\"mode\":\"bf16\",\"sample\":0,\"content\":\"c\"}]}", "'completions[0].effort' is missing"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"content\":\"c\"}]}", "'completions[0].sample' is missing"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":-1,\"content\":\"c\"}]}", "'completions[0].sample' is -1, expected an integer in 0..2147483647"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":\"0\",\"content\":\"c\"}]}", "'completions[0].sample' is a string"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0}]}", "'completions[0].content' is missing"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":5}]}", "'completions[0].content' is a number"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"c\",\"finish_reason\":3}]}",
     "'completions[0].finish_reason' is a number"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"c\",\"completion_tokens\":-5}]}",
     "'completions[0].completion_tokens' is -5"},
    {C0 "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"c\",\"content\":\"d\"}]}",
     "'completions[0].content' appears more than once"},
    {C0 OKC ",{\"mode\":\"bf16\",\"effort\":\"high\",\"sample\":0,\"content\":\"c\"}," OKC "]}",
     "'completions[2]' repeats completions[0]: mode 'bf16', effort 'low', sample 0"},
    {M0 "\"hi\"}", "'messages' is a string"},
    {M0 "[]}", "'messages' is empty"},
    {M0 "[{\"role\":\"user\",\"content\":\"x\"},{\"content\":\"y\"}]}", "'messages[1].role' is missing"},
    {M0 "[{\"role\":\"user\",\"content\":3}]}", "'messages[0].content' is a number"},
    {M0 "[7]}", "'messages[0]' is a number"},
};

Test(traces, each_malformed_line_is_named)
{
    size_t n = sizeof k_bad_cases / sizeof k_bad_cases[0];
    for (size_t i = 0; i < n; i++) {
        char *dir = tu_tempdir();
        size_t len = strlen(GOOD_LINE) + strlen(k_bad_cases[i].line) + 64;
        char *text = malloc(len);
        cr_assert_not_null(text);
        snprintf(text, len, "%s\n\n%s\n{\"id\":\"later\",\"problem\":\"p\",\"answer\":2}\n", GOOD_LINE,
                 k_bad_cases[i].line);
        char *path = write_text(dir, "bad.jsonl", text);
        cr_log_info("case %zu: %s", i, k_bad_cases[i].line);
        expect_load_fail(path, PG_ERR_FORMAT, 3, k_bad_cases[i].want);
        free(text);
        free(path);
        tu_rmtree(dir);
    free(dir);
    }
}

Test(traces, nul_byte_in_line)
{
    char *dir = tu_tempdir();
    char *path = tu_join(dir, "nul.jsonl");
    static const char text[] = GOOD_LINE "\n{\"id\":\"a\0\",\"problem\":\"p\",\"answer\":1}\n";
    tu_write_file(path, text, sizeof text - 1);
    expect_load_fail(path, PG_ERR_FORMAT, 2, "NUL byte");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(traces, duplicate_ids)
{
    char *dir = tu_tempdir();
    char *path = write_text(dir, "dup.jsonl",
                            "{\"id\":\"a\",\"problem\":\"p\",\"answer\":1}\n"
                            "{\"id\":\"b\",\"problem\":\"p\",\"answer\":1}\n"
                            "{\"id\":\"b\",\"problem\":\"p\",\"answer\":1}\n");
    expect_load_fail(path, PG_ERR_FORMAT, 3, "'id' 'b' repeats the id of line 2");
    free(path);
    /* A number id is its decimal string, so 7 and "7" collide. */
    path = write_text(dir, "dup2.jsonl",
                      "{\"id\":7,\"problem\":\"p\",\"answer\":1}\n\n"
                      "{\"id\":\"7\",\"problem\":\"p\",\"answer\":1}\n");
    expect_load_fail(path, PG_ERR_FORMAT, 3, "'id' '7' repeats the id of line 1");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Many ids, so that the id set grows several times, none falsely repeated. */
Test(traces, many_distinct_ids)
{
    char *dir = tu_tempdir();
    size_t cap = 5000 * 64, len = 0;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    for (int i = 0; i < 5000; i++)
        len += (size_t)snprintf(text + len, cap - len,
                                "{\"id\":\"q%d\",\"problem\":\"p\",\"answer\":%d}\n", i, i % 1000);
    char *path = write_text(dir, "many.jsonl", text);
    eval_traces *t = load_ok(path);
    cr_assert_eq(t->n, 5000);
    cr_assert_str_eq(t->problems[4321].id, "q4321");
    cr_assert_eq(t->problems[4321].answer, 321);
    traces_free(t);
    free(path);
    /* ... and a repeat of the first one at the very end is found. */
    snprintf(text + len, cap - len, "{\"id\":\"q0\",\"problem\":\"p\",\"answer\":1}\n");
    path = write_text(dir, "many.jsonl", text);
    expect_load_fail(path, PG_ERR_FORMAT, 5001, "'id' 'q0' repeats the id of line 1");
    free(path);
    free(text);
    tu_rmtree(dir);
    free(dir);
}

Test(traces, answer_forms)
{
    char *dir = tu_tempdir();
    char *path = write_text(dir, "ans.jsonl",
                            "{\"id\":\"a\",\"problem\":\"p\",\"answer\":\"070\"}\n"
                            "{\"id\":\"b\",\"problem\":\"p\",\"answer\":\"70\"}\n"
                            "{\"id\":\"c\",\"problem\":\"p\",\"answer\":70}\n"
                            "{\"id\":\"d\",\"problem\":\"p\",\"answer\":\"000\"}\n"
                            "{\"id\":\"e\",\"problem\":\"p\",\"answer\":\"999\"}\n"
                            "{\"id\":\"f\",\"problem\":\"p\",\"answer\":9.99e2}\n"
                            "{\"id\":\"g\",\"problem\":\"p\",\"answer\":\"0000000000000000000007\"}\n");
    eval_traces *t = load_ok(path);
    static const int want[] = {70, 70, 70, 0, 999, 999, 7};
    cr_assert_eq(t->n, 7);
    for (int i = 0; i < 7; i++) cr_assert_eq(t->problems[i].answer, want[i], "row %d", i);
    traces_free(t);
    free(path);
    path = write_text(dir, "big.jsonl", "{\"id\":\"a\",\"problem\":\"p\",\"answer\":1000}\n");
    expect_load_fail(path, PG_ERR_FORMAT, 1, "'answer' is 1000");
    free(path);
    /* 2^64 + 70: a parse that wrapped around would read 70. */
    path = write_text(dir, "big2.jsonl",
                      "{\"id\":\"a\",\"problem\":\"p\",\"answer\":\"18446744073709551686\"}\n");
    expect_load_fail(path, PG_ERR_FORMAT, 1, "'answer' is \"18446744073709551686\"");
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(traces, long_lines_bom_and_empty_file)
{
    char *dir = tu_tempdir();
    size_t big = 3 << 20; /* far past any fixed line buffer */
    char *text = malloc(big + 256);
    cr_assert_not_null(text);
    int head = sprintf(text, "\xEF\xBB\xBF{\"id\":\"long\",\"answer\":5,\"problem\":\"");
    memset(text + head, 'x', big);
    strcpy(text + head + big, "\"}\n");
    char *path = write_text(dir, "long.jsonl", text);
    eval_traces *t = load_ok(path);
    cr_assert_eq(t->n, 1);
    cr_assert_eq(strlen(t->problems[0].problem), big);
    traces_free(t);
    free(path);
    free(text);

    path = write_text(dir, "empty.jsonl", "\n \n");
    t = load_ok(path);
    cr_assert_eq(t->n, 0);
    traces_free(t);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

Test(traces, missing_file)
{
    expect_load_fail("/nonexistent/precgate/traces.jsonl", PG_ERR_IO, 0,
                     "/nonexistent/precgate/traces.jsonl: cannot open");
}

/* ------------------------------------------------------------------------ */
/* converter                                                                */
/* ------------------------------------------------------------------------ */

/* Converts in_text (written to dir/in.jsonl) into dir/out.jsonl and loads it. */
static eval_traces *convert_and_load(const char *dir, const char *in_text, char **out_text)
{
    char *in = write_text(dir, "in.jsonl", in_text);
    char *out = tu_join(dir, "out.jsonl");
    pg_err err = {0};
    cr_assert_eq(traces_convert_aime(in, out, &err), PG_OK, "%s", err.msg);
    char *tmp = tu_join(dir, "out.jsonl.tmp");
    cr_assert_neq(access(tmp, F_OK), 0, "the temporary file is gone");
    eval_traces *t = load_ok(out);
    if (out_text) *out_text = read_text(out);
    free(tmp);
    free(in);
    free(out);
    return t;
}

/* opencompass/AIME2025 spelling: question / answer (strings), no ids. */
Test(convert, question_answer_spelling)
{
    char *dir = tu_tempdir();
    char *text;
    eval_traces *t = convert_and_load(
        dir,
        "{\"question\": \"Find the sum of all $b > 9$.\\nLine two.\", \"answer\": \"70\"}\n"
        "\n"
        "{\"question\": \"Second \\u00e9 problem.\", \"answer\": \"070\"}\n"
        "{\"question\": \"Third.\", \"answer\": 588}\n",
        &text);
    cr_assert_eq(t->n, 3);
    cr_assert_str_eq(t->problems[0].id, "aime-1");
    cr_assert_str_eq(t->problems[0].problem, "Find the sum of all $b > 9$.\nLine two.");
    cr_assert_eq(t->problems[0].answer, 70);
    cr_assert_str_eq(t->problems[1].id, "aime-2");
    cr_assert_str_eq(t->problems[1].problem, "Second \xc3\xa9 problem.");
    cr_assert_eq(t->problems[1].answer, 70);
    cr_assert_str_eq(t->problems[2].id, "aime-3");
    cr_assert_eq(t->problems[2].answer, 588);
    cr_assert_eq(t->problems[2].line, 3, "blank input lines are not copied");
    cr_assert_str_eq(text,
                     "{\"id\":\"aime-1\",\"problem\":\"Find the sum of all $b > 9$.\\nLine two.\",\"answer\":70}\n"
                     "{\"id\":\"aime-2\",\"problem\":\"Second \xc3\xa9 problem.\",\"answer\":70}\n"
                     "{\"id\":\"aime-3\",\"problem\":\"Third.\",\"answer\":588}\n");
    free(text);
    traces_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* HuggingFaceH4/aime_2024 spelling: id (number) / problem / answer / url, and
 * Maxwell-Jia/AIME_2024's ID / Problem / Answer; extra fields dropped. */
Test(convert, problem_answer_spelling_with_ids)
{
    char *dir = tu_tempdir();
    char *text;
    eval_traces *t = convert_and_load(
        dir,
        "{\"id\": 60, \"problem\": \"P60\", \"solution\": \"long\", \"answer\": \"204\", "
        "\"url\": \"https://example.org/2024_AIME_I/Problem_1\", \"year\": \"2024\"}\n"
        "{\"ID\": \"2024-II-4\", \"Problem\": \"P4\", \"Solution\": \"s\", \"Answer\": 33}\n",
        &text);
    cr_assert_eq(t->n, 2);
    cr_assert_str_eq(t->problems[0].id, "60");
    cr_assert_str_eq(t->problems[0].problem, "P60");
    cr_assert_eq(t->problems[0].answer, 204);
    cr_assert_str_eq(t->problems[1].id, "2024-II-4");
    cr_assert_str_eq(t->problems[1].problem, "P4");
    cr_assert_eq(t->problems[1].answer, 33);
    cr_assert_str_eq(text,
                     "{\"id\":\"60\",\"problem\":\"P60\",\"answer\":204,"
                     "\"url\":\"https://example.org/2024_AIME_I/Problem_1\"}\n"
                     "{\"id\":\"2024-II-4\",\"problem\":\"P4\",\"answer\":33}\n");
    free(text);
    traces_free(t);
    tu_rmtree(dir);
    free(dir);
}

/* Converts in_text expecting failure naming in.jsonl:line and want; a file
 * already at the output path is left as it was, and no temporary remains. */
static void expect_convert_fail(const char *in_text, int line, const char *want)
{
    char *dir = tu_tempdir();
    char *in = write_text(dir, "in.jsonl", in_text);
    char *out = write_text(dir, "out.jsonl", "previous\n");
    pg_err err = {0};
    pg_status st = traces_convert_aime(in, out, &err);
    cr_assert_eq(st, PG_ERR_FORMAT, "status %d; message %s", st, err.msg);
    char where[600];
    snprintf(where, sizeof where, "%s:%d: ", in, line);
    cr_assert_not_null(strstr(err.msg, where), "message \"%s\" lacks \"%s\"", err.msg, where);
    cr_assert_not_null(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
    char *kept = read_text(out);
    cr_assert_str_eq(kept, "previous\n");
    free(kept);
    char *tmp = tu_join(dir, "out.jsonl.tmp");
    cr_assert_neq(access(tmp, F_OK), 0, "the temporary file was removed");
    free(tmp);
    free(in);
    free(out);
    tu_rmtree(dir);
    free(dir);
}

Test(convert, malformed_inputs)
{
    expect_convert_fail("{\"question\":\"q\",\"answer\":\"1\"}\n{\"question\":\"q\"}\n", 2,
                        "'answer' is missing");
    expect_convert_fail("{\"answer\":\"1\"}\n", 1, "'question' (or 'problem') is missing");
    expect_convert_fail("{\"question\":\"q\",\"problem\":\"p\",\"answer\":1}\n", 1,
                        "'problem' and 'question' are both given");
    expect_convert_fail("{\"question\":\"q\",\"answer\":\"1000\"}\n", 1, "'answer' is \"1000\"");
    expect_convert_fail("{\"Problem\":\"q\",\"Answer\":\"x\"}\n", 1, "'Answer' is \"x\"");
    expect_convert_fail("{\"question\":\"\",\"answer\":1}\n", 1, "'question' is empty");
    expect_convert_fail("{\"question\":\"q\",\"answer\":1}\nnot json\n", 2, "invalid JSON");
    expect_convert_fail("{\"id\":\"x\",\"question\":\"q\",\"answer\":1}\n"
                        "{\"ID\":\"x\",\"question\":\"q\",\"answer\":1}\n",
                        2, "'ID' 'x' repeats the id of line 1");
    /* A generated id may collide with a given one. */
    expect_convert_fail("{\"question\":\"q\",\"answer\":1}\n"
                        "{\"id\":\"aime-1\",\"question\":\"q\",\"answer\":1}\n",
                        2, "'id' 'aime-1' repeats the id of line 1");
}

Test(convert, io_errors)
{
    pg_err err = {0};
    cr_assert_eq(traces_convert_aime("/nonexistent/precgate/in.jsonl", "/tmp/x", &err), PG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "/nonexistent/precgate/in.jsonl"), "%s", err.msg);
    char *dir = tu_tempdir();
    char *in = write_text(dir, "in.jsonl", "{\"question\":\"q\",\"answer\":1}\n");
    pg_err_clear(&err);
    cr_assert_eq(traces_convert_aime(in, "/nonexistent/precgate/out.jsonl", &err), PG_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "/nonexistent/precgate/out.jsonl"), "%s", err.msg);
    free(in);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* the shipped demo set                                                     */
/* ------------------------------------------------------------------------ */

/* Index of mode in the demo's modes, or -1. */
static int mode_index(const char *mode)
{
    static const char *const modes[] = {"bf16", "fp8kv", "fp8qkv"};
    for (int i = 0; i < 3; i++)
        if (strcmp(mode, modes[i]) == 0) return i;
    return -1;
}

Test(demo, shipped_demo_loads_and_grades)
{
    eval_traces *t = load_ok(DEMO_PATH);
    cr_assert_eq(t->n, 12);
    /* Correct completions per mode (bf16, fp8kv, fp8qkv), out of 36 each, as
     * worked out by hand when the set was written. The two rules differ on
     * bf16 demo-11 sample 1 (\boxed{\text{63}}: gpt-oss's lazy regex reads
     * "\text{63"), fp8kv demo-12 sample 1 (no box: gpt-oss takes the last
     * integer) and fp8qkv demo-08 sample 2 (\boxed{3,080}: gpt-oss keeps
     * "080"). */
    static const int want_default[3] = {33, 31, 27};
    static const int want_gptoss[3] = {32, 32, 28};
    int got_default[3] = {0}, got_gptoss[3] = {0}, total[3] = {0}, truncated = 0;
    for (int i = 0; i < t->n; i++) {
        const eval_problem *p = &t->problems[i];
        cr_assert_eq(p->n_completions, 9, "%s", p->id);
        for (int j = 0; j < p->n_completions; j++) {
            const eval_completion *c = &p->completions[j];
            int m = mode_index(c->mode);
            cr_assert_geq(m, 0, "unknown mode %s", c->mode);
            cr_assert_str_eq(c->effort, "medium");
            cr_assert(c->sample >= 0 && c->sample <= 2);
            total[m]++;
            grade_result d = grade_completion(c->content, c->finish_reason, p->answer, GRADE_DEFAULT);
            grade_result g = grade_completion(c->content, c->finish_reason, p->answer, GRADE_GPT_OSS);
            got_default[m] += d.correct;
            got_gptoss[m] += g.correct;
            cr_assert_eq(d.truncated, g.truncated);
            if (d.truncated) {
                truncated++;
                cr_assert_not(d.correct);
                cr_assert_str_eq(p->id, "demo-05");
                cr_assert_str_eq(c->mode, "fp8qkv");
            }
        }
    }
    for (int m = 0; m < 3; m++) {
        cr_expect_eq(total[m], 36);
        cr_expect_eq(got_default[m], want_default[m], "default, mode %d: %d correct", m,
                     got_default[m]);
        cr_expect_eq(got_gptoss[m], want_gptoss[m], "gpt-oss, mode %d: %d correct", m,
                     got_gptoss[m]);
    }
    cr_assert_eq(truncated, 1);
    traces_free(t);
}
