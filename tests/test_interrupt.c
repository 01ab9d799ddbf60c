/* test_interrupt.c: SIGINT/SIGTERM as a clean stop (harness/interrupt.h), the
 * exit status it maps to, and the eval client's stop flag (oa_options.stop)
 * against a loopback fake server. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_openai_server.h"
#include "harness/cli/cli.h"
#include "harness/interrupt.h"
#include "evals/openai_client.h"
#include "base/status.h"

#define CHAT "/v1/chat/completions"
#define OK_BODY                                                                             \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"7\"},"    \
    "\"finish_reason\":\"stop\"}]}"
/* Requests one stop test sends, and how many may be in flight at once. */
#define STOP_REQS 12
#define STOP_IN_FLIGHT 2
/* A reply slow enough that a stop lands while it is in progress (fs_stop cuts it short). */
#define SLOW_REPLY_MS 3000

/* Child: installs the handlers, raises sig and reports what it saw through
 * its exit status (1 = the flag, name or exit code was wrong). A second
 * raise kills it, so reaching the end means SA_RESETHAND did not work. */
static void child_raise_twice(int sig, const char *name, int code)
{
    interrupt_install();
    if (interrupt_signal() != 0 || *interrupt_flag() != 0) _exit(1);
    raise(sig);
    if (interrupt_signal() != sig || *interrupt_flag() != sig) _exit(1);
    if (strcmp(interrupt_signal_name(sig), name) != 0) _exit(1);
    if (interrupt_exit_code(sig) != code || cli_exit_code(PG_ERR_INTERRUPTED) != code)
        _exit(1);
    raise(sig);   /* the default action now: the process dies of sig */
    _exit(3);
}

/* Forks child_raise_twice and asserts it died of the second sig. */
static void expect_first_caught_second_kills(int sig, const char *name, int code)
{
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) child_raise_twice(sig, name, code);
    int wst = 0;
    cr_assert_eq(waitpid(p, &wst, 0), p);
    cr_assert(WIFSIGNALED(wst), "%s: child exited %d instead of dying of the second signal",
              name, WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    cr_assert_eq(WTERMSIG(wst), sig);
}

Test(interrupt, first_signal_sets_the_flag_second_kills)
{
    expect_first_caught_second_kills(SIGINT, "SIGINT", 130);
    expect_first_caught_second_kills(SIGTERM, "SIGTERM", 143);
}

Test(interrupt, names_and_codes)
{
    cr_assert_str_eq(interrupt_signal_name(SIGTERM), "SIGTERM");
    cr_assert_str_eq(interrupt_signal_name(SIGKILL), "SIGKILL");
    char want[32];
    snprintf(want, sizeof want, "signal %d", SIGUSR1);
    cr_assert_str_eq(interrupt_signal_name(SIGUSR1), want);
    cr_assert_eq(interrupt_exit_code(SIGINT), 130);
    cr_assert_eq(interrupt_exit_code(SIGTERM), 143);
    /* No signal caught in this process: SIGINT's code, never 0, 1 or 2. */
    cr_assert_eq(cli_exit_code(PG_ERR_INTERRUPTED), 130);
    cr_assert_str_eq(pg_status_str(PG_ERR_INTERRUPTED), "interrupted");
}

/* What the stop tests see of each finished request. */
typedef struct stop_ctx {
    int done;
    int stop_at;                     /* set *flag when done reaches this */
    volatile sig_atomic_t *flag;
} stop_ctx;

/* on_done: counts, and raises the stop flag at stop_at. */
static pg_status count_and_stop(void *ctx, const oa_request *req, const oa_response *resp,
                                const oa_progress *p, pg_err *err)
{
    (void)req, (void)p, (void)err;
    stop_ctx *c = ctx;
    cr_assert_eq(resp->outcome, OA_OK, "%s", resp->error ? resp->error : "");
    if (++c->done == c->stop_at) *c->flag = SIGTERM;
    return PG_OK;
}

/* Runs STOP_REQS requests against s with the stop flag flag; the callback
 * sets it after stop_at replies (0: it is set before the run). */
