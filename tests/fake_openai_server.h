/*
 * fake_openai_server.h: a small threaded HTTP/1.1 server on 127.0.0.1 with
 * scripted replies, for testing the OpenAI client over real loopback HTTP.
 *
 * Header-only (static functions) because CMake links each test_*.c with
 * testutil.c alone. Usage:
 *     fake_server s;
 *     fs_init(&s);
 *     fs_route(&s, "/health", (fs_reply[]){{503, ...}, {200, ...}}, 2);
 *     fs_start(&s);            // binds an ephemeral port: s.port
 *     ...
 *     fs_stop(&s);
 * Each route answers its replies in order and repeats the last one; an
 * unknown path gets 404 {"detail":"Not Found"}. Every connection carries one
 * request (replies say Connection: close) and runs on its own thread. The
 * server logs each request (method, path, headers, body) and counts the
 * requests in service at once: from accept until just before the reply is
 * written, so a client's next request can never overlap the count of the
 * one it waited for. fs_set_sse_gap() makes every text/event-stream reply a
 * slow stream: one event at a time, a fixed gap apart; fs_set_sse_queue()
 * holds its body back after the headers (the server's queue).
 */
#ifndef PG_FAKE_OPENAI_SERVER_H
#define PG_FAKE_OPENAI_SERVER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Most routes, replies per route, and logged requests. */
#define FS_MAX_ROUTES 8
#define FS_MAX_REPLIES 16
#define FS_MAX_LOG 256
/* Largest request accepted (head and body). */
#define FS_MAX_REQUEST (1 << 20)
/* How often the accept loop looks at the stop flag. */
#define FS_ACCEPT_POLL_MS 20

/* One scripted reply. status 0 closes the connection without a reply. */
typedef struct fs_reply {
    int status;
    const char *body;          /* NULL: empty */
    const char *content_type;  /* NULL: application/json */
    const char *headers;       /* extra header lines, each ending "\r\n" */
    int delay_ms;              /* before replying (cut short by fs_stop) */
    int hold_ms;               /* after the body, before closing; the reply then
                                  has no Content-Length (ends at the close) */
} fs_reply;

/* A computed reply: the body (malloc'd; the server frees it) answering
 * request body (len bytes) on path, with its status in *status (200 unless
 * set). NULL closes the connection without a reply. */
typedef char *(*fs_handler_fn)(void *ctx, const char *path, const char *body, size_t len,
                               int *status);

/* One request as received. */
typedef struct fs_logged {
    char method[16];
    char path[256];
    char *head;   /* request line and headers */
    char *body;
} fs_logged;

typedef struct fake_server {
    int fd, port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, started;
    int threads;     /* connection threads alive */
    int active;      /* requests in service now */
    int max_active;  /* most requests in service at once */
    struct {
        char path[128];
        fs_reply replies[FS_MAX_REPLIES];
        int n, next, hits;
        fs_handler_fn handler;   /* set: replies are computed, not scripted */
        void *handler_ctx;
    } routes[FS_MAX_ROUTES];
    int n_routes;
    int sse_gap_ms;  /* > 0: event-stream bodies go out one event at a time */
    int sse_queue_ms; /* > 0: event-stream bodies wait this long after their headers */
    fs_logged log[FS_MAX_LOG];
    int n_log;
} fake_server;

