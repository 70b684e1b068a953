/*
 * service_destination_add (src/lib/service/service.h): a destination named at
 * run time, as the orchestrator adds a saga definition's participants, with
 * no service binary in between. The service library runs in this process
 * (the orchestrator's schema and role, on the harness's PostgreSQL); an
 * outbox row addressed to "shipping" is written by hand and the dispatcher
 * delivers it:
 *
 *  - TRANSPORT=http, SHIPPING_URL set: POSTed to a real HTTP receiver on a
 *    socket of this process, then marked processed;
 *  - TRANSPORT=http, SHIPPING_URL unset: a dead letter at its first attempt,
 *    last_error "SHIPPING_URL is not set" ("cold-storage" names
 *    COLD_STORAGE_URL); a destination never added stays "unknown
 *    destination";
 *  - TRANSPORT=amqp (meson test destinations-amqp): confirmed by the broker
 *    into pgsaga.shipping, which the sender declared on its open connection
 *    when shipping was added (no shipping runs yet: the command waits there
 *    for it; without the queue it would come back, a failed attempt).
 */
#include <arpa/inet.h>
#include <check.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker.h"
#include "db.h"
#include "harness.h"
#include "outbox.h"
#include "service.h"
#include "uuid.h"

static struct saga_env env;
static struct service svc;

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

/* --- the service, in this process ----------------------------------------- */

static void consume(struct inmsg m, const char *type)
{
	inmsg_error(m, 404, "not_found", "no messages expected here");
}

static const struct service_peer_spec peers[] = {
	{ "payment", "PAYMENT_URL", "http://127.0.0.1:8081" },
	{ "inventory", "INVENTORY_URL", "http://127.0.0.1:8082" },
};

static void start_service(void)
{
	/* kept by the service: not on this stack */
	static struct service_spec spec = {
		.service = "orchestrator",
		.about = "test",
		.default_addr = "127.0.0.1:0",
		.migrations = migrations_orchestrator,
		.peers = peers,
		.npeers = sizeof(peers) / sizeof(peers[0]),
		.participants = true,
		.consume = consume,
	};
	char prog[] = "test-destinations", *argv[] = { prog, NULL };
	bool done;

	spec.nmigrations = migrations_orchestrator_count; /* not a constant expression */
	setenv("DATABASE_URL", env.url[SVC_ORCH], 1);
	setenv("INTERNAL_TOKEN", env.token, 1);
	setenv("LOG_LEVEL", "warn", 1);
	setenv("TRANSPORT", harness_transport(), 1);
	if (harness_amqp())
		setenv("AMQP_URL", harness_amqp_url(), 1);
	ck_assert_int_eq(service_init(&svc, &spec, 1, argv, &done), 0);
	ck_assert(!done);
}

/* Drains (SIGTERM, as in production) and frees everything, http too. */
static void stop_service(struct evhttp *http)
{
	raise(SIGTERM);
	ck_assert_int_eq(service_run(&svc), 0);
	if (http)
		evhttp_free(http);
	service_free(&svc);
}

/* --- a real HTTP receiver on the service's loop ---------------------------- */

static struct {
	int posts;
	char path[128], auth[128], body[512];
} got;

static void receive(struct evhttp_request *req, void *arg)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req),
					      "Authorization");
	size_t n = evbuffer_get_length(in);

	got.posts++;
	snprintf(got.path, sizeof(got.path), "%s", evhttp_request_get_uri(req));
	snprintf(got.auth, sizeof(got.auth), "%s", auth ? auth : "");
	if (n >= sizeof(got.body))
		n = sizeof(got.body) - 1;
	evbuffer_remove(in, got.body, n);
	got.body[n] = '\0';
	evhttp_send_reply(req, 200, "OK", NULL);
}

/* Listens on a free port of 127.0.0.1; returns it. */
static int start_receiver(struct evhttp **http)
{
	struct evhttp_bound_socket *bs;
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	*http = evhttp_new(svc.base);
	ck_assert_ptr_nonnull(*http);
	evhttp_set_gencb(*http, receive, NULL);
	bs = evhttp_bind_socket_with_handle(*http, "127.0.0.1", 0);
	ck_assert_ptr_nonnull(bs);
	ck_assert_int_eq(getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa, &len), 0);
	return ntohs(sa.sin_port);
}

