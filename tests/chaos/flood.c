/*
 * flood: hundreds of malformed requests to every endpoint of the three
 * services (docs/protocol.md, "Errors": "No input makes a service crash,
 * hang, leak or answer 500; a rejected request changes nothing").
 *
 * Two kinds of input:
 *
 *  - well-formed HTTP with bad content (JSON, UTF-8, types, ranges, ids,
 *    injection strings, headers, paths, methods): the answer must be a 4xx
 *    with the JSON error envelope {"error":{"code":…,"message":…}}, except a
 *    413, which the HTTP layer may answer bare;
 *  - broken HTTP framing (bad request lines and headers, lying
 *    Content-Length, bad chunking, garbage, truncated requests): evhttp
 *    answers these itself before any route runs, so any 4xx (or closing the
 *    connection) is accepted, and for a method token libevent does not know
 *    also its 501 (RFC 9110 §15.6.2 names 501 for an unrecognised method).
 *
 * Before and after, every table of the three schemas is counted and hashed
 * (after the system went idle), and must be identical; every service must
 * still answer /healthz and /readyz. The whole list is sent once in order
 * and then again from several threads at once.
 *
 * A raw socket client is used instead of http_do so that the framing can be
 * broken on purpose; every request carries Connection: close.
 */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "harness.h"
#include "jsonx.h"

#define FLOOD_THREADS 8
#define IO_TIMEOUT_MS 15000
#define MAX_FAILURES_SHOWN 40

static struct saga_env env;

/* --- the raw client ------------------------------------------------------ */

struct raw_resp {
	int status;      /* 0: no answer (connection closed or reset) */
	char *head;      /* status line and headers */
	char *body;
	size_t body_len;
	bool write_failed;
};

