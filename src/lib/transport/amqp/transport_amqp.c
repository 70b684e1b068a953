/*
 * transport_amqp: the loop's half of the AMQP transport (transport.h); the
 * connection itself runs on the mq_link thread.
 *
 * Sending: each row becomes one mq_msg handed to the link; its confirm comes
 * back through the link's eventfd and ends the send (DELIVERY_OK on a
 * basic.ack, else DELIVERY_RETRYABLE: a nack, a return or a lost connection is
 * a failed attempt like an HTTP 503). A breaker per destination keeps a
 * broker that is down from burning attempts, as httpc's does for a peer.
 *
 * Receiving: a delivery is handed to the service's handler as an inmsg; its
 * HTTP-like answer settles it: 2xx ack; 4xx but 408/429 reject without
 * requeue (dead-lettered to pgsaga.dead by the queue's policy, logged and
 * counted), once the service has kept it as a dead letter of its own
 * (transport_amqp_opts.refused); anything else requeue after a backoff delay, holding the
 * delivery (and its prefetch slot) meanwhile so a broken database is not
 * hammered.
 */
#include "monotime.h"
#include "transport_amqp.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "breaker.h"
#include "log.h"
#include "metrics.h"
#include "mq_link.h"
#include "mq_nodes.h"
#include "traceparent.h"

#define WINDOW 256

struct dest_breaker {
	char name[64];
	struct breaker br;
	struct metric_series *state; /* saga_peer_circuit_state, as httpc's */
};

/* A delivery put off for a while (later()); listed so that stopping can
 * hand every one back at once instead of waiting for its timer. */
struct held {
	struct transport_amqp *a;
	struct mq_msg *m;
	struct event *ev;
	struct held *next, **prev;
};

struct transport_amqp {
	struct transport t; /* first: the ops see a struct transport * */
	struct event_base *base;
	struct mq_link *link;
	struct event *ev;
	struct transport_amqp_opts o;
	char where[128];
	/* the destinations' circuits, made at the first send to each */
	struct dest_breaker *dests;
	int ndests, cap;
	/* where it sends: the peers, and those added (transport_amqp_add_dest) */
	char **names;
	size_t nnames, names_cap;
	int unconfirmed, outstanding;
	bool up, stopping;
	struct held *held;
	struct metric_series *m_up, *m_unconfirmed, *m_blocked, *m_confirm;
	struct metric_series *m_received, *m_acked, *m_rejected, *m_requeued;
	struct metric_series *m_confirm_ok, *m_confirm_failed;
	struct metric_series *m_node[MQ_NODES_MAX]; /* saga_broker_node, per node listed */
	char node[80]; /* the node connected to, or last tried */
	char scheme[8]; /* amqp or amqps */
};

static struct dest_breaker *breaker_for(struct transport_amqp *a, const char *dest)
{
	struct dest_breaker *d;
	char labels[224];

	for (int i = 0; i < a->ndests; i++)
		if (strcmp(a->dests[i].name, dest) == 0)
			return &a->dests[i];
	/* nothing keeps a pointer past the call: the array may move */
	if (a->ndests == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 8;
		a->dests = realloc(a->dests, (size_t)a->cap * sizeof(*a->dests));
		if (!a->dests)
			abort();
	}
	d = &a->dests[a->ndests++];
	snprintf(d->name, sizeof(d->name), "%s", dest);
	breaker_init(&d->br, a->o.breaker_failures, a->o.breaker_open_ms);
	snprintf(labels, sizeof(labels), "peer=\"%s\",instance=\"%s\"", d->name, a->where);
	d->state = metrics_series(
		metrics_family("saga_peer_circuit_state",
			       "Circuit breaker per peer instance: 0 closed, 1 open, 2 half-open",
			       METRIC_GAUGE),
		labels);
	return d;
}

static void show_state(struct dest_breaker *d)
{
	metric_set(d->state, d->br.state == BREAKER_CLOSED ? 0 : d->br.state == BREAKER_OPEN ? 1 : 2);
}

/* --- sending ------------------------------------------------------------- */

