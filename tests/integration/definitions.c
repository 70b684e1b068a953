/*
 * Saga definitions in the admin API and at start (docs/protocol.md, "Saga
 * definitions"): the orchestrator alone, with ADMIN_TOKEN, on a throwaway
 * PostgreSQL cluster, over real sockets.
 *
 * - registering: 201 new, 200 the same JSON value again, 409 another
 *   content under a registered (name, version), 400 invalid_definition with
 *   the definition's first fault ("path: rule"), nothing stored;
 * - reading: the list (from the table, so a row another orchestrator wrote
 *   shows too) and one definition; 404, 400, 405 for the wrong path;
 * - SAGA_DEFINITIONS_DIR: a valid file is registered at start, an invalid
 *   or conflicting one stops the start naming the file;
 * - migrating in-flight sagas between versions: the move (a Migrated
 *   history row, version + 1, deadline kept) and every refusal, a saga that
 *   changes while it is being moved included (the interleaving fixed with
 *   a row lock, not timed).
 */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "jsonx.h"
#include "uuid.h"

#define ADMIN_TOKEN "admin-token-of-the-definitions-test"
#define BEARER "Authorization: Bearer " ADMIN_TOKEN
#define DEFS "/admin/api/definitions"

static const char *const admin_env[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, NULL };

/* A step named n of participant svc; its command is cmd. */
#define STEP_CMD(n, cmd)                                                                   \
	"{\"name\":\"" n "\",\"participant\":\"svc\",\"command\":\"" cmd "\","              \
	"\"succeeded\":\"" n "Done\",\"failed\":\"" n "Failed\",\"compensation\":\"Undo" n \
	"\",\"compensated\":\"" n "Undone\"}"
#define STEP(n) STEP_CMD(n, "Do" n)
#define DEF(name, v, input, steps)                                                  \
	"{\"name\":\"" name "\",\"version\":" #v ",\"input\":" input ",\"steps\":[" steps \
	"]}"
#define IN_REF "{\"ref\":{\"type\":\"id\"}}"
#define IN_REF_NOTE "{\"ref\":{\"type\":\"id\"},\"note\":{\"type\":\"string\",\"maxLength\":10}}"

/* demo: v1 runs A, B; v2 adds C; v3 changes A's command; v4 needs a note too. */
static const char demo1[] = DEF("demo", 1, IN_REF, STEP("A") "," STEP("B"));
static const char demo2[] = DEF("demo", 2, IN_REF, STEP("A") "," STEP("B") "," STEP("C"));
static const char demo3[] = DEF("demo", 3, IN_REF, STEP_CMD("A", "DoAnew") "," STEP("B"));
static const char demo4[] = DEF("demo", 4, IN_REF_NOTE, STEP("A") "," STEP("B"));

/* --- helpers ------------------------------------------------------------- */

static int admin_req(const char *method, const char *path, const char *body,
		     struct http_resp *r)
{
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], method, path,
				 (const char *const[]){ BEARER, NULL }, body,
				 body ? (size_t)-1 : 0, r),
			 0);
	return r->status;
}

/* Checks an error answer's status, code and (unless NULL) message; frees it. */
static void expect_error(struct http_resp *r, int status, const char *code, const char *message)
{
	struct json_object *o, *e;

	ck_assert_msg(r->status == status, "status %d, want %d: %s", r->status, status, r->body);
	o = parse_body(r);
	e = jget(o, "error");
	ck_assert_str_eq(jstr(e, "code"), code);
	if (message)
		ck_assert_str_eq(jstr(e, "message"), message);
	json_object_put(o);
	http_resp_free(r);
}

/* The canonical text of JSON text (the same JSON value, the same text). */
static char *canon(const char *text)
{
	char err[128], *c;
	struct json_object *o = jsonx_parse(text, strlen(text), err, sizeof(err));

	ck_assert_msg(o != NULL, "not JSON (%s): %s", err, text);
	c = jsonx_canonical(o);
	json_object_put(o);
	return c;
}

