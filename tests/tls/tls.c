/*
 * TLS between the services, client certificates, certificate rotation on
 * SIGHUP, and secrets from files (README "Running across hosts"). The three
 * real services on the harness's throwaway PostgreSQL, with certificates from
 * a private CA made by scripts/certs in the test's own directory.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "metrics_reader.h"
#include "uuid.h"

#define WAIT_MS 30000

static struct saga_env env;
static char dir[1024];  /* this test's certificates */
static char dir2[1024]; /* another CA's */

static const char *const svc_names[SVC_COUNT] = { "orchestrator", "payment", "inventory" };

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void certs(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void certs(const char *fmt, ...)
{
	char args[1024], cmd[2048];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "'%s/scripts/certs' %s", getenv("SAGA_SOURCE_DIR"), args);
	rc = system(cmd);
	ck_assert_msg(rc == 0, "%s: exit %d", cmd, rc);
}

static void write_file(const char *path, const char *content)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	/* replaced in one rename, as an operator's tooling should */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "%s: %s", tmp, strerror(errno));
	fputs(content, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, path), 0);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;

	if (!f)
		return strdup("");
	if (getdelim(&buf, &len, '\0', f) < 0) {
		free(buf);
		buf = strdup("");
	}
	fclose(f);
	return buf;
}

static void cat_files(const char *out, const char *a, const char *b)
{
	char *x = read_file(a), *y = read_file(b), *both = malloc(strlen(x) + strlen(y) + 1);

	strcpy(both, x);
	strcat(both, y);
	write_file(out, both);
	free(x);
	free(y);
	free(both);
}

static long long started;

static void setup(void)
{
	started = now_ms();
	env_create(&env);
	snprintf(dir, sizeof(dir), "%s/tls-%s", harness_cluster_dir(), env.dbname);
	snprintf(dir2, sizeof(dir2), "%s/tls-%s-other", harness_cluster_dir(), env.dbname);
	certs("ca '%s'", dir);
	for (int s = 0; s < SVC_COUNT; s++)
		certs("issue '%s' %s", dir, svc_names[s]);
	certs("issue '%s' tester", dir);
}

static void teardown(void)
{
	char cmd[2 * PATH_MAX + 16];

	env_destroy(&env);
	harness_https(NULL, NULL, NULL);
	fprintf(stderr, "tls: test took %lld ms\n", now_ms() - started);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, dir2);
	if (system(cmd) != 0)
		fprintf(stderr, "tls: cannot remove %s\n", dir);
}

static const char *path_in(const char *d, const char *file)
{
	static char paths[16][PATH_MAX];
	static int next;
	char *p = paths[next++ % 16];

	snprintf(p, PATH_MAX, "%s/%s", d, file);
	return p;
}

/*
 * The TLS settings of service s, in a static array: its own certificate,
 * ca verifying its peers, client_ca verifying its clients (NULL: none).
 */
static const char *const *tls_vars(enum svc s, const char *ca, const char *client_ca,
				   const char *more)
{
	static char v[SVC_COUNT][6][PATH_MAX + 32];
	static const char *list[SVC_COUNT][7];
	int n = 0;

	snprintf(v[s][n++], sizeof(v[s][0]), "TLS_CERT_FILE=%s/%s.crt", dir, svc_names[s]);
	snprintf(v[s][n++], sizeof(v[s][0]), "TLS_KEY_FILE=%s/%s.key", dir, svc_names[s]);
	snprintf(v[s][n++], sizeof(v[s][0]), "TLS_CA_FILE=%s", ca);
	if (client_ca)
		snprintf(v[s][n++], sizeof(v[s][0]), "TLS_CLIENT_CA_FILE=%s", client_ca);
	if (more)
		snprintf(v[s][n++], sizeof(v[s][0]), "%s", more);
	for (int i = 0; i < n; i++)
		list[s][i] = v[s][i];
	list[s][n] = NULL;
	return list[s];
}

/* The test's client trusts the CA and presents the tester's certificate. */
static void client_with_cert(void)
{
	harness_https(path_in(dir, "ca.crt"), path_in(dir, "tester.crt"), path_in(dir, "tester.key"));
}