/* A send answered without the broker: a closed circuit, an unknown place. */
struct answer_now {
	struct transport_send *s;
	enum delivery_outcome outcome;
	const char *error; /* a literal */
	int64_t delay_ms;
	char where[128];
};

static void answer_now_cb(evutil_socket_t fd, short what, void *arg)
{
	struct answer_now *n = arg;
	struct transport_result r = { n->outcome, n->error, n->where, n->delay_ms };

	n->s->cb(n->s, &r);
	free(n);
}

/* The callback never runs inside transport_send: on the next loop turn. */
static void answer_soon(struct transport_amqp *a, struct transport_send *s,
			enum delivery_outcome outcome, const char *error, int64_t delay_ms)
{
	struct answer_now *n = calloc(1, sizeof(*n));
	struct timeval zero = { 0, 0 };

	if (!n)
		abort();
	*n = (struct answer_now){ s, outcome, error, delay_ms, "" };
	snprintf(n->where, sizeof(n->where), "%s", a->where);
	if (event_base_once(a->base, -1, EV_TIMEOUT, answer_now_cb, n, &zero) != 0)
		abort();
}

static bool known_dest(const struct transport_amqp *a, const char *dest)
{
	/* itself: a refused delivery it kept, retried by an operator */
	if (strcmp(dest, a->o.service) == 0)
		return true;
	for (size_t i = 0; i < a->nnames; i++)
		if (strcmp(a->names[i], dest) == 0)
			return true;
	return false;
}

static void add_name(struct transport_amqp *a, const char *dest)
{
	if (a->nnames == a->names_cap) {
		a->names_cap = a->names_cap ? 2 * a->names_cap : 8;
		a->names = realloc(a->names, a->names_cap * sizeof(*a->names));
		if (!a->names)
			abort();
	}
	if (!(a->names[a->nnames++] = strdup(dest)))
		abort();
}

void transport_amqp_add_dest(struct transport *t, const char *dest)
{
	struct transport_amqp *a = (struct transport_amqp *)t;

	if (known_dest(a, dest))
		return;
	add_name(a, dest);
	/* handed to the link before any publish to it can be: declared first */
	mq_link_add_queue(a->link, dest);
}

static void amqp_send(struct transport *t, const struct transport_msg *msg,
		      struct transport_send *s)
{
	struct transport_amqp *a = (struct transport_amqp *)t;
	struct dest_breaker *d;
	int64_t now = monotime_ms();
	struct mq_msg *m;

	if (!known_dest(a, msg->dest)) {
		/* as over HTTP: a destination nobody configured is a dead letter */
		answer_soon(a, s, DELIVERY_REFUSED, "unknown destination", -1);
		return;
	}
	d = breaker_for(a, msg->dest);
	if (!breaker_allow(&d->br, now)) {
		int64_t delay = breaker_retry_at(&d->br, now) - now;

		show_state(d);
		answer_soon(a, s, DELIVERY_NOT_ATTEMPTED, "circuit open", delay < 1 ? 1 : delay);
		return;
	}
	show_state(d);
	m = mq_msg_new(msg->len);
	m->token = s;
	snprintf(m->id, sizeof(m->id), "%s", msg->id);
	snprintf(m->type, sizeof(m->type), "%s", msg->type);
	snprintf(m->dest, sizeof(m->dest), "%s", msg->dest);
	if (!traceparent_build(msg->trace, m->traceparent))
		m->traceparent[0] = '\0';
	memcpy(m->body, msg->payload, msg->len);
	a->unconfirmed++;
	metric_set(a->m_unconfirmed, a->unconfirmed);
	mq_link_publish(a->link, m);
}

static void confirmed(struct transport_amqp *a, struct mq_msg *m)
{
	struct transport_send *s = m->token;
	struct transport_result r = { m->ok ? DELIVERY_OK : DELIVERY_RETRYABLE, m->error, a->where,
				      -1 };
	struct timespec end;

	a->unconfirmed--;
	metric_set(a->m_unconfirmed, a->unconfirmed);
	if (m->ok) {
		clock_gettime(CLOCK_MONOTONIC, &end);
		metric_observe(a->m_confirm, (double)(end.tv_sec - m->sent.tv_sec) +
						     (double)(end.tv_nsec - m->sent.tv_nsec) / 1e9);
		metric_add(a->m_confirm_ok, 1);
	} else {
		metric_add(a->m_confirm_failed, 1);
	}
	struct dest_breaker *d = breaker_for(a, m->dest);

	breaker_report(&d->br, m->ok, monotime_ms());
	show_state(d);
	s->cb(s, &r);
}

