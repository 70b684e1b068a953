/*
 * http_flush: write an evhttp connection's pending bytes now.
 *
 * evhttp queues a reply or a request on the connection's bufferevent,
 * which writes it only after the next epoll_wait reports the socket
 * writable: per message two more epoll_ctl (write interest on, then off)
 * and one more trip through the loop. http_flush_now writes the bytes at
 * once and, when all of them went out, tells evhttp the write is done the
 * way the bufferevent would, so the same evhttp code runs, one turn sooner.
 *
 * Call it right after evhttp_send_reply / evhttp_make_request, from a
 * callback of our own (a database result, a timer) and never from inside
 * one of evhttp's (a route handler): evhttp may finish, and for
 * "Connection: close" free, the connection inside this call, so evcon is
 * invalid afterwards. Errors and short writes are left to the bufferevent,
 * which meets them again on its next write and reports them as before.
 */
#ifndef PGSAGA_HTTP_FLUSH_H
#define PGSAGA_HTTP_FLUSH_H

struct evhttp_connection;

void http_flush_now(struct evhttp_connection *evcon);

#endif
