/*
 * Every hop on TLS, seen from outside (README.md, "Running across hosts"):
 * PostgreSQL with hostssl lines only (scripts/pg-cluster --tls), RabbitMQ
 * with a TLS listener only (scripts/rabbit-node --tls), the services
 * connecting with DATABASE_URL's sslmode=verify-full, sslrootcert, sslcert
 * and sslkey and with amqps:// verified against TLS_CA_FILE; and the proof on
 * the wire: tcpdump on the loopback during a saga whose customer id is a
 * unique marker.
 *
 * One program, two runs (tests/tls/meson.build): SAGA_TEST_TLS=1 (wire-tls) runs
 * everything over TLS and asserts the marker and the tokens never appear in
 * the capture; unset (wire-plain) is the control, the same saga and capture
 * with TLS off, where they must appear, so that the wire test can fail.
 *
 * The certificates: scripts/certs, a private CA in the run's directory (and a
 * second, unrelated CA for the broker signed by another authority).
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker.h"
#include "harness.h"
#include "metrics_reader.h"
#include "proc.h"
#include "uuid.h"

#define WAIT_MS 60000

static const char *const svc_name[SVC_COUNT] = { "orchestrator", "payment", "inventory" };

static bool tls_mode;            /* SAGA_TEST_TLS=1 */
static char certs[64];           /* scripts/certs ca + issue: ca.crt, NAME.crt/.key */
static struct broker node;       /* TLS only in tls_mode */
static struct saga_env env;

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs `bash scripts/certs ARGS...`; fails the run on error. */
static void certs_run(const char *a1, const char *a2, const char *a3)
{
	char script[PATH_MAX];
	pid_t pid;
	int status;

	snprintf(script, sizeof(script), "%s/scripts/certs", getenv("SAGA_SOURCE_DIR"));
	pid = fork();
	if (pid == 0) {
		proc_close_from(3);
		execlp("bash", "bash", script, a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "tls_hops: scripts/certs %s %s %s failed\n", a1, a2, a3 ? a3 : "");
		exit(EXIT_FAILURE);
	}
}

static void path_of(char *out, size_t len, const char *file)
{
	if ((size_t)snprintf(out, len, "%s/%s", certs, file) >= len)
		ck_abort_msg("path too long: %s/%s", certs, file);
}

/*
 * The environment of service s in this run: with TLS, its DATABASE_URL with
 * libpq's TLS settings appended (key=value form: later words win), amqps://
 * to the node, and its certificate.
 */
struct svc_env {
	char kv[10][1024];
	const char *list[11];
};

static void svc_env(struct svc_env *v, enum svc s, const char *transport, const char *ca_file)
{
	int n = 0;
	char ca[128];

	path_of(ca, sizeof(ca), "ca.crt");
	snprintf(v->kv[n++], sizeof(v->kv[0]), "TRANSPORT=%s", transport);
	snprintf(v->kv[n++], sizeof(v->kv[0]), "AMQP_URL=%s", node.url);
	snprintf(v->kv[n++], sizeof(v->kv[0]), "ADMIN_TOKEN=wire-admin-token-%d", (int)getpid());
	if (tls_mode) {
		snprintf(v->kv[n++], sizeof(v->kv[0]),
			 "DATABASE_URL=%s sslmode=verify-full sslrootcert=%s sslcert=%s/%s.crt"
			 " sslkey=%s/%s.key",
			 env.url[s], ca, certs, svc_name[s], certs, svc_name[s]);
		snprintf(v->kv[n++], sizeof(v->kv[0]), "TLS_CA_FILE=%.900s", ca_file ? ca_file : ca);
		/* HTTPS only, client certificates required on the internal routes */
		snprintf(v->kv[n++], sizeof(v->kv[0]), "TLS_CERT_FILE=%s/%s.crt", certs, svc_name[s]);
		snprintf(v->kv[n++], sizeof(v->kv[0]), "TLS_KEY_FILE=%s/%s.key", certs, svc_name[s]);
		snprintf(v->kv[n++], sizeof(v->kv[0]), "TLS_CLIENT_CA_FILE=%s", ca);
	}
	for (int i = 0; i < n; i++)
		v->list[i] = v->kv[i];
	v->list[n] = NULL;
}

