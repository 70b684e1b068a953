/*
 * harness: what integration tests stand on.
 *
 * A throwaway PostgreSQL cluster per test binary (started as an unprivileged
 * user by scripts/pg-cluster, in a private directory on a free port), a fresh
 * database per test with sql/bootstrap.sql applied, and the three real
 * service binaries started on free ports, each connecting as its own role;
 * participants made of SQL (saga-participant) beside them when a test asks.
 *
 * Tests run in Check's forked children; services are started from the child
 * with PR_SET_PDEATHSIG so a failing test cannot leak them.
 */
#ifndef PGSAGA_HARNESS_H
#define PGSAGA_HARNESS_H

#include <check.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>

enum svc { SVC_ORCH = 0, SVC_PAY = 1, SVC_INV = 2, SVC_COUNT };

/* Unchecked fixture: start (and, at the end, stop) the cluster once. With
 * SAGA_TEST_PG_TLS_DIR set (a directory of scripts/certs with postgres.crt),
 * the cluster runs TLS only, a role logging in with a client certificate
 * that names it (scripts/pg-cluster --tls); the process's own connections
 * (and its children's, unless their URL says otherwise) then present
 * postgres.crt, the superuser's (PGSSLCERT, PGSSLKEY). */
void harness_cluster_start(void);
void harness_cluster_stop(void);

/*
 * A test program's main: the cluster and (under amqp) the broker around one
 * run of s, whose runner it frees. EXIT_SUCCESS when every test passed
 * (harness_amqp.c, which knows both).
 */
int harness_run(Suite *s);
/* The same for n suites, run in order in one runner (one cluster). */
int harness_run_all(Suite *const suites[], size_t n);

/* The cluster's private directory (service logs live there) and port. */
const char *harness_cluster_dir(void);
int harness_cluster_port(void);

/* Stops the cluster (fast shutdown: clients are cut off) and starts it again
 * on the same port with the same data, to test database outages. Services keep
 * running. Callable from a test. */
void harness_cluster_pause(void);
void harness_cluster_resume(void);
/* Both, with down_ms between them; returns how long the database was
 * unreachable, in ms. Services must reconnect by themselves. */
long harness_cluster_restart(int down_ms);

/*
 * The transport under test (harness_amqp.c): SAGA_TEST_TRANSPORT=amqp runs the services with
 * TRANSPORT=amqp against a RabbitMQ node the runner starts once
 * (harness_broker_start, an unchecked fixture like the cluster); anything
 * else is http. env_create empties the broker's pgsaga queues, so each test
 * starts from nothing as it does with its fresh database.
 */
bool harness_amqp(void);
const char *harness_transport(void); /* "http" or "amqp" */
void harness_broker_start(void);      /* no-op under http */
void harness_broker_stop(void);
const char *harness_amqp_url(void);
struct broker *harness_broker(void);  /* broker.h: kill, restart, ctl */
void harness_broker_reset(void);
void harness_broker_delete_queue(const char *queue);
/* Declares queue (classic, not durable) bound to exchange pgsaga with
 * routing_key: it receives a copy of every message sent there. */
void harness_broker_tap(const char *queue, const char *routing_key);

#define ENV_PARTICIPANTS 2

struct saga_env {
	char dbname[64];
	char admin_url[512];        /* superuser, this database */
	char url[SVC_COUNT][512];   /* DATABASE_URL for each service's role */
	char auditor_url[512];
	int port[SVC_COUNT];        /* HTTP ports, chosen free at env_create */
	pid_t pid[SVC_COUNT];       /* 0 when not running */
	char token[64];             /* INTERNAL_TOKEN given to the services */
	PGconn *admin;              /* cached superuser connection */
	/* participants made of SQL (env_start_participant), "" name when free */
	struct env_participant {
		char name[32];
		int port;
		pid_t pid;          /* 0 when not running */
	} part[ENV_PARTICIPANTS];
};

/* A new database with bootstrap.sql applied; no service started yet. */
void env_create(struct saga_env *e);

/*
 * Starts one service with the standard environment (DATABASE_URL, LISTEN_ADDR,
 * peers' URLs, INTERNAL_TOKEN, LOG_LEVEL=warn unless set) plus extra, a
 * NULL-terminated list of "NAME=value" (may be NULL; later entries win), and
 * waits until GET /readyz answers 200 (fails the test after 20 s).
 * Defaults that make tests converge fast, each overridable in extra:
 * RETRY_BASE_MS=50, RETRY_CAP_MS=500, RETRY_MAX_ATTEMPTS=100,
 * BREAKER_OPEN_MS=500. Other service settings from the runner's environment
 * are dropped; SAGA_TEST_LOG_LEVEL, when set, replaces the default warn.
 * Its stderr goes to <cluster dir>/<dbname>-<service>.log.
 */
void env_start(struct saga_env *e, enum svc s, const char *const *extra);
/*
 * Runs one service as env_start does, for a start that must fail: waits
 * until it exits and returns its status as from waitpid. Fails the test
 * when it became ready instead, or still runs after 20 s (it is killed).
 */
int env_run_to_exit(struct saga_env *e, enum svc s, const char *const *extra);
/* That log file's path. */
void env_log_path(const struct saga_env *e, enum svc s, char *out, size_t len);
void env_start_all(struct saga_env *e);

/* Sends sig to the service and waits for it to exit; returns its exit status
 * as from waitpid (use WIFEXITED etc.). */
int env_stop(struct saga_env *e, enum svc s, int sig);

