/*
 * harness: a throwaway cluster, a database per test, the real services, and a
 * small blocking HTTP client. See harness.h for the contract.
 *
 * Check runs each test in a forked child, so everything the children need is
 * in static variables set by the parent before the first fork, and nothing
 * here keeps a connection across that fork.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "clock.h"
#include "jsonx.h"
#include "proc.h"
#include "uuid.h"

#include <arpa/inet.h>
#include <check.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_TIMEOUT_MS 20000
#define READY_POLL_MS 20
#define STOP_TIMEOUT_MS 30000
#define HTTP_TIMEOUT_MS 30000
#define LOG_TAIL_BYTES 4096

static const char *const svc_name[SVC_COUNT] = { "orchestrator", "payment", "inventory" };
static const char *const svc_role[SVC_COUNT] = { "saga_orchestrator", "saga_payment",
						 "saga_inventory" };
static const char *const svc_peer_var[SVC_COUNT] = { "ORCHESTRATOR_URL", "PAYMENT_URL",
						     "INVENTORY_URL" };

/*
 * Settings a developer's shell may have exported for scripts/up; a test gets
 * exactly the environment it asks for.
 */
static const char *const svc_vars[] = {
	"DATABASE_URL", "LISTEN_ADDR", "PAYMENT_URL", "INVENTORY_URL", "ORCHESTRATOR_URL",
	"INTERNAL_TOKEN", "DISPATCH_BATCH", "RETRY_MAX_ATTEMPTS", "RETRY_BASE_MS", "RETRY_CAP_MS",
	"HTTP_TIMEOUT_MS", "LEASE_MS", "BREAKER_FAILURES", "BREAKER_OPEN_MS", "STEP_TIMEOUT_MS",
	"IDEMPOTENCY_TTL_S", "PAYMENT_DEFAULT_CREDIT", "FAULT_FAIL_RATE", "FAULT_DELAY_MS",
	"FAULT_DROP_RESPONSE_RATE", "LOG_LEVEL", "ADMIN_TOKEN", "TRANSPORT", "AMQP_URL",
	"AMQP_PREFETCH", "MARK_WINDOW_MS", "SHIPPING_URL", "SAGA_DEFINITIONS_DIR",
	"PARTICIPANT_NAME", "PARTICIPANT_COMMANDS", NULL,
};

/* Set once by harness_cluster_start in the runner, inherited by every test child. */
static char cluster_dir[PATH_MAX];
static int cluster_port;
static pid_t cluster_owner;	/* only the process that started the cluster stops it */
static pid_t watchdog_pid;
static unsigned int db_counter;

/* --- small helpers ------------------------------------------------------- */

static __attribute__((format(printf, 1, 2), noreturn)) void harness_fatal(const char *fmt, ...)
{
	va_list ap;

	fputs("harness: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAILURE);
}

static const char *env_dir(const char *name)
{
	const char *v = getenv(name);

	if (!v || !*v)
		ck_abort_msg("%s is not set: run the tests with `meson test`", name);
	return v;
}

/* Applies one "NAME=value" to the environment; anything else is ignored. */
static void set_kv(const char *kv)
{
	const char *eq = strchr(kv, '=');
	char name[128];

	if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof(name))
		return;
	memcpy(name, kv, (size_t)(eq - kv));
	name[eq - kv] = '\0';
	setenv(name, eq + 1, 1);
}

static __attribute__((noreturn)) void exec_cmd(const char *const argv[],
					       const char *const *extra_env)
{
	char *args[16];
	int fd = open("/dev/null", O_RDONLY), n = 0;

	if (fd > 0) {
		dup2(fd, 0);
		close(fd);
	}
	proc_close_from(3);
	proc_reset_signals();
	for (; extra_env && *extra_env; extra_env++)
		set_kv(*extra_env);
	/* execvp takes char *const[]: copies, rather than casting const away. */
	for (; argv[n] && n < 15; n++)
		args[n] = strdup(argv[n]);
	args[n] = NULL;
	execvp(args[0], args);
	fprintf(stderr, "harness: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/*
 * Runs argv (searched on PATH) with the caller's stdout and stderr, extra
 * "NAME=value" settings, stdin from /dev/null; returns the waitpid status or
 * -1 when it could not be started.
 */
static int run_cmd(const char *const argv[], const char *const *extra_env)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0)
		exec_cmd(argv, extra_env);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return status;
}

