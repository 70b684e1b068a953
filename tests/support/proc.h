/*
 * proc: what a test's child needs before it execs a server (a postmaster, a
 * service, a RabbitMQ node), and the watchdog that keeps such a server from
 * outliving its test run. Shared by the harness and the broker wrapper.
 */
#ifndef PGSAGA_TEST_PROC_H
#define PGSAGA_TEST_PROC_H

#include <sys/types.h>

/* Closes every descriptor from lowfd up: a server keeping meson's output
 * pipe open would make meson wait for it forever. */
void proc_close_from(int lowfd);

/* What a freshly exec'd program expects: no blocked or ignored signals left
 * over from Check, the watchdog or the caller. */
void proc_reset_signals(void);

/*
 * A server that runs in a session of its own (pg_ctl's postmaster, a RabbitMQ
 * node) is out of reach of meson's timeout and of Ctrl-C. proc_watchdog_start
 * forks a watchdog, in a session of its own too and with stdio on /dev/null,
 * which calls teardown(arg) and exits when the caller dies without
 * proc_watchdog_stop (PR_SET_PDEATHSIG turns that into SIGTERM) or when it
 * gets SIGTERM, SIGINT or SIGHUP. Returns its pid, or 0 when it could not be
 * forked (the reason goes to stderr, after who).
 */
pid_t proc_watchdog_start(const char *who, void (*teardown)(const void *arg), const void *arg);

/* Tells the watchdog the caller cleans up itself (SIGUSR1), waits for it and
 * sets *pid to 0. Does nothing when *pid is 0. */
void proc_watchdog_stop(pid_t *pid);

#endif
