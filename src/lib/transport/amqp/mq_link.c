/* mq_link: see mq_link.h. Everything named thread_* runs on the link's thread. */
#include "monotime.h"
#include "mq_link.h"

#include <amqp.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "backoff.h"
#include "log.h"
#include "mq_nodes.h"
#include "mq_setup.h"

#define CHANNEL MQ_CHANNEL
#define HEARTBEAT_S MQ_HEARTBEAT_S
#define RPC_TIMEOUT_S MQ_RPC_TIMEOUT_S
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
/*
 * Publishes to one destination nacked in a row, none to it confirmed
 * between, after which the connection is replaced as a lost one is. After
 * the loss of the node that led a quorum queue, a channel of another node
 * can be left nacking every publish to that queue (RabbitMQ 3.10, seen in
 * the hosts suite) while it confirms those to the others, and a new
 * channel would not: counted over all destinations, the refusals never
 * came in a row, and the destination's circuit stayed open for minutes.
 * A basic.return (no queue bound) does not count: a new channel would not
 * change it. A publish not confirmed in time (confirm_timeout_ms) counts as
 * a nack.
 */
#define NACKS_MAX 3
#define NACK_DESTS 64 /* destinations counted apart; the last slot is shared */

struct settle {
	uint64_t generation, tag;
	enum mq_settle how;
};

struct mq_link {
	pthread_t thread;
	pthread_mutex_t mu;
	int loop_fd; /* records for the loop */
	int wake_fd; /* work for the thread */

	/* under mu */
	struct mq_msg *out_head, *out_tail;  /* to the loop */
	struct mq_msg *pub_head, *pub_tail;  /* publishes not yet handed to the thread */
	struct settle *settles;
	size_t nsettles, settles_cap;
	bool stopping, pause_consuming;
	bool reload_tls; /* SIGHUP: read the TLS files again */
	char **added;    /* mq_link_add_queue's, not yet taken by the thread */
	size_t nadded, added_cap;

	/* the thread's own */
	struct mq_nodes nodes;
	size_t node;  /* the one connected to, or tried next */
	size_t tried; /* nodes that did not answer since the last connection */
	struct {
		char dest[64];
		int nacks; /* in a row */
	} nacked[NACK_DESTS];
	bool replace; /* NACKS_MAX reached: the connection goes */
	char service[64], queue[80];
	char **queues; /* the destinations', NULL-terminated */
	size_t nqueues;
	char *tls_ca, *tls_cert, *tls_key; /* NULL: unset */
	SSL_CTX *tls;        /* amqps: the files as they last loaded, NULL: never */
	char tls_err[400];   /* why they last did not, as logged; "" */
	int prefetch, window, confirm_timeout_ms;
	amqp_connection_state_t conn;
	uint64_t generation, seq;
	struct mq_msg *wait_head, *wait_tail;      /* publishes waiting for room */
	struct mq_msg *unconf_head, *unconf_tail;  /* sent, by seq */
	int nunconf;
	bool blocked, consuming;
	int64_t unblocked_ms; /* publishes sent before it wait from then */
	int64_t next_connect_ms;
	int64_t stop_by_ms; /* stopping: give up on confirms after this */
	int backoff_ms;
	char why[160];
};