static void raw_resp_free(struct raw_resp *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

/*
 * Sends head (the request line and headers, verbatim) then body, reads the
 * answer until the server closes. When the server answers before the body
 * is sent (413 from Content-Length), the body is not sent at all, so the
 * answer is not lost to a reset.
 */
static void raw_send(int port, const char *head, size_t head_len, const char *body,
		     size_t body_len, struct raw_resp *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	size_t cap = 4096, len = 0, off;
	char *buf = malloc(cap);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int64_t deadline = clock_ms() + IO_TIMEOUT_MS;
	struct pollfd p;

	memset(out, 0, sizeof(*out));
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_ge(fd, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		      "connect to port %d: %s (service dead?)", port, strerror(errno));
	for (off = 0; off < head_len;) {
		ssize_t n = send(fd, head + off, head_len - off, MSG_NOSIGNAL);

		if (n <= 0) {
			out->write_failed = true;
			break;
		}
		off += (size_t)n;
	}
	if (body_len > 0 && !out->write_failed) {
		/*
		 * A body over the limit is refused from its Content-Length: wait
		 * for that answer instead of writing into a closing socket, whose
		 * reset could destroy the answer before it is read.
		 */
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		if (body_len <= 64 * 1024 || poll(&p, 1, 500) == 0) {
			for (off = 0; off < body_len;) {
				ssize_t n = send(fd, body + off, body_len - off, MSG_NOSIGNAL);

				if (n <= 0) {
					out->write_failed = true;
					break;
				}
				off += (size_t)n;
			}
		}
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		int64_t left = deadline - clock_ms();

		if (left <= 0)
			ck_abort_msg("no answer within %d ms from port %d to: %.120s", IO_TIMEOUT_MS,
				     port, head);
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		if (len + 4096 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		ssize_t n = recv(fd, buf + len, cap - len - 1, 0);

		if (n <= 0)
			break; /* EOF or reset */
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';

	char *sep = strstr(buf, "\r\n\r\n");
	int st = 0;

	if (len >= 12 && strncmp(buf, "HTTP/1.", 7) == 0 && sscanf(buf + 9, "%3d", &st) == 1 &&
	    sep) {
		out->status = st;
		out->head = strndup(buf, (size_t)(sep - buf));
		out->body_len = len - (size_t)(sep + 4 - buf);
		out->body = malloc(out->body_len + 1);
		ck_assert_ptr_nonnull(out->body);
		memcpy(out->body, sep + 4, out->body_len);
		out->body[out->body_len] = '\0';
	}
	free(buf);
}

/* --- requests ------------------------------------------------------------ */

enum kind {
	K_APP,  /* well-formed HTTP: 4xx + JSON error (bare 413 allowed) */
	K_HEAD, /* HEAD: what GET would answer (2xx-4xx), never a body */
	K_WIRE, /* broken framing: any 4xx or no answer */
	K_METHOD, /* unknown method token: 4xx, or evhttp's 501, or no answer */
};

struct req {
	enum kind kind;
	enum svc svc;
	char *head; /* full request head, ending with the blank line */
	size_t head_len;
	char *body; /* may be NULL */
	size_t body_len;
	char *label;
};

static struct req *reqs;
static size_t nreqs, capreqs;

static char *xstrdup_n(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	ck_assert_ptr_nonnull(p);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static struct req *push(enum kind kind, enum svc svc, const char *label)
{
	if (nreqs == capreqs) {
		capreqs = capreqs ? capreqs * 2 : 256;
		reqs = realloc(reqs, capreqs * sizeof(*reqs));
		ck_assert_ptr_nonnull(reqs);
	}
	struct req *r = &reqs[nreqs++];

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->svc = svc;
	r->label = strdup(label);
	return r;
}

/* The token header line for internal endpoints ("" for none). */
enum auth { AUTH_NONE, AUTH_OK, AUTH_WRONG, AUTH_LOWER_OK, AUTH_EMPTY, AUTH_BASIC };

static void auth_line(enum auth a, char *out, size_t n)
{
	switch (a) {
	case AUTH_NONE:
		out[0] = '\0';
		break;
	case AUTH_OK:
		snprintf(out, n, "Authorization: Bearer %s\r\n", env.token);
		break;
	case AUTH_LOWER_OK:
		snprintf(out, n, "authorization: bearer %s\r\n", env.token);
		break;
	case AUTH_WRONG:
		snprintf(out, n, "Authorization: Bearer %sx\r\n", env.token);
		break;
	case AUTH_EMPTY:
		snprintf(out, n, "Authorization: Bearer \r\n");
		break;
	case AUTH_BASIC:
		snprintf(out, n, "Authorization: Basic dXNlcjpwYXNz\r\n");
		break;
	}
}

/*
 * A well-formed request: method, path, extra header lines (each ending in
 * \r\n, may be ""), and a body of body_len bytes (NULL: no body and no
 * Content-Length).
 */
static void add_http(enum kind kind, enum svc svc, const char *method, const char *path,
		     const char *headers, const char *body, size_t body_len, const char *label)
{
	struct req *r = push(kind, svc, label);
	size_t cap = strlen(path) + strlen(headers) + 256;
	char *h = malloc(cap);

	ck_assert_ptr_nonnull(h);
	if (body)
		r->head_len = (size_t)snprintf(h, cap,
					       "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
					       "Content-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n",
					       method, path, headers, body_len);
	else
		r->head_len = (size_t)snprintf(h, cap,
					       "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
					       method, path, headers);
	r->head = h;
	if (body) {
		r->body = xstrdup_n(body, body_len);
		r->body_len = body_len;
	}
}

/* Verbatim bytes, framing and all. */
static void add_wire(enum kind kind, enum svc svc, const char *bytes, size_t len, const char *label)
{
	struct req *r = push(kind, svc, label);

	r->head = xstrdup_n(bytes, len);
	r->head_len = len;
}

#define S(lit) (lit), (sizeof(lit) - 1)

/* POST /orders with a key header line ("" for none) and a body. */
static void order(const char *key_line, const char *body, size_t len, const char *label)
{
	add_http(K_APP, SVC_ORCH, "POST", "/orders", key_line, body, len, label);
}

static int key_seq;

/* A fresh valid key: a request with it is refused for its body alone. */
static const char *fresh_key(void)
{
	static char line[64];

	snprintf(line, sizeof(line), "Idempotency-Key: flood-%d\r\n", ++key_seq);
	return line;
}

static const char valid_order[] =
	"{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";

/* Values that are never valid for any field of any body. */
static const char *const bad_any[] = {
	"null", "true", "false", "[]", "{}", "[1]", "{\"a\":1}", "\"\"",
	"\"\\u0000\"", "\"a\\u0000b\"",
};

/* Bad for an id ([A-Za-z0-9_-]{1,64}) */
static const char *const bad_ids[] = {
	"1",
	"\"\"",
	"\"a b\"",
	"\"c'; DROP TABLE payment.accounts;--\"",
	"\"' OR '1'='1\"",
	"\"c-1\\\"; DELETE FROM orchestrator.saga_instances; --\"",
	"\"$$; TRUNCATE inventory.stock; $$\"",
	"\"\\u00e9t\\u00e9\"",
	"\"\xc3\xa9t\xc3\xa9\"",
	"\"<script>alert(1)</script>\"",
	"\"../../etc/passwd\"",
	"\"%00\"",
	"\"a\\nb\"",
	"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", /* 65 */
	"\"\\ud83d\\ude00\"",
	"\"c.1\"",
	"\"c/1\"",
	"12.5",
};

/* Bad for qty (1..1000) */
static const char *const bad_qty[] = {
	"0", "-1", "1001", "-0", "1.0", "1e0", "1E2", "0.5", "\"1\"", "99999999999999999999",
	"9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e400", "-1e400",
	"1e-400", "NaN", "Infinity", "01", "+1", "0x10", "1.", ".5",
	"100000000000000000000000000000000000000000000000000000000000000000000000000000000",
};

/* Bad for amount (1..10^12) */
static const char *const bad_amount[] = {
	"0", "-1", "1000000000001", "-0", "1.5", "1e3", "\"100\"", "18446744073709551616",
	"9223372036854775807", "-9223372036854775808", "1e308", "2e308", "4.9e-324", "00",
	"1_000", "١٢", "1 2",
};

/* Bad for a UUID field */
static const char *const bad_uuids[] = {
	"\"\"",
	"\"6f9619ff8b86d011b42d00c04fc964ff\"",
	"\"{6f9619ff-8b86-d011-b42d-00c04fc964ff}\"",
	"\"6f9619ff-8b86-d011-b42d-00c04fc964f\"",
	"\"6f9619ff-8b86-d011-b42d-00c04fc964ff0\"",
	"\"6f9619ff-8b86-d011-b42d-00c04fc964fg\"",
	"\"6f9619ff_8b86_d011_b42d_00c04fc964ff\"",
	"\" 6f9619ff-8b86-d011-b42d-00c04fc964ff\"",
	"\"6f9619ff-8b86-d011-b42d-00c04fc964ff\\u0000\"",
	"\"'; DROP TABLE orchestrator.saga_instances;--\"",
	"\"00000000-0000-0000-0000-00000000000\\u0030x\"",
	"\"６f9619ff-8b86-d011-b42d-00c04fc964ff\"",
	"6",
	"null",
};

/* Bodies that are not JSON, or not an object, or not strict RFC 8259. */
static const char *const bad_json[] = {
	"",
	" ",
	"{",
	"}",
	"[",
	"{\"customerId\":\"c-1\",}",
	"{\"customerId\":\"c-1\" \"itemId\":\"A\"}",
	"{'customerId':'c-1'}",
	"{customerId:\"c-1\"}",
	"/* c */ {}",
	"{} // c",
	"{}{}",
	"{} x",
	"[] ",
	"\"just a string\"",
	"42",
	"null",
	"true",
	"NaN",
	"\xef\xbb\xbf{}",
	"{\"a\":\"\xff\"}",
	"{\"a\":\"\xc0\xaf\"}",
	"{\"a\":\"\xed\xa0\x80\"}",
	"{\"a\":\"\xf4\x90\x80\x80\"}",
	"{\"a\":\"\xe2\x82\"}",
	"{\"a\":\"\\ud800\"}",
	"{\"a\":\"\\udc00\\ud800\"}",
	"{\"a\":\"\\x41\"}",
	"{\"a\":\"tab\there\"}",
	"{\"a\":01}",
	"{\"a\":1.}",
	"{\"a\":-}",
	"{\"a\":1e}",
	"{\"a\":Infinity}",
	"{\"a\":undefined}",
	"{\"a\":True}",
	"{\"a\\u0000b\":1}",
	"{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100",
	"<order><qty>1</qty></order>",
	"customerId=c-1&itemId=A001&qty=1&amount=100",
	"\xff\xfe{",
	/* nesting deeper than 32 */
	("{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]"
	 "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"),
};

/* Replaces field's value in the valid order, or drops it (value NULL). */
static void order_with(const char *field, const char *value, char *out, size_t n)
{
	const char *fields[4] = { "customerId", "itemId", "qty", "amount" };
	const char *vals[4] = { "\"c-1\"", "\"A001\"", "1", "100" };
	size_t o = 0;

	o += (size_t)snprintf(out + o, n - o, "{");
	for (int i = 0; i < 4; i++) {
		const char *v = strcmp(fields[i], field) == 0 ? value : vals[i];

		if (!v)
			continue;
		o += (size_t)snprintf(out + o, n - o, "%s\"%s\":%s", o > 1 ? "," : "", fields[i], v);
	}
	snprintf(out + o, n - o, "}");
}

static void build_orders(void)
{
	char body[1024], label[160], line[400];

	/* Idempotency-Key: missing or invalid, each with a valid body */
	order("", S(valid_order), "order: no Idempotency-Key");
	static const char *const bad_keys[] = {
		"Idempotency-Key: \r\n",
		"Idempotency-Key: has space\r\n",
		"Idempotency-Key: tab\there\r\n",
		"Idempotency-Key: \xc3\xa9t\xc3\xa9\r\n",
		"Idempotency-Key: \x01\x02\r\n",
		"Idempotency-Key: \x7f\r\n",
		/* two lines, even equal ones (quotes are part of a key: "" is one) */
		"Idempotency-Key: k1\r\nIdempotency-Key: k2\r\n",
		"Idempotency-Key: k1\r\nIdempotency-Key: k1\r\n",
		"Idempotency-Key: a\x80\x62\r\n",
	};
	for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
		snprintf(label, sizeof(label), "order: bad key #%zu", i);
		order(bad_keys[i], S(valid_order), label);
	}
	/* 256 characters: one too many */
	memset(line, 'k', sizeof(line));
	memcpy(line, "Idempotency-Key: ", 17);
	memcpy(line + 17 + 256, "\r\n", 3);
	order(line, S(valid_order), "order: 256-character key");
	/* a key that reads like SQL, with a bad body */
	order("Idempotency-Key: '; DROP TABLE orchestrator.idempotency_records;--\r\n", S("{}"),
	      "order: injection key, empty object");

	/* bodies */
	for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i++) {
		snprintf(label, sizeof(label), "order: bad JSON #%zu", i);
		order(fresh_key(), bad_json[i], strlen(bad_json[i]), label);
	}
	order(fresh_key(), S("\x00{}"), "order: NUL before the body");
	order(fresh_key(), S("{}\x00"), "order: NUL after the body");
	order(fresh_key(), S("\xff\xfe{\x00}\x00"), "order: UTF-16 body");
	order(fresh_key(), S("{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}\x00"),
	      "order: valid order then NUL");
	static const char *const fields[] = { "customerId", "itemId", "qty", "amount" };
	for (size_t f = 0; f < 4; f++) {
		snprintf(label, sizeof(label), "order: %s missing", fields[f]);
		order_with(fields[f], NULL, body, sizeof(body));
		order(fresh_key(), body, strlen(body), label);
		for (size_t i = 0; i < sizeof(bad_any) / sizeof(bad_any[0]); i++) {
			snprintf(label, sizeof(label), "order: %s = %s", fields[f], bad_any[i]);
			order_with(fields[f], bad_any[i], body, sizeof(body));
			order(fresh_key(), body, strlen(body), label);
		}
	}
	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		for (size_t f = 0; f < 2; f++) {
			snprintf(label, sizeof(label), "order: %s = %s", fields[f], bad_ids[i]);
			order_with(fields[f], bad_ids[i], body, sizeof(body));
			order(fresh_key(), body, strlen(body), label);
		}
	}
	for (size_t i = 0; i < sizeof(bad_qty) / sizeof(bad_qty[0]); i++) {
		snprintf(label, sizeof(label), "order: qty = %.60s", bad_qty[i]);
		order_with("qty", bad_qty[i], body, sizeof(body));
		order(fresh_key(), body, strlen(body), label);
	}
	for (size_t i = 0; i < sizeof(bad_amount) / sizeof(bad_amount[0]); i++) {
		snprintf(label, sizeof(label), "order: amount = %s", bad_amount[i]);
		order_with("amount", bad_amount[i], body, sizeof(body));
		order(fresh_key(), body, strlen(body), label);
	}
	/* a valid order followed by a duplicate key that breaks it (last one wins) */
	order(fresh_key(), S("{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100,\"qty\":0}"),
	      "order: duplicate member, last invalid");

	/* sizes: 64 KiB of invalid JSON is read and refused; one byte more is refused unread */
	size_t big = 64 * 1024;
	char *huge = malloc(1024 * 1024);
	ck_assert_ptr_nonnull(huge);
	memset(huge, '[', 1024 * 1024);
	order(fresh_key(), huge, big, "order: 64 KiB of '['");
	memset(huge, ' ', 1024 * 1024);
	memcpy(huge, valid_order, sizeof(valid_order) - 1);
	order(fresh_key(), huge, big + 1, "order: valid order padded to 64 KiB + 1");
	order(fresh_key(), huge, 1024 * 1024, "order: valid order padded to 1 MiB");
	memset(huge, 'x', 1024 * 1024);
	order(fresh_key(), huge, 1024 * 1024, "order: 1 MiB of garbage");
	/* a 1 MiB string inside an otherwise valid order */
	snprintf(huge, 64, "{\"customerId\":\"");
	size_t o = strlen(huge);
	memset(huge + o, 'c', 1024 * 1024 - o - 64);
	o = 1024 * 1024 - 64;
	o += (size_t)snprintf(huge + o, 64, "\",\"itemId\":\"A001\",\"qty\":1,\"amount\":1}");
	order(fresh_key(), huge, o, "order: 1 MiB customerId");
	free(huge);

	/* GET /orders/{id} */
	static const char *const bad_paths[] = {
		"/orders/",
		"/orders/x",
		"/orders/6f9619ff8b86d011b42d00c04fc964ff",
		"/orders/%7B6f9619ff-8b86-d011-b42d-00c04fc964ff%7D",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964f",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964ff0",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964ff/",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964ff/history",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964fg",
		"/orders/%00",
		"/orders/..%2F..%2Fetc%2Fpasswd",
		"/orders/'%20OR%20'1'='1",
		"/orders/1;DROP%20TABLE%20x",
		"/orders/6f9619ff-8b86-d011-b42d-00c04fc964ff%20",
		"/orders/%C3%A9",
		"/orders/-1",
		"/orders/00000000-0000-0000-0000-000000000000", /* valid, unknown: 404 */
		"/orders/6F9619FF-8B86-D011-B42D-00C04FC964FF", /* valid, unknown: 404 */
	};
	for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
		snprintf(label, sizeof(label), "GET %s", bad_paths[i]);
		add_http(K_APP, SVC_ORCH, "GET", bad_paths[i], "", NULL, 0, label);
	}
	char longpath[5000];
	memcpy(longpath, "/orders/", 8);
	memset(longpath + 8, 'a', 4000);
	longpath[4008] = '\0';
	add_http(K_APP, SVC_ORCH, "GET", longpath, "", NULL, 0, "GET /orders/<4000 a>");
}