static void client_without_cert(void)
{
	harness_https(path_in(dir, "ca.crt"), NULL, NULL);
}

#define ADMIN_TOKEN "console-token-0123456789"

static void start_all_tls(const char *more_pay)
{
	const char *ca = path_in(dir, "ca.crt");

	client_with_cert();
	env_start(&env, SVC_INV, tls_vars(SVC_INV, ca, ca, NULL));
	env_start(&env, SVC_PAY, tls_vars(SVC_PAY, ca, ca, more_pay));
	env_start(&env, SVC_ORCH, tls_vars(SVC_ORCH, ca, ca, "ADMIN_TOKEN=" ADMIN_TOKEN));
}

static void seed_stock(const char *item, int n)
{
	free(env_sqlf(&env, "INSERT INTO inventory.stock (item_id, available) VALUES ('%s', %d)",
		      item, n));
}

static bool wait_state(const char *saga, const char *state)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%.36s'", saga);
	return env_wait_sql(&env, sql, state, WAIT_MS);
}

static int connect_port(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 10, 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* What a plain-text request to port gets back (up to 255 bytes). */
static void plain_request(int port, char *got, size_t len)
{
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	int fd = connect_port(port);
	size_t have = 0;
	ssize_t n;

	ck_assert_int_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	while (have + 1 < len && (n = recv(fd, got + have, len - 1 - have, 0)) > 0)
		have += (size_t)n;
	got[have] = '\0';
	close(fd);
}

/* Whether the certificate a new TLS connection to port gets is cert_file's. */
static bool serves_cert(int port, const char *cert_file)
{
	int fd = connect_port(port);
	SSL_CTX *ctx = NULL;
	SSL *ssl = harness_tls_connect(fd, &ctx, path_in(dir, "ca.crt"), NULL, NULL);
	FILE *f = fopen(cert_file, "r");
	X509 *want = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
	bool same = false;

	if (ssl && want) {
		X509 *got = SSL_get0_peer_certificate(ssl);

		same = got && ASN1_INTEGER_cmp(X509_get0_serialNumber(got),
					       X509_get0_serialNumber(want)) == 0;
	}
	if (f)
		fclose(f);
	X509_free(want);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	ERR_clear_error();
	close(fd);
	return same;
}

static bool wait_serves_cert(int port, const char *cert_file)
{
	long long deadline = now_ms() + WAIT_MS;

	while (now_ms() < deadline) {
		if (serves_cert(port, cert_file))
			return true;
		usleep(20 * 1000);
	}
	return false;
}

static bool log_has(enum svc s, const char *a, const char *b)
{
	char path[PATH_MAX];
	char *log;
	bool found = false;

	env_log_path(&env, s, path, sizeof(path));
	log = read_file(path);
	for (char *line = strtok(log, "\n"); line && !found; line = strtok(NULL, "\n"))
		found = strstr(line, a) && (!b || strstr(line, b));
	free(log);
	return found;
}

static bool wait_log(enum svc s, const char *a, const char *b)
{
	long long deadline = now_ms() + WAIT_MS;

	while (now_ms() < deadline) {
		if (log_has(s, a, b))
			return true;
		usleep(20 * 1000);
	}
	return false;
}

static double handshakes(enum svc s, const char *side, const char *resumed)
{
	char series[128];
	double v;

	snprintf(series, sizeof(series), "saga_tls_handshakes_total{side=\"%s\",resumed=\"%s\"}",
		 side, resumed);
	v = metrics_read_series(env.port[s], series);
	return v < 0 ? 0 : v;
}

/*
 * Stops every running service with SIGTERM and wants exit status 0: under
 * the sanitizers (ASAN_OPTIONS=abort_on_error=1) a leaked OpenSSL object or
 * connection aborts the exit instead.
 */
static void stop_all_clean(void)
{
	for (int s = 0; s < SVC_COUNT; s++) {
		int status;

		if (!env.pid[s])
			continue;
		status = env_stop(&env, (enum svc)s, SIGTERM);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "%s did not exit cleanly (status %d)", svc_names[s], status);
	}
}

