/*
 * test_eval_sameserver.c: `precgate eval` warns when two modes' servers look
 * like one (issue #27): the same base URL once normalised, or the same
 * model and server identity (GET /v1/models, its Server header, GET
 * /version). A warning only: the run, its scores and its exit status are
 * those of a run without it. Also the two pure helpers behind it,
 * oa_url_normalise and oa_identity_match.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evals/openai_client.h"
#include "fake_openai_server.h"
#include "testutil.h"

TestSuite(eval_sameserver, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* Problems in the traces (tu_write_sevens: every answer 7). */
#define N_PROBLEMS 2
/* Flags of every live run here. */
#define FLAGS "--samples 1 --concurrency 1 --no-progress --ready-timeout 10"

#define REPLY(text)                                                                     \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"" text \
    "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"
static const fs_reply k_right = {200, REPLY("so \\\\boxed{7}"), NULL, NULL, 0, 0};
static const fs_reply k_health = {200, "", NULL, NULL, 0, 0};

/* A vLLM-style model list (vllm/entrypoints/openai/protocol.py ModelCard):
 * created and permission differ per request, root and max_model_len are
 * the launch's. */
#define MODELS(root, created)                                                                 \
    "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\",\"created\":" created     \
    ",\"owned_by\":\"vllm\",\"root\":\"" root "\",\"parent\":null,\"max_model_len\":8192,"      \
    "\"permission\":[{\"id\":\"modelperm-" created "\",\"object\":\"model_permission\"}]}]}"
/* Its canonical form in a warning. */
#define MODELS_CANON(root)                                                                    \
    "[{\"id\":\"m\",\"owned_by\":\"vllm\",\"root\":\"" root "\",\"max_model_len\":8192}]"
#define UVICORN "Server: uvicorn\r\n"

/* Starts s as a ready server: /v1/models answers models with the extra
 * header lines headers (NULL: none), /version answers version (NULL: no
 * route, 404), chat completions answer 7. Its URL into url. */
static void start(fake_server *s, const char *models, const char *headers, const fs_reply *version,
                  char *url, size_t size)
{
    fs_init(s);
    const fs_reply list = {200, models, NULL, headers, 0, 0};
    fs_route(s, "/health", &k_health, 1);
    fs_route(s, "/v1/models", &list, 1);
    fs_route(s, "/v1/chat/completions", &k_right, 1);
    if (version != NULL) fs_route(s, "/version", version, 1);
    cr_assert(fs_start(s));
    fs_url(s, url, size);
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Runs eval with the endpoint flags eps; asserts the run is complete and
 * exits 0 (a warning changes neither); returns the output. */
static char *run_ok(const char *eps)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' %s --db '%s' " FLAGS,
                                    tu_write_sevens(N_PROBLEMS), eps, tu_in_dir("e.db"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "run 1 complete") != NULL, "%s", out);
    return out;
}

static const fs_reply k_version = {200, "{\"version\":\"0.11.0\"}", NULL, NULL, 0, 0};
static const fs_reply k_version_other = {200, "{\"version\":\"0.10.2\"}", NULL, NULL, 0, 0};
static const fs_reply k_version_500 = {500, "{\"detail\":\"boom\"}", NULL, NULL, 0, 0};

Test(eval_sameserver, three_modes_at_one_url_give_one_warning_per_pair)
{
    fake_server s;
    char u[64], eps[512];
    start(&s, MODELS("/models/m", "1700000000"), UVICORN, &k_version, u, sizeof u);
    /* One server spelt three ways: as printed, with "/", with "/v1/". */
    snprintf(eps, sizeof eps, "--endpoint bf16=%s --endpoint fp8kv=%s/ --endpoint fp8qkv=%s/v1/",
             u, u, u);
    char *out = run_ok(eps);
    char want[512];
    snprintf(want, sizeof want,
             "precgate: modes bf16 (%s) and fp8kv (%s/) are given the same server URL (%s); the "
             "comparison is of a server with itself\n", u, u, u);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    snprintf(want, sizeof want, "modes fp8kv (%s/) and fp8qkv (%s/v1/) are given the same server "
             "URL (%s)", u, u, u);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    cr_assert_eq(count(out, "are given the same server URL"), 3, "one per pair: %s", out);
    cr_assert_eq(count(out, "report the same model"), 0, "a pair is warned of once: %s", out);
    free(out);
    fs_stop(&s);
}