static bool exited_ok(int status)
{
	return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int pg_cluster(const char *verb, bool with_port)
{
	char script[PATH_MAX], port[16];
	const char *const fast[] = { "PGSAGA_FAST=1", NULL };
	const char *argv[] = { "bash", script, verb, cluster_dir, with_port ? port : NULL, NULL,
			       NULL, NULL };
	const char *src = getenv("SAGA_SOURCE_DIR");
	const char *tls = getenv("SAGA_TEST_PG_TLS_DIR");

	if (!src || !*src)
		harness_fatal("SAGA_SOURCE_DIR is not set: run the tests with `meson test`");
	snprintf(script, sizeof(script), "%s/scripts/pg-cluster", src);
	snprintf(port, sizeof(port), "%d", cluster_port);
	if (with_port && tls && *tls) {
		argv[5] = "--tls";
		argv[6] = tls;
	}
	/* bash, not the script itself: a checkout may have lost the exec bit. */
	return run_cmd(argv, fast);
}

/* n distinct free ports: all sockets stay bound until every port is known. */
static void free_ports(int *out, int n)
{
	int fds[SVC_COUNT + 1];

	if (n > SVC_COUNT + 1)
		harness_fatal("free_ports: too many");
	for (int i = 0; i < n; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t len = sizeof(sa);

		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    getsockname(fds[i], (struct sockaddr *)&sa, &len) < 0)
			harness_fatal("cannot find a free port: %s", strerror(errno));
		out[i] = ntohs(sa.sin_port);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (remove(path) < 0 && errno != ENOENT)
		fprintf(stderr, "harness: cannot remove %s: %s\n", path, strerror(errno));
	return 0;
}

/* FTW_PHYS: as root DIR/data is a symlink to the cluster's /tmp twin, which
 * pg-cluster destroy removes itself; never follow it. */
static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cluster_teardown(void)
{
	if (pg_cluster("destroy", false) != 0)
		fprintf(stderr, "harness: pg-cluster destroy %s failed\n", cluster_dir);
	if (getenv("SAGA_KEEP_TMP"))
		fprintf(stderr, "harness: SAGA_KEEP_TMP set, keeping the logs in %s\n", cluster_dir);
	else
		rm_tree(cluster_dir);
}

/* For proc_watchdog_start: the cluster outlives its runner otherwise, as
 * pg_ctl detaches the postmaster into its own session, so neither meson's
 * timeout nor a Ctrl-C reaches it. */
static void cluster_teardown_of(const void *unused)
{
	(void)unused;
	cluster_teardown();
}

/* --- the cluster ---------------------------------------------------------- */

void harness_cluster_start(void)
{
	const char *tls = getenv("SAGA_TEST_PG_TLS_DIR");
	int port;

	if (cluster_port)
		return;
	snprintf(cluster_dir, sizeof(cluster_dir), "/tmp/pgsaga-test-XXXXXX");
	if (!mkdtemp(cluster_dir))
		harness_fatal("mkdtemp %s: %s", cluster_dir, strerror(errno));
	free_ports(&port, 1);
	cluster_port = port;
	cluster_owner = getpid();
	if (tls && *tls) {
		char crt[PATH_MAX], key[PATH_MAX];

		snprintf(crt, sizeof(crt), "%.4000s/postgres.crt", tls);
		snprintf(key, sizeof(key), "%.4000s/postgres.key", tls);
		setenv("PGSSLCERT", crt, 1);
		setenv("PGSSLKEY", key, 1);
	}
	if (pg_cluster("start", true) != 0) {
		cluster_teardown();
		harness_fatal("scripts/pg-cluster start %s %d failed", cluster_dir, port);
	}
	watchdog_pid = proc_watchdog_start("harness", cluster_teardown_of, NULL);
}

void harness_cluster_stop(void)
{
	if (!cluster_port || getpid() != cluster_owner)
		return;
	proc_watchdog_stop(&watchdog_pid);
	cluster_teardown();
	cluster_port = 0;
	cluster_dir[0] = '\0';
}

const char *harness_cluster_dir(void)
{
	return cluster_dir;
}

int harness_cluster_port(void)
{
	return cluster_port;
}

void harness_cluster_pause(void)
{
	if (!cluster_port)
		ck_abort_msg("harness_cluster_start was not called");
	if (pg_cluster("stop", false) != 0)
		ck_abort_msg("scripts/pg-cluster stop %s failed", cluster_dir);
}

void harness_cluster_resume(void)
{
	if (!cluster_port)
		ck_abort_msg("harness_cluster_start was not called");
	if (pg_cluster("start", true) != 0)
		ck_abort_msg("scripts/pg-cluster start %s %d failed", cluster_dir, cluster_port);
}

long harness_cluster_restart(int down_ms)
{
	int64_t t0 = clock_ms();

	harness_cluster_pause();
	sleep_ms(down_ms);
	harness_cluster_resume();
	return (long)(clock_ms() - t0);
}

/* --- SQL ------------------------------------------------------------------- */

static PGconn *connect_or_abort(const char *url)
{
	PGconn *c = PQconnectdb(url);

	if (PQstatus(c) != CONNECTION_OK) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(c));
		PQfinish(c);
		ck_abort_msg("cannot connect to %s: %s", url, msg);
	}
	return c;
}