/* The answer's body is the same JSON value as want; frees the answer. */
static void expect_json(struct http_resp *r, int status, const char *want)
{
	char *got, *exp;

	ck_assert_msg(r->status == status, "status %d, want %d: %s", r->status, status, r->body);
	got = canon(r->body);
	exp = canon(want);
	ck_assert_str_eq(got, exp);
	free(got);
	free(exp);
	http_resp_free(r);
}

static void register_ok(const char *def, int status, const char *name, int version)
{
	struct http_resp r;
	char want[128];

	admin_req("POST", DEFS, def, &r);
	snprintf(want, sizeof(want), "{\"name\":\"%s\",\"version\":%d}", name, version);
	expect_json(&r, status, want);
}

/* --- registering and reading --------------------------------------------- */

START_TEST(register_and_read)
{
	/* demo1 again: keys in another order, other white space */
	static const char demo1_again[] =
		"{ \"steps\": [" STEP("A") ", " STEP("B") "],\n \"input\": " IN_REF
		", \"version\": 1, \"name\": \"demo\" }";
	static const struct {
		const char *def, *message;
	} invalid[] = {
		{ DEF("Bad", 1, "{}", STEP("A")),
		  "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
		{ DEF("bad", 0, "{}", STEP("A")), "version: must be an integer from 1 to 2147483647" },
		{ DEF("bad", 1, "{}", ""), "steps: 1 to 16 steps" },
		{ DEF("bad", 1, "{}", STEP("A") "," STEP("A")), "steps[1].name: step name A is used twice" },
		{ DEF("bad", 1, "{\"qty\":{\"type\":\"integer\",\"min\":5,\"max\":4}}", STEP("A")),
		  "input.qty: min must be <= max" },
		{ "[1, 2]", NULL },
	};
	struct http_resp r;

	env_start(&env, SVC_ORCH, admin_env);
	register_ok(demo1, 201, "demo", 1);
	register_ok(demo1_again, 200, "demo", 1);
	register_ok(demo1, 200, "demo", 1);
	admin_req("POST", DEFS, DEF("demo", 1, IN_REF, STEP("A")), &r);
	expect_error(&r, 409, "definition_exists", NULL);
	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		admin_req("POST", DEFS, invalid[i].def, &r);
		expect_error(&r, 400, "invalid_definition", invalid[i].message);
	}
	admin_req("POST", DEFS, "{\"name\": \"bad\",", &r);
	expect_error(&r, 400, "invalid_json", NULL);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_definitions"
					  " WHERE name <> 'order'",
				    0, NULL),
			 1);
	char *stored = env_sql(&env, "SELECT definition::text FROM orchestrator.saga_definitions"
				     " WHERE name = 'demo' AND version = 1", 0, NULL);
	char *a = canon(stored), *b = canon(demo1);

	ck_assert_str_eq(a, b); /* the 409 changed nothing */
	free(a);
	free(b);
	free(stored);
	register_ok(demo2, 201, "demo", 2);

	/* a definition another orchestrator registered: the list reads the table */
	free(env_sql(&env, "INSERT INTO orchestrator.saga_definitions (name, version, definition)"
			   " VALUES ('zeta', 3, '" DEF("zeta", 3, "{}", STEP("Z")) "')", 0, NULL));
	admin_req("GET", DEFS, NULL, &r);
	expect_json(&r, 200,
		    "{\"definitions\":[{\"name\":\"demo\",\"versions\":[1,2],\"latest\":2},"
		    "{\"name\":\"order\",\"versions\":[1],\"latest\":1},"
		    "{\"name\":\"zeta\",\"versions\":[3],\"latest\":3}]}");

	admin_req("GET", DEFS "/demo/1", NULL, &r);
	expect_json(&r, 200, demo1);
	admin_req("GET", DEFS "/zeta/3", NULL, &r);
	expect_json(&r, 200, DEF("zeta", 3, "{}", STEP("Z")));
	admin_req("GET", DEFS "/demo/7", NULL, &r);
	expect_error(&r, 404, "not_found", NULL);
	admin_req("GET", DEFS "/Demo/1", NULL, &r);
	expect_error(&r, 400, "invalid_field",
		     "name: must be 1-63 characters of [a-z0-9_-], starting with a letter");
	admin_req("GET", DEFS "/demo/0", NULL, &r);
	expect_error(&r, 400, "invalid_field", "version: must be an integer from 1 to 2147483647");
	admin_req("GET", DEFS "/demo/2147483648", NULL, &r);
	expect_error(&r, 400, "invalid_field", NULL);
	admin_req("GET", DEFS "/demo/x", NULL, &r);
	expect_error(&r, 400, "invalid_field", NULL);
	admin_req("GET", DEFS "/demo", NULL, &r);
	expect_error(&r, 404, "not_found", NULL);
	admin_req("GET", DEFS "/demo/1/2", NULL, &r);
	expect_error(&r, 404, "not_found", NULL);
	admin_req("GET", DEFS "/demo/migrate", NULL, &r);
	expect_error(&r, 405, "method_not_allowed", NULL);
	admin_req("POST", DEFS "/demo/1", "{}", &r);
	expect_error(&r, 405, "method_not_allowed", NULL);

	/* the admin token, as for every admin route */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", DEFS, NULL, NULL, 0, &r), 0);
	expect_error(&r, 401, "unauthorized", NULL);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", DEFS, NULL, demo2, (size_t)-1, &r), 0);
	expect_error(&r, 401, "unauthorized", NULL);
}
END_TEST