/* POST /events/{Type} */
static void build_events(void)
{
	static const char *const types[] = {
		"PaymentSucceeded", "PaymentFailed",	  "PaymentRefunded",
		"InventoryReserved", "InventoryReservationFailed", "InventoryReleased",
	};
	static const char ok_id[] = "\"6f9619ff-8b86-4011-b42d-00c04fc964ff\"";
	char path[128], body[512], label[200], auth[160];

	for (size_t t = 0; t < 6; t++) {
		snprintf(path, sizeof(path), "/events/%s", types[t]);
		snprintf(body, sizeof(body), "{\"eventId\":%s,\"sagaId\":%s}", ok_id, ok_id);
		/* no token, wrong tokens */
		for (enum auth a = AUTH_NONE; a <= AUTH_BASIC; a++) {
			if (a == AUTH_OK || a == AUTH_LOWER_OK)
				continue;
			auth_line(a, auth, sizeof(auth));
			snprintf(label, sizeof(label), "%s: auth %d", path, a);
			add_http(K_APP, SVC_ORCH, "POST", path, auth, body, strlen(body), label);
		}
		auth_line(t % 2 ? AUTH_LOWER_OK : AUTH_OK, auth, sizeof(auth));
		/* a valid event for a saga that does not exist: 404, nothing written */
		snprintf(label, sizeof(label), "%s: unknown saga", path);
		add_http(K_APP, SVC_ORCH, "POST", path, auth, body, strlen(body), label);
		for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i += 3) {
			snprintf(label, sizeof(label), "%s: bad JSON #%zu", path, i);
			add_http(K_APP, SVC_ORCH, "POST", path, auth, bad_json[i], strlen(bad_json[i]),
				 label);
		}
		for (size_t i = 0; i < sizeof(bad_uuids) / sizeof(bad_uuids[0]); i++) {
			snprintf(body, sizeof(body), "{\"eventId\":%s,\"sagaId\":%s}",
				 i % 2 ? ok_id : bad_uuids[i], i % 2 ? bad_uuids[i] : ok_id);
			snprintf(label, sizeof(label), "%s: bad %s %s", path,
				 i % 2 ? "sagaId" : "eventId", bad_uuids[i]);
			add_http(K_APP, SVC_ORCH, "POST", path, auth, body, strlen(body), label);
		}
		static const char *const bad_reasons[] = {
			"1", "null", "[]", "{}", "true", "\"\\u0000\"", "\"\xff\"",
			"\"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"
			"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"
			"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\"", /* 201 */
		};
		for (size_t i = 0; i < sizeof(bad_reasons) / sizeof(bad_reasons[0]); i++) {
			snprintf(body, sizeof(body), "{\"eventId\":%s,\"sagaId\":%s,\"reason\":%s}",
				 ok_id, ok_id, bad_reasons[i]);
			snprintf(label, sizeof(label), "%s: reason %.40s", path, bad_reasons[i]);
			add_http(K_APP, SVC_ORCH, "POST", path, auth, body, strlen(body), label);
		}
	}
	/* unknown types, with and without the token */
	static const char *const unknown[] = {
		"/events/", "/events/StepTimeout", "/events/paymentsucceeded", "/events/Foo",
		"/events/PaymentSucceeded/x", "/events/PaymentSucceeded%00", "/events/OrderPlaced",
		"/events/PayCommand",
	};
	snprintf(body, sizeof(body), "{\"eventId\":%s,\"sagaId\":%s}", ok_id, ok_id);
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		auth_line(AUTH_OK, auth, sizeof(auth));
		snprintf(label, sizeof(label), "POST %s (token)", unknown[i]);
		add_http(K_APP, SVC_ORCH, "POST", unknown[i], auth, body, strlen(body), label);
		snprintf(label, sizeof(label), "POST %s (no token)", unknown[i]);
		add_http(K_APP, SVC_ORCH, "POST", unknown[i], "", body, strlen(body), label);
	}
}