static PGconn *admin_conn(struct saga_env *e)
{
	if (e->admin && PQstatus(e->admin) != CONNECTION_OK) {
		PQfinish(e->admin);
		e->admin = NULL;
	}
	if (!e->admin)
		e->admin = connect_or_abort(e->admin_url);
	return e->admin;
}

/*
 * Runs sql; on success returns the result, else NULL with the message in err.
 * A connection found broken (the cluster was restarted under it) is reset and
 * the statement tried once more.
 */
static PGresult *try_sql(struct saga_env *e, const char *sql, int nparams,
			 const char *const *params, char *err, size_t errlen)
{
	for (int attempt = 0;; attempt++) {
		PGconn *c = admin_conn(e);
		PGresult *res = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
		ExecStatusType st = PQresultStatus(res);

		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
			return res;
		snprintf(err, errlen, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(c));
		PQclear(res);
		if (attempt > 0 || PQstatus(c) != CONNECTION_BAD)
			return NULL;
		PQfinish(c);
		e->admin = NULL;
	}
}

static char *first_value(PGresult *res)
{
	char *v = NULL;

	if (PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0))
		v = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

char *env_sql(struct saga_env *e, const char *sql, int nparams, const char *const *params)
{
	char err[1024];
	PGresult *res = try_sql(e, sql, nparams, params, err, sizeof(err));

	if (!res)
		ck_abort_msg("SQL failed: %s\n  in: %s", err, sql);
	return first_value(res);
}

long long env_sql_ll(struct saga_env *e, const char *sql, int nparams, const char *const *params)
{
	char *v = env_sql(e, sql, nparams, params), *end;
	long long n;

	if (!v)
		ck_abort_msg("SQL returned NULL or no rows where a number was expected: %s", sql);
	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno || end == v || *end) {
		char copy[64];

		snprintf(copy, sizeof(copy), "%s", v);
		free(v);
		ck_abort_msg("SQL returned '%s', not an integer: %s", copy, sql);
	}
	free(v);
	return n;
}

/*
 * Errors do not fail the wait: what it waits for may be a table a service's
 * migrations have yet to create, or the end of an outage. The last value or
 * error is printed when it times out.
 */
long long env_sql_llf(struct saga_env *e, const char *fmt, ...)
{
	char sql[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	return env_sql_ll(e, sql, 0, NULL);
}

char *env_sqlf(struct saga_env *e, const char *fmt, ...)
{
	char sql[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	return env_sql(e, sql, 0, NULL);
}

bool env_wait_sql(struct saga_env *e, const char *sql, const char *want, int timeout_ms)
{
	long long deadline = clock_ms() + timeout_ms;
	char err[1024] = "", last[256] = "(none)";

	for (;;) {
		PGresult *res = try_sql(e, sql, 0, NULL, err, sizeof(err));

		if (res) {
			char *v = first_value(res);
			bool match = v && want && strcmp(v, want) == 0;

			match = match || (!v && !want);
			snprintf(last, sizeof(last), "%s", v ? v : "NULL");
			err[0] = '\0';
			free(v);
			if (match)
				return true;
		}
		if (clock_ms() >= deadline)
			break;
		sleep_ms(READY_POLL_MS);
	}
	fprintf(stderr, "harness: waited %d ms for '%s' from: %s\n  last value: %s%s%s\n",
		timeout_ms, want ? want : "NULL", sql, last, err[0] ? "\n  last error: " : "",
		err);
	return false;
}

const char *sql_state_as(const char *url, const char *sql)
{
	static char state[6];
	PGconn *c = PQconnectdb(url);
	PGresult *res;
	const char *s;

	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		snprintf(state, sizeof(state), "08006");	/* connection_failure */
		return state;
	}
	res = PQexec(c, sql);
	switch (PQresultStatus(res)) {
	case PGRES_COMMAND_OK:
	case PGRES_TUPLES_OK:
	case PGRES_EMPTY_QUERY:
		s = "00000";
		break;
	default:
		s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (!s)
			s = "XX000";
		break;
	}
	snprintf(state, sizeof(state), "%s", s);
	PQclear(res);
	PQfinish(c);
	return state;
}

void sql_exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult *r = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK,
		      "%s: %s", sql, PQerrorMessage(conn));
	PQclear(r);
}

/* --- files ----------------------------------------------------------------- */

