/* proc: see proc.h. */
#define _GNU_SOURCE
#include "proc.h"

#include <signal.h>
#include <sys/syscall.h>
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