/* POST /commands/{Type} on payment and inventory, and POST /admin/faults */
static void build_commands(void)
{
	static const char ok_id[] = "\"6f9619ff-8b86-4011-b42d-00c04fc964ff\"";
	struct {
		enum svc svc;
		const char *type;
		const char *field[2];
		const char *ok[2];
	} cmds[] = {
		{ SVC_PAY, "PayCommand", { "customerId", "amount" }, { "\"c-1\"", "100" } },
		{ SVC_PAY, "RefundPaymentCommand", { NULL, NULL }, { NULL, NULL } },
		{ SVC_INV, "ReserveInventoryCommand", { "itemId", "qty" }, { "\"A001\"", "1" } },
		{ SVC_INV, "ReleaseInventoryCommand", { NULL, NULL }, { NULL, NULL } },
	};
	char path[128], body[1024], label[200], auth[160];

	for (size_t c = 0; c < 4; c++) {
		enum svc s = cmds[c].svc;

		snprintf(path, sizeof(path), "/commands/%s", cmds[c].type);
		/* a complete, valid command: only ever sent with a bad token */
		if (cmds[c].field[0])
			snprintf(body, sizeof(body), "{\"commandId\":%s,\"sagaId\":%s,\"%s\":%s,\"%s\":%s}",
				 ok_id, ok_id, cmds[c].field[0], cmds[c].ok[0], cmds[c].field[1],
				 cmds[c].ok[1]);
		else
			snprintf(body, sizeof(body), "{\"commandId\":%s,\"sagaId\":%s}", ok_id, ok_id);
		for (enum auth a = AUTH_NONE; a <= AUTH_BASIC; a++) {
			if (a == AUTH_OK || a == AUTH_LOWER_OK)
				continue;
			auth_line(a, auth, sizeof(auth));
			snprintf(label, sizeof(label), "%s: auth %d", path, a);
			add_http(K_APP, s, "POST", path, auth, body, strlen(body), label);
		}
		auth_line(c % 2 ? AUTH_LOWER_OK : AUTH_OK, auth, sizeof(auth));
		for (size_t i = 0; i < sizeof(bad_json) / sizeof(bad_json[0]); i += 2) {
			snprintf(label, sizeof(label), "%s: bad JSON #%zu", path, i);
			add_http(K_APP, s, "POST", path, auth, bad_json[i], strlen(bad_json[i]), label);
		}
		for (size_t i = 0; i < sizeof(bad_uuids) / sizeof(bad_uuids[0]); i++) {
			for (int which = 0; which < 2; which++) {
				const char *cid = which ? ok_id : bad_uuids[i];
				const char *sid = which ? bad_uuids[i] : ok_id;

				if (cmds[c].field[0])
					snprintf(body, sizeof(body),
						 "{\"commandId\":%s,\"sagaId\":%s,\"%s\":%s,\"%s\":%s}", cid,
						 sid, cmds[c].field[0], cmds[c].ok[0], cmds[c].field[1],
						 cmds[c].ok[1]);
				else
					snprintf(body, sizeof(body), "{\"commandId\":%s,\"sagaId\":%s}", cid,
						 sid);
				snprintf(label, sizeof(label), "%s: bad %s %s", path,
					 which ? "sagaId" : "commandId", bad_uuids[i]);
				add_http(K_APP, s, "POST", path, auth, body, strlen(body), label);
			}
		}
		if (!cmds[c].field[0])
			continue;
		/* the type's own fields: missing, wrong type, out of range */
		for (int f = 0; f < 2; f++) {
			const char *const *vals = f == 0 ? bad_ids : strcmp(cmds[c].field[1], "qty") == 0 ? bad_qty : bad_amount;
			size_t n = f == 0 ? sizeof(bad_ids) / sizeof(bad_ids[0])
				   : strcmp(cmds[c].field[1], "qty") == 0 ? sizeof(bad_qty) / sizeof(bad_qty[0])
									 : sizeof(bad_amount) / sizeof(bad_amount[0]);

			snprintf(body, sizeof(body), "{\"commandId\":%s,\"sagaId\":%s,\"%s\":%s}", ok_id,
				 ok_id, cmds[c].field[1 - f], cmds[c].ok[1 - f]);
			snprintf(label, sizeof(label), "%s: %s missing", path, cmds[c].field[f]);
			add_http(K_APP, s, "POST", path, auth, body, strlen(body), label);
			for (size_t i = 0; i < n; i++) {
				snprintf(body, sizeof(body),
					 "{\"commandId\":%s,\"sagaId\":%s,\"%s\":%s,\"%s\":%s}", ok_id, ok_id,
					 cmds[c].field[f], vals[i], cmds[c].field[1 - f], cmds[c].ok[1 - f]);
				snprintf(label, sizeof(label), "%s: %s = %.50s", path, cmds[c].field[f],
					 vals[i]);
				add_http(K_APP, s, "POST", path, auth, body, strlen(body), label);
			}
		}
	}
	/* unknown command types */
	static const char *const unknown[] = {
		"/commands/", "/commands/paycommand", "/commands/ReserveInventoryCommand",
		"/commands/Foo", "/commands/PayCommand/x", "/commands/../admin/faults",
	};
	snprintf(body, sizeof(body), "{\"commandId\":%s,\"sagaId\":%s}", ok_id, ok_id);
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		auth_line(AUTH_OK, auth, sizeof(auth));
		snprintf(label, sizeof(label), "payment POST %s", unknown[i]);
		/* ReserveInventoryCommand is unknown to payment, not to inventory */
		add_http(K_APP, SVC_PAY, "POST", unknown[i], auth, body, strlen(body), label);
		if (strstr(unknown[i], "Reserve"))
			continue;
		snprintf(label, sizeof(label), "inventory POST %s", unknown[i]);
		add_http(K_APP, SVC_INV, "POST", unknown[i], auth, body, strlen(body), label);
	}
	/* POST /admin/faults: every body here is refused, so no fault is switched on */
	static const char *const bad_faults[] = {
		"{\"failRate\":1.5}", "{\"failRate\":-0.1}", "{\"failRate\":\"0.5\"}",
		"{\"failRate\":true}", "{\"failRate\":null}", "{\"failRate\":1e400}",
		"{\"dropResponseRate\":2}", "{\"dropResponseRate\":[]}", "{\"delayMs\":600001}",
		"{\"delayMs\":-1}", "{\"delayMs\":\"10\"}", "{\"failRate\":0,\"delayMs\":-5}",
		"[]", "1", "{", "", "{\"failRate\":NaN}", "{\"failRate\":0.5,}",
	};
	for (int s = SVC_PAY; s <= SVC_INV; s++) {
		for (enum auth a = AUTH_NONE; a <= AUTH_BASIC; a++) {
			if (a == AUTH_OK || a == AUTH_LOWER_OK)
				continue;
			auth_line(a, auth, sizeof(auth));
			snprintf(label, sizeof(label), "svc %d /admin/faults: auth %d", s, a);
			add_http(K_APP, (enum svc)s, "POST", "/admin/faults", auth, S("{\"failRate\":1}"),
				 label);
		}
		auth_line(AUTH_OK, auth, sizeof(auth));
		for (size_t i = 0; i < sizeof(bad_faults) / sizeof(bad_faults[0]); i++) {
			snprintf(label, sizeof(label), "svc %d /admin/faults %s", s, bad_faults[i]);
			add_http(K_APP, (enum svc)s, "POST", "/admin/faults", auth, bad_faults[i],
				 strlen(bad_faults[i]), label);
		}
	}
	/* the orchestrator has no /admin/faults */
	auth_line(AUTH_OK, auth, sizeof(auth));
	add_http(K_APP, SVC_ORCH, "POST", "/admin/faults", auth, S("{\"failRate\":1}"),
		 "orchestrator /admin/faults");
}