static void start_all(const char *transport)
{
	struct svc_env v;

	for (int s = 0; s < SVC_COUNT; s++) {
		svc_env(&v, s, transport, NULL);
		env_start(&env, s, v.list);
	}
}

static bool wait_metric(enum svc s, const char *series, double want)
{
	for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(50 * 1000))
		if (metrics_read_series(env.port[s], series) == want)
			return true;
	return false;
}

static bool wait_completed(const char *saga)
{
	char sql[160];

	snprintf(sql, sizeof(sql),
		 "SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%s'", saga);
	return env_wait_sql(&env, sql, "Completed", WAIT_MS);
}

static void seed(const char *item)
{
	free(env_sqlf(&env, "INSERT INTO inventory.stock VALUES ('%s', 100)", item));
}

/* The whole file at path, NUL-terminated (len without it); NULL when unreadable. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0, got;

	if (!f)
		return NULL;
	do {
		if (n + 65536 + 1 > cap) {
			cap = (n + 65536 + 1) * 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		got = fread(buf + n, 1, 65536, f);
		n += got;
	} while (got > 0);
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* dst gets src's bytes in one rename: a reader sees the old file or the new. */
static void copy_file(const char *src, const char *dst)
{
	char tmp[PATH_MAX + 8];
	size_t len;
	char *data = slurp(src, &len);
	FILE *f;

	ck_assert_ptr_nonnull(data);
	snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
	f = fopen(tmp, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, dst), 0);
	free(data);
}

/* --- TLS only: every hop verified ---------------------------------------- */

/*
 * The saga over amqps with the broker TLS-only and PostgreSQL hostssl-only:
 * every service's database sessions are TLS with its client certificate,
 * every broker connection is TLS.
 */
START_TEST(saga_with_every_hop_on_tls)
{
	char saga[UUID_STR_LEN], out[4096];

	start_all("amqp");
	for (int s = 0; s < SVC_COUNT; s++)
		ck_assert(wait_metric(s, "saga_broker_up", 1));
	seed("T1");
	env_new_order(&env, "c-tls", "T1", 1, 100, saga);
	ck_assert(wait_completed(saga));

	/* PostgreSQL: the services' sessions, all TLS, each with its certificate */
	ck_assert_int_eq(env_sql_ll(&env,
				    "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s"
				    " USING (pid) WHERE a.usename LIKE 'saga\\_%' AND NOT s.ssl",
				    0, NULL), 0);
	for (int s = 0; s < SVC_COUNT; s++)
		ck_assert_int_gt(env_sql_llf(&env,
					     "SELECT count(*) FROM pg_stat_activity a JOIN"
					     " pg_stat_ssl s USING (pid) WHERE a.datname ="
					     " current_database() AND s.ssl AND s.client_dn ="
					     " '/CN=%s'", svc_name[s]), 0);
	/* RabbitMQ: three connections, all TLS */
	ck_assert_int_eq(broker_ctl(&node, out, sizeof(out), "list_connections", "name", "ssl",
				    NULL), 0);
	int conns = 0;

	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strstr(line, "->"))
			continue; /* a header line */
		conns++;
		ck_assert_msg(strstr(line, "\ttrue"), "a plain connection: %s", line);
	}
	ck_assert_int_ge(conns, SVC_COUNT);
}
END_TEST

/*
 * Plain text is refused by both: sslmode=disable, and AMQP without TLS.
 * PostgreSQL also wants a client certificate that names the role: payment's
 * logs in as saga_payment, the superuser's (this process's PGSSLCERT) does not.
 */