char *file_read(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

/* --- one test's world ------------------------------------------------------ */

static void random_hex(char *out, size_t bytes)
{
	unsigned char buf[32];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	ssize_t got = fd >= 0 ? read(fd, buf, bytes) : -1;

	if (fd >= 0)
		close(fd);
	if (bytes > sizeof(buf) || got != (ssize_t)bytes)
		ck_abort_msg("cannot read /dev/urandom");
	for (size_t i = 0; i < bytes; i++)
		sprintf(out + 2 * i, "%02x", buf[i]);
}

void env_create(struct saga_env *e)
{
	char cluster_url[256], sql[128], script[PATH_MAX];
	PGconn *c;
	PGresult *res;
	int status;

	if (!cluster_port)
		ck_abort_msg("harness_cluster_start was not called");
	memset(e, 0, sizeof(*e));
	snprintf(e->dbname, sizeof(e->dbname), "t%ld_%u", (long)getpid(), ++db_counter);

	snprintf(cluster_url, sizeof(cluster_url),
		 "host=127.0.0.1 port=%d dbname=postgres user=postgres", cluster_port);
	c = connect_or_abort(cluster_url);
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", e->dbname);
	res = PQexec(c, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", PQresultErrorMessage(res));
		PQclear(res);
		PQfinish(c);
		ck_abort_msg("%s: %s", sql, msg);
	}
	PQclear(res);
	PQfinish(c);

	snprintf(e->admin_url, sizeof(e->admin_url),
		 "host=127.0.0.1 port=%d dbname=%s user=postgres", cluster_port, e->dbname);
	for (int s = 0; s < SVC_COUNT; s++)
		snprintf(e->url[s], sizeof(e->url[s]), "host=127.0.0.1 port=%d dbname=%s user=%s",
			 cluster_port, e->dbname, svc_role[s]);
	snprintf(e->auditor_url, sizeof(e->auditor_url),
		 "host=127.0.0.1 port=%d dbname=%s user=saga_auditor", cluster_port, e->dbname);

	snprintf(script, sizeof(script), "%s/sql/bootstrap.sql", env_dir("SAGA_SOURCE_DIR"));
	{
		/* -X: a developer's ~/.psqlrc must not change what runs. */
		const char *const argv[] = { "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1",
					     "-f", script, e->admin_url, NULL };

		status = run_cmd(argv, NULL);
	}
	if (!exited_ok(status))
		ck_abort_msg("psql -f %s failed on %s", script, e->dbname);

	harness_broker_reset();
	free_ports(e->port, SVC_COUNT);
	strcpy(e->token, "test-token-");
	random_hex(e->token + strlen(e->token), 12);
}

/* <cluster dir>/<dbname>-<name>.log: where a process of e writes. */
static void log_path_of(const struct saga_env *e, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s-%s.log", cluster_dir, e->dbname, name);

	if (n < 0 || (size_t)n >= len)
		ck_abort_msg("log path too long in %s", cluster_dir);
}

void env_log_path(const struct saga_env *e, enum svc s, char *out, size_t len)
{
	log_path_of(e, svc_name[s], out, len);
}

static void print_log_tail(const struct saga_env *e, const char *name)
{
	char path[PATH_MAX], buf[LOG_TAIL_BYTES + 1];
	int fd;
	off_t size;
	ssize_t n;

	log_path_of(e, name, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	lseek(fd, size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0, SEEK_SET);
	n = read(fd, buf, LOG_TAIL_BYTES);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	fprintf(stderr, "---- end of %s ----\n%s%s---- end ----\n", path, buf,
		n > 0 && buf[n - 1] != '\n' ? "\n" : "");
}

/* The test client's TLS settings (harness_https); on when ca[0]. */
static struct {
	char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
} hs;

void harness_https(const char *ca, const char *cert, const char *key)
{
	snprintf(hs.ca, sizeof(hs.ca), "%s", ca ? ca : "");
	snprintf(hs.cert, sizeof(hs.cert), "%s", cert ? cert : "");
	snprintf(hs.key, sizeof(hs.key), "%s", key ? key : "");
}

bool harness_https_on(void)
{
	return hs.ca[0] != '\0';
}

/* What one process of a test runs as: the three services and participants alike. */
struct proc_spec {
	const char *name;   /* for logs and messages */
	const char *binary; /* path */
	const char *db_url; /* DATABASE_URL */
	int port;           /* LISTEN_ADDR's */
	const char *const *preset; /* "NAME=value" before extra, may be NULL */
};

static __attribute__((noreturn)) void exec_process(const struct saga_env *e,
						   const struct proc_spec *p,
						   const char *const *extra, pid_t parent)
{
	char val[128], logp[PATH_MAX];
	const char *ll = getenv("SAGA_TEST_LOG_LEVEL");
	int fd;

	/* A test that fails or times out must not leave its services behind. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	log_path_of(e, p->name, logp, sizeof(logp));
	fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	fd = open("/dev/null", O_RDONLY);
	if (fd >= 0)
		dup2(fd, 0);
	proc_close_from(3);
	proc_reset_signals();

	for (const char *const *v = svc_vars; *v; v++)
		unsetenv(*v);
	setenv("DATABASE_URL", p->db_url, 1);
	snprintf(val, sizeof(val), "127.0.0.1:%d", p->port);
	setenv("LISTEN_ADDR", val, 1);
	for (int s = 0; s < SVC_COUNT; s++) {
		snprintf(val, sizeof(val), "%s://127.0.0.1:%d", harness_https_on() ? "https" : "http",
			 e->port[s]);
		setenv(svc_peer_var[s], val, 1);
	}
	setenv("INTERNAL_TOKEN", e->token, 1);
	setenv("TRANSPORT", harness_transport(), 1);
	if (harness_amqp())
		setenv("AMQP_URL", harness_amqp_url(), 1);
	setenv("LOG_LEVEL", ll && *ll ? ll : "warn", 1);
	/*
	 * Redelivery, and probing a peer whose circuit opened, within a test's
	 * patience. Retries come ~60 times faster than by default, so more of
	 * them are allowed before a dead letter: an outage of a few seconds must
	 * not dead-letter what production would still retry. A test of the real
	 * pacing or of dead letters sets its own values in extra.
	 */
	setenv("RETRY_BASE_MS", "50", 1);
	setenv("RETRY_CAP_MS", "500", 1);
	setenv("RETRY_MAX_ATTEMPTS", "100", 1);
	setenv("BREAKER_OPEN_MS", "500", 1);
	for (const char *const *v = p->preset; v && *v; v++)
		set_kv(*v);
	for (; extra && *extra; extra++)
		set_kv(*extra);

	execl(p->binary, p->binary, (char *)NULL);
	fprintf(stderr, "harness: cannot run %s: %s\n", p->binary, strerror(errno));
	_exit(127);
}

static int http_get_status(int port, const char *path, int timeout_ms);

/* Starts p into *pid and waits for its /readyz; fails the test otherwise. */
static void start_process(struct saga_env *e, const struct proc_spec *p, pid_t *pid,
			  const char *const *extra)
{
	long long deadline;
	pid_t self = getpid();

	if (access(p->binary, X_OK) < 0)
		ck_abort_msg("%s: %s", p->binary, strerror(errno));
	if (*pid)
		ck_abort_msg("%s is already running (pid %ld)", p->name, (long)*pid);
	*pid = fork();
	if (*pid < 0)
		ck_abort_msg("fork: %s", strerror(errno));
	if (*pid == 0)
		exec_process(e, p, extra, self);

	deadline = clock_ms() + READY_TIMEOUT_MS;
	for (;;) {
		int status;

		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			*pid = 0;
			print_log_tail(e, p->name);
			if (WIFEXITED(status))
				ck_abort_msg("%s exited with status %d while starting (log above)",
					     p->name, WEXITSTATUS(status));
			ck_abort_msg("%s died of signal %d while starting (log above)", p->name,
				     WTERMSIG(status));
		}
		if (http_get_status(p->port, "/readyz", 1000) == 200)
			return;
		if (clock_ms() >= deadline)
			break;
		sleep_ms(READY_POLL_MS);
	}
	kill(*pid, SIGKILL);
	waitpid(*pid, NULL, 0);
	*pid = 0;
	print_log_tail(e, p->name);
	ck_abort_msg("%s not ready on port %d after %d ms (log above)", p->name, p->port,
		     READY_TIMEOUT_MS);
}

static void service_spec(const struct saga_env *e, enum svc s, char *path, size_t len,
			 struct proc_spec *p)
{
	snprintf(path, len, "%s/src/%s/saga-%s", env_dir("SAGA_BUILD_DIR"), svc_name[s],
		 svc_name[s]);
	*p = (struct proc_spec){ .name = svc_name[s], .binary = path, .db_url = e->url[s],
				 .port = e->port[s] };
}

void env_start(struct saga_env *e, enum svc s, const char *const *extra)
{
	char path[PATH_MAX];
	struct proc_spec p;

	service_spec(e, s, path, sizeof(path), &p);
	start_process(e, &p, &e->pid[s], extra);
}

int env_run_to_exit(struct saga_env *e, enum svc s, const char *const *extra)
{
	char path[PATH_MAX];
	struct proc_spec p;
	long long deadline = clock_ms() + READY_TIMEOUT_MS;
	pid_t pid, self = getpid();
	int status;

	service_spec(e, s, path, sizeof(path), &p);
	if (e->pid[s])
		ck_abort_msg("%s is already running (pid %ld)", svc_name[s], (long)e->pid[s]);
	pid = fork();
	if (pid < 0)
		ck_abort_msg("fork: %s", strerror(errno));
	if (pid == 0)
		exec_process(e, &p, extra, self);
	for (;;) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		if (http_get_status(e->port[s], "/readyz", 1000) == 200 || clock_ms() >= deadline)
			break;
		sleep_ms(READY_POLL_MS);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	print_log_tail(e, svc_name[s]);
	ck_abort_msg("%s started (or hung) where it had to stop (log above)", svc_name[s]);
}

void env_start_all(struct saga_env *e)
{
	env_start(e, SVC_INV, NULL);
	env_start(e, SVC_PAY, NULL);
	env_start(e, SVC_ORCH, NULL);
}

/* Sends sig to *pid and waits for it; 0 in *pid after. */
static int stop_process(struct saga_env *e, const char *name, pid_t *pid, int sig)
{
	long long deadline = clock_ms() + STOP_TIMEOUT_MS;
	pid_t p = *pid;
	int status;

	if (!p)
		ck_abort_msg("stopping %s: it is not running", name);
	kill(p, sig);
	for (;;) {
		pid_t r = waitpid(p, &status, WNOHANG);

		if (r == p)
			break;
		if (r < 0 && errno != EINTR) {
			*pid = 0;
			ck_abort_msg("waitpid %s: %s", name, strerror(errno));
		}
		if (clock_ms() >= deadline) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
			*pid = 0;
			print_log_tail(e, name);
			ck_abort_msg("%s did not exit within %d ms of signal %d", name,
				     STOP_TIMEOUT_MS, sig);
		}
		sleep_ms(10);
	}
	*pid = 0;
	return status;
}