/* Zeroes s and prepares its lock; call before fs_route. */
static inline void fs_init(fake_server *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

/* Scripts path to answer replies[0..n-1] in order, then repeat the last.
 * The reply strings must outlive the server. Replaces an earlier script. */
static inline void fs_route(fake_server *s, const char *path, const fs_reply *replies, int n)
{
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->n_routes && strcmp(s->routes[i].path, path) != 0) i++;
    if (i == s->n_routes && s->n_routes < FS_MAX_ROUTES) s->n_routes++;
    if (i < FS_MAX_ROUTES && n > 0 && n <= FS_MAX_REPLIES) {
        snprintf(s->routes[i].path, sizeof s->routes[i].path, "%s", path);
        memcpy(s->routes[i].replies, replies, (size_t)n * sizeof *replies);
        s->routes[i].n = n;
        s->routes[i].next = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Answers path by handler(ctx, ...) instead of a script (for replies that
 * depend on the request: teacher-forced scoring). Replaces an earlier route. */
static inline void fs_handle(fake_server *s, const char *path, fs_handler_fn handler, void *ctx)
{
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->n_routes && strcmp(s->routes[i].path, path) != 0) i++;
    if (i == s->n_routes && s->n_routes < FS_MAX_ROUTES) s->n_routes++;
    if (i < FS_MAX_ROUTES) {
        snprintf(s->routes[i].path, sizeof s->routes[i].path, "%s", path);
        s->routes[i].handler = handler;
        s->routes[i].handler_ctx = ctx;
        s->routes[i].n = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* From now on, sends each text/event-stream body one event (up to and with
 * its "\n\n") at a time, gap_ms apart, without Content-Length (the reply
 * ends at the close): a slow but live stream. 0 turns it off. */
static inline void fs_set_sse_gap(fake_server *s, int gap_ms)
{
    pthread_mutex_lock(&s->mu);
    s->sse_gap_ms = gap_ms;
    pthread_mutex_unlock(&s->mu);
}

/* From now on, holds each text/event-stream body back queue_ms after its
 * headers: a request queued in a loaded vLLM, which sends its 200 headers at
 * once and its first event only once the request is scheduled. 0 turns it
 * off. */
static inline void fs_set_sse_queue(fake_server *s, int queue_ms)
{
    pthread_mutex_lock(&s->mu);
    s->sse_queue_ms = queue_ms;
    pthread_mutex_unlock(&s->mu);
}

/* Scripts s as a ready OpenAI-compatible server serving model "m": /health
 * 200, /v1/models listing m, and chat completions answering chat[0..n-1]. */
static inline void fs_route_openai(fake_server *s, const fs_reply *chat, int n)
{
    static const fs_reply models = {200, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL,
                                    NULL, 0, 0};
    static const fs_reply health = {200, "", NULL, NULL, 0, 0};
    fs_route(s, "/health", &health, 1);
    fs_route(s, "/v1/models", &models, 1);
    fs_route(s, "/v1/chat/completions", chat, n);
}

/* Sleeps ms milliseconds or until fs_stop; call with s->mu held. */
static inline void fs_wait_locked(fake_server *s, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {}
}

/* Writes all n bytes of p to fd (ignoring a client that went away). */
static inline void fs_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

/* The reason phrase of a status. */
static inline const char *fs_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

/* The value of header name (case-insensitive) in head, copied into out. */
static inline bool fs_header(const char *head, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p != NULL; p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            p += n + 1;
            while (*p == ' ') p++;
            size_t len = strcspn(p, "\r\n");
            snprintf(out, size, "%.*s", (int)(len < size ? len : size - 1), p);
            return true;
        }
    }
    return false;
}

typedef struct fs_conn {
    fake_server *s;
    int fd;
} fs_conn;

/* Serves one connection: reads one request, logs it, answers its script. */
static inline void *fs_conn_main(void *arg)
{
    fs_conn c = *(fs_conn *)arg;
    free(arg);
    fake_server *s = c.s;
    char *req = malloc(FS_MAX_REQUEST + 1);
    size_t len = 0, head_len = 0, body_len = 0;
    bool counted = true, complete = false, sent_continue = false;
    while (req && len < FS_MAX_REQUEST) {
        ssize_t k = recv(c.fd, req + len, FS_MAX_REQUEST - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        req[len] = '\0';
        if (head_len == 0) {
            char *e = strstr(req, "\r\n\r\n");
            if (e == NULL) continue;
            head_len = (size_t)(e - req) + 4;
            char v[64];
            if (fs_header(req, "Content-Length", v, sizeof v)) body_len = strtoul(v, NULL, 10);
            if (!sent_continue && fs_header(req, "Expect", v, sizeof v) &&
                strcasecmp(v, "100-continue") == 0) {
                fs_send_all(c.fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
                sent_continue = true;
            }
        }
        if (head_len && len >= head_len + body_len) {
            complete = true;
            break;
        }
    }

    fs_reply r = {404, "{\"detail\":\"Not Found\"}", NULL, NULL, 0, 0};
    char *computed = NULL;
    if (complete) {
        fs_logged lg = {{0}, {0}, NULL, NULL};
        sscanf(req, "%15s %255s", lg.method, lg.path);
        lg.path[strcspn(lg.path, "?")] = '\0';
        lg.head = strndup(req, head_len);
        lg.body = strndup(req + head_len, body_len);
        pthread_mutex_lock(&s->mu);
        if (s->n_log < FS_MAX_LOG) s->log[s->n_log++] = lg;
        else free(lg.head), free(lg.body);
        fs_handler_fn handler = NULL;
        void *handler_ctx = NULL;
        for (int i = 0; i < s->n_routes; i++)
            if (strcmp(s->routes[i].path, lg.path) == 0 && s->routes[i].handler != NULL) {
                handler = s->routes[i].handler;
                handler_ctx = s->routes[i].handler_ctx;
                s->routes[i].hits++;
            } else if (strcmp(s->routes[i].path, lg.path) == 0) {
                int k = s->routes[i].next < s->routes[i].n ? s->routes[i].next : s->routes[i].n - 1;
                r = s->routes[i].replies[k];
                s->routes[i].next++;
                s->routes[i].hits++;
            }
        if (handler != NULL) {
            pthread_mutex_unlock(&s->mu);
            int status = 200;
            computed = handler(handler_ctx, lg.path, req + head_len, body_len, &status);
            r = (fs_reply){computed ? status : 0, computed, NULL, NULL, 0, 0};
            pthread_mutex_lock(&s->mu);
        }
        if (r.delay_ms > 0) fs_wait_locked(s, r.delay_ms);
        const bool sse = r.content_type && strcmp(r.content_type, "text/event-stream") == 0;
        const int gap_ms = sse ? s->sse_gap_ms : 0, queue_ms = sse ? s->sse_queue_ms : 0;
        s->active--;
        counted = false;
        pthread_mutex_unlock(&s->mu);

        if (r.status != 0) {
            const char *body = r.body ? r.body : "";
            char head[1024], cl[64] = "";
            if (r.hold_ms <= 0 && gap_ms <= 0)
                snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", strlen(body));
            int hn = snprintf(head, sizeof head,
                              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%sConnection: close\r\n\r\n",
                              r.status, fs_reason(r.status),
                              r.content_type ? r.content_type : "application/json", cl,
                              r.headers ? r.headers : "");
            fs_send_all(c.fd, head, (size_t)hn);
            if (queue_ms > 0) {
                pthread_mutex_lock(&s->mu);
                fs_wait_locked(s, queue_ms);
                pthread_mutex_unlock(&s->mu);
            }
            const char *rest = body;  /* what is left to send */
            while (gap_ms > 0 && *rest != '\0') {
                const char *end = strstr(rest, "\n\n");
                const size_t n = end ? (size_t)(end - rest) + 2 : strlen(rest);
                fs_send_all(c.fd, rest, n);
                rest += n;
                pthread_mutex_lock(&s->mu);
                if (*rest != '\0') fs_wait_locked(s, gap_ms);
                pthread_mutex_unlock(&s->mu);
            }
            fs_send_all(c.fd, rest, strlen(rest));
            if (r.hold_ms > 0) {
                pthread_mutex_lock(&s->mu);
                fs_wait_locked(s, r.hold_ms);
                pthread_mutex_unlock(&s->mu);
            }
        }
    }
    free(req);
    free(computed);
    close(c.fd);
    pthread_mutex_lock(&s->mu);
    if (counted) s->active--;
    s->threads--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Accepts connections until fs_stop, one detached thread each. */
static inline void *fs_accept_main(void *arg)
{
    fake_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, FS_ACCEPT_POLL_MS) <= 0) continue;
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) continue;
        fs_conn *c = malloc(sizeof *c);
        pthread_t t;
        pthread_mutex_lock(&s->mu);
        s->threads++;
        if (++s->active > s->max_active) s->max_active = s->active;
        pthread_mutex_unlock(&s->mu);
        if (c) *c = (fs_conn){s, fd};
        if (c == NULL || pthread_create(&t, NULL, fs_conn_main, c) != 0) {
            free(c);
            close(fd);
            pthread_mutex_lock(&s->mu);
            s->threads--;
            s->active--;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

/* Listens on 127.0.0.1 at an ephemeral port (s->port) and starts serving;
 * false when the socket cannot be set up. */
static inline bool fs_start(fake_server *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 128) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&a, &al) != 0)
        return false;
    s->port = ntohs(a.sin_port);
    s->started = pthread_create(&s->acceptor, NULL, fs_accept_main, s) == 0;
    return s->started;
}

