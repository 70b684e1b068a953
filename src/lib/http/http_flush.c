/* http_flush: see http_flush.h. */
#include "http_flush.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "tls.h"

void http_flush_now(struct evhttp_connection *evcon)
{
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	struct evbuffer *out = bev ? bufferevent_get_output(bev) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	int n;

	/*
	 * nothing queued: not connected yet (evhttp writes after the connect);
	 * over TLS the socket takes only what OpenSSL wrote, which it does itself
	 */
	if (fd < 0 || tls_is_tls(bev) || evbuffer_get_length(out) == 0 ||
	    !(bufferevent_get_enabled(bev) & EV_WRITE))
		return;
	/* the bufferevent keeps its output's front frozen except while it writes */
	evbuffer_unfreeze(out, 1);
	n = evbuffer_write(out, fd);
	evbuffer_freeze(out, 1);
	if (n <= 0 || evbuffer_get_length(out) > 0)
		return; /* EAGAIN, an error, or a short write: the bufferevent goes on */
	/* all out: run evhttp's write callback now, as the bufferevent would */
	bufferevent_trigger(bev, EV_WRITE, 0);
}