int env_stop(struct saga_env *e, enum svc s, int sig)
{
	return stop_process(e, svc_name[s], &e->pid[s], sig);
}

int harness_free_port(void)
{
	int port;

	free_ports(&port, 1);
	return port;
}

/* --- participants made of SQL ------------------------------------------------ */

void env_load_sql(struct saga_env *e, const char *rel_path)
{
	char script[PATH_MAX];
	const char *const argv[] = { "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", script,
				     e->admin_url, NULL };

	snprintf(script, sizeof(script), "%s/%s", env_dir("SAGA_SOURCE_DIR"), rel_path);
	if (!exited_ok(run_cmd(argv, NULL)))
		ck_abort_msg("psql -f %s failed on %s", script, e->dbname);
}

static struct env_participant *participant_of(struct saga_env *e, const char *name, bool add)
{
	struct env_participant *free_slot = NULL;

	for (size_t i = 0; i < ENV_PARTICIPANTS; i++) {
		if (strcmp(e->part[i].name, name) == 0)
			return &e->part[i];
		if (!free_slot && !e->part[i].name[0])
			free_slot = &e->part[i];
	}
	if (!add)
		ck_abort_msg("participant %s was never started", name);
	if (!free_slot || strlen(name) >= sizeof(free_slot->name))
		ck_abort_msg("participant %s: no room (%d at most, names < %zu bytes)", name,
			     ENV_PARTICIPANTS, sizeof(free_slot->name));
	snprintf(free_slot->name, sizeof(free_slot->name), "%s", name);
	return free_slot;
}

