/*
 * The edges of HTTP and JSON: bad input is a 4xx with a JSON error and
 * changes nothing; framing a proxy could read another way, control bytes
 * in headers and a NUL in a query are refused, so are a missing or second
 * Host and a request target with a space; methods are answered as RFC 9110
 * says; numbers that do not fit and a NUL in an id are invalid fields;
 * every answer is compact JSON with one Date.
 */
#include <arpa/inet.h>
#include <check.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "jsonx.h"
#include "suites.h"
#include "uuid.h"

/*
 * Sends raw bytes on one connection and reads until the server closes it
 * (or 10 s pass). Returns how many responses came back; the first one's
 * status is in *status, and all the server sent, status lines and headers
 * included, in *text (caller frees).
 */
static int raw_exchange(const char *bytes, size_t len, int *status, char **text)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)env.port[SVC_ORCH]) };
	struct timeval tv = { 10, 0 };
	size_t cap = 1 << 16, got = 0;
	char *buf = calloc(1, cap + 1);
	int fd = socket(AF_INET, SOCK_STREAM, 0), n = 0;
	bool closed = false;

	ck_assert_ptr_nonnull(buf);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(send(fd, bytes, len, MSG_NOSIGNAL), (ssize_t)len);
	while (got < cap) {
		ssize_t r = recv(fd, buf + got, cap - got, 0);

		if (r == 0)
			closed = true;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	ck_assert_msg(closed, "the connection was kept open after: %.*s", (int)len, bytes);
	*status = 0;
	if (got > 12 && strncmp(buf, "HTTP/1.", 7) == 0)
		*status = atoi(buf + 9);
	for (char *p = buf; (p = strstr(p, "HTTP/1.")) != NULL; p++) {
		int code = 0, end = 0;

		/* a status line, not the words in a message */
		if (sscanf(p, "HTTP/1.%*1[01] %3d %n", &code, &end) == 1 && end == 13)
			n++;
	}
	*text = buf;
	return n;
}

/* The body is JSON in the one style of every answer: compact. */
static void assert_compact(const struct http_resp *r)
{
	char *c = jsonx_compact(r->body);

	ck_assert_msg(c != NULL, "not JSON: %s", r->body);
	ck_assert_msg(strcmp(c, r->body) == 0, "not compact: %s", r->body);
	free(c);
}

/*
 * One Date header, RFC 1123 in GMT and about now (httpd formats it once a
 * second instead of evhttp once a reply).
 */
static void assert_date(const struct http_resp *r)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char *d = http_header(r, "Date"), wday[4], mon[4], gmt[4], again[64];
	const char *p = r->headers, *m;
	struct tm tm = { 0 };
	int n = 0;

	ck_assert_msg(d != NULL, "no Date header: %s", r->headers);
	for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		n += strncasecmp(p, "Date:", 5) == 0;
	ck_assert_int_eq(n, 1);
	ck_assert_msg(sscanf(d, "%3s, %d %3s %d %d:%d:%d %3s", wday, &tm.tm_mday, mon, &tm.tm_year,
			     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, gmt) == 8 &&
			      strlen(mon) == 3 && (m = strstr(months, mon)) != NULL,
		      "bad Date: %s", d);
	tm.tm_mon = (int)(m - months) / 3;
	tm.tm_year -= 1900;
	time_t t = timegm(&tm);
	ck_assert_msg(labs((long)(t - time(NULL))) <= 300, "Date is not now: %s", d);
	/* the exact form, weekday included */
	strftime(again, sizeof(again), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&t));
	ck_assert_str_eq(d, again);
	free(d);
}