/* --- SAGA_DEFINITIONS_DIR ------------------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

static void remove_file(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_int_eq(unlink(path), 0);
}

/* Starting the orchestrator on dir fails (exit status 1), its log naming want. */
static void start_fails(const char *const *extra, const char *want)
{
	char logp[512], *log;
	int st = env_run_to_exit(&env, SVC_ORCH, extra);

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	env_log_path(&env, SVC_ORCH, logp, sizeof(logp));
	log = file_read(logp);
	ck_assert_msg(strstr(log, want), "log lacks \"%s\":\n%s", want, log);
	free(log);
}

START_TEST(definitions_dir)
{
	char dir[] = "/tmp/pgsaga-defs-XXXXXX", var[64], want[256];
	struct http_resp r;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(var, sizeof(var), "SAGA_DEFINITIONS_DIR=%s", dir);
	const char *const extra[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, var, NULL };

	write_file(dir, "demo.json", demo1);
	write_file(dir, "notes.txt", "not a definition, not read");
	env_start(&env, SVC_ORCH, extra);
	admin_req("GET", DEFS "/demo/1", NULL, &r);
	expect_json(&r, 200, demo1);
	int st = env_stop(&env, SVC_ORCH, SIGTERM);

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);

	write_file(dir, "invalid.json", DEF("bad", 1, "{}", ""));
	snprintf(want, sizeof(want), "%s/invalid.json: steps: 1 to 16 steps", dir);
	start_fails(extra, want);
	remove_file(dir, "invalid.json");

	write_file(dir, "zz-conflict.json", DEF("demo", 1, IN_REF, STEP("A")));
	snprintf(want, sizeof(want),
		 "%s/zz-conflict.json: demo version 1 is registered already with another content",
		 dir);
	start_fails(extra, want);
	remove_file(dir, "zz-conflict.json");
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_definitions"
					  " WHERE name = 'bad' OR (name = 'demo' AND version <> 1)",
				    0, NULL),
			 0);

	remove_file(dir, "demo.json");
	remove_file(dir, "notes.txt");
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* --- migrating ------------------------------------------------------------ */

/* A saga of demo version 1 as the engine would have left it. */
static void insert_saga(char id[UUID_STR_LEN], const char *state, const char *compensation,
			int version)
{
	char v[16];

	uuid_new(id);
	snprintf(v, sizeof(v), "%d", version);
	const char *params[4] = { id, state, compensation, v };

	free(env_sql(&env,
		     "INSERT INTO orchestrator.saga_instances (saga_id, state, compensation, version,"
		     "   definition_name, definition_version, input, deadline_at)"
		     " VALUES ($1, $2::text, $3::text, $4::int, 'demo', 1, '{\"ref\":\"r-1\"}',"
		     "   CASE WHEN $2::text LIKE 'Pending%' THEN '2100-01-01 00:00:00+00'::timestamptz END)",
		     4, params));
}

