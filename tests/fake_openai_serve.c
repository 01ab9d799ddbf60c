/* fake_openai_serve.c: a loopback OpenAI-compatible server as a process of
 * its own (tests/fake_openai_server.h), for the tests that run precgate eval
 * from a script (tests/slurm_e2e.sh): serves model "m" and answers every chat
 * completion "… \boxed{ANSWER}", until SIGTERM or SIGINT.
 *
 *   fake_openai_serve ANSWER PORT_FILE
 *
 * writes the port it listens on into PORT_FILE (whole, renamed into place)
 * once it accepts connections. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_openai_server.h"

/* Longest answer and reply body. */
#define SERVE_ANSWER_MAX 32
#define SERVE_BODY_MAX 512

static volatile sig_atomic_t stop_flag;

/* SIGTERM/SIGINT: stop serving. */
static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || strlen(argv[1]) >= SERVE_ANSWER_MAX) {
        fprintf(stderr, "usage: fake_openai_serve ANSWER PORT_FILE\n");
        return 2;
    }
    static char body[SERVE_BODY_MAX];
    snprintf(body, sizeof body,
             "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
             "\"so \\\\boxed{%s}\"},\"finish_reason\":\"stop\"}],"
             "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}",
             argv[1]);
    const fs_reply chat = {200, body, NULL, NULL, 0, 0};
    static fake_server s;
    fs_init(&s);
    fs_route_openai(&s, &chat, 1);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (!fs_start(&s)) {
        fprintf(stderr, "fake_openai_serve: cannot listen on 127.0.0.1\n");
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", s.port) < 0 || fclose(f) != 0 ||
        rename(tmp, argv[2]) != 0) {
        fprintf(stderr, "fake_openai_serve: cannot write %s\n", argv[2]);
        fs_stop(&s);
        return 1;
    }
    while (!stop_flag) pause();
    fs_stop(&s);
    return 0;
}