/* Unknown paths and methods on every service. */
static void build_paths_methods(void)
{
	static const char *const paths[] = {
		"/", "/foo", "/order", "/ORDERS", "//orders", "/orders;x", "/orders%2F",
		"/healthz/x", "/metrics/x", "/readyz/?x=1&y", "/admin", "/admin/", "/admin/faults/x",
		"/commands", "/events", "/%00", "/%ff%fe", "/\xc3\xa9", "/..%2f..%2f",
		"/.env", "/wp-login.php",
	};
	static const char *const routes[SVC_COUNT][4] = {
		[SVC_ORCH] = { "/orders", "/orders/6f9619ff-8b86-4011-b42d-00c04fc964ff",
			       "/events/PaymentSucceeded", "/healthz" },
		[SVC_PAY] = { "/commands/PayCommand", "/admin/faults", "/readyz", "/metrics" },
		[SVC_INV] = { "/commands/ReleaseInventoryCommand", "/admin/faults", "/healthz",
			      "/metrics" },
	};
	/* methods evhttp knows; only GET (HEAD with it) and POST are routed anywhere */
	static const char *const methods[] = { "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE",
					       "CONNECT" };
	char label[200], auth[160];

	auth_line(AUTH_OK, auth, sizeof(auth));
	for (int s = 0; s < SVC_COUNT; s++) {
		for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
			snprintf(label, sizeof(label), "svc %d GET %s", s, paths[i]);
			add_http(K_APP, (enum svc)s, "GET", paths[i], "", NULL, 0, label);
			snprintf(label, sizeof(label), "svc %d POST %s", s, paths[i]);
			add_http(K_APP, (enum svc)s, "POST", paths[i], auth, S("{}"), label);
		}
		for (int r = 0; r < 4; r++) {
			for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
				snprintf(label, sizeof(label), "svc %d %s %s", s, methods[m], routes[s][r]);
				add_http(K_APP, (enum svc)s, methods[m], routes[s][r], auth, S("{}"),
					 label);
			}
			snprintf(label, sizeof(label), "svc %d HEAD %s", s, routes[s][r]);
			add_http(K_HEAD, (enum svc)s, "HEAD", routes[s][r], "", NULL, 0, label);
		}
		/* the wrong one of GET and POST on each route */
		add_http(K_APP, (enum svc)s, "POST", routes[s][3], auth, S("{}"), "POST on a GET route");
	}
	add_http(K_APP, SVC_ORCH, "GET", "/orders", "", NULL, 0, "GET /orders");
	add_http(K_APP, SVC_PAY, "GET", "/commands/PayCommand", auth, NULL, 0, "GET a command");
	add_http(K_APP, SVC_INV, "GET", "/admin/faults", auth, NULL, 0, "GET /admin/faults");
}