/* --- an outbox row and what became of it ----------------------------------- */

/* Writes a command to dest into the orchestrator's outbox; its id into id. */
static void write_command(const char *dest, char *id)
{
	char payload[160];

	uuid_new(id);
	snprintf(payload, sizeof(payload),
		 "{\"commandId\":\"%s\",\"sagaId\":\"00000000-0000-4000-8000-000000000001\"}", id);
	const char *p[3] = { id, dest, payload };
	free(env_sql(&env,
		     "INSERT INTO orchestrator.outbox_messages"
		     " (message_id, kind, destination, type, payload)"
		     " VALUES ($1::uuid, 'command', $2, 'ShipCommand', $3::jsonb)",
		     3, p));
}

struct watch {
	const char *id;
	struct event *ev, *limit;
	bool asking, timed_out;
	/* the row, once processed or dead */
	bool settled, processed, dead;
	int attempts;
	char last_error[300];
};

static void row_read(void *arg, PGresult *res, const struct db_error *err)
{
	struct watch *w = arg;

	w->asking = false;
	ck_assert_msg(err->status == DB_OK, "%s", err->message);
	ck_assert_int_eq(PQntuples(res), 1);
	w->processed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	w->dead = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	w->attempts = atoi(PQgetvalue(res, 0, 2));
	snprintf(w->last_error, sizeof(w->last_error), "%s", PQgetvalue(res, 0, 3));
	w->settled = w->processed || w->dead;
}

static void ask(evutil_socket_t fd, short what, void *arg)
{
	struct watch *w = arg;
	const char *p[1] = { w->id };

	if (w->asking)
		return;
	w->asking = true;
	db_query(svc.pool,
		 "SELECT processed_at IS NOT NULL, dead_at IS NOT NULL, attempt_count,"
		 "       coalesce(last_error, '')"
		 "  FROM orchestrator.outbox_messages WHERE message_id = $1::uuid",
		 1, p, row_read, w);
}

static void give_up(evutil_socket_t fd, short what, void *arg)
{
	struct watch *w = arg;

	w->timed_out = true;
	event_base_loopbreak(svc.base);
}

/*
 * Runs the service's loop until the row is processed or dead (a failure
 * after 30 s: it never was).
 */
static void wait_settled(struct watch *w)
{
	struct timeval every = { 0, 50 * 1000 }, limit = { 30, 0 };

	w->ev = event_new(svc.base, -1, EV_PERSIST, ask, w);
	w->limit = evtimer_new(svc.base, give_up, w);
	ck_assert(w->ev && w->limit);
	event_add(w->ev, &every);
	evtimer_add(w->limit, &limit);
	outbox_kick(svc.outbox);
	while (!w->settled && !w->timed_out)
		event_base_loop(svc.base, EVLOOP_ONCE);
	event_free(w->ev);
	event_free(w->limit);
	ck_assert_msg(w->settled, "outbox row %s neither delivered nor dead", w->id);
	/* a statement still out finishes during the drain */
	while (w->asking)
		event_base_loop(svc.base, EVLOOP_ONCE);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
}

/*
 * amqp: runs the loop until the broker connection is up, so that the queue
 * is declared on the open connection (mq_link_add_queue), not at connecting.
 */
static void wait_broker_up(void)
{
	struct timeval every = { 0, 20 * 1000 };
	struct event *ev = event_new(svc.base, -1, EV_PERSIST, tick, NULL);

	ck_assert_ptr_nonnull(ev);
	event_add(ev, &every);
	for (int i = 0; i < 1500; i++) {
		const char *state = svc.transport->ops->broker_state(svc.transport);

		if (state && strcmp(state, "up") == 0)
			break;
		event_base_loop(svc.base, EVLOOP_ONCE);
	}
	event_free(ev);
	ck_assert_str_eq(svc.transport->ops->broker_state(svc.transport), "up");
}

/* --- the tests -------------------------------------------------------------- */