/* A sample of bad input: JSON errors, 4xx, and nothing written. */
START_TEST(bad_input_changes_nothing)
{
	struct http_resp r;
	static const struct {
		const char *key, *body;
		int status;
		const char *code;
	} cases[] = {
		{ NULL, "{}", 400, "idempotency_key_missing" },
		{ "", "{}", 400, "idempotency_key_invalid" },
		{ "has space", "{}", 400, "idempotency_key_invalid" },
		{ "k", "{", 400, "invalid_json" },
		{ "k", "{\"customerId\":\"c\",} ", 400, "invalid_json" },
		{ "k", "[1]", 400, "invalid_json" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":0,\"amount\":1}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":1,\"amount\":-5}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c'; DROP TABLE x;--\",\"itemId\":\"A\",\"qty\":1,"
		       "\"amount\":5}", 400, "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":1,\"amount\":1e3}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":\"1\",\"amount\":5}", 400,
		  "invalid_field" },
	};

	env_start_all(&env);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		env_post_order(&env, cases[i].key, cases[i].body, &r);
		ck_assert_msg(r.status == cases[i].status, "case %zu: %d %s", i, r.status, r.body);
		struct json_object *o = parse_body(&r), *err;
		ck_assert(json_object_object_get_ex(o, "error", &err));
		ck_assert_str_eq(jstr(err, "code"), cases[i].code);
		json_object_put(o);
		http_resp_free(&r);
	}
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/orders/not-a-uuid", NULL, NULL, 0,
				 &r),
			 0);
	ck_assert_int_eq(r.status, 400);
	ck_assert_ptr_nonnull(strstr(r.body, "invalid_id"));
	http_resp_free(&r);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET",
				 "/orders/6F9619FF-8B86-D011-B42D-00C04FC964FF", NULL, NULL, 0, &r),
			 0);
	ck_assert_int_eq(r.status, 404);
	http_resp_free(&r);

	/* 65 KiB body: refused from its Content-Length */
	size_t big = 65 * 1024;
	char *huge = malloc(big + 1);
	memset(huge, ' ', big);
	huge[big] = '\0';
	const char *h[] = { "Idempotency-Key: big", NULL };
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/orders", h, huge, big, &r), 0);
	ck_assert_int_eq(r.status, 413);
	http_resp_free(&r);
	free(huge);

	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " UNION ALL SELECT count(*) FROM orchestrator.idempotency_records"
					  " ORDER BY 1 DESC LIMIT 1",
				    0, NULL),
			 0);
	/* still alive */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/healthz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
}
END_TEST

/*
 * docs/protocol.md: framing a proxy could read another way is refused with 400 and
 * the connection closed. Each front request carries a POST /orders as its
 * body: a proxy that frames it one way sees one request, while a server
 * that reads no body (an unknown Transfer-Encoding, "Content-Length :")
 * would run the POST as the next request (request smuggling).
 */
START_TEST(ambiguous_framing_refused)
{
	static const char order[] =
		"{\"customerId\":\"c-fr\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	static const struct {
		const char *front;    /* request line and the headers that say where the body ends */
		bool chunked;         /* the body sent as one chunk */
		const char *code;     /* in the answer; NULL: evhttp's own bare 400 */
	} cases[] = {
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nContent-Length: 58\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nContent-Length: 058\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\ncontent-length: 7\r\n", false,
		  "\"ambiguous_framing\"" },
		/* evhttp refuses a Transfer-Encoding with a Content-Length itself */
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nTransfer-Encoding: identity\r\n",
		  false, NULL },
		{ "POST /orders HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n", true,
		  NULL },
		/* Transfer-Encodings evhttp does not take for chunked read no body */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: identity\r\n", false,
		  "\"ambiguous_framing\"" },
		/* evhttp reads chunks; a proxy may refuse gzip or decode it */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n", true,
		  "\"ambiguous_framing\"" },
		/* two of them: evhttp's own 400 */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		  "Transfer-Encoding: chunked\r\n", true, NULL },
		/* a proxy may ignore Transfer-Encoding in HTTP/1.0 */
		{ "GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n", true,
		  "\"ambiguous_framing\"" },
		/* no Content-Length to evhttp, one to a lenient proxy */
		{ "GET /healthz HTTP/1.1\r\nContent-Length : 142\r\n", false, "\"invalid_header\"" },
		/* not 1*DIGIT: evhttp's strtoll takes it, a proxy may not */
		{ "GET /healthz HTTP/1.1\r\nContent-Length: +142\r\n", false,
		  "\"ambiguous_framing\"" },
	};
	char req[1024], smuggled[256], body_sent[300];
	int status;
	char *text;

	ck_assert_int_eq(strlen(order), 58);
	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(smuggled, sizeof(smuggled),
			 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: smuggled-%02zu\r\n"
			 "Content-Length: 58\r\n\r\n%s",
			 i, order);
		ck_assert_int_eq(strlen(smuggled), 142);
		if (cases[i].chunked)
			snprintf(body_sent, sizeof(body_sent), "%zx\r\n%s\r\n0\r\n\r\n",
				 strlen(smuggled), smuggled);
		else
			snprintf(body_sent, sizeof(body_sent), "%s", smuggled);
		snprintf(req, sizeof(req), "%sHost: x\r\nIdempotency-Key: front-%zu\r\n\r\n%s",
			 cases[i].front, i, body_sent);
		ck_assert_msg(raw_exchange(req, strlen(req), &status, &text) == 1,
			      "framing %zu: more than one answer: %s", i, text);
		ck_assert_msg(status == 400, "framing %zu: %s", i, text);
		ck_assert_msg(strstr(text, "\r\nConnection: close\r\n") != NULL, "framing %zu: %s", i,
			      text);
		ck_assert_msg(!cases[i].code || strstr(text, cases[i].code) != NULL,
			      "framing %zu: %s", i, text);
		free(text);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records",
				    0, NULL),
			 0);
	/* one Content-Length alone is fine, so is chunked in any case, and the
	 * connection lives on */
	snprintf(req, sizeof(req),
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: frame-ok\r\n"
		 "Content-Length: %zu\r\n\r\n%s"
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: frame-ok-2\r\n"
		 "Transfer-Encoding:  Chunked \r\n\r\n%zx\r\n%s\r\n0\r\n\r\n"
		 "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		 strlen(order), order, strlen(order), order);
	ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 3);
	ck_assert_int_eq(status, 201);
	free(text);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 2);
}
END_TEST