/* Broken framing, sent verbatim. */
static void build_wire(void)
{
	static const struct {
		enum kind kind;
		const char *bytes;
		size_t len;
	} w[] = {
		{ K_WIRE, S("GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nIdempotency-Key: w1\r\n\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\nIdempotency-Key: w2\r\n\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\nIdempotency-Key: w3\r\n\r\n") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\nIdempotency-Key: w4\r\n\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 60\r\nIdempotency-Key: w5\r\n\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nIdempotency-Key: w6\r\n\r\n{\"customerId\"") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: w7\r\n\r\nzz\r\n{}\r\n0\r\n\r\n") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: w8\r\n\r\n100000\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: w9\r\n\r\n2\r\n{}\r\n") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nIdempotency-Key: w10\r\n\r\n{}") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\nIdempotency-Key: w11\r\n\r\n2\r\n{}\r\n0\r\n\r\n") },
		{ K_WIRE, S("GET /healthz\r\n\r\n") },
		{ K_WIRE, S("GET /healthz HTTP/2.0\r\n\r\n") },
		{ K_WIRE, S("GET /healthz HTTP/1.1 extra\r\nHost: x\r\n\r\n") },
		{ K_WIRE, S("GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n") },
		{ K_WIRE, S("GET /heal\x00thz HTTP/1.1\r\nHost: x\r\n\r\n") },
		{ K_WIRE, S("GET /nowhere HTTP/1.1\nHost: x\n\n") },
		{ K_WIRE, S("\r\n\r\n") },
		{ K_WIRE, S("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") },
		{ K_WIRE, S("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") },
		{ K_WIRE, S("GET /healthz HTTP/1.1\r\nHost: x") },
		{ K_WIRE, S("POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: w12\r\nContent-Length: 5\r\n\r\n{}") },
		{ K_WIRE, S("") },
		{ K_METHOD, S("FOO /orders HTTP/1.1\r\nHost: x\r\n\r\n") },
		{ K_METHOD, S("PROPFIND /orders HTTP/1.1\r\nHost: x\r\n\r\n") },
		{ K_METHOD, S("get /healthz HTTP/1.1\r\nHost: x\r\n\r\n") },
	};
	char label[64];

	for (int s = 0; s < SVC_COUNT; s++) {
		for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
			snprintf(label, sizeof(label), "svc %d raw #%zu", s, i);
			add_wire(w[i].kind, (enum svc)s, w[i].bytes, w[i].len, label);
		}
	}
	/* headers and request lines larger than the limits */
	size_t big = 64 * 1024;
	char *b = malloc(big + 256);
	ck_assert_ptr_nonnull(b);
	int n = snprintf(b, 256, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(b + n, 'h', big);
	memcpy(b + n + big, "\r\n\r\n", 4);
	add_wire(K_WIRE, SVC_ORCH, b, (size_t)n + big + 4, "64 KiB header");
	n = snprintf(b, 256, "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nIdempotency-Key: ");
	memset(b + n, 'k', big);
	memcpy(b + n + big, "\r\n\r\n{}", 6);
	add_wire(K_WIRE, SVC_ORCH, b, (size_t)n + big + 6, "64 KiB Idempotency-Key");
	n = snprintf(b, 256, "GET /");
	memset(b + n, 'p', big);
	n += snprintf(b + n + big, 64, " HTTP/1.1\r\nHost: x\r\n\r\n");
	add_wire(K_WIRE, SVC_ORCH, b, (size_t)n + big, "64 KiB request line");
	n = snprintf(b, 256, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
	size_t o = (size_t)n;
	for (int i = 0; o + 16 < big; i++)
		o += (size_t)sprintf(b + o, "X-%d: y\r\n", i);
	memcpy(b + o, "\r\n", 2);
	add_wire(K_WIRE, SVC_PAY, b, o + 2, "thousands of headers");
	free(b);
}

/* --- running and judging ------------------------------------------------- */

struct outcome {
	int status;
	bool ok;
	int ms;
	char why[200];
};

static bool json_error_body(const struct raw_resp *r, char *why, size_t n)
{
	char err[128];
	struct json_object *o = jsonx_parse(r->body, r->body_len, err, sizeof(err)), *e, *c, *m;
	bool ok = o && json_object_object_get_ex(o, "error", &e) &&
		  json_object_is_type(e, json_type_object) &&
		  json_object_object_get_ex(e, "code", &c) && json_object_is_type(c, json_type_string) &&
		  json_object_get_string_len(c) > 0 && json_object_object_get_ex(e, "message", &m) &&
		  json_object_is_type(m, json_type_string);

	if (!ok)
		snprintf(why, n, "body is not the JSON error envelope: %.80s", r->body);
	json_object_put(o);
	return ok;
}

static void one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
}