static int post_command(const char *token, struct http_resp *r)
{
	char auth[128];
	const char *h[2] = { auth, NULL };

	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "POST", "/commands/PayCommand",
				 token ? h : NULL, "{}", (size_t)-1, r),
			 0);
	return r->status;
}

START_TEST(saga_over_https_with_client_certs)
{
	char saga[UUID_STR_LEN], got[256], *code;
	struct http_resp r;

	start_all_tls(NULL);
	seed_stock("A001", 100);
	/* every hop on TLS: sagas complete */
	for (int i = 0; i < 5; i++) {
		env_new_order(&env, "c-tls", "A001", 1, 100, saga);
		ck_assert(wait_state(saga, "Completed"));
	}
	/* a plain-text request to a TLS port gets no HTTP answer */
	for (int s = 0; s < SVC_COUNT; s++) {
		plain_request(env.port[s], got, sizeof(got));
		ck_assert_msg(strncmp(got, "HTTP/", 5) != 0, "plain HTTP answered: %s", got);
	}
	/* HTTPS answers carry HSTS */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/healthz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	char *sts = http_header(&r, "Strict-Transport-Security");
	ck_assert_ptr_nonnull(sts);
	free(sts);
	http_resp_free(&r);
	/* the console's cookie is Secure */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/admin/session", NULL,
				 "{\"token\":\"" ADMIN_TOKEN "\"}", (size_t)-1, &r), 0);
	ck_assert_int_eq(r.status, 200);
	char *cookie = http_header(&r, "Set-Cookie");
	ck_assert_ptr_nonnull(cookie);
	ck_assert_msg(strstr(cookie, "; Secure"), "%s", cookie);
	free(cookie);
	sts = http_header(&r, "Strict-Transport-Security");
	ck_assert_ptr_nonnull(sts);
	free(sts);
	http_resp_free(&r);

	/* internal endpoint: token first (401), then the certificate (403) */
	client_without_cert();
	ck_assert_int_eq(post_command(NULL, &r), 401);
	http_resp_free(&r);
	ck_assert_int_eq(post_command(env.token, &r), 403);
	struct json_object *o = parse_body(&r);
	code = strdup(jstr(jget(o, "error"), "code"));
	json_object_put(o);
	ck_assert_str_eq(code, "client_certificate_required");
	free(code);
	http_resp_free(&r);
	/* public endpoints need none */
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "GET", "/healthz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
	/* a certificate of another CA does not verify */
	certs("ca '%s'", dir2);
	certs("issue '%s' tester", dir2);
	harness_https(path_in(dir, "ca.crt"), path_in(dir2, "tester.crt"),
		      path_in(dir2, "tester.key"));
	ck_assert_int_eq(post_command(env.token, &r), 403);
	http_resp_free(&r);
	/* with one that verifies: as before (the empty command is invalid) */
	client_with_cert();
	ck_assert_int_eq(post_command(NULL, &r), 401);
	http_resp_free(&r);
	int status = post_command(env.token, &r);
	ck_assert_msg(status == 400 || status == 422, "status %d: %s", status, r.body);
	http_resp_free(&r);

	/*
	 * Keep-alive: the 5 sagas' messages went over a few connections.
	 * Then each answer of payment is dropped (its connection closed) for a
	 * while: the orchestrator reconnects, resuming its TLS session.
	 */
	long long messages = env_sql_ll(&env,
					"SELECT (SELECT count(*) FROM orchestrator.outbox_messages) +"
					" (SELECT count(*) FROM payment.outbox_messages) +"
					" (SELECT count(*) FROM inventory.outbox_messages)",
					0, NULL);
	double full = 0;
	for (int s = 0; s < SVC_COUNT; s++)
		full += handshakes(s, "client", "false") + handshakes(s, "client", "true");
	fprintf(stderr, "tls: %lld messages, %.0f client handshakes\n", messages, full);
	ck_assert_int_ge(messages, 20);
	ck_assert_msg(full <= messages / 2, "%.0f handshakes for %lld messages", full, messages);

	char auth[128];
	const char *h[2] = { auth, NULL };
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", env.token);
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "POST", "/admin/faults", h,
				 "{\"dropResponseRate\":1}", (size_t)-1, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
	env_new_order(&env, "c-tls", "A001", 1, 100, saga);
	ck_assert(env_wait_sql(&env,
			       "SELECT max(attempt_count) >= 3 FROM orchestrator.outbox_messages"
			       " WHERE type = 'PayCommand' AND processed_at IS NULL",
			       "t", WAIT_MS));
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "POST", "/admin/faults", h,
				 "{\"dropResponseRate\":0}", (size_t)-1, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_msg(handshakes(SVC_ORCH, "client", "true") >= 1,
		      "no session resumed: orchestrator client %.0f full, payment server %.0f full, "
		      "%.0f resumed",
		      handshakes(SVC_ORCH, "client", "false"), handshakes(SVC_PAY, "server", "false"),
		      handshakes(SVC_PAY, "server", "true"));
	ck_assert_msg(handshakes(SVC_PAY, "server", "true") >= 1, "payment resumed none");
	stop_all_clean();
}
END_TEST