/* POST .../migrate with body; returns the 200 answer parsed (caller puts). */
static struct json_object *migrate(const char *name, const char *body)
{
	char path[128];
	struct http_resp r;
	struct json_object *o;

	snprintf(path, sizeof(path), DEFS "/%s/migrate", name);
	admin_req("POST", path, body, &r);
	ck_assert_msg(r.status == 200, "migrate %s: %d %s", body, r.status, r.body);
	o = parse_body(&r);
	http_resp_free(&r);
	return o;
}

/* The answer moved n and refused exactly the (sagaId, reason) pairs given. */
static void expect_outcome(struct json_object *o, long n, const char *const *refused)
{
	struct json_object *arr = jget(o, "refused");
	size_t k = 0;

	ck_assert_int_eq(json_object_get_int64(jget(o, "migrated")), n);
	for (; refused[2 * k]; k++) {
		bool found = false;

		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			struct json_object *e = json_object_array_get_idx(arr, i);

			if (strcmp(jstr(e, "sagaId"), refused[2 * k]) == 0) {
				ck_assert_str_eq(jstr(e, "reason"), refused[2 * k + 1]);
				found = true;
			}
		}
		ck_assert_msg(found, "%s not refused: %s", refused[2 * k],
			      json_object_to_json_string(o));
	}
	ck_assert_int_eq(json_object_array_length(arr), k);
	json_object_put(o);
}

/* "version definition_version deadline_at" of a saga. */
static char *saga_row(const char *id)
{
	const char *params[1] = { id };

	return env_sql(&env,
		       "SELECT version || ' ' || definition_version || ' ' || coalesce("
		       "  to_char(deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), '-')"
		       " FROM orchestrator.saga_instances WHERE saga_id = $1",
		       1, params);
}

static void expect_row(const char *id, const char *want)
{
	char *got = saga_row(id);

	ck_assert_msg(got && strcmp(got, want) == 0, "saga %s: %s, want %s", id, got ? got : "-",
		      want);
	free(got);
}

static long long history_rows(const char *id)
{
	const char *params[1] = { id };

	return env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_history WHERE saga_id = $1",
			  1, params);
}

static void register_demo(void)
{
	register_ok(demo1, 201, "demo", 1);
	register_ok(demo2, 201, "demo", 2);
	register_ok(demo3, 201, "demo", 3);
	register_ok(demo4, 201, "demo", 4);
}