/* Stops accepting, cuts delays short, waits for every connection thread,
 * and frees the log. */
static inline void fs_stop(fake_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->acceptor, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->threads > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->fd >= 0) close(s->fd);
    for (int i = 0; i < s->n_log; i++) free(s->log[i].head), free(s->log[i].body);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* Requests path has received so far. */
static inline int fs_hits(fake_server *s, const char *path)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_routes; i++)
        if (strcmp(s->routes[i].path, path) == 0) n = s->routes[i].hits;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Most requests that were in service at once. */
static inline int fs_max_active(fake_server *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->max_active;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* The k-th request (from 0) logged for path, or NULL. Entries never change
 * once logged, so the pointer stays valid until fs_stop. */
static inline const fs_logged *fs_request(fake_server *s, const char *path, int k)
{
    const fs_logged *found = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_log && found == NULL; i++)
        if (strcmp(s->log[i].path, path) == 0 && k-- == 0) found = &s->log[i];
    pthread_mutex_unlock(&s->mu);
    return found;
}

/* "http://127.0.0.1:<port>" into buf. */
static inline void fs_url(const fake_server *s, char *buf, size_t size)
{
    snprintf(buf, size, "http://127.0.0.1:%d", s->port);
}

/* A loopback port that nothing listens on (bound, then closed), or -1. */
static inline int fs_dead_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* A loopback port whose server is stopped (SIGSTOP): a child process holds
 * the listening socket and is stopped, so the kernel completes every TCP
 * handshake and takes the request into its buffers, and nothing ever
 * answers. The child's pid goes to *pid (kill it with SIGKILL and reap it);
 * -1 when it cannot be set up. */