/* --- receiving ------------------------------------------------------------ */

static void settle(struct mq_msg *m, enum mq_settle how)
{
	struct transport_amqp *a = m->token;

	mq_link_settle(a->link, m->generation, m->tag, how);
	a->outstanding--;
	free(m);
}

static void unhold(struct held *h)
{
	*h->prev = h->next;
	if (h->next)
		h->next->prev = h->prev;
	event_free(h->ev);
	settle(h->m, MQ_REQUEUE);
	free(h);
}

static void requeue_cb(evutil_socket_t fd, short what, void *arg)
{
	unhold(arg);
}

/* Not now: delivered again after a delay, not in a hot loop. */
static void later(struct mq_msg *m, const char *why)
{
	struct transport_amqp *a = m->token;
	int64_t ms = backoff_delay_ms(a->o.retry_base_ms, a->o.retry_cap_ms,
				      (int)(m->delivery_count < 30 ? m->delivery_count + 1 : 30),
				      backoff_random());
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
	struct log_ctx lc = { .message_id = m->id };
	struct held *h;

	metric_add(a->m_requeued, 1);
	LOG_AT(LOG_DEBUG, &lc, "amqp: %s not handled now (%s); delivered again in %lld ms",
	       m->type, why, (long long)ms);
	if (a->stopping) {
		settle(m, MQ_REQUEUE);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		abort();
	h->a = a;
	h->m = m;
	h->ev = evtimer_new(a->base, requeue_cb, h);
	if (!h->ev)
		abort();
	h->next = a->held;
	if (h->next)
		h->next->prev = &h->next;
	h->prev = &a->held;
	a->held = h;
	evtimer_add(h->ev, &tv);
}

/* The refusal is kept (or could not be, for good): into pgsaga.dead with it. */
static void refusal_kept(void *tok, bool retry)
{
	struct mq_msg *m = tok;
	struct transport_amqp *a = m->token;
	struct log_ctx lc = { .message_id = m->id };

	if (retry) {
		later(m, "keeping the refused message failed for now");
		return;
	}
	metric_add(a->m_rejected, 1);
	LOG_AT(LOG_WARN, &lc, "amqp: rejected %s into pgsaga.dead", m->type);
	settle(m, MQ_REJECT);
}

static void answer(struct mq_msg *m, int status, const char *text)
{
	struct transport_amqp *a = m->token;

	if (status >= 200 && status < 300) {
		metric_add(a->m_acked, 1);
		settle(m, MQ_ACK);
	} else if (status >= 400 && status < 500 && status != 408 && status != 429) {
		const struct transport_refusal r = { m->id, m->type, m->body, m->len, status, text };
		struct log_ctx lc = { .message_id = m->id };

		LOG_AT(LOG_WARN, &lc, "amqp: %s refused for good: %d %s", m->type, status, text);
		if (a->o.refused)
			a->o.refused(a->o.arg, &r, refusal_kept, m);
		else
			refusal_kept(m, false);
	} else {
		later(m, text);
	}
}

static const char *in_body(void *h, size_t *len)
{
	struct mq_msg *m = h;

	*len = m->len;
	return m->body;
}

static const char *in_traceparent(void *h)
{
	struct mq_msg *m = h;

	return m->traceparent[0] ? m->traceparent : NULL;
}

static void in_reply(void *h, int status, const char *json)
{
	answer(h, status, json);
}

static void in_error(void *h, int status, const char *code, const char *message)
{
	char text[300];

	snprintf(text, sizeof(text), "%s: %s", code, message);
	answer(h, status, text);
}

static void in_unavailable(void *h)
{
	later(h, "database unavailable");
}

static void in_drop(void *h)
{
	/* the effect committed, the ack is "lost": the inbox takes the copy */
	later(h, "answer dropped (fault injection)");
}

static const char *in_id(void *h)
{
	return ((struct mq_msg *)h)->id;
}

static const struct inmsg_ops delivery_ops = { in_body,	       in_traceparent, in_reply, in_error,
					       in_unavailable, in_drop,	       in_id };

static void delivered(struct transport_amqp *a, struct mq_msg *m)
{
	m->token = a;
	a->outstanding++;
	metric_add(a->m_received, 1);
	if (a->stopping) {
		settle(m, MQ_REQUEUE);
		return;
	}
	a->o.consume((struct inmsg){ &delivery_ops, m }, m->type);
}

/* --- the link ------------------------------------------------------------- */

static void state_changed(struct transport_amqp *a, struct mq_msg *m)
{
	bool was_up = a->up;

	a->up = m->up;
	snprintf(a->node, sizeof(a->node), "%s", m->node);
	/* with several nodes, last_error says which one failed a publish */
	if (mq_link_node(a->link, 1))
		snprintf(a->where, sizeof(a->where), "%s://%s", a->scheme, m->node);
	for (size_t i = 0; i < MQ_NODES_MAX && a->m_node[i]; i++)
		metric_set(a->m_node[i], m->up && strcmp(mq_link_node(a->link, i), m->node) == 0);
	metric_set(a->m_up, m->up);
	metric_set(a->m_blocked, m->up && m->blocked);
	if (m->up && !was_up && a->o.on_up)
		a->o.on_up(a->o.arg);
}

static void link_cb(evutil_socket_t fd, short what, void *arg)
{
	struct transport_amqp *a = arg;
	struct mq_msg *m = mq_link_take(a->link), *next;

	for (; m; m = next) {
		next = m->next;
		switch (m->kind) {
		case MQ_CONFIRMED:
			confirmed(a, m);
			free(m);
			break;
		case MQ_DELIVERY:
			delivered(a, m);
			break;
		case MQ_STATE:
			state_changed(a, m);
			free(m);
			break;
		}
	}
}

static bool amqp_idle(const struct transport *t)
{
	const struct transport_amqp *a = (const struct transport_amqp *)t;

	return a->unconfirmed == 0 && a->outstanding == 0;
}

static const char *amqp_broker(const struct transport *t)
{
	return ((const struct transport_amqp *)t)->up ? "up" : "down";
}

static const char *amqp_broker_node(const struct transport *t)
{
	const struct transport_amqp *a = (const struct transport_amqp *)t;

	return a->up ? a->node : NULL;
}

static void amqp_stop(struct transport *t)
{
	struct transport_amqp *a = (struct transport_amqp *)t;

	a->stopping = true;
	mq_link_pause_consuming(a->link);
	while (a->held)
		unhold(a->held);
}

static void amqp_free(struct transport *t)
{
	struct transport_amqp *a = (struct transport_amqp *)t;

	while (a->held)
		unhold(a->held);
	mq_link_free(a->link);
	if (a->ev)
		event_free(a->ev);
	for (size_t i = 0; i < a->nnames; i++)
		free(a->names[i]);
	free(a->names);
	free(a->dests);
	free(a);
}

/* A destination not sent to yet has a closed circuit. */
static const char *amqp_breaker(const struct transport *t, const char *dest)
{
	const struct transport_amqp *a = (const struct transport_amqp *)t;

	for (int i = 0; i < a->ndests; i++)
		if (strcmp(a->dests[i].name, dest) == 0)
			return breaker_state_name(&a->dests[i].br, monotime_ms());
	return "closed";
}

static void amqp_reload_tls(struct transport *t)
{
	mq_link_reload_tls(((struct transport_amqp *)t)->link);
}

static const struct transport_ops amqp_ops = { amqp_send,	 amqp_idle,	 amqp_broker,
					       amqp_stop,	 amqp_free,	 amqp_breaker,
					       amqp_broker_node, amqp_reload_tls };

static void declare_metrics(struct transport_amqp *a)
{
	struct metric_family *d =
		metrics_family("saga_amqp_deliveries_total",
			       "AMQP deliveries received, and how each was settled", METRIC_COUNTER);
	struct metric_family *c = metrics_family(
		"saga_amqp_publishes_total", "AMQP publishes by broker answer", METRIC_COUNTER);

	a->m_up = metrics_series(metrics_family("saga_broker_up",
						"1 while connected to the broker, else 0",
						METRIC_GAUGE), "");
	a->m_unconfirmed = metrics_series(
		metrics_family("saga_amqp_unconfirmed", "Publishes the broker has not confirmed yet",
			       METRIC_GAUGE), "");
	a->m_blocked = metrics_series(
		metrics_family("saga_amqp_blocked",
			       "1 while the broker blocks publishing (connection.blocked)",
			       METRIC_GAUGE), "");
	a->m_confirm = metrics_series(
		metrics_family("saga_amqp_confirm_seconds", "Time from publish to the broker's confirm",
			       METRIC_HISTOGRAM), "");
	for (size_t i = 0; i < MQ_NODES_MAX && mq_link_node(a->link, i); i++) {
		char labels[120];

		snprintf(labels, sizeof(labels), "node=\"%s\"", mq_link_node(a->link, i));
		a->m_node[i] = metrics_series(
			metrics_family("saga_broker_node",
				       "1 for the node of AMQP_URL connected to, 0 for the others",
				       METRIC_GAUGE),
			labels);
	}
	a->m_received = metrics_series(d, "outcome=\"received\"");
	a->m_acked = metrics_series(d, "outcome=\"acked\"");
	a->m_rejected = metrics_series(d, "outcome=\"rejected\"");
	a->m_requeued = metrics_series(d, "outcome=\"requeued\"");
	a->m_confirm_ok = metrics_series(c, "outcome=\"confirmed\"");
	a->m_confirm_failed = metrics_series(c, "outcome=\"failed\"");
}

struct transport *transport_amqp_new(struct event_base *base, const struct transport_amqp_opts *o,
				     char *err, size_t errlen)
{
	struct transport_amqp *a = calloc(1, sizeof(*a));
	/*
	 * The queues it declares: its own (the link's, always) and those of the
	 * destinations it sends to, so that what it sends before a receiver's
	 * first start waits in the receiver's queue (see mq_setup.h).
	 */
	const char **queues = calloc(o->ndests + 1, sizeof(*queues));
	struct mq_link_opts lo = { o->url, o->service, queues, o->prefetch, WINDOW,
				   o->confirm_timeout_ms, o->tls_ca, o->tls_cert, o->tls_key };

	if (!a || !queues)
		abort();
	a->t.ops = &amqp_ops;
	a->base = base;
	a->o = *o;
	a->o.dests = NULL; /* borrowed for the call: names has them */
	for (size_t i = 0; i < o->ndests; i++) {
		add_name(a, o->dests[i]);
		queues[i] = o->dests[i];
	}
	a->link = mq_link_new(&lo, err, errlen);
	free(queues); /* copied */
	if (!a->link) {
		for (size_t i = 0; i < a->nnames; i++)
			free(a->names[i]);
		free(a->names);
		free(a);
		return NULL;
	}
	snprintf(a->scheme, sizeof(a->scheme), "%s", strncmp(o->url, "amqps:", 6) ? "amqp" : "amqps");
	/*
	 * where, for last_error and the instance label of the circuit metric:
	 * one node's URL without its credentials, as it always was; with
	 * several, the node in use (the first until connected)
	 */
	if (mq_link_node(a->link, 1)) {
		snprintf(a->where, sizeof(a->where), "%s://%s", a->scheme, mq_link_node(a->link, 0));
	} else {
		const char *at = strrchr(o->url, '@'), *rest = strstr(o->url, "://");

		snprintf(a->where, sizeof(a->where), "%s://%s", a->scheme,
			 at ? at + 1 : rest ? rest + 3 : o->url);
	}
	declare_metrics(a);
	a->ev = event_new(base, mq_link_fd(a->link), EV_READ | EV_PERSIST, link_cb, a);
	if (!a->ev || event_add(a->ev, NULL) != 0) {
		amqp_free(&a->t);
		return NULL;
	}
	return &a->t;
}