/*
 * A connection to a peer outlives the attempt timeout when idle: after a
 * pause three times HTTP_TIMEOUT_MS, the next saga's four hops reuse the
 * four connections of the last one instead of a handshake each. (evhttp
 * closes an idle client connection when the request timeout runs out; the
 * client gives idle ones a timeout of their own.) One handshake is allowed
 * for an attempt that timed out on a slow machine.
 */
START_TEST(idle_peer_connections_outlive_the_attempt_timeout)
{
	const char *ca = path_in(dir, "ca.crt");
	const enum svc order[SVC_COUNT] = { SVC_INV, SVC_PAY, SVC_ORCH };
	char saga[UUID_STR_LEN];
	double before = 0, after = 0;

	client_with_cert();
	for (int i = 0; i < SVC_COUNT; i++)
		env_start(&env, order[i], tls_vars(order[i], ca, ca, "HTTP_TIMEOUT_MS=1500"));
	seed_stock("A001", 10);
	env_new_order(&env, "c-idle", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	for (int s = 0; s < SVC_COUNT; s++)
		before += handshakes(s, "client", "false") + handshakes(s, "client", "true");
	sleep(5);
	env_new_order(&env, "c-idle", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	for (int s = 0; s < SVC_COUNT; s++)
		after += handshakes(s, "client", "false") + handshakes(s, "client", "true");
	fprintf(stderr, "tls: client handshakes %.0f before the pause, %.0f after\n", before, after);
	ck_assert_msg(before >= 4, "the first saga made %.0f connections", before);
	ck_assert_msg(after - before <= 1, "%.0f new handshakes after an idle pause",
		      after - before);
	stop_all_clean();
}
END_TEST

/* Counts the records of application data that arrive (content type 23). */
static void count_records(int write_p, int version, int content_type, const void *buf,
			  size_t len, SSL *ssl, void *arg)
{
	(void)version;
	(void)ssl;
	if (!write_p && content_type == SSL3_RT_HEADER && len >= 1 &&
	    ((const unsigned char *)buf)[0] == SSL3_RT_APPLICATION_DATA)
		(*(int *)arg)++;
}

/* One /healthz over ssl; its answer's records (*records counts them). */
static void healthz_over(SSL *ssl, int *records)
{
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	char got[4096];
	size_t have = 0;
	int n;

	*records = 0;
	ck_assert_int_eq(SSL_write(ssl, req, sizeof(req) - 1), (int)sizeof(req) - 1);
	while (have + 1 < sizeof(got) &&
	       (n = SSL_read(ssl, got + have, (int)(sizeof(got) - 1 - have))) > 0) {
		char *body;

		have += (size_t)n;
		got[have] = '\0';
		body = strstr(got, "\r\n\r\n");
		if (body && strstr(got, "Content-Length: ") &&
		    strlen(body + 4) >= strtoul(strstr(got, "Content-Length: ") + 16, NULL, 10))
			break;
	}
	ck_assert_msg(strncmp(got, "HTTP/1.1 200", 12) == 0, "healthz: %.40s", got);
}

/*
 * A message is one TLS record: evhttp hands a message's head and body over
 * as two pieces, and without tls.c's coalescing each became a record of its
 * own (a write and a segment each, and the peer woken twice). The second
 * answer on the connection is counted, after the session tickets that
 * follow a TLS 1.3 handshake.
 */
START_TEST(one_record_per_message)
{
	const char *ca = path_in(dir, "ca.crt");
	int fd, first = 0, second = 0;
	SSL_CTX *ctx = NULL;
	SSL *ssl;

	client_without_cert();
	env_start(&env, SVC_INV, tls_vars(SVC_INV, ca, NULL, NULL));
	fd = connect_port(env.port[SVC_INV]);
	ssl = harness_tls_connect(fd, &ctx, ca, NULL, NULL);
	ck_assert_ptr_nonnull(ssl);
	SSL_set_msg_callback(ssl, count_records);
	SSL_set_msg_callback_arg(ssl, &first);
	healthz_over(ssl, &first);
	SSL_set_msg_callback_arg(ssl, &second);
	healthz_over(ssl, &second);
	fprintf(stderr, "tls: records of application data in an answer: %d, then %d\n", first,
		second);
	ck_assert_int_eq(second, 1);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
	stop_all_clean();
}
END_TEST

START_TEST(peer_of_another_ca_fails_until_sighup)
{
	char saga[UUID_STR_LEN], orch_ca[PATH_MAX];
	const char *ca = path_in(dir, "ca.crt");
	pid_t pid;

	/* payment's certificate is signed by a CA the orchestrator does not trust */
	certs("ca '%s'", dir2);
	certs("issue '%s' payment", dir2);
	snprintf(orch_ca, sizeof(orch_ca), "%s/orchestrator-ca.crt", dir);
	cat_files(orch_ca, ca, "/dev/null");
	/* the test's client trusts both */
	cat_files(path_in(dir, "bundle.crt"), ca, path_in(dir2, "ca.crt"));
	harness_https(path_in(dir, "bundle.crt"), path_in(dir, "tester.crt"),
		      path_in(dir, "tester.key"));
	env_start(&env, SVC_INV, tls_vars(SVC_INV, ca, ca, NULL));
	{
		static char v[4][PATH_MAX + 32];
		const char *list[5];

		snprintf(v[0], sizeof(v[0]), "TLS_CERT_FILE=%s/payment.crt", dir2);
		snprintf(v[1], sizeof(v[1]), "TLS_KEY_FILE=%s/payment.key", dir2);
		snprintf(v[2], sizeof(v[2]), "TLS_CA_FILE=%s", ca);
		snprintf(v[3], sizeof(v[3]), "TLS_CLIENT_CA_FILE=%s", ca);
		for (int i = 0; i < 4; i++)
			list[i] = v[i];
		list[4] = NULL;
		env_start(&env, SVC_PAY, list);
	}
	/* the orchestrator verifies servers and clients with the same bundle */
	env_start(&env, SVC_ORCH, tls_vars(SVC_ORCH, orch_ca, orch_ca, NULL));
	pid = env.pid[SVC_ORCH];
	seed_stock("A001", 10);
	env_new_order(&env, "c-ca", "A001", 1, 100, saga);
	ck_assert(env_wait_sql(&env,
			       "SELECT count(*) FROM orchestrator.outbox_messages"
			       " WHERE type = 'PayCommand' AND attempt_count >= 2"
			       " AND last_error LIKE '%certificate verify failed%'",
			       "1", WAIT_MS));
	char *err = env_sql(&env, "SELECT last_error FROM orchestrator.outbox_messages"
				  " WHERE type = 'PayCommand'", 0, NULL);
	fprintf(stderr, "tls: last_error: %s\n", err);
	free(err);
	/* nothing reached payment */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.processed_messages", 0,
				    NULL), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 0);

	/* the CA fixed: the bundle trusts both, SIGHUP, same process */
	cat_files(orch_ca, ca, path_in(dir2, "ca.crt"));
	ck_assert_int_eq(kill(pid, SIGHUP), 0);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(env.pid[SVC_ORCH], pid);
	ck_assert_int_eq(kill(pid, 0), 0);
	stop_all_clean();
}
END_TEST