START_TEST(added_destination_is_delivered)
{
	char id[UUID_STR_LEN], err[256], url[64], want[160];
	struct evhttp *http = NULL;
	struct watch w = { .id = id };

	if (harness_amqp())
		harness_broker_delete_queue("pgsaga.shipping");
	start_service();
	if (harness_amqp()) {
		wait_broker_up();
	} else {
		snprintf(url, sizeof(url), "http://127.0.0.1:%d", start_receiver(&http));
		setenv("SHIPPING_URL", url, 1);
	}
	ck_assert_int_eq(service_destination_add(&svc, "shipping", err, sizeof(err)), 0);
	/* again: nothing changes, as for a peer of the spec */
	ck_assert_int_eq(service_destination_add(&svc, "shipping", err, sizeof(err)), 0);
	ck_assert_int_eq(service_destination_add(&svc, "payment", err, sizeof(err)), 0);
	ck_assert_uint_eq(svc.nadded, 1);

	write_command("shipping", id);
	wait_settled(&w);
	ck_assert_msg(w.processed, "dead letter: %s", w.last_error);
	ck_assert_int_eq(w.attempts, 0);
	if (harness_amqp()) {
		/* declared by the sender, waiting for shipping's first start */
		ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.shipping"), 1);
	} else {
		ck_assert_int_eq(got.posts, 1);
		ck_assert_str_eq(got.path, "/commands/ShipCommand");
		snprintf(want, sizeof(want), "Bearer %s", env.token);
		ck_assert_str_eq(got.auth, want);
		ck_assert_ptr_nonnull(strstr(got.body, id));
	}
	stop_service(http);
}
END_TEST

START_TEST(destination_without_url_is_a_dead_letter)
{
	char ids[3][UUID_STR_LEN], err[256];
	struct watch w[3] = { { .id = ids[0] }, { .id = ids[1] }, { .id = ids[2] } };

	unsetenv("SHIPPING_URL");
	unsetenv("COLD_STORAGE_URL");
	start_service();
	ck_assert_int_eq(service_destination_add(&svc, "shipping", err, sizeof(err)), 0);
	ck_assert_int_eq(service_destination_add(&svc, "cold-storage", err, sizeof(err)), 0);
	write_command("shipping", ids[0]);
	write_command("cold-storage", ids[1]);
	write_command("nowhere", ids[2]); /* never added */
	for (int i = 0; i < 3; i++)
		wait_settled(&w[i]);
	for (int i = 0; i < 3; i++) {
		ck_assert(w[i].dead);
		ck_assert_int_eq(w[i].attempts, 1); /* at once, not after RETRY_MAX_ATTEMPTS */
	}
	ck_assert_str_eq(w[0].last_error, "SHIPPING_URL is not set");
	ck_assert_str_eq(w[1].last_error, "COLD_STORAGE_URL is not set");
	ck_assert_str_eq(w[2].last_error, "nowhere: unknown destination");
	stop_service(NULL);
}
END_TEST

START_TEST(destination_names)
{
	const char *const bad[] = { "", "Shipping", "ship ping", "ship.ping", "shipping/x",
				    "a123456789012345678901234567890123456789012345678901234567890123" };
	char err[256], var[80];

	start_service();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(service_destination_add(&svc, bad[i], err, sizeof(err)), -1);
		ck_assert_ptr_nonnull(strstr(err, "expected 1-63 characters of [a-z0-9_-]"));
	}
	ck_assert_uint_eq(svc.nadded, 0);
	/* 63 characters is a name */
	ck_assert_int_eq(service_destination_add(&svc, bad[5] + 1, err, sizeof(err)), 0);
	/* a URL that does not parse: said, and its messages are dead letters */
	setenv("BAD_URL", "ftp://127.0.0.1:1", 1);
	if (harness_amqp()) {
		ck_assert_int_eq(service_destination_add(&svc, "bad", err, sizeof(err)), 0);
	} else {
		ck_assert_int_eq(service_destination_add(&svc, "bad", err, sizeof(err)), -1);
		ck_assert_msg(strncmp(err, "BAD_URL: ", 9) == 0, "%s", err);
	}
	ck_assert(service_destination_variable("cold-storage_2", var, sizeof(var)));
	ck_assert_str_eq(var, "COLD_STORAGE_2_URL");
	ck_assert(!service_destination_variable("shipping", var, 12));
	stop_service(NULL);
}
END_TEST

static Suite *destinations_suite(void)
{
	Suite *s = suite_create("destinations");
	TCase *tc = tcase_create("destinations");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, added_destination_is_delivered);
	/* no URL is read over the broker: http only */
	if (!harness_amqp())
		tcase_add_test(tc, destination_without_url_is_a_dead_letter);
	tcase_add_test(tc, destination_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(destinations_suite());
}
