/*
 * proc: what a test's child needs before it execs a server (a postmaster, a
 * service, a RabbitMQ node). Shared by the harness and the broker wrapper.
 */
#ifndef PGSAGA_TEST_PROC_H
#define PGSAGA_TEST_PROC_H

/* Closes every descriptor from lowfd up: a server keeping meson's output
 * pipe open would make meson wait for it forever. */
void proc_close_from(int lowfd);

/* What a freshly exec'd program expects: no blocked or ignored signals left
 * over from Check, the watchdog or the caller. */
void proc_reset_signals(void);

#endif