static void signal_fd(int fd)
{
	uint64_t one = 1;

	while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

static void drain_fd(int fd)
{
	uint64_t n;

	while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
}

struct mq_msg *mq_msg_new(size_t len)
{
	struct mq_msg *m = calloc(1, sizeof(*m) + len + 1);

	if (!m)
		abort();
	m->len = len;
	return m;
}

static void append(struct mq_msg **head, struct mq_msg **tail, struct mq_msg *m)
{
	m->next = NULL;
	if (*tail)
		(*tail)->next = m;
	else
		*head = m;
	*tail = m;
}

static struct mq_msg *pop(struct mq_msg **head, struct mq_msg **tail)
{
	struct mq_msg *m = *head;

	if (m) {
		*head = m->next;
		if (!*head)
			*tail = NULL;
		m->next = NULL;
	}
	return m;
}

/* --- the loop's side ------------------------------------------------------ */

int mq_link_fd(const struct mq_link *l)
{
	return l->loop_fd;
}

struct mq_msg *mq_link_take(struct mq_link *l)
{
	struct mq_msg *m;

	drain_fd(l->loop_fd);
	pthread_mutex_lock(&l->mu);
	m = l->out_head;
	l->out_head = l->out_tail = NULL;
	pthread_mutex_unlock(&l->mu);
	return m;
}

void mq_link_publish(struct mq_link *l, struct mq_msg *m)
{
	pthread_mutex_lock(&l->mu);
	append(&l->pub_head, &l->pub_tail, m);
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
}

void mq_link_settle(struct mq_link *l, uint64_t generation, uint64_t tag, enum mq_settle how)
{
	pthread_mutex_lock(&l->mu);
	if (l->nsettles == l->settles_cap) {
		l->settles_cap = l->settles_cap ? 2 * l->settles_cap : 64;
		l->settles = realloc(l->settles, l->settles_cap * sizeof(*l->settles));
		if (!l->settles)
			abort();
	}
	l->settles[l->nsettles++] = (struct settle){ generation, tag, how };
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
}

void mq_link_reload_tls(struct mq_link *l)
{
	pthread_mutex_lock(&l->mu);
	l->reload_tls = true;
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
}

void mq_link_add_queue(struct mq_link *l, const char *name)
{
	pthread_mutex_lock(&l->mu);
	if (l->nadded == l->added_cap) {
		l->added_cap = l->added_cap ? 2 * l->added_cap : 8;
		l->added = realloc(l->added, l->added_cap * sizeof(*l->added));
		if (!l->added)
			abort();
	}
	if (!(l->added[l->nadded++] = strdup(name)))
		abort();
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
}

void mq_link_pause_consuming(struct mq_link *l)
{
	pthread_mutex_lock(&l->mu);
	l->pause_consuming = true;
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
}

/* --- the thread: talking to the loop -------------------------------------- */

static void thread_to_loop(struct mq_link *l, struct mq_msg *m)
{
	bool was_empty;

	pthread_mutex_lock(&l->mu);
	was_empty = l->out_head == NULL;
	append(&l->out_head, &l->out_tail, m);
	pthread_mutex_unlock(&l->mu);
	if (was_empty)
		signal_fd(l->loop_fd);
}

static void thread_state(struct mq_link *l)
{
	struct mq_msg *m = mq_msg_new(0);

	m->kind = MQ_STATE;
	m->up = l->conn != NULL;
	m->blocked = l->blocked;
	snprintf(m->node, sizeof(m->node), "%s", l->nodes.name[l->node]);
	snprintf(m->error, sizeof(m->error), "%s", l->why);
	thread_to_loop(l, m);
}

static void thread_confirm(struct mq_link *l, struct mq_msg *m, bool ok, const char *why)
{
	m->kind = MQ_CONFIRMED;
	m->ok = ok;
	if (!ok && !m->error[0])
		snprintf(m->error, sizeof(m->error), "%s", why);
	thread_to_loop(l, m);
}

/*
 * amqps: reads the TLS files again (at every connection attempt, and at once
 * on SIGHUP). When they do not load, the last set that did stays in use and
 * the reason is logged at level error (at each SIGHUP, and once per new
 * reason otherwise: a link that cannot connect tries again and again). false:
 * nothing has ever loaded; the reason is in why.
 */
static bool thread_load_tls(struct mq_link *l, bool hup)
{
	char err[sizeof(l->tls_err)];
	SSL_CTX *t = mq_tls_load(l->tls_ca, l->tls_cert, l->tls_key, err, sizeof(err));

	if (t) {
		SSL_CTX_free(l->tls);
		l->tls = t;
		if (hup || l->tls_err[0])
			log_info("amqp: TLS files reloaded: new broker connections use them");
		l->tls_err[0] = '\0';
		return true;
	}
	if (l->tls && (hup || strcmp(err, l->tls_err) != 0))
		log_error("amqp: TLS files not reloaded, the old ones stay in use: %s", err);
	snprintf(l->tls_err, sizeof(l->tls_err), "%s", err);
	if (!l->tls)
		snprintf(l->why, sizeof(l->why), "%.*s", (int)sizeof(l->why) - 1, err);
	return l->tls != NULL;
}

/* What mq_setup needs of the link, for the node in use. */
static struct mq_setup thread_setup(struct mq_link *l, bool consume)
{
	return (struct mq_setup){ &l->nodes.ci[l->node], l->service,
				  (const char *const *)l->queues, l->prefetch,
				  consume ? l->queue : NULL, NULL, mq_nodes_group_size(&l->nodes) };
}

static void thread_connect(struct mq_link *l, bool consume)
{
	struct mq_setup setup = thread_setup(l, consume);

	l->why[0] = '\0';
	if (!l->nodes.ci[l->node].ssl || thread_load_tls(l, false)) {
		setup.tls = l->tls;
		l->conn = mq_setup_open(&setup, l->why, sizeof(l->why));
	}
	if (l->conn) {
		l->consuming = consume;
		l->generation++;
		l->seq = 0;
		l->blocked = false;
		l->unblocked_ms = 0;
		l->backoff_ms = RECONNECT_MIN_MS;
		l->tried = 0;
		memset(l->nacked, 0, sizeof(l->nacked));
		l->replace = false;
		log_info("amqp: connected to %s", l->nodes.name[l->node]);
		thread_state(l);
		return;
	}
	l->consuming = false;
	l->node = mq_nodes_next(&l->nodes, l->node);
	if (++l->tried < l->nodes.n) {
		/* a cluster: the next node may answer, try it at once */
		log_warn("amqp: %s; trying %s", l->why, l->nodes.name[l->node]);
		l->next_connect_ms = monotime_ms();
		return;
	}
	l->tried = 0;
	log_warn("amqp: %s; retrying in about %d ms", l->why, l->backoff_ms);
	l->next_connect_ms = monotime_ms() + backoff_delay_ms(l->backoff_ms / 2, l->backoff_ms, 1,
							 backoff_random()) + l->backoff_ms / 2;
	l->backoff_ms = l->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : l->backoff_ms * 2;
}

/* The connection is gone: everything unconfirmed failed. */
static void thread_lose(struct mq_link *l)
{
	struct mq_msg *m;
	char why[200];

	log_warn("amqp: connection lost: %s", l->why);
	snprintf(why, sizeof(why), "connection lost: %s", l->why);
	amqp_destroy_connection(l->conn);
	l->conn = NULL;
	l->consuming = false;
	l->blocked = false;
	while ((m = pop(&l->unconf_head, &l->unconf_tail)) != NULL)
		thread_confirm(l, m, false, why);
	l->nunconf = 0;
	l->next_connect_ms = monotime_ms() + RECONNECT_MIN_MS;
	thread_state(l);
	/* the node may be gone with its connection: start with the next one */
	l->node = mq_nodes_next(&l->nodes, l->node);
	l->tried = 0;
}

/* The nacks in a row of publishes to dest (the last slot when all are taken). */
static int *nacks_of(struct mq_link *l, const char *dest)
{
	size_t i;

	for (i = 0; i < NACK_DESTS - 1 && l->nacked[i].dest[0]; i++)
		if (strcmp(l->nacked[i].dest, dest) == 0)
			return &l->nacked[i].nacks;
	if (!l->nacked[i].dest[0])
		snprintf(l->nacked[i].dest, sizeof(l->nacked[i].dest), "%s", dest);
	return &l->nacked[i].nacks;
}

/* The broker answered m's publish; counts the nacks in a row per destination. */
static void thread_settled(struct mq_link *l, struct mq_msg *m, bool ack)
{
	int *nacks = nacks_of(l, m->dest);

	*nacks = ack ? 0 : *nacks + 1;
	if (*nacks >= NACKS_MAX && !l->replace) {
		l->replace = true;
		snprintf(l->why, sizeof(l->why),
			 "%d publishes to %s in a row nacked or not confirmed by %s;"
			 " replacing the connection",
			 *nacks, m->dest, l->nodes.name[l->node]);
	}
	thread_confirm(l, m, ack && !m->error[0], ack ? "" : "nacked by the broker");
}

/* basic.ack / basic.nack for seq (and all before it when multiple). */
static void thread_confirmed(struct mq_link *l, uint64_t seq, bool multiple, bool ack)
{
	while (l->unconf_head && l->unconf_head->tag <= seq) {
		struct mq_msg *m = l->unconf_head;

		if (!multiple && m->tag != seq)
			break; /* acks may come out of order only when not multiple */
		pop(&l->unconf_head, &l->unconf_tail);
		l->nunconf--;
		thread_settled(l, m, ack);
	}
	if (!multiple) {
		/* an out-of-order single confirm: find it */
		for (struct mq_msg **p = &l->unconf_head; *p; p = &(*p)->next) {
			if ((*p)->tag != seq)
				continue;
			struct mq_msg *m = *p;

			*p = m->next;
			if (l->unconf_tail == m) {
				l->unconf_tail = NULL;
				for (struct mq_msg *t = l->unconf_head; t; t = t->next)
					l->unconf_tail = t;
			}
			l->nunconf--;
			thread_settled(l, m, ack);
			break;
		}
	}
}

/* When the oldest unconfirmed publish runs out of time (INT64_MAX: never). */
static int64_t thread_confirm_deadline(const struct mq_link *l)
{
	const struct mq_msg *m = l->unconf_head;
	int64_t sent;

	if (!m || l->blocked || l->confirm_timeout_ms <= 0)
		return INT64_MAX;
	sent = (int64_t)m->sent.tv_sec * 1000 + m->sent.tv_nsec / 1000000;
	return (sent > l->unblocked_ms ? sent : l->unblocked_ms) + l->confirm_timeout_ms;
}

/*
 * Publishes the broker has not confirmed in time fail, oldest first (the
 * list is in the order they were sent). false: NACKS_MAX reached for a
 * destination, the connection goes.
 */
static bool thread_expire(struct mq_link *l)
{
	int64_t now = monotime_ms();

	while (thread_confirm_deadline(l) <= now) {
		struct mq_msg *m = pop(&l->unconf_head, &l->unconf_tail);

		l->nunconf--;
		if (!m->error[0])
			snprintf(m->error, sizeof(m->error), "no confirm from %s within %d ms",
				 l->nodes.name[l->node], l->confirm_timeout_ms);
		thread_settled(l, m, false);
	}
	return !l->replace;
}

static void copy_bytes(char *dst, size_t cap, amqp_bytes_t b)
{
	size_t n = b.len < cap - 1 ? b.len : cap - 1;

	memcpy(dst, b.bytes, n);
	dst[n] = '\0';
}

static const amqp_field_value_t *header(const amqp_basic_properties_t *p, const char *key)
{
	if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
		return NULL;
	for (int i = 0; i < p->headers.num_entries; i++) {
		const amqp_table_entry_t *e = &p->headers.entries[i];

		if (e->key.len == strlen(key) && memcmp(e->key.bytes, key, e->key.len) == 0)
			return &e->value;
	}
	return NULL;
}

static long header_long(const amqp_field_value_t *v)
{
	if (!v)
		return 0;
	switch (v->kind) {
	case AMQP_FIELD_KIND_I8: return v->value.i8;
	case AMQP_FIELD_KIND_U8: return v->value.u8;
	case AMQP_FIELD_KIND_I16: return v->value.i16;
	case AMQP_FIELD_KIND_U16: return v->value.u16;
	case AMQP_FIELD_KIND_I32: return v->value.i32;
	case AMQP_FIELD_KIND_U32: return (long)v->value.u32;
	case AMQP_FIELD_KIND_I64: return (long)v->value.i64;
	case AMQP_FIELD_KIND_U64: return (long)v->value.u64;
	default: return 0;
	}
}

static bool thread_delivery(struct mq_link *l, uint64_t tag, bool redelivered)
{
	amqp_message_t msg;
	amqp_rpc_reply_t r = amqp_read_message(l->conn, CHANNEL, &msg, 0);
	const amqp_basic_properties_t *p = &msg.properties;
	const amqp_field_value_t *tp;
	struct mq_msg *m;

	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		snprintf(l->why, sizeof(l->why), "reading a delivery failed");
		return false;
	}
	m = mq_msg_new(msg.body.len);
	m->kind = MQ_DELIVERY;
	m->generation = l->generation;
	m->tag = tag;
	m->redelivered = redelivered;
	memcpy(m->body, msg.body.bytes, msg.body.len);
	if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		copy_bytes(m->id, sizeof(m->id), p->message_id);
	if (p->_flags & AMQP_BASIC_TYPE_FLAG)
		copy_bytes(m->type, sizeof(m->type), p->type);
	tp = header(p, "traceparent");
	if (tp && (tp->kind == AMQP_FIELD_KIND_UTF8 || tp->kind == AMQP_FIELD_KIND_BYTES))
		copy_bytes(m->traceparent, sizeof(m->traceparent), tp->value.bytes);
	m->delivery_count = header_long(header(p, "x-delivery-count"));
	amqp_destroy_message(&msg);
	thread_to_loop(l, m);
	return true;
}