/*
 * docs/protocol.md: a NUL or another control byte in a header is a 400, and an
 * Idempotency-Key is never cut short: "ab<NUL>cd" once was stored as "ab",
 * so two different keys became one.
 */
START_TEST(control_bytes_in_headers_refused)
{
	static const char order[] =
		"{\"customerId\":\"c-nul\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	static const char *const values[] = { "Idempotency-Key: ab\0cd", "Idempotency-Key: ab\x01" "cd",
					      "Idempotency-Key: ab\x7f" "cd", "X-Note: a\0b" };
	static const size_t lens[] = { 22, 22, 22, 11 };
	char req[1024];
	struct http_resp r;
	int status;
	char *body;

	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		int n = snprintf(req, sizeof(req), "POST /orders HTTP/1.1\r\nHost: x\r\n%s",
				 i == 3 ? "Idempotency-Key: nul-3\r\n" : "");
		memcpy(req + n, values[i], lens[i]);
		n += (int)lens[i];
		n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\nContent-Length: %zu\r\n\r\n%s",
			      strlen(order), order);
		ck_assert_int_eq(raw_exchange(req, (size_t)n, &status, &body), 1);
		ck_assert_msg(status == 400, "header %zu: status %d %s", i, status, body);
		ck_assert_msg(strstr(body, "\"invalid_header\"") != NULL, "header %zu: %s", i, body);
		free(body);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records",
				    0, NULL), 0);
	/* the key the NUL would have collapsed to is still a new key */
	ck_assert_int_eq(env_post_order(&env, "ab", order, &r), 201);
	http_resp_free(&r);
}
END_TEST

/*
 * RFC 9110: a 405 lists the path's methods in Allow and the message names
 * the method; HEAD is served wherever GET is, with GET's headers and no
 * body; a CONNECT is answered and its connection closed (evhttp would keep
 * it open for a tunnel, and the client wait); a 401 names its scheme; 422
 * has its own reason phrase.
 */
START_TEST(methods_answered_as_rfc_9110)
{
	static const struct {
		const char *req;
		int status;
		const char *want[2]; /* in the answer's text */
	} cases[] = {
		{ "PUT /orders HTTP/1.1", 405, { "\r\nAllow: POST\r\n", "method PUT not allowed" } },
		{ "DELETE /orders/00000000-0000-0000-0000-000000000000 HTTP/1.1", 405,
		  { "\r\nAllow: GET, HEAD\r\n", "method DELETE not allowed" } },
		{ "OPTIONS /healthz HTTP/1.1", 405,
		  { "\r\nAllow: GET, HEAD\r\n", "method OPTIONS not allowed" } },
		{ "HEAD /healthz HTTP/1.1", 200, { "\r\nContent-Length: ", NULL } },
		{ "HEAD /orders/00000000-0000-0000-0000-000000000000 HTTP/1.1", 404,
		  { "\r\nContent-Length: ", NULL } },
		{ "CONNECT /orders HTTP/1.1", 404, { "\r\nContent-Length: ", "\"not_found\"" } },
		{ "POST /events/PaymentFailed HTTP/1.1", 401,
		  { "\r\nWWW-Authenticate: Bearer\r\n", NULL } },
	};
	const char *order = "{\"customerId\":\"c-m\",\"itemId\":\"A001\",\"qty\":1,\"amount\":1}";
	const char *other = "{\"customerId\":\"c-m\",\"itemId\":\"A001\",\"qty\":2,\"amount\":1}";
	char req[512];
	int status;
	char *text;
	struct http_resp r;

	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(req, sizeof(req), "%s\r\nHost: x\r\nConnection: close\r\n\r\n",
			 cases[i].req);
		ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 1);
		ck_assert_msg(status == cases[i].status, "%s: %s", cases[i].req, text);
		for (int j = 0; j < 2; j++)
			ck_assert_msg(!cases[i].want[j] || strstr(text, cases[i].want[j]),
				      "%s: %s", cases[i].req, text);
		/* a HEAD's answer ends with its headers */
		if (strncmp(cases[i].req, "HEAD ", 5) == 0)
			ck_assert_msg(strcmp(strstr(text, "\r\n\r\n"), "\r\n\r\n") == 0,
				      "%s: a body: %s", cases[i].req, text);
		free(text);
	}
	/* the key again with another body */
	ck_assert_int_eq(env_post_order(&env, "m-1", order, &r), 201);
	http_resp_free(&r);
	snprintf(req, sizeof(req),
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: m-1\r\n"
		 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(other), other);
	ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 1);
	ck_assert_msg(strncmp(text, "HTTP/1.1 422 Unprocessable Content\r\n", 36) == 0, "%s", text);
	free(text);
}
END_TEST