START_TEST(sighup_rotates_certificate_in_flight)
{
	char sagas[10][UUID_STR_LEN], before[PATH_MAX], bad[PATH_MAX];
	const char *cert = path_in(dir, "payment.crt");
	pid_t pid;

	/* each command waits, so that sagas are in flight across the reload */
	start_all_tls("FAULT_DELAY_MS=200");
	pid = env.pid[SVC_PAY];
	seed_stock("A001", 100);
	snprintf(before, sizeof(before), "%s/payment-before.crt", dir);
	cat_files(before, cert, "/dev/null");
	ck_assert(serves_cert(env.port[SVC_PAY], before));
	for (int i = 0; i < 10; i++)
		env_new_order(&env, "c-rot", "A001", 1, 100, sagas[i]);
	certs("issue '%s' payment", dir); /* a new serial */
	ck_assert(!serves_cert(env.port[SVC_PAY], cert));
	ck_assert_int_eq(kill(pid, SIGHUP), 0);
	ck_assert(wait_serves_cert(env.port[SVC_PAY], cert));
	for (int i = 0; i < 10; i++)
		ck_assert(wait_state(sagas[i], "Completed"));

	/* a file that does not load: logged at level error, the last good one stays */
	snprintf(bad, sizeof(bad), "%s/payment.crt", dir);
	cat_files(before, cert, "/dev/null");
	write_file(bad, "not a certificate\n");
	ck_assert_int_eq(kill(pid, SIGHUP), 0);
	ck_assert(wait_log(SVC_PAY, "\"error\"", "TLS_CERT_FILE"));
	ck_assert(log_has(SVC_PAY, bad, "not reloaded"));
	ck_assert(serves_cert(env.port[SVC_PAY], before));
	env_new_order(&env, "c-rot", "A001", 1, 100, sagas[0]);
	ck_assert(wait_state(sagas[0], "Completed"));
	ck_assert_int_eq(env.pid[SVC_PAY], pid);
	ck_assert_int_eq(kill(pid, 0), 0);
	stop_all_clean();
}
END_TEST

