/* test_grade.c: answer extraction (default and gpt-oss) and grading. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "evals/grade.h"

/* One extraction case: the text, whether an integer comes out, and which. */
typedef struct grade_case {
    const char *text;
    bool extracted;
    long long value;
} grade_case;

#define NONE false, 0
#define INT(v) true, (v)

/* The default extractor: last brace-matched \boxed / \fbox, normalised. */
static const grade_case k_default_cases[] = {
    {"\\boxed{42}", INT(42)},
    {"\\boxed{070}", INT(70)},
    {"\\boxed{000}", INT(0)},
    {"\\boxed{1,234}", INT(1234)},
    {"\\boxed{1{,}234}", INT(1234)},
    {"\\boxed{1,234,567}", INT(1234567)},
    {"\\boxed{1\\,000}", INT(1000)},
    {"\\boxed{12,34}", NONE},
    {"\\boxed{1,2345}", NONE},
    {"\\boxed{1234,567}", NONE},
    {"\\boxed{3, 5}", NONE},
    {"\\boxed{{,}123}", NONE},
    {"\\boxed{\\frac{1}{2}}", NONE},
    {"first \\boxed{12} then \\boxed{34}", INT(34)},
    {"\\boxed{12}\n\nWait: \\boxed{\\frac{3}{4}}", NONE},
    {"\\fbox{7}", INT(7)},
    {"\\boxed{5} and finally \\fbox{6}", INT(6)},
    {"\\fbox{5} and finally \\boxed{6}", INT(6)},
    {"$\\boxed{ 42 }$", INT(42)},
    {"\\boxed{$42$}", INT(42)},
    {"\\boxed{~42~}", INT(42)},
    {"\\boxed{4 2}", INT(42)},
    {"\\boxed{4\\!2}", INT(42)},
    {"\\boxed{\\text{42}}", INT(42)},
    {"\\boxed{\\textbf{42}}", INT(42)},
    {"\\boxed{\\mathrm{0}}", INT(0)},
    {"Answer: $\\boxed{\\text{\\textbf{007}}}$.", INT(7)},
    {"\\boxed{42\\text{ apples}}", NONE},
    {"\\boxed{x = 5}", NONE},
    {"\\boxed{42.0}", NONE},
    {"\\boxed{-5}", INT(-5)},
    {"\\boxed{+5}", INT(5)},
    {"\\boxed{--5}", NONE},
    {"The answer is 42.", NONE},
    {"", NONE},
    {"\\boxed{}", NONE},
    {"boxed{42}", NONE},
    {"\\boxed42", NONE},
    {"\\boxed {17}", INT(17)},
    {"\\boxed{42} and \\boxed{43", INT(42)},
    {"\\boxed{\\boxed{9}}", INT(9)},
    {"\\boxed{\\fbox{9}}", INT(9)},
    {"\\boxed{{42}}", NONE},
    {"\\boxed{9223372036854775807}", INT(LLONG_MAX)},
    {"\\boxed{-9223372036854775808}", INT(LLONG_MIN)},
    {"\\boxed{9223372036854775808}", NONE},
    {"\\boxed{99999999999999999999}", NONE},
};

/* The gpt-oss runner's rule (openai/gpt-oss gpt_oss/evals/aime_eval.py). Every
 * expectation below was checked against that Python function, except the
 * overflow row, where Python returns the (wrong) big integer. */
static const grade_case k_gptoss_cases[] = {
    {"\\boxed{42}", INT(42)},
    {"\\boxed{070}", INT(70)},
    {"\\boxed{1,234}", INT(234)},
    {"boxed{3, 5}", INT(5)},
    {"\\boxed{3, } and 7", NONE},
    {"\\boxed{\\frac{1}{2}}", NONE},
    {"first \\boxed{12} then \\boxed{34}", INT(34)},
    {"\\boxed{12}\n\nWait: \\boxed{\\frac{3}{4}}", NONE},
    {"\\fbox{7}", INT(7)},
    {"\\fbox{7} then 8 more", INT(8)},
    {"\\framebox{9}", INT(9)},
    {"\\boxed{a}\\framebox{8}", INT(8)},
    {"$\\boxed{ 42 }$", INT(42)},
    {"\\boxed{\n42\n}", INT(42)},
    {"\\boxed{\t-0\t}", INT(0)},
    {"\\boxed{\\text{42}}", NONE},
    {"The answer is 42.", INT(42)},
    {"x = 3 and y = 1024", INT(1024)},
    {"abc123def456ghi", INT(456)},
    {"no digits here", NONE},
    {"", NONE},
    {"\\boxed{} and 17", INT(17)},
    {"\\boxed{5} and \\boxed{}", INT(5)},
    {"\\boxed{-5}", INT(-5)},
    {"\\boxed{+5}", INT(5)},
    {"\\boxed{1_000}", INT(1000)},
    {"\\boxed{1__000}", NONE},
    {"\\boxed{_1}", NONE},
    {"\\boxed{1_}", NONE},
    {"\\boxed{42.0}", NONE},
    {"\\boxed{4 2}", NONE},
    {"\\boxed{42} and \\boxed{43", INT(42)},
    {"boxed{12 and 34", INT(34)},
    {"\\boxed{43 and later }", NONE},
    {"boxed{12}", INT(12)},
    {"\\boxed{\\boxed{9}}", NONE},
    {"\\boxed{x = 5}", NONE},
    {"Result 12, then \\boxed{ 7 }", INT(7)},
    {"\\boxed{99999999999999999999}", NONE},
};