static pg_status run_with_stop(fake_server *s, volatile sig_atomic_t *flag, stop_ctx *c,
                               pg_err *err)
{
    char url[64];
    fs_url(s, url, sizeof url);
    oa_options o = {.model = "m", .max_in_flight = STOP_IN_FLIGHT, .max_attempts = 3,
                    .backoff_base_s = 0.01, .backoff_cap_s = 0.05, .timeout_s = 5,
                    .connect_timeout_s = 2, .stall_s = 5, .poll_s = 0.05, .stop = flag};
    oa_endpoint *ep = NULL;
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, &o, &ep, err), PG_OK, "%s", err->msg);
    oa_sampling sp = oa_sampling_default();
    sp.stream = 0;
    char *body = NULL;
    cr_assert_eq(oa_build_chat_body("m", NULL, "3+4?", &sp, &body, err), PG_OK);
    oa_request reqs[STOP_REQS];
    for (int i = 0; i < STOP_REQS; i++)
        reqs[i] = (oa_request){.mode = "bf16", .effort = "low", .problem_id = "p", .sample = i,
                               .body_json = body};
    const pg_status st = oa_run(&ep, 1, reqs, STOP_REQS, count_and_stop, c, err);
    free(body);
    oa_endpoint_close(ep);
    return st;
}

Test(interrupt, stop_flag_set_before_the_run_sends_nothing)
{
    fake_server s;
    fs_init(&s);
    fs_route(&s, CHAT, (fs_reply[]){{200, OK_BODY, NULL, NULL, 0, 0}}, 1);
    cr_assert(fs_start(&s));
    volatile sig_atomic_t flag = SIGINT;
    stop_ctx c = {.flag = &flag};
    pg_err err = {0};
    cr_assert_eq(run_with_stop(&s, &flag, &c, &err), PG_ERR_INTERRUPTED);
    cr_assert_not_null(strstr(err.msg, "interrupted"), "%s", err.msg);
    cr_assert_eq(c.done, 0);
    cr_assert_eq(fs_hits(&s, CHAT), 0);
    fs_stop(&s);
}

Test(interrupt, stop_flag_mid_run_abandons_in_flight_and_starts_nothing_new)
{
    fake_server s;
    fs_init(&s);
    /* The first reply comes at once, every later one slowly: the stop lands
     * while the second request is in progress. */
    fs_route(&s, CHAT, (fs_reply[]){{200, OK_BODY, NULL, NULL, 0, 0},
                                    {200, OK_BODY, NULL, NULL, SLOW_REPLY_MS, 0}}, 2);
    cr_assert(fs_start(&s));
    volatile sig_atomic_t flag = 0;
    stop_ctx c = {.stop_at = 1, .flag = &flag};
    pg_err err = {0};
    cr_assert_eq(run_with_stop(&s, &flag, &c, &err), PG_ERR_INTERRUPTED);
    /* The request whose reply set the flag was reported; the one in flight
     * beside it was abandoned unreported, and nothing new was started. */
    cr_assert_eq(c.done, 1, "%s", err.msg);
    /* Nothing beyond the first two (the abandoned one may not have arrived). */
    cr_assert(fs_hits(&s, CHAT) >= 1 && fs_hits(&s, CHAT) <= STOP_IN_FLIGHT, "%d requests sent",
              fs_hits(&s, CHAT));
    cr_assert_not_null(strstr(err.msg, "1 in progress abandoned"), "%s", err.msg);
    fs_stop(&s);
}

Test(interrupt, stop_flag_ends_the_wait_for_a_server)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", fs_dead_port());
    volatile sig_atomic_t flag = SIGTERM;
    oa_options o = {.model = "m", .poll_s = 0.05, .stop = &flag};
    oa_endpoint *ep = NULL;
    pg_err err = {0};
    cr_assert_eq(oa_endpoint_open("bf16", url, NULL, NULL, &o, &ep, &err), PG_OK, "%s", err.msg);
    /* A 600 s deadline: only the flag can end it quickly. */
    cr_assert_eq(oa_wait_ready(ep, 600, &err), PG_ERR_INTERRUPTED, "%s", err.msg);
    oa_endpoint_close(ep);
}