/* A basic.return: the message it carries will be confirmed, but failed. */
static bool thread_returned(struct mq_link *l, const amqp_basic_return_t *rt)
{
	char text[96], id[64] = "";
	amqp_message_t msg;
	amqp_rpc_reply_t r;

	copy_bytes(text, sizeof(text), rt->reply_text);
	r = amqp_read_message(l->conn, CHANNEL, &msg, 0);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		snprintf(l->why, sizeof(l->why), "reading a returned message failed");
		return false;
	}
	if (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
		copy_bytes(id, sizeof(id), msg.properties.message_id);
	amqp_destroy_message(&msg);
	for (struct mq_msg *m = l->unconf_head; m; m = m->next)
		if (strcmp(m->id, id) == 0 && !m->error[0]) {
			snprintf(m->error, sizeof(m->error), "returned by the broker: %s", text);
			break;
		}
	return true;
}

/* Reads whatever the broker sent, without waiting. false: connection lost. */
static bool thread_read(struct mq_link *l)
{
	struct timeval zero = { 0, 0 };
	amqp_frame_t f;

	for (;;) {
		int rc = amqp_simple_wait_frame_noblock(l->conn, &f, &zero);

		if (rc == AMQP_STATUS_TIMEOUT)
			return true;
		if (rc != AMQP_STATUS_OK) {
			snprintf(l->why, sizeof(l->why), "%s", amqp_error_string2(rc));
			return false;
		}
		if (f.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (f.payload.method.id) {
		case AMQP_BASIC_ACK_METHOD: {
			amqp_basic_ack_t *a = f.payload.method.decoded;

			thread_confirmed(l, a->delivery_tag, a->multiple, true);
			break;
		}
		case AMQP_BASIC_NACK_METHOD: {
			amqp_basic_nack_t *n = f.payload.method.decoded;

			thread_confirmed(l, n->delivery_tag, n->multiple, false);
			if (l->replace)
				return false; /* see NACKS_MAX */
			break;
		}
		case AMQP_BASIC_RETURN_METHOD:
			if (!thread_returned(l, f.payload.method.decoded))
				return false;
			break;
		case AMQP_BASIC_DELIVER_METHOD: {
			amqp_basic_deliver_t *d = f.payload.method.decoded;

			if (!thread_delivery(l, d->delivery_tag, d->redelivered))
				return false;
			break;
		}
		case AMQP_CONNECTION_BLOCKED_METHOD:
		case AMQP_CONNECTION_UNBLOCKED_METHOD:
			l->blocked = f.payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD;
			if (!l->blocked)
				l->unblocked_ms = monotime_ms();
			log_warn("amqp: the broker %s publishing",
				 l->blocked ? "blocked" : "unblocked");
			thread_state(l);
			break;
		case AMQP_BASIC_CANCEL_METHOD:
			snprintf(l->why, sizeof(l->why), "the broker cancelled the consumer of %s",
				 l->queue);
			return false;
		case AMQP_CHANNEL_CLOSE_METHOD:
		case AMQP_CONNECTION_CLOSE_METHOD: {
			amqp_connection_close_t *c = f.payload.method.decoded;
			amqp_channel_close_t *ch = f.payload.method.decoded;
			amqp_bytes_t t = f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD
						 ? ch->reply_text
						 : c->reply_text;

			snprintf(l->why, sizeof(l->why), "closed by the broker: %.*s", (int)t.len,
				 (char *)t.bytes);
			return false;
		}
		default:
			break;
		}
		amqp_maybe_release_buffers(l->conn);
	}
}

/*
 * Queues added by the loop (mq_link_add_queue): kept for every connection
 * from now on, and declared now on the one open. Before the publishes taken
 * with them, so that none of those to the new queue is returned for want of
 * it. false: connection lost.
 */
static bool thread_add_queues(struct mq_link *l, char **added, size_t n)
{
	struct mq_setup setup = thread_setup(l, l->consuming);
	bool ok = true;

	l->queues = realloc(l->queues, (l->nqueues + n + 1) * sizeof(*l->queues));
	if (!l->queues)
		abort();
	for (size_t i = 0; i < n; i++) {
		l->queues[l->nqueues++] = added[i];
		l->queues[l->nqueues] = NULL;
		if (l->conn && ok)
			ok = mq_setup_declare_peer(l->conn, &setup, added[i], l->why, sizeof(l->why));
	}
	return ok;
}

/* Settlements and publishes the loop handed over. false: connection lost. */
static bool thread_write(struct mq_link *l, struct settle *s, size_t ns)
{
	for (size_t i = 0; i < ns; i++) {
		int rc = AMQP_STATUS_OK;

		if (s[i].generation != l->generation)
			continue; /* that delivery's channel died: the broker requeued it */
		if (s[i].how == MQ_ACK)
			rc = amqp_basic_ack(l->conn, CHANNEL, s[i].tag, 0);
		else
			rc = amqp_basic_reject(l->conn, CHANNEL, s[i].tag, s[i].how == MQ_REQUEUE);
		if (rc != AMQP_STATUS_OK) {
			snprintf(l->why, sizeof(l->why), "settling: %s", amqp_error_string2(rc));
			return false;
		}
	}
	while (!l->blocked && l->nunconf < l->window && l->wait_head) {
		struct mq_msg *m = pop(&l->wait_head, &l->wait_tail);
		amqp_basic_properties_t p;
		amqp_table_entry_t h[1] = { mq_entry_str("traceparent", m->traceparent) };
		int rc;

		memset(&p, 0, sizeof(p));
		p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
			   AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_APP_ID_FLAG;
		p.content_type = amqp_cstring_bytes("application/json");
		p.delivery_mode = 2;
		p.message_id = amqp_cstring_bytes(m->id);
		p.type = amqp_cstring_bytes(m->type);
		p.app_id = amqp_cstring_bytes(l->service);
		if (m->traceparent[0]) {
			p._flags |= AMQP_BASIC_HEADERS_FLAG;
			p.headers = (amqp_table_t){ 1, h };
		}
		m->tag = ++l->seq;
		clock_gettime(CLOCK_MONOTONIC, &m->sent);
		append(&l->unconf_head, &l->unconf_tail, m);
		l->nunconf++;
		rc = amqp_basic_publish(l->conn, CHANNEL, amqp_cstring_bytes("pgsaga"),
					amqp_cstring_bytes(m->dest), 1, 0, &p,
					(amqp_bytes_t){ m->len, m->body });
		if (rc != AMQP_STATUS_OK) {
			snprintf(l->why, sizeof(l->why), "publishing: %s", amqp_error_string2(rc));
			return false;
		}
	}
	return true;
}

static void thread_close(struct mq_link *l)
{
	amqp_channel_close(l->conn, CHANNEL, AMQP_REPLY_SUCCESS);
	amqp_connection_close(l->conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(l->conn);
	l->conn = NULL;
}

static void thread_wait(struct mq_link *l)
{
	struct pollfd p[2] = { { l->wake_fd, POLLIN, 0 }, { -1, POLLIN, 0 } };
	int timeout = HEARTBEAT_S * 1000 / 2;

	if (l->conn) {
		/*
		 * thread_read drained every whole frame; what may be left in the
		 * buffer is part of one, and the rest comes through the socket
		 */
		if (amqp_frames_enqueued(l->conn))
			return;
		int64_t left = thread_confirm_deadline(l) - monotime_ms();

		p[1].fd = amqp_get_sockfd(l->conn);
		if (left < timeout)
			timeout = left < 0 ? 0 : (int)left;
	} else {
		int64_t left = l->next_connect_ms - monotime_ms();

		timeout = left < 0 ? 0 : left > 1000 ? 1000 : (int)left;
	}
	if (poll(p, 2, timeout) > 0 && (p[0].revents & POLLIN))
		drain_fd(l->wake_fd);
}

static void *thread_main(void *arg)
{
	struct mq_link *l = arg;

	for (;;) {
		struct settle *s;
		size_t ns, nadded;
		bool stopping, pause, reload;
		struct mq_msg *m;
		char **added;

		pthread_mutex_lock(&l->mu);
		stopping = l->stopping;
		pause = l->pause_consuming;
		reload = l->reload_tls;
		l->reload_tls = false;
		while ((m = pop(&l->pub_head, &l->pub_tail)) != NULL)
			append(&l->wait_head, &l->wait_tail, m);
		s = l->settles;
		ns = l->nsettles;
		l->settles = NULL;
		l->nsettles = l->settles_cap = 0;
		added = l->added;
		nadded = l->nadded;
		l->added = NULL;
		l->nadded = l->added_cap = 0;
		pthread_mutex_unlock(&l->mu);

		if (reload && l->tls) /* amqps, loaded once: else the next attempt loads */
			thread_load_tls(l, true);
		if (!l->conn && !stopping && monotime_ms() >= l->next_connect_ms)
			thread_connect(l, !pause);
		if (l->conn && pause && l->consuming) {
			amqp_basic_cancel(l->conn, CHANNEL, amqp_empty_bytes);
			l->consuming = false;
		}
		if (nadded && !thread_add_queues(l, added, nadded))
			thread_lose(l);
		free(added);
		if (l->conn && (!thread_read(l) || !thread_write(l, s, ns) || !thread_expire(l)))
			thread_lose(l);
		free(s);
		if (!l->conn) {
			/* nobody to send to: these fail now, the outbox retries them */
			while ((m = pop(&l->wait_head, &l->wait_tail)) != NULL)
				thread_confirm(l, m, false, l->why[0] ? l->why : "broker unavailable");
		}
		if (stopping && !l->stop_by_ms)
			l->stop_by_ms = monotime_ms() + 2 * RPC_TIMEOUT_S * 1000;
		if (stopping && (!l->conn || (!l->wait_head && !l->unconf_head) ||
				 monotime_ms() >= l->stop_by_ms))
			break;
		thread_wait(l);
	}
	if (l->conn)
		thread_close(l);
	while (l->unconf_head)
		thread_confirm(l, pop(&l->unconf_head, &l->unconf_tail), false, "shutting down");
	while (l->wait_head)
		thread_confirm(l, pop(&l->wait_head, &l->wait_tail), false, "shutting down");
	SSL_CTX_free(l->tls);
	return NULL;
}

static char *dup_or_null(const char *s)
{
	char *d;

	if (!s || !*s)
		return NULL;
	if (!(d = strdup(s)))
		abort();
	return d;
}

static void free_tls(struct mq_link *l)
{
	free(l->tls_ca);
	free(l->tls_cert);
	free(l->tls_key);
}

struct mq_link *mq_link_new(const struct mq_link_opts *o, char *err, size_t errlen)
{
	struct mq_link *l = calloc(1, sizeof(*l));
	size_t nq = 0;

	if (!l)
		abort();
	if (mq_nodes_parse(&l->nodes, o->url, err, errlen) != 0) {
		free(l);
		return NULL;
	}
	snprintf(l->service, sizeof(l->service), "%s", o->service);
	snprintf(l->queue, sizeof(l->queue), "pgsaga.%s", o->service);
	while (o->queues[nq])
		nq++;
	l->queues = calloc(nq + 1, sizeof(*l->queues));
	if (!l->queues)
		abort();
	for (size_t i = 0; i < nq; i++)
		if (!(l->queues[i] = strdup(o->queues[i])))
			abort();
	l->nqueues = nq;
	l->tls_ca = dup_or_null(o->tls_ca);
	l->tls_cert = dup_or_null(o->tls_cert);
	l->tls_key = dup_or_null(o->tls_key);
	l->prefetch = o->prefetch;
	l->window = o->window;
	l->confirm_timeout_ms = o->confirm_timeout_ms;
	l->backoff_ms = RECONNECT_MIN_MS;
	l->loop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&l->mu, NULL);
	if (l->loop_fd < 0 || l->wake_fd < 0 || pthread_create(&l->thread, NULL, thread_main, l)) {
		snprintf(err, errlen, "cannot start the AMQP thread: %s", strerror(errno));
		/* nothing started: free by hand */
		if (l->loop_fd >= 0)
			close(l->loop_fd);
		if (l->wake_fd >= 0)
			close(l->wake_fd);
		for (size_t i = 0; i < nq; i++)
			free(l->queues[i]);
		free(l->queues);
		mq_nodes_free(&l->nodes);
		free_tls(l);
		free(l);
		return NULL;
	}
	return l;
}

const char *mq_link_node(const struct mq_link *l, size_t i)
{
	return i < l->nodes.n ? l->nodes.name[i] : NULL;
}

void mq_link_free(struct mq_link *l)
{
	struct mq_msg *m;

	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stopping = true;
	pthread_mutex_unlock(&l->mu);
	signal_fd(l->wake_fd);
	pthread_join(l->thread, NULL);
	for (m = l->out_head; m;) {
		struct mq_msg *next = m->next;

		free(m);
		m = next;
	}
	for (m = l->pub_head; m;) {
		struct mq_msg *next = m->next;

		free(m);
		m = next;
	}
	free(l->settles);
	for (char **q = l->queues; *q; q++)
		free(*q);
	free(l->queues);
	for (size_t i = 0; i < l->nadded; i++)
		free(l->added[i]);
	free(l->added);
	free_tls(l);
	close(l->loop_fd);
	close(l->wake_fd);
	pthread_mutex_destroy(&l->mu);
	mq_nodes_free(&l->nodes);
	free(l);
}