void env_start_participant(struct saga_env *e, const char *name, int port,
			   const char *const *extra)
{
	struct env_participant *pt = participant_of(e, name, true);
	char path[PATH_MAX], url[512], pname[96];
	const char *preset[2] = { pname, NULL };
	struct proc_spec p;

	snprintf(path, sizeof(path), "%s/src/participant/saga-participant",
		 env_dir("SAGA_BUILD_DIR"));
	snprintf(url, sizeof(url), "host=127.0.0.1 port=%d dbname=%s user=saga_%s", cluster_port,
		 e->dbname, name);
	snprintf(pname, sizeof(pname), "PARTICIPANT_NAME=%s", name);
	pt->port = port;
	p = (struct proc_spec){ .name = pt->name, .binary = path, .db_url = url, .port = port,
				.preset = preset };
	start_process(e, &p, &pt->pid, extra);
}

int env_stop_participant(struct saga_env *e, const char *name, int sig)
{
	struct env_participant *pt = participant_of(e, name, false);

	return stop_process(e, pt->name, &pt->pid, sig);
}

pid_t env_participant_pid(struct saga_env *e, const char *name)
{
	return participant_of(e, name, false)->pid;
}

static void kill_and_reap(pid_t *pid)
{
	if (!*pid)
		return;
	kill(*pid, SIGKILL);
	while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
		;
	*pid = 0;
}

void env_destroy(struct saga_env *e)
{
	for (int s = 0; s < SVC_COUNT; s++)
		kill_and_reap(&e->pid[s]);
	for (size_t i = 0; i < ENV_PARTICIPANTS; i++)
		kill_and_reap(&e->part[i].pid);
	if (e->admin) {
		PQfinish(e->admin);
		e->admin = NULL;
	}
}