START_TEST(migrate_demo)
{
	char a[UUID_STR_LEN], b[UUID_STR_LEN], comp[UUID_STR_LEN], done[UUID_STR_LEN],
		unknown[UUID_STR_LEN], body[512];
	struct http_resp r;

	env_start(&env, SVC_ORCH, admin_env);
	register_demo();
	insert_saga(a, "PendingA", NULL, 1);
	insert_saga(b, "PendingB", NULL, 3);
	insert_saga(comp, "Compensating", "A", 4);
	insert_saga(done, "Completed", NULL, 3);
	uuid_new(unknown);

	/* A is not the same step in 3; 4 needs a note the saga's input lacks */
	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":3,\"sagaIds\":[\"%s\"]}", a);
	expect_outcome(migrate("demo", body), 0, (const char *const[]){ a, "steps_differ", NULL });
	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":4,\"sagaIds\":[\"%s\"]}", a);
	expect_outcome(migrate("demo", body), 0, (const char *const[]){ a, "input_invalid", NULL });
	expect_row(a, "1 1 2100-01-01");
	ck_assert_int_eq(history_rows(a), 0);

	/* every saga of version 1: A and B move, the compensating one does not */
	expect_outcome(migrate("demo", "{\"fromVersion\":1,\"toVersion\":2}"), 2,
		       (const char *const[]){ comp, "compensating", NULL });
	expect_row(a, "2 2 2100-01-01");
	expect_row(b, "4 2 2100-01-01");
	expect_row(comp, "4 1 -");
	expect_row(done, "3 1 -");
	const char *params[1] = { b };
	char *h = env_sql(&env,
			  "SELECT version || ' ' || from_state || ' ' || to_state || ' ' || cause"
			  "  || ' ' || coalesce(message_id::text, 'null')"
			  " FROM orchestrator.saga_history WHERE saga_id = $1",
			  1, params);

	ck_assert_str_eq(h, "4 PendingB PendingB Migrated null");
	free(h);
	ck_assert_int_eq(history_rows(comp), 0);

	/* moved already, finished, unknown: refused as moved, asked for twice or not */
	snprintf(body, sizeof(body),
		 "{\"fromVersion\":1,\"toVersion\":2,\"sagaIds\":[\"%s\",\"%s\",\"%s\",\"%s\"]}", a,
		 done, unknown, a);
	expect_outcome(migrate("demo", body), 0,
		       (const char *const[]){ a, "moved", done, "moved", unknown, "moved", NULL });
	expect_row(a, "2 2 2100-01-01");

	/* and back: the steps it began are the same in 1 */
	snprintf(body, sizeof(body), "{\"fromVersion\":2,\"toVersion\":1,\"sagaIds\":[\"%s\"]}", b);
	expect_outcome(migrate("demo", body), 1, (const char *const[]){ NULL });
	expect_row(b, "5 1 2100-01-01");

	/* a version, or a name, never registered */
	admin_req("POST", DEFS "/demo/migrate", "{\"fromVersion\":1,\"toVersion\":9}", &r);
	expect_error(&r, 404, "not_found", NULL);
	admin_req("POST", DEFS "/demo/migrate", "{\"fromVersion\":9,\"toVersion\":1}", &r);
	expect_error(&r, 404, "not_found", NULL);
	admin_req("POST", DEFS "/nosuch/migrate", "{\"fromVersion\":1,\"toVersion\":2}", &r);
	expect_error(&r, 404, "not_found", NULL);

	/* a bad body names the field */
	admin_req("POST", DEFS "/demo/migrate", "{\"toVersion\":2}", &r);
	expect_error(&r, 400, "invalid_field", "fromVersion: must be an integer from 1 to 2147483647");
	admin_req("POST", DEFS "/demo/migrate", "{\"fromVersion\":1,\"toVersion\":1}", &r);
	expect_error(&r, 400, "invalid_field", NULL);
	admin_req("POST", DEFS "/demo/migrate", "{\"fromVersion\":1,\"toVersion\":\"2\"}", &r);
	expect_error(&r, 400, "invalid_field", NULL);
	admin_req("POST", DEFS "/demo/migrate",
		  "{\"fromVersion\":1,\"toVersion\":2,\"sagaIds\":[\"x\"]}", &r);
	expect_error(&r, 400, "invalid_field", "sagaIds: must be 1 to 1000 saga ids (UUIDs)");
	admin_req("POST", DEFS "/demo/migrate", "{\"fromVersion\":1,\"toVersion\":2,\"sagaIds\":[]}",
		  &r);
	expect_error(&r, 400, "invalid_field", NULL);
	admin_req("POST", DEFS "/demo/migrate", "[1]", &r);
	expect_error(&r, 400, "invalid_json", NULL);
	admin_req("POST", DEFS "/Demo/migrate", "{\"fromVersion\":1,\"toVersion\":2}", &r);
	expect_error(&r, 400, "invalid_field", NULL);
	expect_row(b, "5 1 2100-01-01");
	expect_row(comp, "4 1 -");
}
END_TEST