/* Runs every case of table (n rows) through extractor ex. */
static void run_table(const grade_case *table, size_t n, grade_extractor ex)
{
    for (size_t i = 0; i < n; i++) {
        const grade_case *c = &table[i];
        long long v = -12345;
        bool got = grade_extract(c->text, ex, &v);
        cr_expect_eq(got, c->extracted, "%s row %zu \"%s\": extracted %d, expected %d",
                     grade_extractor_name(ex), i, c->text, got, c->extracted);
        cr_expect_eq(v, c->extracted ? c->value : 0, "%s row %zu \"%s\": value %lld, expected %lld",
                     grade_extractor_name(ex), i, c->text, v, c->value);
    }
}

Test(grade, default_extractor_table)
{
    size_t n = sizeof k_default_cases / sizeof k_default_cases[0];
    cr_assert_geq(n, 30);
    run_table(k_default_cases, n, GRADE_DEFAULT);
}

Test(grade, gptoss_extractor_table)
{
    size_t n = sizeof k_gptoss_cases / sizeof k_gptoss_cases[0];
    cr_assert_geq(n, 30);
    run_table(k_gptoss_cases, n, GRADE_GPT_OSS);
}

Test(grade, null_text_is_no_answer)
{
    long long v = 7;
    cr_assert_not(grade_extract(NULL, GRADE_DEFAULT, &v));
    cr_assert_eq(v, 0);
    v = 7;
    cr_assert_not(grade_extract(NULL, GRADE_GPT_OSS, &v));
    cr_assert_eq(v, 0);
}

Test(grade, correct_and_wrong)
{
    grade_result r = grade_completion("so \\boxed{070}", "stop", 70, GRADE_DEFAULT);
    cr_assert(r.extracted);
    cr_assert_eq(r.value, 70);
    cr_assert(r.correct);
    cr_assert_not(r.truncated);

    r = grade_completion("so \\boxed{71}", "stop", 70, GRADE_DEFAULT);
    cr_assert(r.extracted);
    cr_assert_eq(r.value, 71);
    cr_assert_not(r.correct);

    r = grade_completion("The answer is 70.", NULL, 70, GRADE_DEFAULT);
    cr_assert_not(r.extracted);
    cr_assert_not(r.correct);
    cr_assert_not(r.truncated);

    r = grade_completion("The answer is 70.", NULL, 70, GRADE_GPT_OSS);
    cr_assert(r.extracted);
    cr_assert(r.correct);

    /* The two rules part ways on a thousands separator. */
    r = grade_completion("\\boxed{3,080}", "stop", 80, GRADE_DEFAULT);
    cr_assert_eq(r.value, 3080);
    cr_assert_not(r.correct);
    r = grade_completion("\\boxed{3,080}", "stop", 80, GRADE_GPT_OSS);
    cr_assert_eq(r.value, 80);
    cr_assert(r.correct);
}

Test(grade, truncated_without_content_is_wrong)
{
    for (int ex = 0; ex < GRADE_EXTRACTOR_COUNT; ex++) {
        grade_result r = grade_completion(NULL, "length", 5, (grade_extractor)ex);
        cr_assert_not(r.extracted);
        cr_assert_not(r.correct);
        cr_assert(r.truncated);
        r = grade_completion("", "length", 0, (grade_extractor)ex);
        cr_assert_not(r.extracted);
        cr_assert_not(r.correct);
        cr_assert(r.truncated);
        r = grade_completion("", "stop", 0, (grade_extractor)ex);
        cr_assert_not(r.correct);
        cr_assert_not(r.truncated);
    }
}