START_TEST(plain_text_refused)
{
	char url[1024], plain[160];
	PGconn *c;

	snprintf(url, sizeof(url), "%s sslmode=disable", env.url[SVC_PAY]);
	c = PQconnectdb(url);
	ck_assert_int_ne(PQstatus(c), CONNECTION_OK);
	ck_assert_msg(strstr(PQerrorMessage(c), "no encryption"), "%s", PQerrorMessage(c));
	PQfinish(c);
	snprintf(url, sizeof(url), "%s sslmode=require", env.url[SVC_PAY]);
	c = PQconnectdb(url);
	ck_assert_int_ne(PQstatus(c), CONNECTION_OK);
	ck_assert_msg(strstr(PQerrorMessage(c), "certificate authentication failed"), "%s",
		      PQerrorMessage(c));
	PQfinish(c);
	snprintf(url, sizeof(url), "%s sslmode=require sslcert=%s/payment.crt sslkey=%s/payment.key",
		 env.url[SVC_PAY], certs, certs);
	c = PQconnectdb(url);
	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
	PQfinish(c);

	snprintf(plain, sizeof(plain), "amqp://guest:guest@127.0.0.1:%d/%%2f", node.port);
	ck_assert(!broker_can_connect(plain));
}
END_TEST

/*
 * A broker whose certificate another authority signed: the connection fails
 * with the reason, the order waits in the outbox; once TLS_CA_FILE holds the
 * right CA (read at every connection attempt), the link connects and the
 * saga completes.
 */
START_TEST(broker_signed_by_another_ca)
{
	char saga[UUID_STR_LEN], ca_file[PATH_MAX], other[128], right[128], logp[PATH_MAX];
	struct svc_env v;
	size_t len;
	char *log;

	snprintf(ca_file, sizeof(ca_file), "%s/%s-ca.crt", harness_cluster_dir(), env.dbname);
	path_of(other, sizeof(other), "other/ca.crt");
	path_of(right, sizeof(right), "ca.crt");
	copy_file(other, ca_file);
	svc_env(&v, SVC_ORCH, "amqp", ca_file);
	env_start(&env, SVC_ORCH, v.list);
	env_new_order(&env, "c-ca", "T2", 1, 100, saga);
	env_log_path(&env, SVC_ORCH, logp, sizeof(logp));
	log = NULL;
	for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(100 * 1000)) {
		free(log);
		log = slurp(logp, &len);
		if (log && strstr(log, "certificate verify failed"))
			break;
	}
	ck_assert_msg(log && strstr(log, "certificate verify failed"), "log: %s", log ? log : "");
	free(log);
	ck_assert_int_eq(metrics_read_series(env.port[SVC_ORCH], "saga_broker_up"), 0);
	/* the peers, with the right CA, ready for the command when it comes */
	for (int s = SVC_PAY; s < SVC_COUNT; s++) {
		svc_env(&v, s, "amqp", NULL);
		env_start(&env, s, v.list);
	}
	seed("T2");
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
					  " WHERE processed_at IS NOT NULL", 0, NULL), 0);

	/* the right CA, in one rename: the next attempt verifies */
	copy_file(right, ca_file);
	ck_assert(wait_metric(SVC_ORCH, "saga_broker_up", 1));
	ck_assert(wait_completed(saga));
}
END_TEST

/* The line of the service's log that holds both a and b, or false. */
static bool log_has(enum svc s, const char *a, const char *b)
{
	char path[PATH_MAX];
	size_t len;
	char *log, *save = NULL;
	bool found = false;

	env_log_path(&env, s, path, sizeof(path));
	log = slurp(path, &len);
	for (char *line = log ? strtok_r(log, "\n", &save) : NULL; line && !found;
	     line = strtok_r(NULL, "\n", &save))
		found = strstr(line, a) && strstr(line, b);
	free(log);
	return found;
}

static bool wait_log(enum svc s, const char *a, const char *b)
{
	for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(50 * 1000))
		if (log_has(s, a, b))
			return true;
	return false;
}

/*
 * Whether the broker's connection of service name shows a client
 * certificate whose subject is subject (rabbitmqctl list_connections; 3.10
 * shows no serial).
 */
static bool broker_subject_is(const char *name, const char *subject)
{
	char buf[8192], want[64], *save = NULL;

	snprintf(want, sizeof(want), "\t%s\t", subject);
	if (broker_ctl(&node, buf, sizeof(buf), "list_connections", "name", "peer_cert_subject",
		       "client_properties", NULL) != 0)
		return false;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strstr(line, "->") && strstr(line, "connection_name") && strstr(line, name))
			return strstr(line, want) != NULL;
	return false;
}