/* The order saga keeps its input in its columns; migrating reads it there. */
START_TEST(migrate_order_saga)
{
	char path[512], id[UUID_STR_LEN], body[256], *text, *v2, *v3, err[128];
	struct json_object *doc, *input, *note;

	env_start(&env, SVC_ORCH, admin_env);
	snprintf(path, sizeof(path), "%s/src/orchestrator/definitions/order.json",
		 getenv("SAGA_SOURCE_DIR"));
	text = file_read(path);
	doc = jsonx_parse(text, strlen(text), err, sizeof(err));
	ck_assert_ptr_nonnull(doc);
	json_object_object_add(doc, "version", json_object_new_int(2));
	json_object_object_add(doc, "description", json_object_new_string("the same steps"));
	v2 = strdup(json_object_to_json_string(doc));
	json_object_object_add(doc, "version", json_object_new_int(3));
	input = jget(doc, "input");
	note = json_object_new_object();
	json_object_object_add(note, "type", json_object_new_string("id"));
	json_object_object_add(input, "note", note);
	v3 = strdup(json_object_to_json_string(doc));
	register_ok(v2, 201, "order", 2);
	register_ok(v3, 201, "order", 3);

	uuid_new(id);
	const char *params[1] = { id };

	free(env_sql(&env,
		     "INSERT INTO orchestrator.saga_instances (saga_id, state, version, customer_id,"
		     "   item_id, qty, amount, deadline_at)"
		     " VALUES ($1, 'PendingPayment', 1, 'c-1', 'A001', 2, 300, '2100-01-01')",
		     1, params));
	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":3,\"sagaIds\":[\"%s\"]}", id);
	expect_outcome(migrate("order", body), 0, (const char *const[]){ id, "input_invalid", NULL });
	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":2,\"sagaIds\":[\"%s\"]}", id);
	expect_outcome(migrate("order", body), 1, (const char *const[]){ NULL });
	expect_row(id, "2 2 2100-01-01");
	free(v2);
	free(v3);
	free(text);
	json_object_put(doc);
}
END_TEST

/*
 * A saga that changes between the read and the move is refused as moved
 * and left as it is. The interleaving is fixed: a transaction of the
 * test's own holds the saga's row, changed; the move waits for it
 * (pg_blocking_pids says so), then the transaction commits.
 */
START_TEST(migrate_refuses_a_saga_that_changed)
{
	char id[UUID_STR_LEN], body[256], buf[4096];
	int fds[2], st;
	ssize_t n;
	size_t got = 0;
	pid_t pid;
	PGconn *conn;

	env_start(&env, SVC_ORCH, admin_env);
	register_ok(demo1, 201, "demo", 1);
	register_ok(demo2, 201, "demo", 2);
	insert_saga(id, "PendingA", NULL, 1);
	conn = PQconnectdb(env.admin_url);
	ck_assert_int_eq(PQstatus(conn), CONNECTION_OK);
	sql_exec_ok(conn, "BEGIN", 0, NULL);
	const char *params[1] = { id };

	sql_exec_ok(conn, "UPDATE orchestrator.saga_instances SET version = version + 1"
			  " WHERE saga_id = $1", 1, params);

	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":2,\"sagaIds\":[\"%s\"]}", id);
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct http_resp r;
		char head[16];

		close(fds[0]);
		if (http_do(env.port[SVC_ORCH], "POST", DEFS "/demo/migrate",
			    (const char *const[]){ BEARER, NULL }, body, (size_t)-1, &r) != 0)
			_exit(1);
		snprintf(head, sizeof(head), "%d ", r.status);
		if (write(fds[1], head, strlen(head)) < 0 || write(fds[1], r.body, r.body_len) < 0)
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	ck_assert_msg(env_wait_sql(&env,
				   "SELECT count(*) FROM pg_stat_activity"
				   " WHERE datname = current_database()"
				   "   AND cardinality(pg_blocking_pids(pid)) > 0",
				   "1", WAIT_MS),
		      "the move never waited for the saga's row");
	sql_exec_ok(conn, "COMMIT", 0, NULL);
	PQfinish(conn);
	while ((n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the request failed");
	ck_assert_msg(strncmp(buf, "200 ", 4) == 0, "answer: %s", buf);

	struct json_object *o;
	char err[128];

	o = jsonx_parse(buf + 4, strlen(buf + 4), err, sizeof(err));
	ck_assert_ptr_nonnull(o);
	expect_outcome(o, 0, (const char *const[]){ id, "moved", NULL });
	expect_row(id, "2 1 2100-01-01");
	ck_assert_int_eq(history_rows(id), 0);
}
END_TEST

static Suite *definitions_suite(void)
{
	Suite *s = suite_create("definitions");
	TCase *tc = fixture_tcase("definitions");

	tcase_add_test(tc, register_and_read);
	tcase_add_test(tc, definitions_dir);
	tcase_add_test(tc, migrate_demo);
	tcase_add_test(tc, migrate_order_saga);
	tcase_add_test(tc, migrate_refuses_a_saga_that_changed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(definitions_suite());
}