Test(grade, truncated_with_content_is_graded_on_it)
{
    grade_result r = grade_completion("partial final: \\boxed{5}", "length", 5, GRADE_DEFAULT);
    cr_assert(r.truncated);
    cr_assert(r.correct);
    r = grade_completion("partial final: \\boxed{5", "length", 5, GRADE_DEFAULT);
    cr_assert(r.truncated);
    cr_assert_not(r.extracted);
}

Test(grade, extractor_names)
{
    cr_assert_str_eq(grade_extractor_name(GRADE_DEFAULT), "default");
    cr_assert_str_eq(grade_extractor_name(GRADE_GPT_OSS), "gpt-oss");
    cr_assert_str_eq(grade_extractor_name(GRADE_EXTRACTOR_COUNT), "invalid");
    grade_extractor ex = GRADE_DEFAULT;
    pg_err err = {0};
    cr_assert_eq(grade_extractor_parse("gpt-oss", &ex, &err), PG_OK);
    cr_assert_eq(ex, GRADE_GPT_OSS);
    cr_assert_eq(grade_extractor_parse("default", &ex, &err), PG_OK);
    cr_assert_eq(ex, GRADE_DEFAULT);
    cr_assert_eq(grade_extractor_parse("GPT-OSS", &ex, &err), PG_ERR_USAGE);
    cr_assert_eq(ex, GRADE_DEFAULT, "untouched on failure");
    cr_assert_not_null(strstr(err.msg, "'GPT-OSS'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "gpt-oss"), "%s", err.msg);
}

/* Repeats unit count times after head and before tail, in a malloc'd string. */
static char *repeat(const char *head, const char *unit, size_t count, const char *tail)
{
    size_t hu = strlen(head), uu = strlen(unit), tu = strlen(tail);
    char *s = malloc(hu + uu * count + tu + 1);
    cr_assert_not_null(s);
    memcpy(s, head, hu);
    for (size_t i = 0; i < count; i++) memcpy(s + hu + i * uu, unit, uu);
    memcpy(s + hu + uu * count, tail, tu + 1);
    return s;
}

/* Adversarial inputs that a naive scan would take quadratic time on finish
 * well inside the timeout. */
Test(grade, linear_on_unclosed_boxes, .timeout = 20)
{
    char *s = repeat("\\boxed{1}", "\\boxed{", 200000, "");
    long long v;
    cr_assert(grade_extract(s, GRADE_DEFAULT, &v));
    cr_assert_eq(v, 1);
    cr_assert(grade_extract(s, GRADE_GPT_OSS, &v));
    cr_assert_eq(v, 1);
    free(s);
    s = repeat("\\boxed{", "\\text{", 200000, "");
    cr_assert_not(grade_extract(s, GRADE_DEFAULT, &v));
    free(s);
    s = repeat("\\boxed{", " ", 1000000, "42}");
    cr_assert(grade_extract(s, GRADE_DEFAULT, &v));
    cr_assert_eq(v, 42);
    free(s);
}

/* What may be graded: an answer or a truncation; everything else is an
 * error with a reason naming the field (the rule for server replies and for
 * recorded completions alike). */
Test(grade, gradable_table)
{
    static const struct {
        const char *content, *finish;
        bool gradable;
        const char *why;
    } cases[] = {
        {"\\boxed{7}", "stop", true, NULL},
        {"\\boxed{7}", NULL, true, NULL},
        {" ", "stop", true, NULL},                       /* whitespace is content */
        {NULL, "length", true, NULL},                    /* truncated, graded wrong */
        {"", "length", true, NULL},
        {"\\boxed{7}", "length", true, NULL},
        {NULL, "stop", false, "had no F and finish_reason 'stop'"},
        {"", "stop", false, "had an empty F and finish_reason 'stop'"},
        {NULL, NULL, false, "had no F and no finish_reason"},
        {"\\boxed{7}", "abort", false, "ended with finish_reason 'abort' (the server gave up"},
        {"\\boxed{7}", "error", false, "ended with finish_reason 'error'"},
        {NULL, "tool_calls", false, "had no F and finish_reason 'tool_calls'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pg_err why = {0};
        const bool g = grade_gradable(cases[i].content, cases[i].finish, "F", &why) == PG_OK;
        cr_expect_eq(g, cases[i].gradable, "case %zu", i);
        if (cases[i].why != NULL)
            cr_expect(strncmp(why.msg, cases[i].why, strlen(cases[i].why)) == 0, "case %zu: %s",
                      i, why.msg);
        else
            cr_expect_str_eq(why.msg, "", "case %zu", i);
    }
}
