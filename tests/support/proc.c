/* proc: see proc.h. */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

void proc_close_from(int lowfd)
{
	long max = sysconf(_SC_OPEN_MAX);

#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned int)lowfd, ~0U, 0U) == 0)
		return;
#endif
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = lowfd; fd < max; fd++)
		close(fd);
}

void proc_reset_signals(void)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
}

pid_t proc_watchdog_start(const char *who, void (*teardown)(const void *arg), const void *arg)
{
	pid_t parent = getpid(), pid;
	sigset_t set;
	int sig = 0, fd;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	pid = fork();
	if (pid != 0) {
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		if (pid < 0) {
			fprintf(stderr, "%s: no watchdog: %s\n", who, strerror(errno));
			return 0;
		}
		return pid;
	}
	setsid();
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
	}
	proc_close_from(3);
	if (getppid() == parent) {
		while (sigwait(&set, &sig) != 0)
			;
	}
	if (sig != SIGUSR1)
		teardown(arg);
	_exit(0);
}

void proc_watchdog_stop(pid_t *pid)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGUSR1);
	while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
		;
	*pid = 0;
}
