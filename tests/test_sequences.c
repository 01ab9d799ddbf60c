/* test_sequences.c: the teacher-forcing sequences file (evals/sequences.h). */
#include <criterion/criterion.h>
#include <string.h>

#include "evals/sequences.h"
#include "testutil.h"

TestSuite(sequences, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* Writes text to name in the scratch directory; returns its path. */
static const char *file_of(const char *name, const char *text)
{
    const char *path = tu_in_dir(name);
    tu_write_file(path, text, strlen(text));
    return path;
}

Test(sequences, both_forms_load_with_their_fields)
{
    const char *path = file_of("s.jsonl",
        "{\"id\": \"a\", \"tokens\": [1, 2, 3, 2147483647], \"score_from\": 2, \"note\": 1}\n"
        "\n"
        "{\"id\": \"b\", \"tokens\": [5, 0]}\n"
        "{\"id\": \"c\", \"prompt\": \"\", \"completion\": \"so \\\\boxed{7}\"}\n");
    div_sequences s;
    pg_err err = {0};
    cr_assert_eq(div_sequences_load(path, &s, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(s.n, 3);
    cr_expect_str_eq(s.v[0].id, "a");
    cr_expect_eq(s.v[0].n_tokens, 4);
    cr_expect_eq(s.v[0].tokens[3], 2147483647);
    cr_expect_eq(s.v[0].score_from, 2);
    cr_expect_eq(s.v[0].line, 1);
    cr_expect_eq(s.v[1].score_from, 1);   /* default: all but the first */
    cr_expect_eq(s.v[1].tokens[1], 0);
    cr_expect_eq(s.v[1].line, 3);
    cr_expect_null(s.v[2].tokens);
    cr_expect_str_eq(s.v[2].prompt, "");
    cr_expect_str_eq(s.v[2].completion, "so \\boxed{7}");
    cr_expect_eq(s.v[2].score_from, 0);
    div_sequences_free(&s);
    cr_expect_eq(s.n, 0);
    div_sequences_free(NULL);
}

Test(sequences, bad_lines_name_the_file_line_and_field)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"tokens\": [1, 2]}\n", "s.jsonl:1: 'id' is missing"},
        {"{\"id\": \"\", \"tokens\": [1, 2]}\n", "s.jsonl:1: 'id' is empty"},
        {"{\"id\": 3, \"tokens\": [1, 2]}\n", "'id' is a number, expected a string"},
        {"{\"id\": \"a\", \"tokens\": [1, 2]}\n{\"id\": \"a\", \"tokens\": [1, 2]}\n",
         "s.jsonl:2: 'id' 'a' repeats the id of line 1"},
        {"{\"id\": \"a\"}\n", "s.jsonl:1: has neither tokens nor prompt and completion"},
        {"{\"id\": \"a\", \"tokens\": [1]}\n", "'tokens' has 1 ids; at least 2"},
        {"{\"id\": \"a\", \"tokens\": \"1 2\"}\n", "'tokens' is a string, expected an array"},
        {"{\"id\": \"a\", \"tokens\": [1, -2]}\n", "'tokens[1]' is another number, expected a "
                                                  "token id in 0..2147483647"},
        {"{\"id\": \"a\", \"tokens\": [1, 2.5]}\n", "'tokens[1]' is another number"},
        {"{\"id\": \"a\", \"tokens\": [1, 2147483648]}\n", "'tokens[1]' is another number"},
        {"{\"id\": \"a\", \"tokens\": [1, null]}\n", "'tokens[1]' is null"},
        {"{\"id\": \"a\", \"tokens\": [1, 2], \"score_from\": 2}\n",
         "'score_from' is out of range, expected an integer in 1..1"},
        {"{\"id\": \"a\", \"tokens\": [1, 2], \"score_from\": 0}\n", "'score_from' is out of range"},
        {"{\"id\": \"a\", \"tokens\": [1, 2], \"score_from\": \"1\"}\n", "'score_from' is a string"},
        {"{\"id\": \"a\", \"tokens\": [1, 2], \"prompt\": \"x\"}\n",
         "'prompt' given with tokens: a line is one form"},
        {"{\"id\": \"a\", \"prompt\": \"x\"}\n", "'completion' is missing"},
        {"{\"id\": \"a\", \"completion\": \"x\"}\n", "'prompt' is missing"},
        {"{\"id\": \"a\", \"prompt\": \"x\", \"completion\": \"\"}\n", "'completion' is empty"},
        {"{\"id\": \"a\", \"prompt\": \"x\", \"completion\": \"y\", \"score_from\": 1}\n",
         "'score_from' is not allowed with prompt and completion"},
        {"{\"id\": \"a\", \"tokens\": [1, 2], \"tokens\": [3, 4]}\n", "'tokens' appears more than once"},
        {"{\"id\": \"a\", \"tokens\": [1, 2]\n", "s.jsonl:1: invalid JSON at column"},
        {"[1, 2]\n", "s.jsonl:1: the line is an array, expected a JSON object"},
        {"\n\n", "s.jsonl: holds no sequence"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = file_of("s.jsonl", cases[i].text);
        div_sequences s;
        pg_err err = {0};
        cr_expect_eq(div_sequences_load(path, &s, &err), PG_ERR_FORMAT, "case %zu", i);
        cr_expect(strstr(err.msg, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i,
                  err.msg, cases[i].want);
        cr_expect_eq(s.n, 0, "case %zu", i);
        cr_expect_null(s.v, "case %zu", i);
    }
    div_sequences s;
    pg_err err = {0};
    cr_expect_eq(div_sequences_load(tu_in_dir("absent.jsonl"), &s, &err), PG_ERR_IO);
    cr_expect(strstr(err.msg, "absent.jsonl: cannot open") != NULL, "%s", err.msg);
}