/*
 * A %00 in a query value decodes to a NUL, which cut the value short
 * unseen: "c-1%00zzz" filtered on c-1, "%00" on nothing. It is a 400 like
 * any undecodable value.
 */
START_TEST(nul_in_query_value_refused)
{
	static const char *const paths[] = {
		"/admin/api/sagas?customerId=%00",
		"/admin/api/sagas?customerId=c-n%00zzz",
		"/admin/api/sagas?limit=5&state=Completed%00x",
	};
	const char *const admin[] = { "ADMIN_TOKEN=atok-i-0123456789abcdef", NULL };
	const char *const bearer[] = { "Authorization: Bearer atok-i-0123456789abcdef", NULL };
	struct http_resp r;

	env_start(&env, SVC_ORCH, admin);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", paths[i], bearer, NULL, 0, &r),
				 0);
		ck_assert_msg(r.status == 400 && strstr(r.body, "\"invalid_field\""), "%s: %d %s",
			      paths[i], r.status, r.body);
		http_resp_free(&r);
	}
	/* "%2500" is the text "%00", no NUL */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/admin/api/sagas?customerId=%2500",
				 bearer, NULL, 0, &r),
			 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
}
END_TEST

/*
 * docs/protocol.md: a well-formed number that does not fit is invalid_field naming
 * the field, however many digits it has, at the entry and on the internal
 * endpoints alike.
 */
START_TEST(numbers_out_of_range_are_invalid_fields)
{
	static const struct {
		const char *qty, *amount, *field;
	} cases[] = {
		{ "9223372036854775808", "100", "qty" },
		{ "-9223372036854775809", "100", "qty" },
		{ "9223372036854775807", "100", "qty" },
		{ "1e400", "100", "qty" },
		{ "1", "1000000000000000000000000000000", "amount" },
		{ "1", "-1000000000000000000000000000000", "amount" },
		{ "1", "18446744073709551616", "amount" },
		{ "1", "-1e400", "amount" },
	};
	char body[300], cmd[UUID_STR_LEN], saga[UUID_STR_LEN];
	struct http_resp r;

	env_start_all(&env);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(body, sizeof(body),
			 "{\"customerId\":\"c-big\",\"itemId\":\"A001\",\"qty\":%s,\"amount\":%s}",
			 cases[i].qty, cases[i].amount);
		ck_assert_int_eq(env_post_order(&env, "big-number", body, &r), 400);
		ck_assert_msg(strstr(r.body, "\"invalid_field\"") && strstr(r.body, cases[i].field),
			      "case %zu: %s", i, r.body);
		http_resp_free(&r);
	}
	uuid_new(cmd);
	uuid_new(saga);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-big\","
		 "\"amount\":99999999999999999999999999}",
		 cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 400);
	ck_assert_msg(strstr(r.body, "\"invalid_field\"") && strstr(r.body, "amount"), "%s",
		      r.body);
	http_resp_free(&r);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT (SELECT count(*) FROM orchestrator.saga_instances)"
					  " + (SELECT count(*) FROM payment.payments)", 0, NULL), 0);
}
END_TEST