static inline int fs_stopped_server(pid_t *pid)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    *pid = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0 || (*pid = fork()) < 0) {
        close(fd);
        return -1;
    }
    if (*pid == 0) {  /* the server: stops itself, holding the socket */
        for (;;) raise(SIGSTOP);
    }
    close(fd);  /* the child's copy keeps it listening */
    int st;
    waitpid(*pid, &st, WUNTRACED);  /* returns once the child is stopped */
    return ntohs(a.sin_port);
}

/* A loopback port whose listen queue is full: nothing accepts, and the
 * kernel drops every further SYN, so a client's connect hangs (its SYN is
 * retransmitted after 1 s, 3 s, ...). The listening socket and the sockets
 * that fill its queue go to fds[0..FS_FULL_BACKLOG_FDS-1] (close them);
 * -1 when it cannot be set up. */
#define FS_FULL_BACKLOG_FDS 3
static inline int fs_full_backlog_port(int fds[FS_FULL_BACKLOG_FDS])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    for (int i = 0; i < FS_FULL_BACKLOG_FDS; i++) fds[i] = -1;
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0 || bind(fds[0], (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fds[0], 0) != 0 || getsockname(fds[0], (struct sockaddr *)&a, &al) != 0)
        return -1;
    /* backlog 0 queues one connection (Linux: full once more than the
     * backlog wait); the second filler's SYN is already dropped. */
    for (int i = 1; i < FS_FULL_BACKLOG_FDS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] < 0) return -1;
        if (connect(fds[i], (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)
            return -1;
    }
    return ntohs(a.sin_port);
}

#endif /* PG_FAKE_OPENAI_SERVER_H */