/* --- HTTP client ------------------------------------------------------------ */

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const void *data, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			abort();
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_addf(struct buf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static bool has_header(const char *const *headers, const char *name)
{
	size_t n = strlen(name);

	for (; headers && *headers; headers++) {
		if (strncasecmp(*headers, name, n) == 0 && (*headers)[n] == ':')
			return true;
	}
	return false;
}

/* Value of header name in a raw block of "Name: value\r\n" lines, malloc'd. */
static char *find_header(const char *block, const char *name)
{
	size_t n = strlen(name);

	for (const char *line = block; line && *line;) {
		const char *eol = strstr(line, "\r\n");
		const char *end = eol ? eol : line + strlen(line);

		if ((size_t)(end - line) > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
			const char *v = line + n + 1;

			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
				end--;
			return strndup(v, (size_t)(end - v));
		}
		line = eol ? eol + 2 : NULL;
	}
	return NULL;
}

/*
 * Decodes a chunked body: 1 when complete (the last chunk seen), 0 when more
 * is needed, -1 when malformed. Trailers are skipped.
 */
static int dechunk(const char *in, size_t len, struct buf *out)
{
	size_t pos = 0;

	out->len = 0;
	for (;;) {
		const char *eol = memmem(in + pos, len - pos, "\r\n", 2);
		char *end;
		unsigned long long size;

		if (!eol)
			return 0;
		errno = 0;
		size = strtoull(in + pos, &end, 16);
		if (errno || end == in + pos)
			return -1;
		pos = (size_t)(eol - in) + 2;
		if (size == 0) {
			/* Trailers, then the empty line. */
			for (;;) {
				eol = memmem(in + pos, len - pos, "\r\n", 2);
				if (!eol)
					return 0;
				if (eol == in + pos)
					return 1;
				pos = (size_t)(eol - in) + 2;
			}
		}
		if (size > len - pos || len - pos - size < 2)
			return 0;
		buf_add(out, in + pos, (size_t)size);
		pos += (size_t)size;
		if (memcmp(in + pos, "\r\n", 2) != 0)
			return -1;
		pos += 2;
	}
}

/*
 * Whether raw (header + body so far) is a complete response: lets us stop
 * reading at the end of a message instead of waiting for the server's close.
 */
static bool response_complete(const char *raw, size_t len, bool head)
{
	const char *hend = memmem(raw, len, "\r\n\r\n", 4);
	size_t hlen, blen;
	char *te, *cl;
	int status;
	bool done = false;

	if (!hend)
		return false;
	hlen = (size_t)(hend - raw) + 4;
	blen = len - hlen;
	if (sscanf(raw, "HTTP/%*d.%*d %d", &status) != 1)
		return false;
	if (head || status == 204 || status == 304 || (status >= 100 && status < 200))
		return true;
	{
		char *hdrs = strndup(raw, hlen);

		te = find_header(hdrs, "Transfer-Encoding");
		cl = find_header(hdrs, "Content-Length");
		free(hdrs);
	}
	if (te && strcasestr(te, "chunked")) {
		struct buf tmp = { 0 };

		done = dechunk(raw + hlen, blen, &tmp) != 0;
		free(tmp.p);
	} else if (cl) {
		done = blen >= strtoull(cl, NULL, 10);
	}
	free(te);
	free(cl);
	return done;
}

static void set_timeouts(int fd, int timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void resp_init_empty(struct http_resp *out)
{
	out->status = 0;
	out->headers = strdup("");
	out->body = strdup("");
	out->body_len = 0;
}

/* Splits raw into status, header block and (decoded) body. */
static int parse_response(const char *raw, size_t len, struct http_resp *out)
{
	const char *hend = memmem(raw, len, "\r\n\r\n", 4);
	const char *first_eol;
	size_t hlen;
	int status;
	char *te, *cl;
	struct buf body = { 0 };

	if (!hend || sscanf(raw, "HTTP/%*d.%*d %d", &status) != 1)
		return -1;
	first_eol = strstr(raw, "\r\n");
	hlen = (size_t)(hend - raw) + 4;
	free(out->headers);
	/* The header lines, status line excluded, each ending in \r\n. */
	out->headers = strndup(first_eol + 2, (size_t)(hend + 2 - (first_eol + 2)));
	te = find_header(out->headers, "Transfer-Encoding");
	cl = find_header(out->headers, "Content-Length");
	if (te && strcasestr(te, "chunked")) {
		if (dechunk(raw + hlen, len - hlen, &body) < 0)
			buf_add(&body, "", 0);
	} else {
		size_t blen = len - hlen;

		if (cl && strtoull(cl, NULL, 10) < blen)
			blen = (size_t)strtoull(cl, NULL, 10);
		buf_add(&body, raw + hlen, blen);
	}
	free(te);
	free(cl);
	if (!body.p)
		buf_add(&body, "", 0);
	free(out->body);
	out->body = body.p;
	out->body_len = body.len;
	out->status = status;
	return 0;
}

SSL *harness_tls_connect(int fd, SSL_CTX **ctx_out, const char *ca, const char *cert,
			 const char *key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl = NULL;

	*ctx_out = ctx;
	if (!ctx || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
		return NULL;
	if (cert && *cert &&
	    (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
	     SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1))
		return NULL;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	ssl = SSL_new(ctx);
	if (!ssl || X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1") != 1 ||
	    SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

/* A TLS client connection on fd with harness_https's settings, or NULL. */
static SSL *https_connect(int fd, SSL_CTX **ctx)
{
	return harness_tls_connect(fd, ctx, hs.ca, hs.cert, hs.key);
}

static int http_do_timeout(int port, const char *method, const char *path,
			   const char *const *headers, const char *body, size_t body_len,
			   struct http_resp *out, int timeout_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct buf req = { 0 }, raw = { 0 };
	bool head = strcasecmp(method, "HEAD") == 0;
	size_t off = 0;
	int fd, rc = -1;
	SSL_CTX *ctx = NULL;
	SSL *ssl = NULL;

	resp_init_empty(out);
	if (body && body_len == (size_t)-1)
		body_len = strlen(body);

	buf_addf(&req, "%s %s HTTP/1.1\r\n", method, path);
	/* A caller's own Host or Content-Length wins: tests use that to send lies. */
	if (!has_header(headers, "Host"))
		buf_addf(&req, "Host: 127.0.0.1:%d\r\n", port);
	buf_add(&req, "Connection: close\r\n", 19);
	if (body && !has_header(headers, "Content-Length") &&
	    !has_header(headers, "Transfer-Encoding"))
		buf_addf(&req, "Content-Length: %zu\r\n", body_len);
	for (const char *const *h = headers; h && *h; h++) {
		buf_add(&req, *h, strlen(*h));
		buf_add(&req, "\r\n", 2);
	}
	buf_add(&req, "\r\n", 2);
	if (body)
		buf_add(&req, body, body_len);

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto out;
	set_timeouts(fd, timeout_ms);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto out;
	if (harness_https_on() && !(ssl = https_connect(fd, &ctx)))
		goto out;

	/* A server may answer (413, 401) and close before taking the whole body:
	 * a failed send still leaves its answer to read. */
	while (off < req.len) {
		ssize_t n = ssl ? SSL_write(ssl, req.p + off, (int)(req.len - off))
				: send(fd, req.p + off, req.len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR && !ssl)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	for (;;) {
		char chunk[16384];
		ssize_t n = ssl ? SSL_read(ssl, chunk, sizeof(chunk)) : recv(fd, chunk, sizeof(chunk), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_add(&raw, chunk, (size_t)n);
		if (response_complete(raw.p, raw.len, head))
			break;
	}
	if (raw.len && parse_response(raw.p, raw.len, out) == 0)
		rc = 0;
out:
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	ERR_clear_error();
	if (fd >= 0)
		close(fd);
	free(req.p);
	free(raw.p);
	return rc;
}

int http_do(int port, const char *method, const char *path, const char *const *headers,
	    const char *body, size_t body_len, struct http_resp *out)
{
	return http_do_timeout(port, method, path, headers, body, body_len, out, HTTP_TIMEOUT_MS);
}

static int http_get_status(int port, const char *path, int timeout_ms)
{
	struct http_resp r;
	int status;

	http_do_timeout(port, "GET", path, NULL, NULL, 0, &r, timeout_ms);
	status = r.status;
	http_resp_free(&r);
	return status;
}

char *http_header(const struct http_resp *r, const char *name)
{
	return r->headers ? find_header(r->headers, name) : NULL;
}

void http_resp_free(struct http_resp *r)
{
	free(r->headers);
	free(r->body);
	r->headers = NULL;
	r->body = NULL;
	r->body_len = 0;
	r->status = 0;
}

int env_post_order(struct saga_env *e, const char *key, const char *body,
		   struct http_resp *out)
{
	char kh[300];
	const char *h[2] = { kh, NULL };

	if (key)
		snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key);
	ck_assert_int_eq(http_do(e->port[SVC_ORCH], "POST", "/orders", key ? h : NULL, body,
				 (size_t)-1, out),
			 0);
	return out->status;
}

struct json_object *parse_body(const struct http_resp *r)
{
	char err[128];
	struct json_object *o = jsonx_parse(r->body, r->body_len, err, sizeof(err));

	ck_assert_msg(o != NULL, "response is not JSON (%s): %s", err, r->body);
	return o;
}

struct json_object *jget(struct json_object *o, const char *key)
{
	struct json_object *v;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "no %s in %.300s", key,
		      json_object_to_json_string(o));
	return v;
}

const char *jstr(struct json_object *o, const char *key)
{
	return json_object_get_string(jget(o, key));
}

void env_new_order(struct saga_env *e, const char *customer, const char *item, long qty,
		   long amount, char *saga)
{
	struct http_resp r;
	char body[256], key[UUID_STR_LEN];
	struct json_object *o;

	uuid_new(key);
	snprintf(body, sizeof(body),
		 "{\"customerId\":\"%s\",\"itemId\":\"%s\",\"qty\":%ld,\"amount\":%ld}",
		 customer, item, qty, amount);
	ck_assert_msg(env_post_order(e, key, body, &r) == 201, "POST /orders %s: %d %s", body,
		      r.status, r.body);
	if (saga) {
		o = parse_body(&r);
		snprintf(saga, UUID_STR_LEN, "%s", jstr(o, "sagaId"));
		json_object_put(o);
	}
	http_resp_free(&r);
}