Test(eval_sameserver, two_servers_with_one_identity_are_warned_of)
{
    fake_server a, b;
    char ua[64], ub[64], eps[256];
    /* created and permission differ, as vLLM makes them per request. */
    start(&a, MODELS("/models/m", "1700000000"), UVICORN, &k_version, ua, sizeof ua);
    start(&b, MODELS("/models/m", "1700000999"), UVICORN, &k_version, ub, sizeof ub);
    snprintf(eps, sizeof eps, "--endpoint bf16=%s --endpoint fp8kv=%s", ua, ub);
    char *out = run_ok(eps);
    char want[1024];
    snprintf(want, sizeof want,
             "precgate: modes bf16 (%s) and fp8kv (%s) report the same model and server identity "
             "(models " MODELS_CANON("/models/m") ", Server header 'uvicorn', /version '0.11.0'); "
             "if they are one server the comparison is of a server with itself\n", ua, ub);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    cr_assert_eq(count(out, "report the same model"), 1, "%s", out);
    cr_assert_eq(fs_hits(&a, "/version"), 1, "/version is asked once: %s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
}

Test(eval_sameserver, a_different_version_model_or_header_is_no_warning)
{
    fake_server a, b, c, d, e;
    char ua[64], ub[64], uc[64], ud[64], ue[64], eps[512];
    start(&a, MODELS("/models/m", "1"), UVICORN, &k_version, ua, sizeof ua);
    start(&b, MODELS("/models/m", "1"), UVICORN, &k_version_other, ub, sizeof ub);
    start(&c, MODELS("/models/other", "1"), UVICORN, &k_version, uc, sizeof uc);
    start(&d, MODELS("/models/m", "1"), "Server: llama.cpp\r\n", &k_version, ud, sizeof ud);
    /* The route on one, none on the other: different software. */
    start(&e, MODELS("/models/m", "1"), UVICORN, NULL, ue, sizeof ue);
    snprintf(eps, sizeof eps,
             "--endpoint bf16=%s --endpoint fp8kv=%s --endpoint fp8qkv=%s --endpoint int8=%s "
             "--endpoint int4=%s", ua, ub, uc, ud, ue);
    char *out = run_ok(eps);
    cr_assert_eq(count(out, "report the same model"), 0, "%s", out);
    cr_assert_eq(count(out, "same server URL"), 0, "%s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
    fs_stop(&c);
    fs_stop(&d);
    fs_stop(&e);
}

Test(eval_sameserver, model_ids_alone_are_no_identity)
{
    /* Two servers of model "m" that say nothing else (no fields, no Server
     * header, no /version): the model, not the server, so no warning. */
    fake_server a, b;
    char ua[64], ub[64], eps[256];
    start(&a, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL, NULL, ua, sizeof ua);
    start(&b, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL, NULL, ub, sizeof ub);
    snprintf(eps, sizeof eps, "--endpoint bf16=%s --endpoint fp8kv=%s", ua, ub);
    char *out = run_ok(eps);
    cr_assert_eq(count(out, "report the same model"), 0, "%s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
}

Test(eval_sameserver, servers_without_or_failing_version_still_run_and_compare)
{
    /* No /version anywhere (404): same list and header still match, and
     * the run is unchanged. A 500 on /version is no answer: not compared,
     * never taken as a match of its own. */
    fake_server a, b, c;
    char ua[64], ub[64], uc[64], eps[512];
    start(&a, MODELS("/models/m", "1"), UVICORN, NULL, ua, sizeof ua);
    start(&b, MODELS("/models/m", "2"), UVICORN, NULL, ub, sizeof ub);
    start(&c, MODELS("/models/m", "3"), UVICORN, &k_version_500, uc, sizeof uc);
    snprintf(eps, sizeof eps, "--endpoint bf16=%s --endpoint fp8kv=%s --endpoint fp8qkv=%s", ua,
             ub, uc);
    char *out = run_ok(eps);
    char want[1024];
    snprintf(want, sizeof want,
             "modes bf16 (%s) and fp8kv (%s) report the same model and server identity (models "
             MODELS_CANON("/models/m") ", Server header 'uvicorn', neither has /version)", ua, ub);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    snprintf(want, sizeof want,
             "modes bf16 (%s) and fp8qkv (%s) report the same model and server identity (models "
             MODELS_CANON("/models/m") ", Server header 'uvicorn', /version not compared (no "
             "usable answer))", ua, uc);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    /* Every mode scored 1.000 on both problems, as without the warning. */
    cr_assert(strstr(out, "bf16       medium      1.000") != NULL, "%s", out);
    cr_assert(strstr(out, "fp8qkv     medium      1.000") != NULL, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&a, "/v1/chat/completions"), N_PROBLEMS);
    fs_stop(&a);
    fs_stop(&b);
    fs_stop(&c);
}

Test(eval_sameserver, a_server_header_with_an_escape_sequence_is_printed_escaped)
{
    fake_server a, b;
    char ua[64], ub[64], eps[256];
    /* ESC [ 2 J clears the screen; BEL rings. */
    start(&a, MODELS("/models/m", "1"), "Server: uvi\033[2Jcorn\007\r\n", &k_version, ua,
          sizeof ua);
    start(&b, MODELS("/models/m", "1"), "Server: uvi\033[2Jcorn\007\r\n", &k_version, ub,
          sizeof ub);
    snprintf(eps, sizeof eps, "--endpoint bf16=%s --endpoint fp8kv=%s", ua, ub);
    char *out = run_ok(eps);
    cr_assert(strstr(out, "Server header 'uvi\\x1b[2Jcorn\\x07'") != NULL, "%s", out);
    cr_assert(strchr(out, '\033') == NULL && strchr(out, '\007') == NULL,
              "no raw control character reaches the terminal: %s", out);
    /* The canonical list's JSON escapes come out unambiguous too. */
    cr_assert(strstr(out, "\"root\":\"/models/m\"") != NULL, "%s", out);
    free(out);
    fs_stop(&a);
    fs_stop(&b);
}

Test(eval_sameserver, urls_normalise_case_default_port_and_v1)
{
    char out[OA_URL_MAX];
    cr_assert_eq(oa_url_normalise("http://Node7.EXAMPLE:80/v1/", out, sizeof out), 0);
    cr_assert_str_eq(out, "http://node7.example");
    cr_assert_eq(oa_url_normalise("HTTPS://h:443//", out, sizeof out), 0);
    cr_assert_str_eq(out, "https://h");
    cr_assert_eq(oa_url_normalise("https://h:80/Proxy/BF16/v1", out, sizeof out), 0);
    cr_assert_str_eq(out, "https://h:80/Proxy/BF16", "the path keeps its case");
    cr_assert_eq(oa_url_normalise("http://[::1]:08000", out, sizeof out), 0);
    cr_assert_str_eq(out, "http://[::1]:8000");
    cr_assert_eq(oa_url_normalise("http://localhost:8000", out, sizeof out), 0);
    cr_assert_str_eq(out, "http://localhost:8000", "names are not resolved");
    cr_assert_eq(oa_url_normalise("ftp://h", out, sizeof out), -1);
    cr_assert_eq(oa_url_normalise("http://h:x", out, sizeof out), -1);
    cr_assert_eq(oa_url_normalise("http://h:8000", out, 8), -1);
}

Test(eval_sameserver, identity_match_rules)
{
    char what[512];
    const char *list = "[{\"id\":\"m\"}]";
    oa_identity a = {list, 0, "uvicorn", OA_VERSION_ANSWERED, "0.11.0", ""};
    oa_identity b = a;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 1);
    cr_assert_str_eq(what, "models [{\"id\":\"m\"}], Server header 'uvicorn', /version '0.11.0'");
    b.server = NULL;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 0, "a header on one only");
    a.server = NULL;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 1, "the version is something");
    a.version_state = b.version_state = OA_VERSION_UNKNOWN;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 0,
                 "ids alone, versions unknown: never a match");
    a.version_state = OA_VERSION_ABSENT;
    b.version_state = OA_VERSION_ABSENT;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 0, "ids alone, no /version");
    a.models_beyond_ids = b.models_beyond_ids = 1;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 1);
    cr_assert_str_eq(what, "models [{\"id\":\"m\"}], neither has /version");
    a.models = NULL;
    cr_assert_eq(oa_identity_match(&a, &b, what, sizeof what), 0, "a server not contacted");
}