static void judge_raw(const struct req *q, const struct raw_resp *r, struct outcome *out);

static void judge(const struct req *q, const struct raw_resp *r, struct outcome *out)
{
	judge_raw(q, r, out);
	one_line(out->why);
}

static void judge_raw(const struct req *q, const struct raw_resp *r, struct outcome *out)
{
	out->status = r->status;
	out->ok = false;
	out->why[0] = '\0';
	switch (q->kind) {
	case K_APP:
		if (r->status < 400 || r->status > 499) {
			snprintf(out->why, sizeof(out->why), "status %d (want 4xx JSON): %.80s",
				 r->status, r->body ? r->body : "");
			return;
		}
		if (r->status == 413) {
			out->ok = true; /* bare 413 from the HTTP layer is allowed */
			return;
		}
		out->ok = json_error_body(r, out->why, sizeof(out->why));
		return;
	case K_HEAD:
		out->ok = r->status >= 200 && r->status <= 499 && r->body_len == 0;
		if (!out->ok)
			snprintf(out->why, sizeof(out->why), "HEAD: status %d, %zu body bytes",
				 r->status, r->body_len);
		return;
	case K_WIRE:
		out->ok = r->status == 0 || (r->status >= 400 && r->status <= 499);
		if (!out->ok)
			snprintf(out->why, sizeof(out->why), "status %d (want 4xx or no answer)",
				 r->status);
		return;
	case K_METHOD:
		out->ok = r->status == 0 || r->status == 501 || (r->status >= 400 && r->status <= 499);
		if (!out->ok)
			snprintf(out->why, sizeof(out->why), "status %d", r->status);
		return;
	}
}

static struct outcome *outcomes;

static void run_one(size_t i)
{
	struct raw_resp r;
	int64_t t0 = clock_ms();

	raw_send(env.port[reqs[i].svc], reqs[i].head, reqs[i].head_len, reqs[i].body,
		 reqs[i].body_len, &r);
	judge(&reqs[i], &r, &outcomes[i]);
	outcomes[i].ms = (int)(clock_ms() - t0);
	raw_resp_free(&r);
}

struct worker {
	size_t from, step;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;

	for (size_t i = w->from; i < nreqs; i += w->step)
		run_one(i);
	return NULL;
}

/* Reports every failure at once: one run shows all that is wrong. */
static void check_outcomes(const char *round)
{
	size_t bad = 0, by_status[6] = { 0 }, slowest = 0;
	char msg[8192];
	size_t o = 0;

	for (size_t i = 0; i < nreqs; i++) {
		int st = outcomes[i].status;

		by_status[st == 0 ? 0 : st / 100 < 6 ? st / 100 : 5]++;
		if (outcomes[i].ms > outcomes[slowest].ms)
			slowest = i;
		if (outcomes[i].ok)
			continue;
		if (bad++ < MAX_FAILURES_SHOWN && o < sizeof(msg) - 400)
			o += (size_t)snprintf(msg + o, sizeof(msg) - o, "\n  [%s] %s", reqs[i].label,
					      outcomes[i].why);
	}
	printf("flood %s: %zu requests: %zu no answer, %zu 2xx, %zu 4xx, %zu 5xx; %zu unexpected;"
	       " slowest %d ms [%s]\n",
	       round, nreqs, by_status[0], by_status[2], by_status[4], by_status[5], bad,
	       outcomes[slowest].ms, reqs[slowest].label);
	fflush(stdout);
	ck_assert_msg(bad == 0, "%s: %zu of %zu requests answered wrongly:%s", round, bad, nreqs,
		      msg);
}

