/*
 * interrupt.h: SIGINT and SIGTERM as a request to stop cleanly.
 *
 * interrupt_install() makes the first SIGINT or SIGTERM set a flag (the
 * signal's number) instead of killing the process; work loops poll
 * interrupt_flag() (openai_client's oa_options.stop, the sweep's layer loop),
 * stop starting new work, finish the database writes in flight, mark their
 * run 'interrupted' and exit with interrupt_exit_code(): 130 for SIGINT, 143
 * for SIGTERM (the shell's 128 + signal number).
 *
 * A second signal kills at once: the handler is installed with SA_RESETHAND,
 * so after the first delivery each of the two signals has its default action
 * again (a second Ctrl-C ends a stop that hangs; the run then reads as
 * 'interrupted' through its dead pid, store_probe_process). SA_RESTART keeps
 * the writes in flight from failing with EINTR.
 */
#ifndef PG_INTERRUPT_H
#define PG_INTERRUPT_H

#include <signal.h>

/* Installs the SIGINT and SIGTERM handlers (sigaction; safe to call again). */
void interrupt_install(void);

/* 0 until a handled signal arrives, then the first one's number. */
int interrupt_signal(void);

/* The flag itself, for loops that poll it (nonzero: stop); never NULL. */
const volatile sig_atomic_t *interrupt_flag(void);

/* "SIGINT", "SIGTERM", ... for a signal number; "signal N" for others
 * (a static buffer, overwritten by the next such call); never NULL. */
const char *interrupt_signal_name(int sig);

/* The exit status of a command stopped by sig: 128 + sig (130, 143). */
int interrupt_exit_code(int sig);

#endif /* PG_INTERRUPT_H */