/* --- secrets from files ---------------------------------------------------- */

/*
 * Runs a service binary with exactly the environment vars (NULL-terminated
 * "NAME=value") and args; its output goes to out. Returns the exit status
 * (-1 when it did not exit within 20 s: killed).
 */
static int run_capture(enum svc s, const char *arg, const char *const *vars, char *out,
		       size_t outlen)
{
	char path[PATH_MAX];
	int p[2], status;
	size_t have = 0;
	long long deadline = now_ms() + 20000;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/src/%s/saga-%s", getenv("SAGA_BUILD_DIR"), svc_names[s],
		 svc_names[s]);
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		char *envp[16];
		size_t n = 0;

		for (; vars[n] && n < 15; n++)
			envp[n] = strdup(vars[n]);
		envp[n] = NULL;
		char *argv[3] = { path, arg ? strdup(arg) : NULL, NULL };

		execve(path, argv, envp);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		struct pollfd pf = { p[0], POLLIN, 0 };
		long long left = deadline - now_ms();
		ssize_t n;

		if (left <= 0 || poll(&pf, 1, (int)left) <= 0) {
			kill(pid, SIGKILL);
			break;
		}
		n = read(p[0], out + have, outlen - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		if (have + 1 >= outlen)
			break;
	}
	out[have] = '\0';
	close(p[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(secrets_from_files)
{
	static const char *const names[] = { "DATABASE_URL", "INTERNAL_TOKEN", "ADMIN_TOKEN",
					     "AMQP_URL" };
	char db[PATH_MAX], tok[PATH_MAX], adm[PATH_MAX], amqp[PATH_MAX], content[700], out[8192];
	char vdb[PATH_MAX + 32], vtok[PATH_MAX + 32], vadm[PATH_MAX + 32], auth[128];
	const char admin_token[] = "admin-token-from-a-file-0123456789";
	struct http_resp r;

	mkdir(dir, 0700);
	snprintf(db, sizeof(db), "%s/db-url", dir);
	snprintf(tok, sizeof(tok), "%s/token", dir);
	snprintf(adm, sizeof(adm), "%s/admin-token", dir);
	snprintf(amqp, sizeof(amqp), "%s/amqp-url", dir);
	snprintf(content, sizeof(content), "%s\n", env.url[SVC_PAY]);
	write_file(db, content);
	snprintf(content, sizeof(content), "%s\n", env.token);
	write_file(tok, content);
	write_file(adm, admin_token); /* no newline: taken as it is */
	write_file(amqp, "not-an-amqp-url-marker\n");

	/* the values come from the files: the database, the token, the admin token */
	snprintf(vdb, sizeof(vdb), "DATABASE_URL_FILE=%s", db);
	snprintf(vtok, sizeof(vtok), "INTERNAL_TOKEN_FILE=%s", tok);
	snprintf(vadm, sizeof(vadm), "ADMIN_TOKEN_FILE=%s", adm);
	const char *const from_files[] = { "DATABASE_URL=", "INTERNAL_TOKEN=", vdb, vtok, vadm,
					   NULL };
	env_start(&env, SVC_PAY, from_files);
	const char *h[2] = { auth, NULL };
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", env.token);
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "POST", "/commands/PayCommand", h, "{}",
				 (size_t)-1, &r), 0);
	ck_assert_int_ne(r.status, 401);
	http_resp_free(&r);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", admin_token);
	ck_assert_int_eq(http_do(env.port[SVC_PAY], "GET", "/admin/api/dead-letters", h, NULL, 0,
				 &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);

	/* AMQP_URL_FILE is read too: its (bad) content is refused, not quoted */
	char vamqp[PATH_MAX + 32];
	snprintf(vamqp, sizeof(vamqp), "AMQP_URL_FILE=%s", amqp);
	char vurl[600], vt[100];
	snprintf(vurl, sizeof(vurl), "DATABASE_URL=%s", env.url[SVC_PAY]);
	snprintf(vt, sizeof(vt), "INTERNAL_TOKEN=%s", env.token);
	const char *const amqp_vars[] = { vurl, vt, "TRANSPORT=amqp", vamqp, "LISTEN_ADDR=127.0.0.1:0",
					  NULL };
	ck_assert_int_ne(run_capture(SVC_PAY, NULL, amqp_vars, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "AMQP_URL"), "%s", out);
	ck_assert_msg(!strstr(out, "not-an-amqp-url-marker"), "%s", out);

	/* both set, or a file that cannot be read: exit non-zero naming them */
	const char *const files[] = { db, tok, adm, amqp };
	for (size_t i = 0; i < 4; i++) {
		char both[700], file[PATH_MAX + 32], want[80];
		const char *vars[6];
		int n = 0;

		snprintf(both, sizeof(both), "%s=%s", names[i],
			 i == 0 ? env.url[SVC_PAY] : i == 1 ? env.token : "some-value-0123456789");
		snprintf(file, sizeof(file), "%s_FILE=%s", names[i], files[i]);
		if (i != 0)
			vars[n++] = vurl;
		if (i != 1)
			vars[n++] = vt;
		vars[n++] = both;
		vars[n++] = file;
		vars[n] = NULL;
		ck_assert_int_ne(run_capture(SVC_PAY, NULL, vars, out, sizeof(out)), 0);
		snprintf(want, sizeof(want), "%s and %s_FILE", names[i], names[i]);
		ck_assert_msg(strstr(out, want), "%s: %s", names[i], out);

		snprintf(file, sizeof(file), "%s_FILE=%s/no-such-file", names[i], dir);
		n = 0;
		if (i != 0)
			vars[n++] = vurl;
		if (i != 1)
			vars[n++] = vt;
		vars[n++] = file;
		vars[n] = NULL;
		ck_assert_int_ne(run_capture(SVC_PAY, NULL, vars, out, sizeof(out)), 0);
		snprintf(want, sizeof(want), "%s_FILE", names[i]);
		ck_assert_msg(strstr(out, want) && strstr(out, "no-such-file"), "%s: %s", names[i],
			      out);
	}
}
END_TEST

START_TEST(database_password_appears_nowhere)
{
	char marker[80], urls[SVC_COUNT][700], vars[SVC_COUNT][720], out[65536], saga[UUID_STR_LEN];
	char bad[300];
	struct http_resp r;

	snprintf(marker, sizeof(marker), "PwQ7%sZ", env.dbname);
	for (int i = 0; i < SVC_COUNT; i++) {
		int s = SVC_INV - i; /* the orchestrator last */

		/* trust authentication: the server ignores the password */
		snprintf(urls[s], sizeof(urls[s]), "%s password=%s", env.url[s], marker);
		snprintf(vars[s], sizeof(vars[s]), "DATABASE_URL=%s", urls[s]);
		const char *const extra[] = { vars[s], "LOG_LEVEL=debug",
					      "ADMIN_TOKEN=an-admin-token-0123456789", NULL };
		env_start(&env, (enum svc)s, extra);
	}
	seed_stock("A001", 10);
	env_new_order(&env, "c-pw", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	for (int s = 0; s < SVC_COUNT; s++) {
		static const char *const paths[] = { "/metrics", "/healthz", "/readyz" };

		for (size_t i = 0; i < 3; i++) {
			ck_assert_int_eq(http_do(env.port[s], "GET", paths[i], NULL, NULL, 0, &r), 0);
			ck_assert_int_eq(r.status, 200);
			ck_assert_msg(!memmem(r.body, r.body_len, marker, strlen(marker)) &&
					      !strstr(r.headers, marker),
				      "%s of %s", paths[i], svc_names[s]);
			http_resp_free(&r);
		}
	}
	/* --help with it set */
	const char *const help_vars[] = { vars[SVC_PAY], NULL };
	ck_assert_int_eq(run_capture(SVC_PAY, "--help", help_vars, out, sizeof(out)), 0);
	ck_assert_msg(!strstr(out, marker), "--help: %s", out);
	/* a URL that is not one: the error does not quote it */
	snprintf(bad, sizeof(bad), "DATABASE_URL=postgresql://u:%s@127.0.0.1:notaport/db", marker);
	char vt[100];
	snprintf(vt, sizeof(vt), "INTERNAL_TOKEN=%s", env.token);
	const char *const bad_vars[] = { bad, vt, NULL };
	ck_assert_int_ne(run_capture(SVC_PAY, NULL, bad_vars, out, sizeof(out)), 0);
	ck_assert_msg(!strstr(out, marker), "error: %s", out);
	/* the logs of the whole run, after a clean stop */
	for (int s = 0; s < SVC_COUNT; s++) {
		char path[PATH_MAX], *log;

		int status = env_stop(&env, (enum svc)s, SIGTERM);

		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		env_log_path(&env, (enum svc)s, path, sizeof(path));
		log = read_file(path);
		ck_assert_msg(strlen(log) > 0, "%s: empty log", path);
		ck_assert_msg(!strstr(log, marker), "%s holds the password", path);
		free(log);
	}
}
END_TEST

static Suite *tls_suite(void)
{
	Suite *s = suite_create("tls");
	TCase *tc = tcase_create("tls");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	suite_add_tcase(s, tc);
	tcase_add_test(tc, saga_over_https_with_client_certs);
	tcase_add_test(tc, idle_peer_connections_outlive_the_attempt_timeout);
	tcase_add_test(tc, one_record_per_message);
	tcase_add_test(tc, peer_of_another_ca_fails_until_sighup);
	tcase_add_test(tc, sighup_rotates_certificate_in_flight);
	tcase_add_test(tc, secrets_from_files);
	tcase_add_test(tc, database_password_appears_nowhere);
	return s;
}

int main(void)
{
	return harness_run(tls_suite());
}
