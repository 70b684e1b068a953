/*
 * tls.c on a real loopback TCP connection: both ends of a handshake made
 * with tls_connect_bev and tls_accept_bev run with TCP_NODELAY (without it
 * evhttp's head and body, two TLS records, stall on Nagle and the peer's
 * delayed ACK, 40 ms a message). Certificates from scripts/certs in a
 * temporary directory.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "suites.h"
#include "tls.h"

static int done; /* handshakes finished, either end */

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	if (what & BEV_EVENT_CONNECTED)
		done++;
	else
		ck_abort_msg("handshake failed (events 0x%x)", what);
}

static int nodelay(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	return v;
}

START_TEST(handshake_sets_nodelay_both_ends)
{
	const char *src = getenv("SAGA_SOURCE_DIR");
	char dir[] = "/tmp/pgsaga-unit-tls-XXXXXX", cmd[1024], crt[128], key[128], ca[128];
	char err[256] = "";
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	struct tls_files f;
	struct tls *t;
	struct event_base *base;
	struct bufferevent *cli, *srv;
	struct timeval limit = { 20, 0 }; /* a hang guard, not a measurement */
	int lfd, cfd, sfd;

	ck_assert_msg(src != NULL, "SAGA_SOURCE_DIR is not set (run through meson test)");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "'%s/scripts/certs' ca %s >/dev/null && '%s/scripts/certs' issue %s svc >/dev/null",
		 src, dir, src, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(crt, sizeof(crt), "%s/svc.crt", dir);
	snprintf(key, sizeof(key), "%s/svc.key", dir);
	snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
	f = (struct tls_files){ .cert = crt, .key = key, .ca = ca, .client_ca = ca };
	t = tls_new(&f, err, sizeof(err));
	ck_assert_msg(t != NULL, "%s", err);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);
	sfd = accept(lfd, NULL, NULL);
	ck_assert_int_ge(sfd, 0);
	ck_assert_int_eq(nodelay(cfd), 0); /* the kernel's default: the test can fail */
	ck_assert_int_eq(nodelay(sfd), 0);
	evutil_make_socket_nonblocking(cfd);
	evutil_make_socket_nonblocking(sfd);

	/* the fds set afterwards, as evhttp does: the handshakes start then */
	base = event_base_new();
	srv = tls_accept_bev(t, base);
	cli = tls_connect_bev(t, base, "127.0.0.1", NULL);
	ck_assert_ptr_nonnull(srv);
	ck_assert_ptr_nonnull(cli);
	bufferevent_setcb(srv, NULL, NULL, event_cb, NULL);
	bufferevent_setcb(cli, NULL, NULL, event_cb, NULL);
	ck_assert_int_eq(bufferevent_setfd(srv, sfd), 0);
	ck_assert_int_eq(bufferevent_setfd(cli, cfd), 0);
	bufferevent_enable(srv, EV_READ | EV_WRITE);
	bufferevent_enable(cli, EV_READ | EV_WRITE);
	event_base_loopexit(base, &limit);
	while (done < 2 && event_base_loop(base, EVLOOP_ONCE) == 0 &&
	       !event_base_got_exit(base))
		;
	ck_assert_int_eq(done, 2);
	ck_assert_int_eq(nodelay(cfd), 1);
	ck_assert_int_eq(nodelay(sfd), 1);

	bufferevent_free(cli); /* BEV_OPT_CLOSE_ON_FREE: closes the fds */
	bufferevent_free(srv);
	event_base_free(base);
	tls_free(t);
	close(lfd);
	snprintf(cmd, sizeof(cmd), "rm -rf -- %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *tls_suite(void)
{
	Suite *s = suite_create("tls");
	TCase *tc = tcase_create("sockets");

	tcase_add_test(tc, handshake_sets_nodelay_both_ends);
	suite_add_tcase(s, tc);
	return s;
}