/* Waits until payment's broker connection shows subject; false after WAIT_MS. */
static bool wait_broker_subject(const char *subject)
{
	char out[8192] = "";

	for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(200 * 1000))
		if (broker_subject_is("payment", subject))
			return true;
	broker_ctl(&node, out, sizeof(out), "list_connections", "name", "peer_cert_subject", NULL);
	fprintf(stderr, "tls_hops: no connection of payment with %s:\n%s\n", subject, out);
	return false;
}

/*
 * Broker side of certificate rotation: the link keeps its open connection,
 * and after SIGHUP every new connection presents the new client certificate;
 * a certificate file that does not load is logged at level error (naming
 * it), and the link goes on with the last one that loaded: it reconnects and
 * sagas complete. One process throughout.
 */
START_TEST(broker_client_certificate_rotated_on_sighup)
{
	char saga[UUID_STR_LEN], dir[256], crt[300], key[300], from[300], to[300];
	struct svc_env v;
	pid_t pid;
	int status;
	FILE *f;

	/* payment's files of its own, to rotate and break */
	snprintf(dir, sizeof(dir), "%.200s/%.40s-paycert", harness_cluster_dir(), env.dbname);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(crt, sizeof(crt), "%s/payment.crt", dir);
	snprintf(key, sizeof(key), "%s/payment.key", dir);
	/* the run's CA, so that scripts/certs issues in dir too */
	for (int i = 0; i < 4; i++) {
		static const char *const name[] = { "ca.crt", "ca.key", "payment.crt",
						    "payment.key" };

		path_of(from, sizeof(from), name[i]);
		snprintf(to, sizeof(to), "%s/%s", dir, name[i]);
		copy_file(from, to);
	}
	for (int s = 0; s < SVC_COUNT; s++) {
		svc_env(&v, s, "amqp", NULL);
		for (int i = 0; s == SVC_PAY && v.list[i]; i++) {
			if (strncmp(v.kv[i], "TLS_CERT_FILE=", 14) == 0)
				snprintf(v.kv[i], sizeof(v.kv[i]), "TLS_CERT_FILE=%s", crt);
			else if (strncmp(v.kv[i], "TLS_KEY_FILE=", 13) == 0)
				snprintf(v.kv[i], sizeof(v.kv[i]), "TLS_KEY_FILE=%s", key);
		}
		if (s == SVC_PAY) { /* the reload's info line */
			int n = 0;

			while (v.list[n])
				n++;
			snprintf(v.kv[n], sizeof(v.kv[n]), "LOG_LEVEL=info");
			v.list[n] = v.kv[n];
			v.list[n + 1] = NULL;
		}
		env_start(&env, s, v.list);
	}
	pid = env.pid[SVC_PAY];
	for (int s = 0; s < SVC_COUNT; s++)
		ck_assert(wait_metric(s, "saga_broker_up", 1));
	ck_assert(wait_broker_subject("CN=payment"));

	/*
	 * A new certificate (another subject, to tell them apart on the
	 * broker) and SIGHUP: the open connection stays as it is, the next
	 * one presents the new certificate
	 */
	certs_run("issue", dir, "payment-r2");
	snprintf(from, sizeof(from), "%s/payment-r2.key", dir);
	copy_file(from, key);
	snprintf(from, sizeof(from), "%s/payment-r2.crt", dir);
	copy_file(from, crt);
	ck_assert_int_eq(kill(pid, SIGHUP), 0);
	ck_assert(wait_log(SVC_PAY, "amqp: TLS files reloaded", "\"info\""));
	ck_assert(broker_subject_is("payment", "CN=payment"));
	ck_assert_int_eq(broker_ctl(&node, NULL, 0, "close_all_connections", "tls_hops", NULL), 0);
	ck_assert(wait_broker_subject("CN=payment-r2"));
	seed("T3");
	env_new_order(&env, "c-rot", "T3", 1, 100, saga);
	ck_assert(wait_completed(saga));

	/* a file that does not load: logged, the last good one stays in use */
	f = fopen(crt, "w");
	ck_assert_ptr_nonnull(f);
	fputs("not a certificate\n", f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(kill(pid, SIGHUP), 0);
	ck_assert(wait_log(SVC_PAY, "amqp: TLS files not reloaded", crt));
	ck_assert(log_has(SVC_PAY, "amqp: TLS files not reloaded", "\"error\""));
	ck_assert_int_eq(broker_ctl(&node, NULL, 0, "close_all_connections", "tls_hops", NULL), 0);
	ck_assert(wait_broker_subject("CN=payment-r2"));
	env_new_order(&env, "c-rot", "T3", 1, 100, saga);
	ck_assert(wait_completed(saga));
	ck_assert_int_eq(env.pid[SVC_PAY], pid);
	ck_assert_int_eq(kill(pid, 0), 0);
	/* under the sanitizers, an OpenSSL object left on the link's thread
	 * fails the exit */
	status = env_stop(&env, SVC_PAY, SIGTERM);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "payment did not exit cleanly (status %d)", status);
}
END_TEST