/*
 * One JSON style everywhere (compact): GET /orders/{id} came from
 * PostgreSQL's json_build_object ("sagaId" : …), and a replay from jsonb
 * ("sagaId": …). A replay is the first answer byte for byte but for
 * "duplicated".
 */
START_TEST(answers_are_compact_json)
{
	static const char order[] =
		"{\"customerId\":\"c-js\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	struct http_resp first, again, got;
	char path[64], *want;

	env_start_all(&env);
	seed_stock("A001", 5);
	ck_assert_int_eq(env_post_order(&env, "compact-1", order, &first), 201);
	assert_compact(&first);
	assert_date(&first);
	ck_assert_int_eq(env_post_order(&env, "compact-1", order, &again), 201);
	assert_compact(&again);
	want = strdup(first.body);
	ck_assert_ptr_nonnull(strstr(want, "\"duplicated\":false"));
	memcpy(strstr(want, "\"duplicated\":false") + 13, "true}", 6);
	ck_assert_str_eq(again.body, want);
	free(want);
	struct json_object *o = parse_body(&first);
	snprintf(path, sizeof(path), "/orders/%s", jstr(o, "sagaId"));
	ck_assert(wait_state(jstr(o, "sagaId"), "Completed"));
	json_object_put(o);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path, NULL, NULL, 0, &got), 0);
	ck_assert_int_eq(got.status, 200);
	assert_compact(&got);
	http_resp_free(&got);
	/* errors too */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/orders/x", NULL, NULL, 0, &got), 0);
	ck_assert_int_eq(got.status, 400);
	assert_compact(&got);
	assert_date(&got);
	http_resp_free(&got);
	http_resp_free(&first);
	http_resp_free(&again);
}
END_TEST

/*
 * A \u0000 in customerId or itemId is well-formed JSON with a bad value:
 * invalid_field naming the field, like any value off its pattern. In a key
 * it stays invalid JSON (json-c would cut the key there).
 */
START_TEST(nul_in_an_id_is_an_invalid_field)
{
	static const char *const cases[][2] = {
		{ "{\"customerId\":\"a\\u0000b\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}",
		  "customerId" },
		{ "{\"customerId\":\"c-nul\",\"itemId\":\"A001\\u0000\",\"qty\":1,\"amount\":100}",
		  "itemId" },
		{ "{\"customer\\u0000Id\":\"c-nul\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}",
		  "invalid_json" },
	};
	struct http_resp r;

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(env_post_order(&env, "nul-id", cases[i][0], &r), 400);
		ck_assert_msg(strstr(r.body, i < 2 ? "\"invalid_field\"" : "\"invalid_json\"") &&
				      strstr(r.body, cases[i][1]),
			      "case %zu: %s", i, r.body);
		http_resp_free(&r);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL), 0);
}
END_TEST

/*
 * RFC 9112 §3.2: an HTTP/1.1 request without Host, or any request with two,
 * is 400; HTTP/1.0 may leave Host out. A request target with a space in it
 * is a malformed request line, 400, not a path that is not found.
 */
START_TEST(host_and_request_target_checked)
{
	static const struct {
		const char *req;
		int status;
		const char *code;
	} cases[] = {
		{ "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nhost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400, "\"invalid_host\"" },
		{ "GET /healthz x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_target\"" },
		{ "GET /nowhere x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_target\"" },
		{ "GET /healthz HTTP/1.0\r\n\r\n", 200, "\"status\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 200, "\"status\"" },
	};
	int status;
	char *text;

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(raw_exchange(cases[i].req, strlen(cases[i].req), &status, &text), 1);
		ck_assert_msg(status == cases[i].status && strstr(text, cases[i].code),
			      "case %zu: %s", i, text);
		free(text);
	}
}
END_TEST

Suite *http_edges_suite(void)
{
	Suite *s = suite_create("http_edges");
	TCase *edges = fixture_tcase("http_edges");

	tcase_add_test(edges, bad_input_changes_nothing);
	tcase_add_test(edges, ambiguous_framing_refused);
	tcase_add_test(edges, control_bytes_in_headers_refused);
	tcase_add_test(edges, methods_answered_as_rfc_9110);
	tcase_add_test(edges, nul_in_query_value_refused);
	tcase_add_test(edges, numbers_out_of_range_are_invalid_fields);
	tcase_add_test(edges, nul_in_an_id_is_an_invalid_field);
	tcase_add_test(edges, host_and_request_target_checked);
	tcase_add_test(edges, answers_are_compact_json);
	suite_add_tcase(s, edges);
	return s;
}