/*
 * Participants made of SQL functions (saga-participant, docs/participants.md)
 * beside the three services, e.g. shipping:
 *
 *   env_load_sql(e, "sql/shipping/shipping.sql");
 *   env_start_participant(e, "shipping", port, extra);
 *
 * env_load_sql runs a file of the source tree as superuser on e's database
 * (psql, ON_ERROR_STOP). env_start_participant runs saga-participant as
 * env_start runs a service (same defaults, peers' URLs, token, transport;
 * log <dbname>-<name>.log) with PARTICIPANT_NAME=name, DATABASE_URL as role
 * saga_<name>, LISTEN_ADDR on port; extra must give PARTICIPANT_COMMANDS. The
 * orchestrator learns its URL from its own extra (e.g. SHIPPING_URL). At most
 * ENV_PARTICIPANTS names per env; env_destroy kills them too.
 */
void env_load_sql(struct saga_env *e, const char *rel_path);
void env_start_participant(struct saga_env *e, const char *name, int port,
			   const char *const *extra);
/* As env_stop, for a participant started before. */
int env_stop_participant(struct saga_env *e, const char *name, int sig);
/* Its pid, 0 when not running. */
pid_t env_participant_pid(struct saga_env *e, const char *name);
/* A free TCP port on 127.0.0.1 (a participant's, say). */
int harness_free_port(void);

/* Stops what runs (SIGKILL) and closes connections. The database stays. */
void env_destroy(struct saga_env *e);

/*
 * HTTPS (tests/tls/tls.c): from now on in this process, http_do and env_start's
 * readiness probe speak TLS, verifying the service against the PEM bundle ca
 * and the address 127.0.0.1, presenting cert/key when not NULL; and the
 * services started get https:// peer URLs. ca NULL: plain HTTP again.
 */
void harness_https(const char *ca, const char *cert, const char *key);
bool harness_https_on(void);
/*
 * A blocking TLS client connection on the connected socket fd (same checks),
 * or NULL. *ctx is set even on failure: the caller frees both.
 */
typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
SSL *harness_tls_connect(int fd, SSL_CTX **ctx, const char *ca, const char *cert,
			 const char *key);

/* --- HTTP: a small blocking HTTP/1.1 client, one connection per call --- */

struct http_resp {
	int status;           /* 0 when the connection failed or closed early */
	char *headers;        /* raw header block, NUL-terminated */
	char *body;           /* NUL-terminated (may contain NULs before) */
	size_t body_len;
};

/*
 * method and path as sent; headers a NULL-terminated list of "Name: value"
 * lines (may be NULL); body may be NULL (then no Content-Length) and is sent
 * with body_len bytes (pass (size_t)-1 for strlen). Times out after 30 s.
 */
int http_do(int port, const char *method, const char *path, const char *const *headers,
	    const char *body, size_t body_len, struct http_resp *out);
/* Case-insensitive header lookup; returns a malloc'd value or NULL. */
char *http_header(const struct http_resp *r, const char *name);
void http_resp_free(struct http_resp *r);

/* --- JSON answers (json-c); each fails the test when the JSON is not so --- */

struct json_object;

/* r's body parsed as JSON; free with json_object_put. */
struct json_object *parse_body(const struct http_resp *r);
/* o's member key, borrowed from o (NULL for a JSON null); o must have it. */
struct json_object *jget(struct json_object *o, const char *key);
/* jget as a string: json-c's text for a non-string, NULL for a JSON null. */
const char *jstr(struct json_object *o, const char *key);

/*
 * POST /orders to e's orchestrator with body, and "Idempotency-Key: key"
 * unless key is NULL; returns the status and fills out (caller frees). Fails
 * the test when no answer came.
 */
int env_post_order(struct saga_env *e, const char *key, const char *body,
		   struct http_resp *out);
/*
 * Places an order of qty item for customer, paying amount, under a fresh
 * key; fails the test unless it was accepted (201). Its saga id goes to
 * saga (UUID_STR_LEN bytes) unless saga is NULL.
 */
void env_new_order(struct saga_env *e, const char *customer, const char *item, long qty,
		   long amount, char *saga);

/* --- SQL on the test's database as superuser (or any url) --- */

/* First column of the first row as a malloc'd string; NULL for SQL NULL
 * or no rows. Fails the test on an SQL error. params may be NULL. */
char *env_sql(struct saga_env *e, const char *sql, int nparams, const char *const *params);
long long env_sql_ll(struct saga_env *e, const char *sql, int nparams,
		     const char *const *params);
/*
 * printf-style variants, for tests that splice in ids they generated
 * themselves (never input from elsewhere).
 */
long long env_sql_llf(struct saga_env *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
char *env_sqlf(struct saga_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Polls sql (no params) every 20 ms until its first value equals want,
 * or timeout_ms passes; returns true when it matched. */
bool env_wait_sql(struct saga_env *e, const char *sql, const char *want, int timeout_ms);

/* Runs sql once on a new connection to url; returns the SQLSTATE of the
 * error ("00000" on success) in a static buffer. */
const char *sql_state_as(const char *url, const char *sql);

/* Runs sql with its params (nparams of them, may be 0 and NULL) on a
 * connection of the test's own; fails the test unless it succeeded (rows or
 * not). */
void sql_exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params);

/* --- files --- */

/* The whole of the file at path, NUL-terminated, malloc'd; fails the test
 * when it cannot be read. */
char *file_read(const char *path);

#endif
