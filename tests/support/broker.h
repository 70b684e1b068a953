/*
 * broker: throwaway RabbitMQ nodes for integration tests.
 *
 * A node is started by scripts/rabbit-node in a private directory on a free
 * AMQP port (its distribution and epmd ports are free ones too, chosen by the
 * script); as root the node runs as the `rabbitmq` user. A test may kill -9
 * the node and start it again on the same port with the same data, stop it
 * gracefully, and run rabbitmqctl on it.
 *
 * Cleanup: broker_destroy stops the node and deletes its directory. A node
 * must not outlive its test run even when that run is killed: broker_start
 * forks a watchdog in a session of its own, tied to the caller by
 * PR_SET_PDEATHSIG, which destroys the node when the caller dies without
 * broker_destroy (a Check child that fails, times out or is killed; meson's
 * timeout; Ctrl-C). Only the process that started a node (its owner, e.g. the
 * runner in an unchecked fixture) destroys it; forked Check children inherit
 * the struct and may kill, stop and restart the node.
 *
 * The AMQP helpers (librabbitmq, blocking, 10 s timeouts) are for tests only:
 * they connect, do one thing and disconnect.
 *
 * Failures abort the test (ck_abort_msg) after printing why and the end of the
 * node's log to stderr, except where a function says it returns an error.
 */
#ifndef PGSAGA_BROKER_H
#define PGSAGA_BROKER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct broker {
	char dir[PATH_MAX];   /* private directory (scripts/rabbit-node DIR) */
	int port;             /* AMQP port on 127.0.0.1 */
	char url[128];        /* amqp://guest:guest@127.0.0.1:PORT/%2f (amqps:// with TLS) */
	char tls_dir[PATH_MAX]; /* broker_start_tls: scripts/rabbit-node --tls DIR */
	pid_t owner;          /* the process that started it; 0 when destroyed */
	pid_t watchdog;
};

/* Starts a new node on a free port and waits until it accepts connections
 * (about 5 s). */
void broker_start(struct broker *b);

/* The same with AMQP over TLS only (scripts/rabbit-node --tls certs, a
 * directory of scripts/certs with ca.crt and rabbitmq.crt). The AMQP helpers
 * below speak plain AMQP and do not reach such a node. */
void broker_start_tls(struct broker *b, const char *certs);

/* Stops the node (graceful), deletes its directory and ends the watchdog.
 * Does nothing outside the owner or when already destroyed. */
void broker_destroy(struct broker *b);

/* SIGKILLs every process of the node and waits until they are gone. */
void broker_kill(struct broker *b);

/* Writes the node's metadata (Mnesia's log, its dets tables) to disk, as a
 * node does in time by itself: call before broker_kill when what the test
 * declared just before must survive it. */
void broker_sync(const struct broker *b);

/* Graceful stop; returns once every process of the node has ended. */
void broker_stop(struct broker *b);

/* Starts the node again on the same port with the same data (after kill or
 * stop) and waits until it accepts connections. */
void broker_restart(struct broker *b);

/* The node's process group id, or 0 when it is not running. */
pid_t broker_pgid(const struct broker *b);

/* Number of live (non-zombie) processes in process group pgid. */
int broker_group_size(pid_t pgid);

/*
 * Runs `rabbitmqctl -q ARGS...` on the node (NULL-terminated args). Returns
 * the exit status (0 on success, -1 when it could not run); when out is not
 * NULL, its standard output (truncated to outlen - 1 bytes) goes there.
 * Each call costs about a second of CPU: rabbitmqctl boots an Erlang VM.
 */
int broker_ctl(const struct broker *b, char *out, size_t outlen, const char *arg, ...)
	__attribute__((sentinel));

/* --- AMQP, as a client would see the node -------------------------------- */

/* true when an AMQP login on url succeeds (connection then closed). */
bool broker_can_connect(const char *url);

struct broker_msg {
	const char *message_id;   /* may be NULL */
	const char *type;         /* may be NULL */
	const char *app_id;       /* may be NULL */
	const char *body;         /* sent as application/json, persistent */
	size_t body_len;          /* (size_t)-1 for strlen */
};

/*
 * Publishes one persistent message with publisher confirms and mandatory set.
 * Returns 0 when the broker confirmed it; else -1 with the reason in err
 * (unroutable: "returned"; refused: "nacked"; connection problems).
 */
int broker_publish(const char *url, const char *exchange, const char *routing_key,
		   const struct broker_msg *m, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/* Declares a durable queue (arguments none) if missing; aborts on failure. */
void broker_declare_queue(const char *url, const char *queue);

/* Messages ready in queue (passive declare), or -1 when the queue does not
 * exist or the node cannot be reached (the reason goes to stderr). */
long broker_queue_depth(const char *url, const char *queue);

struct broker_got {
	char *message_id;         /* malloc'd, NULL when absent */
	char *type;
	char *app_id;
	char *exchange;           /* as published (dead letters keep theirs) */
	char *routing_key;
	char *body;               /* NUL-terminated */
	size_t body_len;
};

/*
 * basic.get one message from queue and acknowledge it. Returns 1 with *out
 * filled (free with broker_got_free), 0 when the queue is empty, -1 on error.
 */
int broker_get(const char *url, const char *queue, struct broker_got *out);
void broker_got_free(struct broker_got *g);

#endif
