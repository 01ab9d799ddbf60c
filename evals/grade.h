/*
 * grade.h: grading one recorded completion of an AIME-style problem, whose
 * answer is an integer in 0..999.
 *
 * Two extractors turn a completion's final text (its "content", never its
 * reasoning) into an integer:
 *
 *   default  The last brace-matched \boxed{...} or \fbox{...}: of those whose
 *            braces close, the one that starts last (white space may separate
 *            the command from its brace). Braces are counted as in
 *            lm-evaluation-harness's last_boxed_only_string
 *            (lm_eval/tasks/aime/utils.py), which however prefers any \boxed
 *            to \fbox and gives up on an unclosed last box.
 *            Inside it: \text{X}, \textbf{X}, \mathrm{X} and \mathbf{X} are
 *            replaced by X; $, white space and the spacing commands \! \, \;
 *            \: "\ " and ~ are dropped; {,} becomes ','; commas are then
 *            accepted only as thousands separators (1-3 digits, then groups
 *            of exactly 3: 1,234 and 1{,}234,567) and removed. What is left
 *            must be an optional sign and base-10 digits (so 070 == 70);
 *            anything else (3,5  \frac{1}{2}  42.0  an empty box) is no
 *            answer. Without a box there is no answer, nor when the content
 *            normalises to more than 64 bytes or nests braces deeper than 64
 *            (no integer that fits in long long needs either).
 *
 *   gpt-oss  The rule of openai/gpt-oss gpt_oss/evals/aime_eval.py
 *            (extract_boxed_text, then int() in AIME25Eval.__call__; commit
 *            7b58334, summarised in shared/reference/notes-evals.md §1),
 *            reproduced so that scores line up with published gpt-oss numbers:
 *              1. the regex r"boxed{(.*?)}|framebox{(.*?)}" (DOTALL): a lazy
 *                 match that ends at the first '}', no backslash needed, no
 *                 \fbox; of the matches, the last with a non-empty group,
 *                 then .split(",")[-1].strip()   (boxed{3, 5} -> "5",
 *                 boxed{1,234} -> "234");
 *              2. when no match has a non-empty group, the last run of
 *                 digits anywhere in the text (r"\d+");
 *              3. Python int(): surrounding white space, an optional sign,
 *                 and '_' between digits are allowed; anything else is no
 *                 answer (and, as in the runner, no fallback to step 2).
 *            Known divergences from Python: only ASCII digits and ASCII
 *            white space (plus \x1c-\x1f, which str.isspace also accepts) are
 *            recognised, where Python also takes other Unicode digits and
 *            spaces.
 *
 * Both extractors report "no answer" for an integer that does not fit in
 * long long; Python would return it, but it cannot equal an answer in
 * 0..999, so the grade is the same.
 */
#ifndef PG_GRADE_H
#define PG_GRADE_H

#include <stdbool.h>

#include "base/status.h"

typedef enum grade_extractor {
    GRADE_DEFAULT,  /* last brace-matched \boxed / \fbox, normalised */
    GRADE_GPT_OSS,  /* gpt-oss evals runner's regex and last-integer fallback */
    GRADE_EXTRACTOR_COUNT
} grade_extractor;

/* The finish_reason with which an OpenAI-compatible server reports that
 * generation stopped at the token limit (vLLM sends content null when that
 * happens in gpt-oss's analysis channel). */
#define GRADE_FINISH_LENGTH "length"

/* The grade of one completion. */
typedef struct grade_result {
    bool extracted;   /* the extractor found an integer */
    long long value;  /* that integer when extracted, else 0 */
    bool correct;     /* extracted and value == the reference answer */
    bool truncated;   /* finish_reason was "length" */
} grade_result;

/* The extractor's name: "default" or "gpt-oss" ("invalid" for other values). */
const char *grade_extractor_name(grade_extractor ex);

/* Parses "default" or "gpt-oss" into *out; otherwise PG_ERR_USAGE naming the
 * unknown spelling and the accepted ones (*out untouched). */
pg_status grade_extractor_parse(const char *name, grade_extractor *out, pg_err *err);

/* Applies extractor ex to text (NULL reads as ""); true and *value set when
 * an integer was found, false and *value = 0 otherwise. */
bool grade_extract(const char *text, grade_extractor ex, long long *value);

/* Whether a completion carries something to grade: finish_reason "length"
 * (a truncation, content or not), or non-empty content with a finish_reason
 * that is not a failure ("abort", "error": vLLM's FINISH_REASON_STRINGS for a
 * generation the server gave up on, vllm/v1/engine/__init__.py). An empty
 * content counts as none (vLLM returns an empty final answer as null). When
 * not gradable, PG_ERR_FORMAT is returned and err gets what was wrong,
 * naming the content as field ("had no FIELD and finish_reason 'stop'",
 * "ended with finish_reason 'abort' (...)"): such a completion is an error,
 * never a wrong answer. PG_OK when gradable. */
pg_status grade_gradable(const char *content, const char *finish_reason, const char *field,
                         pg_err *err);

/* Grades a completion's final content against answer. content NULL or "" is
 * no answer; finish_reason (may be NULL) "length" marks it truncated. A
 * truncated completion with content is still graded on that content, as the
 * gpt-oss and lm-eval runners do; one without content is wrong. */
grade_result grade_completion(const char *content, const char *finish_reason, int answer,
                              grade_extractor ex);

#endif /* PG_GRADE_H */