/* Row count and content hash of every table of the three schemas. */
static char *db_fingerprint(void)
{
	return env_sql(&env,
		       "SELECT string_agg(format('%s.%s %s', schemaname, tablename, "
		       "  (xpath('/row/x/text()', query_to_xml(format("
		       "    'SELECT count(*) || '' '' || md5(coalesce(string_agg(t::text, ''|'' ORDER BY t::text), '''')) AS x FROM %I.%I t',"
		       "    schemaname, tablename), false, true, '')))[1]::text), E'\\n' ORDER BY schemaname, tablename)"
		       "  FROM pg_tables WHERE schemaname IN ('orchestrator', 'payment', 'inventory')",
		       0, NULL);
}

static const char quiet_sql[] =
	"SELECT (SELECT count(*) FROM orchestrator.saga_instances"
	"         WHERE state NOT IN ('Completed', 'Failed', 'Compensated'))"
	"     + (SELECT count(*) FROM orchestrator.outbox_messages WHERE processed_at IS NULL)"
	"     + (SELECT count(*) FROM payment.outbox_messages WHERE processed_at IS NULL)"
	"     + (SELECT count(*) FROM inventory.outbox_messages WHERE processed_at IS NULL)";

static void assert_alive(void)
{
	struct http_resp r;

	for (int s = 0; s < SVC_COUNT; s++) {
		ck_assert_int_eq(http_do(env.port[s], "GET", "/healthz", NULL, NULL, 0, &r), 0);
		ck_assert_msg(r.status == 200, "service %d /healthz: %d", s, r.status);
		http_resp_free(&r);
		ck_assert_int_eq(http_do(env.port[s], "GET", "/readyz", NULL, NULL, 0, &r), 0);
		ck_assert_msg(r.status == 200, "service %d /readyz: %d", s, r.status);
		http_resp_free(&r);
		ck_assert_int_eq(http_do(env.port[s], "GET", "/metrics", NULL, NULL, 0, &r), 0);
		ck_assert_msg(r.status == 200, "service %d /metrics: %d", s, r.status);
		http_resp_free(&r);
	}
}

START_TEST(malformed_requests_change_nothing)
{
	char *before, *after;

	env_start_all(&env);
	/* Some real history first, so that every table has rows to protect. */
	free(env_sql(&env, "INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 2)", 0,
		     NULL));
	env_new_order(&env, "c-1", "A001", 2, 100, NULL);
	env_new_order(&env, "c-2", "A001", 1, 100, NULL);
	env_new_order(&env, "c-3", "A001", 1, 999999999999, NULL);
	ck_assert_msg(env_wait_sql(&env, quiet_sql, "0", 30000), "seed sagas did not finish");
	before = db_fingerprint();
	ck_assert_ptr_nonnull(before);

	build_orders();
	build_events();
	build_commands();
	build_paths_methods();
	build_wire();
	outcomes = calloc(nreqs, sizeof(*outcomes));
	ck_assert_ptr_nonnull(outcomes);

	for (size_t i = 0; i < nreqs; i++)
		run_one(i);
	check_outcomes("sequential");
	assert_alive();

	memset(outcomes, 0, nreqs * sizeof(*outcomes));
	pthread_t th[FLOOD_THREADS];
	struct worker w[FLOOD_THREADS];
	for (int t = 0; t < FLOOD_THREADS; t++) {
		w[t] = (struct worker){ (size_t)t, FLOOD_THREADS };
		ck_assert_int_eq(pthread_create(&th[t], NULL, worker_run, &w[t]), 0);
	}
	for (int t = 0; t < FLOOD_THREADS; t++)
		pthread_join(th[t], NULL);
	check_outcomes("concurrent");
	assert_alive();

	/* Nothing changed, and no fault was switched on by the /admin/faults cases. */
	ck_assert(env_wait_sql(&env, quiet_sql, "0", 10000));
	after = db_fingerprint();
	ck_assert_msg(strcmp(before, after) == 0, "the database changed:\nbefore:\n%s\nafter:\n%s",
		      before, after);
	for (int s = SVC_PAY; s <= SVC_INV; s++) {
		char auth[160];
		const char *h[2] = { auth, NULL };
		struct http_resp r;

		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", env.token);
		ck_assert_int_eq(http_do(env.port[s], "POST", "/admin/faults", h, "{}", 2, &r), 0);
		ck_assert_int_eq(r.status, 200);
		ck_assert_msg(strstr(r.body, "\"failRate\":0,") && strstr(r.body, "\"delayMs\":0,") &&
				      strstr(r.body, "\"dropResponseRate\":0}"),
			      "faults changed: %s", r.body);
		http_resp_free(&r);
	}
	long tables = 0, rows = 0;
	for (char *line = before; line && *line;) {
		char *nl = strchr(line, '\n');
		char *sp = strchr(line, ' ');

		tables++;
		if (sp)
			rows += atol(sp + 1);
		line = nl ? nl + 1 : NULL;
	}
	printf("flood: %ld tables with %ld rows unchanged\n", tables, rows);
	ck_assert_int_ge(tables, 12);

	/*
	 * A clean exit after the flood: SIGTERM drains and exits 0, and in a
	 * sanitizer build LeakSanitizer runs at exit and fails the exit
	 * status if the flood leaked.
	 */
	for (int s = 0; s < SVC_COUNT; s++) {
		ck_assert_msg(env.pid[s] > 0 && kill(env.pid[s], 0) == 0, "service %d is gone", s);
		int st = env_stop(&env, (enum svc)s, SIGTERM);

		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "service %d did not exit cleanly after the flood (status 0x%x; see its log)",
			      s, st);
	}
	free(before);
	free(after);
}
END_TEST

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

static Suite *flood_suite(void)
{
	Suite *s = suite_create("flood");
	TCase *tc = tcase_create("malformed");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, malformed_requests_change_nothing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(flood_suite());
}
