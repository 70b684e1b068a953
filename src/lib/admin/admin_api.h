/*
 * admin_api: the JSON admin API's data, as each service serves its own part
 * over its own schema and role, and as the orchestrator combines the parts.
 *
 * Every service answers, over its own tables only:
 *   GET  /admin/api/deliveries         {"deliveries": [...]}
 *   GET  /admin/api/dead-letters       {"deadLetters": [...], "groups": [...]}
 *   POST /admin/api/dead-letters/retry {"retried": n}
 *   GET  /admin/api/sagas/{id}         payment and inventory: their part of a
 *        saga, {"messages": [...], "payment"|"reservation": row or null}
 * The orchestrator (admin_spec.combine) asks its peers over HTTP with the
 * admin token and merges their answers into its own: arrays under the same
 * key are joined, other keys are added. A peer that does not answer 200 is
 * named in "unavailable" and the answer is partial, never a 500.
 */
#ifndef PGSAGA_ADMIN_API_H
#define PGSAGA_ADMIN_API_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

struct db_pool;
struct event_base;
struct evhttp_request;
struct httpd;
struct httpd_route;
struct outbox;
struct transport;

struct admin_spec {
	bool combine;             /* answers gather the peers' parts (orchestrator) */
	const char *saga_row;     /* key of this service's row in a saga, or NULL */
	const char *saga_row_sql; /* $1 saga id: one row, one column, JSON text or NULL */
	const struct httpd_route *routes; /* the service's own admin routes */
	size_t nroutes;
};

/* The API routes common to the three services (static). */
size_t admin_api_routes(const struct httpd_route **out);

/*
 * What the admin API needs from the service that serves it. The service
 * fills it in; admin_api_open copies it (the pointers must outlive
 * admin_api_close), so the admin module never sees the service's own struct.
 */
struct admin_ctx {
	const char *service;           /* this service's name and schema: "payment" */
	const char *token;             /* ADMIN_TOKEN */
	const struct admin_spec *spec; /* the service's part, or NULL */
	struct event_base *base;
	struct httpd *httpd;
	struct db_pool *pool;
	struct outbox *outbox;       /* kicked after a retry */
	struct transport *transport; /* asked for each destination's circuit */
	const char *const *peer_names; /* the destinations ("payment", ...) */
	const char *const *peer_urls;  /* and their base URL lists */
	size_t npeers;
	int http_timeout_ms;
	struct tls *tls;               /* for https:// peers (tls.h) */
};

/*
 * Remembers ctx (one service per process) and opens the HTTP clients to
 * the peers (combine only); admin_api_close frees them.
 */
void admin_api_open(const struct admin_ctx *ctx);
void admin_api_close(void);

/* The most peers combined: the spec's and those added. */
#define ADMIN_MAX_PEERS 16

/*
 * A peer opened after the start (a participant a saga definition names),
 * at urls: combined from now on as the spec's peers are (its part of a
 * saga, its dead letters). name must outlive admin_api_close. Nothing when
 * this service does not combine, the peer is known, or ADMIN_MAX_PEERS are.
 */
void admin_api_add_peer(const char *name, const char *urls);

/*
 * Combining: local (taken) is this service's part. For each peer, path is
 * the request to send it (GET), or NULL to leave the peer out. When every
 * peer has answered, finish (may be NULL) may edit the result, then it is
 * sent with status 200. On a service that does not combine, local is sent
 * at once.
 */
typedef void (*admin_finish_fn)(struct json_object *result, void *arg);
void admin_gather(struct evhttp_request *req, struct json_object *local, const char *const *paths,
		  admin_finish_fn finish, void *arg);

/* The peers the orchestrator combines, by name ("payment", ...); count. */
size_t admin_api_peers(const char *const **names);

/* Answers 200 with a JSON object (not taken). */
void admin_reply_json(struct evhttp_request *req, struct json_object *o);

/*
 * Answers 405 with Allow: allow, for a prefix route whose handler finds
 * that the path it got is another method's (two routes sharing a prefix).
 */
void admin_method_not_allowed(struct evhttp_request *req, const char *allow);

/* Parses JSON text from our own database (trusted); NULL becomes null. */
struct json_object *admin_parse_db(const char *text);

/*
 * Reads a query parameter: returns its malloc'd value (NULL when absent or
 * empty: "?state=&customerId=c-1" filters by customer only);
 * when the query is malformed or the value is longer than maxlen, answers
 * 400 invalid_field naming it and sets *answered.
 */
char *admin_param(struct evhttp_request *req, const char *name, size_t maxlen, bool *answered);

/* The generic SQL of a saga's messages in this service: $1 the saga id,
 * $2 the service's name, $3 a text[] of message ids received (for the
 * inbox rows); one JSON array. */
extern const char admin_messages_sql[];

#endif