/* --- both runs: the proof on the wire ------------------------------------ */

struct capture {
	pid_t pid;
	char file[PATH_MAX], err[PATH_MAX];
};

/*
 * tcpdump on lo, only the test's own ports, every packet handed over at once
 * (--immediate-mode) and written at once (-U); returns once it captures. Its
 * stderr goes to a file: a closed pipe would kill it with SIGPIPE when it
 * prints its counts at the end, before it has written everything.
 */
static void capture_start(struct capture *cap, const int *ports, int nports)
{
	char filter[512];
	int n = 0, fd;
	size_t len = 0;
	char *out = NULL;

	n += snprintf(filter + n, sizeof(filter) - (size_t)n, "tcp and (");
	for (int i = 0; i < nports; i++)
		n += snprintf(filter + n, sizeof(filter) - (size_t)n, "%sport %d", i ? " or " : "",
			      ports[i]);
	snprintf(filter + n, sizeof(filter) - (size_t)n, ")");
	snprintf(cap->file, sizeof(cap->file), "%s/%s-wire.pcap", harness_cluster_dir(),
		 env.dbname);
	snprintf(cap->err, sizeof(cap->err), "%s/%s-tcpdump.log", harness_cluster_dir(),
		 env.dbname);
	fd = open(cap->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	cap->pid = fork();
	ck_assert_int_ge(cap->pid, 0);
	if (cap->pid == 0) {
		dup2(fd, 2);
		proc_close_from(3);
		proc_reset_signals();
		execlp("tcpdump", "tcpdump", "-i", "lo", "-n", "-U", "--immediate-mode", "-s", "0",
		       "-w", cap->file, filter, (char *)NULL);
		fprintf(stderr, "cannot run tcpdump: %s\n", strerror(errno));
		_exit(127);
	}
	close(fd);
	/* "listening on lo, ..." once the capture runs */
	for (long long end = now_ms() + 30000; now_ms() < end; usleep(20 * 1000)) {
		free(out);
		out = slurp(cap->err, &len);
		if ((out && strstr(out, "listening on")) || waitpid(cap->pid, NULL, WNOHANG) != 0)
			break;
	}
	ck_assert_msg(out && strstr(out, "listening on"), "tcpdump did not start: %s",
		      out ? out : "");
	free(out);
}

/* Stops the capture (tcpdump writes what it has on SIGINT); the file's bytes. */
static char *capture_stop(struct capture *cap, size_t *len)
{
	int status;
	char *data;

	kill(cap->pid, SIGINT);
	ck_assert_int_eq(waitpid(cap->pid, &status, 0), cap->pid);
	data = slurp(cap->file, len);
	ck_assert_ptr_nonnull(data);
	return data;
}

static bool has(const char *data, size_t len, const char *s)
{
	return memmem(data, len, s, strlen(s)) != NULL;
}

/*
 * A saga whose customer id is a unique marker, and a look at it through the
 * admin API, captured on the loopback: the database's, the broker's and the
 * services' ports only. TLS on: neither the marker, nor the internal token,
 * nor the admin token is in the capture. TLS off (the control): each of them
 * is (the internal token travels with the HTTP transport's commands only).
 */
static void wire_run(const char *transport)
{
	char saga[UUID_STR_LEN], marker[64], admin[64], path[128], auth[96];
	int ports[2 + SVC_COUNT], n = 0;
	bool http = strcmp(transport, "http") == 0;
	struct capture cap;
	struct http_resp r;
	size_t len;
	char *data;

	snprintf(marker, sizeof(marker), "wire-marker-%s-%d-%ld", transport, (int)getpid(),
		 (long)time(NULL));
	snprintf(admin, sizeof(admin), "wire-admin-token-%d", (int)getpid());
	ports[n++] = harness_cluster_port();
	ports[n++] = node.port;
	for (int s = 0; s < SVC_COUNT; s++)
		ports[n++] = env.port[s];
	capture_start(&cap, ports, n);
	start_all(transport);
	if (!http)
		for (int s = 0; s < SVC_COUNT; s++)
			ck_assert(wait_metric(s, "saga_broker_up", 1));
	seed("W1");
	env_new_order(&env, marker, "W1", 1, 100, saga);
	ck_assert(wait_completed(saga));
	snprintf(path, sizeof(path), "/admin/api/sagas/%s", saga);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", admin);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path, (const char *const[]){ auth, NULL },
				 NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
	data = capture_stop(&cap, &len);
	ck_assert_int_gt(len, 0);
	if (tls_mode) {
		ck_assert_msg(!has(data, len, marker), "the marker is on the wire");
		ck_assert_msg(!has(data, len, env.token), "the internal token is on the wire");
		ck_assert_msg(!has(data, len, admin), "the admin token is on the wire");
	} else {
		ck_assert_msg(has(data, len, marker), "the control did not see the marker");
		ck_assert_msg(has(data, len, admin), "the control did not see the admin token");
		if (http)
			ck_assert_msg(has(data, len, env.token),
				      "the control did not see the internal token");
	}
	free(data);
	unlink(cap.file);
	unlink(cap.err);
}

START_TEST(secrets_never_on_the_wire_http)
{
	wire_run("http");
}
END_TEST

START_TEST(secrets_never_on_the_wire_amqp)
{
	wire_run("amqp");
}
END_TEST

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

int main(void)
{
	const char *t = getenv("SAGA_TEST_TLS");
	Suite *s = suite_create(t && strcmp(t, "1") == 0 ? "wire-tls" : "wire-plain");
	TCase *tc = tcase_create("hops");
	char other[PATH_MAX];
	SRunner *sr;
	int failed;

	tls_mode = t && strcmp(t, "1") == 0;
	snprintf(certs, sizeof(certs), "/tmp/pgsaga-certs-XXXXXX");
	if (!mkdtemp(certs)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	chmod(certs, 0755); /* the servers' users copy their files from here */
	certs_run("ca", certs, NULL);
	certs_run("issue", certs, "postgres");
	certs_run("issue", certs, "rabbitmq");
	for (int i = 0; i < SVC_COUNT; i++)
		certs_run("issue", certs, svc_name[i]);
	certs_run("issue", certs, "client"); /* the test's own, toward the services */
	path_of(other, sizeof(other), "other");
	certs_run("ca", other, NULL);
	if (tls_mode) {
		char ca[128], crt[128], key[128];

		setenv("SAGA_TEST_PG_TLS_DIR", certs, 1);
		path_of(ca, sizeof(ca), "ca.crt");
		path_of(crt, sizeof(crt), "client.crt");
		path_of(key, sizeof(key), "client.key");
		harness_https(ca, crt, key);
	}

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	suite_add_tcase(s, tc);
	if (tls_mode) {
		tcase_add_test(tc, saga_with_every_hop_on_tls);
		tcase_add_test(tc, plain_text_refused);
		tcase_add_test(tc, broker_signed_by_another_ca);
		tcase_add_test(tc, broker_client_certificate_rotated_on_sighup);
	}
	tcase_add_test(tc, secrets_never_on_the_wire_http);
	tcase_add_test(tc, secrets_never_on_the_wire_amqp);

	harness_cluster_start();
	if (tls_mode)
		broker_start_tls(&node, certs);
	else
		broker_start(&node);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	broker_destroy(&node);
	harness_cluster_stop();
	nftw(certs, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
