/* interrupt.c: SIGINT/SIGTERM set a flag for a clean stop; a second one kills (see interrupt.h). */
#include "interrupt.h"

#include <stdio.h>
#include <string.h>

/* The shell's exit status of a process killed by signal N is this plus N. */
#define INTERRUPT_EXIT_BASE 128
/* Room for "signal N". */
#define INTERRUPT_NAME_MAX 32

/* The first handled signal's number; 0 until one arrives. */
static volatile sig_atomic_t caught;

/* Records the first signal (async-signal-safe: one sig_atomic_t store). */
static void on_signal(int sig)
{
    if (caught == 0) caught = sig;
}

void interrupt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int interrupt_signal(void)
{
    return (int)caught;
}

const volatile sig_atomic_t *interrupt_flag(void)
{
    return &caught;
}

const char *interrupt_signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGKILL: return "SIGKILL";
    default: break;
    }
    static char name[INTERRUPT_NAME_MAX];
    snprintf(name, sizeof name, "signal %d", sig);
    return name;
}

int interrupt_exit_code(int sig)
{
    return INTERRUPT_EXIT_BASE + sig;
}
