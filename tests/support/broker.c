/*
 * broker: throwaway RabbitMQ nodes for integration tests, over
 * scripts/rabbit-node, and a few blocking librabbitmq calls. See broker.h.
 */
#define _GNU_SOURCE
#include "broker.h"
#include "proc.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define AMQP_TIMEOUT_S 10
#define MAX_ARGS 24

/* --- processes ------------------------------------------------------------ */

static const char *script_path(void)
{
	static char path[PATH_MAX];
	const char *src = getenv("SAGA_SOURCE_DIR");

	if (!src || !*src) {
		fprintf(stderr, "broker: SAGA_SOURCE_DIR is not set: run the tests with meson test\n");
		ck_abort_msg("SAGA_SOURCE_DIR is not set: run the tests with `meson test`");
	}
	snprintf(path, sizeof(path), "%s/scripts/rabbit-node", src);
	return path;
}

/*
 * Runs `bash scripts/rabbit-node argv...` (bash: a checkout may have lost the
 * exec bit); stdout into out when given (else inherited), stderr inherited.
 * Returns the waitpid status, or -1.
 */
static int run_script(const char *const *args, char *out, size_t outlen)
{
	const char *argv[MAX_ARGS + 3];
	int pfd[2] = { -1, -1 }, status, n = 0;
	size_t got = 0;
	pid_t pid;

	argv[n++] = "bash";
	argv[n++] = script_path();
	for (; *args && n < MAX_ARGS + 2; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (out && pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY);

		if (fd > 0) {
			dup2(fd, 0);
			close(fd);
		}
		if (out)
			dup2(pfd[1], 1);
		char *copy[MAX_ARGS + 3];

		proc_close_from(3);
		proc_reset_signals();
		/* execvp takes char *const[]: copies, rather than casting const away. */
		for (int i = 0; i <= n; i++)
			copy[i] = argv[i] ? strdup(argv[i]) : NULL;
		execvp("bash", copy);
		_exit(127);
	}
	if (out) {
		close(pfd[1]);
		for (;;) {
			char buf[4096];
			ssize_t r = read(pfd[0], buf, sizeof(buf));

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			if (outlen > 0 && got < outlen - 1) {
				size_t take = (size_t)r;

				if (take > outlen - 1 - got)
					take = outlen - 1 - got;
				memcpy(out + got, buf, take);
				got += take;
			}
		}
		close(pfd[0]);
		if (outlen > 0)
			out[got] = '\0';
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	return status;
}

static bool ran_ok(int status)
{
	return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int script(const struct broker *b, const char *verb, bool with_port)
{
	char port[16];
	const char *args[] = { verb, b->dir, with_port ? port : NULL, NULL, NULL, NULL };

	if (with_port && b->tls_dir[0]) {
		args[3] = "--tls";
		args[4] = b->tls_dir;
	}

	snprintf(port, sizeof(port), "%d", b->port);
	return run_script(args, NULL, 0);
}

static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void teardown_node(const struct broker *b)
{
	const char *args[] = { "destroy", b->dir, NULL };

	if (!ran_ok(run_script(args, NULL, 0)))
		fprintf(stderr, "broker: rabbit-node destroy %s failed\n", b->dir);
	if (rmdir(b->dir) < 0 && errno != ENOENT)
		fprintf(stderr, "broker: cannot remove %s: %s\n", b->dir, strerror(errno));
}

/* For proc_watchdog_start: the node runs in a session of its own, so neither
 * meson's timeout nor a Ctrl-C reaches it. */
static void teardown_node_of(const void *b)
{
	teardown_node(b);
}

/* --- the node ------------------------------------------------------------- */

static void start(struct broker *b, const char *certs);

void broker_start(struct broker *b)
{
	start(b, NULL);
}

void broker_start_tls(struct broker *b, const char *certs)
{
	start(b, certs);
}

static void start(struct broker *b, const char *certs)
{
	memset(b, 0, sizeof(*b));
	if (certs)
		snprintf(b->tls_dir, sizeof(b->tls_dir), "%s", certs);
	script_path(); /* outside meson, fail before there is a directory to leave */
	snprintf(b->dir, sizeof(b->dir), "/tmp/pgsaga-rabbit-test-XXXXXX");
	if (!mkdtemp(b->dir))
		ck_abort_msg("mkdtemp %s: %s", b->dir, strerror(errno));
	b->port = free_port();
	if (b->port < 0)
		ck_abort_msg("no free port: %s", strerror(errno));
	snprintf(b->url, sizeof(b->url), "amqp%s://guest:guest@127.0.0.1:%d/%%2f", certs ? "s" : "",
		 b->port);
	b->owner = getpid();
	/* Before the start: a test killed while the node boots leaves nothing. */
	b->watchdog = proc_watchdog_start("broker", teardown_node_of, b);
	if (!ran_ok(script(b, "start", true))) {
		fprintf(stderr, "broker: scripts/rabbit-node start %s %d failed\n", b->dir, b->port);
		broker_destroy(b);
		ck_abort_msg("scripts/rabbit-node start failed (see stderr)");
	}
}

void broker_destroy(struct broker *b)
{
	if (!b->owner || getpid() != b->owner)
		return;
	proc_watchdog_stop(&b->watchdog);
	teardown_node(b);
	b->owner = 0;
}

void broker_kill(struct broker *b)
{
	if (!ran_ok(script(b, "kill", false)))
		ck_abort_msg("scripts/rabbit-node kill %s failed", b->dir);
}

void broker_stop(struct broker *b)
{
	if (!ran_ok(script(b, "stop", false)))
		ck_abort_msg("scripts/rabbit-node stop %s failed", b->dir);
}

void broker_restart(struct broker *b)
{
	if (!ran_ok(script(b, "start", true)))
		ck_abort_msg("scripts/rabbit-node start %s %d failed (see stderr)", b->dir, b->port);
}

pid_t broker_pgid(const struct broker *b)
{
	const char *args[] = { "pid", b->dir, NULL };
	char out[32];

	if (!ran_ok(run_script(args, out, sizeof(out))))
		return 0;
	return (pid_t)atol(out);
}

int broker_group_size(pid_t pgid)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[300], buf[512], *p, state;
		int ppid, grp;
		FILE *f;
		size_t len;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		/* comm may hold spaces and parentheses: the fields follow the last ')'. */
		p = strrchr(buf, ')');
		if (!p || sscanf(p + 1, " %c %d %d", &state, &ppid, &grp) != 3)
			continue;
		if (grp == pgid && state != 'Z' && state != 'X')
			n++;
	}
	closedir(d);
	return n;
}

int broker_ctl(const struct broker *b, char *out, size_t outlen, const char *arg, ...)
{
	const char *args[MAX_ARGS + 1];
	va_list ap;
	int n = 0;

	args[n++] = "ctl";
	args[n++] = b->dir;
	args[n++] = "-q";
	va_start(ap, arg);
	for (const char *a = arg; a && n < MAX_ARGS; a = va_arg(ap, const char *))
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	n = run_script(args, out, outlen);
	if (n == -1 || !WIFEXITED(n))
		return -1;
	return WEXITSTATUS(n);
}

void broker_sync(const struct broker *b)
{
	/*
	 * A node killed a moment after it changed its metadata comes back
	 * without the change; a node in production runs far longer than a test
	 * between declaring its queues and dying, and writes it back meanwhile.
	 * Seen here:
	 *  - Mnesia, written lazily from its log: a durable queue declared just
	 *    before the kill was gone after the restart (404 NOT_FOUND for 60 s,
	 *    once in a CI run of test-broker; the message store had fsynced the
	 *    confirmed message);
	 *  - Ra's dets table (auto_save), RabbitMQ 3.10.8 / Ra 2.2.0: a quorum
	 *    queue declared some seconds before the kill came back without its Ra
	 *    server ("running pre init for 2 registered servers" for 3 queues;
	 *    its leader never known, every operation on it timing out),
	 *    pgsaga.inventory every time.
	 */
	if (broker_ctl(b, NULL, 0, "eval",
		       "ok = mnesia:sync_log(), [dets:sync(T) || T <- dets:all()], ok.", NULL) != 0)
		ck_abort_msg("rabbitmqctl eval mnesia:sync_log, dets:sync failed on %s", b->dir);
}

/* --- AMQP ------------------------------------------------------------------- */

static void reply_error(amqp_rpc_reply_t r, const char *what, char *err, size_t errlen)
{
	switch (r.reply_type) {
	case AMQP_RESPONSE_NORMAL:
		snprintf(err, errlen, "%s: ok", what);
		break;
	case AMQP_RESPONSE_NONE:
		snprintf(err, errlen, "%s: no reply", what);
		break;
	case AMQP_RESPONSE_LIBRARY_EXCEPTION:
		snprintf(err, errlen, "%s: %s", what, amqp_error_string2(r.library_error));
		break;
	case AMQP_RESPONSE_SERVER_EXCEPTION:
		if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
			amqp_channel_close_t *c = r.reply.decoded;

			snprintf(err, errlen, "%s: channel closed %u %.*s", what, c->reply_code,
				 (int)c->reply_text.len, (const char *)c->reply_text.bytes);
		} else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
			amqp_connection_close_t *c = r.reply.decoded;

			snprintf(err, errlen, "%s: connection closed %u %.*s", what, c->reply_code,
				 (int)c->reply_text.len, (const char *)c->reply_text.bytes);
		} else {
			snprintf(err, errlen, "%s: server method 0x%08x", what, r.reply.id);
		}
		break;
	}
}

/* Connects, logs in and opens channel 1; NULL with err set on failure. */
static amqp_connection_state_t amqp_open(const char *url, char *err, size_t errlen)
{
	struct amqp_connection_info ci;
	struct timeval tv = { .tv_sec = AMQP_TIMEOUT_S };
	amqp_connection_state_t c;
	amqp_socket_t *s;
	amqp_rpc_reply_t r;
	char *copy = strdup(url);
	int rc;

	if (!copy || amqp_parse_url(copy, &ci) != AMQP_STATUS_OK) {
		snprintf(err, errlen, "bad AMQP URL %s", url);
		free(copy);
		return NULL;
	}
	c = amqp_new_connection();
	s = c ? amqp_tcp_socket_new(c) : NULL;
	if (!s) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	rc = amqp_socket_open_noblock(s, ci.host, ci.port, &tv);
	if (rc != AMQP_STATUS_OK) {
		snprintf(err, errlen, "connect %s:%d: %s", ci.host, ci.port, amqp_error_string2(rc));
		goto fail;
	}
	amqp_set_rpc_timeout(c, &tv);
	r = amqp_login(c, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		reply_error(r, "login", err, errlen);
		goto fail;
	}
	amqp_channel_open(c, 1);
	r = amqp_get_rpc_reply(c);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		reply_error(r, "channel.open", err, errlen);
		goto fail;
	}
	free(copy);
	return c;
fail:
	if (c)
		amqp_destroy_connection(c);
	free(copy);
	return NULL;
}

static void amqp_done(amqp_connection_state_t c)
{
	amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
	amqp_connection_close(c, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(c);
}

/* After a server exception the connection is of no use: close it without
 * the polite handshake, which would wait for a reply that does not come. */
static void amqp_drop(amqp_connection_state_t c)
{
	amqp_destroy_connection(c);
}

bool broker_can_connect(const char *url)
{
	char err[256];
	amqp_connection_state_t c = amqp_open(url, err, sizeof(err));

	if (!c)
		return false;
	amqp_done(c);
	return true;
}

static amqp_bytes_t bytes_of(const char *s)
{
	return s ? amqp_cstring_bytes(s) : amqp_empty_bytes;
}

/* Waits for the confirm of the one message published on channel 1. */
static int await_confirm(amqp_connection_state_t c, char *err, size_t errlen)
{
	bool returned = false;

	for (;;) {
		struct timeval tv = { .tv_sec = AMQP_TIMEOUT_S };
		amqp_frame_t f;
		int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);

		if (rc != AMQP_STATUS_OK) {
			snprintf(err, errlen, "waiting for the confirm: %s", amqp_error_string2(rc));
			return -1;
		}
		if (f.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (f.payload.method.id) {
		case AMQP_BASIC_ACK_METHOD:
			if (!returned)
				return 0;
			snprintf(err, errlen, "returned");
			return -1;
		case AMQP_BASIC_NACK_METHOD:
			snprintf(err, errlen, "nacked");
			return -1;
		case AMQP_BASIC_RETURN_METHOD: {
			amqp_message_t m;
			amqp_rpc_reply_t r = amqp_read_message(c, f.channel, &m, 0);

			if (r.reply_type == AMQP_RESPONSE_NORMAL)
				amqp_destroy_message(&m);
			returned = true;
			break;
		}
		case AMQP_CHANNEL_CLOSE_METHOD: {
			amqp_channel_close_t *cc = f.payload.method.decoded;

			snprintf(err, errlen, "channel closed %u %.*s", cc->reply_code,
				 (int)cc->reply_text.len, (const char *)cc->reply_text.bytes);
			return -1;
		}
		case AMQP_CONNECTION_CLOSE_METHOD:
			snprintf(err, errlen, "connection closed by the broker");
			return -1;
		default:
			break;
		}
	}
}

int broker_publish(const char *url, const char *exchange, const char *routing_key,
		   const struct broker_msg *m, char *err, size_t errlen)
{
	amqp_connection_state_t c = amqp_open(url, err, errlen);
	amqp_basic_properties_t p = { 0 };
	amqp_bytes_t body;
	amqp_rpc_reply_t r;
	int rc;

	if (!c)
		return -1;
	amqp_confirm_select(c, 1);
	r = amqp_get_rpc_reply(c);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		reply_error(r, "confirm.select", err, errlen);
		amqp_drop(c);
		return -1;
	}
	p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
	p.content_type = amqp_cstring_bytes("application/json");
	p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
	if (m->message_id) {
		p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
		p.message_id = bytes_of(m->message_id);
	}
	if (m->type) {
		p._flags |= AMQP_BASIC_TYPE_FLAG;
		p.type = bytes_of(m->type);
	}
	if (m->app_id) {
		p._flags |= AMQP_BASIC_APP_ID_FLAG;
		p.app_id = bytes_of(m->app_id);
	}
	body.bytes = (void *)(uintptr_t)m->body;
	body.len = m->body_len == (size_t)-1 ? strlen(m->body) : m->body_len;
	rc = amqp_basic_publish(c, 1, bytes_of(exchange), bytes_of(routing_key), 1, 0, &p, body);
	if (rc != AMQP_STATUS_OK) {
		snprintf(err, errlen, "basic.publish: %s", amqp_error_string2(rc));
		amqp_drop(c);
		return -1;
	}
	rc = await_confirm(c, err, errlen);
	if (rc == 0 || strcmp(err, "returned") == 0 || strcmp(err, "nacked") == 0)
		amqp_done(c);
	else
		amqp_drop(c);
	return rc;
}

void broker_declare_queue(const char *url, const char *queue)
{
	char err[256];
	amqp_connection_state_t c = amqp_open(url, err, sizeof(err));
	amqp_rpc_reply_t r;

	if (!c)
		ck_abort_msg("declare %s: %s", queue, err);
	amqp_queue_declare(c, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, amqp_empty_table);
	r = amqp_get_rpc_reply(c);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		reply_error(r, "queue.declare", err, sizeof(err));
		amqp_drop(c);
		ck_abort_msg("declare %s: %s", queue, err);
	}
	amqp_done(c);
}

long broker_queue_depth(const char *url, const char *queue)
{
	char err[256];
	amqp_connection_state_t c = amqp_open(url, err, sizeof(err));
	amqp_queue_declare_ok_t *ok;
	long n;

	if (!c) {
		fprintf(stderr, "broker_queue_depth(%s): %s\n", queue, err);
		return -1;
	}
	ok = amqp_queue_declare(c, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
	if (!ok) {
		reply_error(amqp_get_rpc_reply(c), "queue.declare", err, sizeof(err));
		fprintf(stderr, "broker_queue_depth(%s): %s\n", queue, err);
		amqp_drop(c);
		return -1;
	}
	n = (long)ok->message_count;
	amqp_done(c);
	return n;
}

static char *dup_bytes(amqp_bytes_t b, bool present)
{
	char *s;

	if (!present)
		return NULL;
	s = malloc(b.len + 1);
	if (!s)
		ck_abort_msg("out of memory");
	if (b.len)
		memcpy(s, b.bytes, b.len);
	s[b.len] = '\0';
	return s;
}

int broker_get(const char *url, const char *queue, struct broker_got *out)
{
	char err[256];
	amqp_connection_state_t c = amqp_open(url, err, sizeof(err));
	amqp_basic_get_ok_t *ok;
	amqp_rpc_reply_t r;
	amqp_message_t m;
	amqp_flags_t fl;
	uint64_t tag;

	memset(out, 0, sizeof(*out));
	if (!c)
		return -1;
	r = amqp_basic_get(c, 1, amqp_cstring_bytes(queue), 0);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		amqp_drop(c);
		return -1;
	}
	if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) {
		amqp_done(c);
		return 0;
	}
	ok = r.reply.decoded;
	tag = ok->delivery_tag;
	out->exchange = dup_bytes(ok->exchange, true);
	out->routing_key = dup_bytes(ok->routing_key, true);
	r = amqp_read_message(c, 1, &m, 0);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		broker_got_free(out);
		amqp_drop(c);
		return -1;
	}
	fl = m.properties._flags;
	out->message_id = dup_bytes(m.properties.message_id, fl & AMQP_BASIC_MESSAGE_ID_FLAG);
	out->type = dup_bytes(m.properties.type, fl & AMQP_BASIC_TYPE_FLAG);
	out->app_id = dup_bytes(m.properties.app_id, fl & AMQP_BASIC_APP_ID_FLAG);
	out->body = dup_bytes(m.body, true);
	out->body_len = m.body.len;
	amqp_destroy_message(&m);
	if (amqp_basic_ack(c, 1, tag, 0) != AMQP_STATUS_OK) {
		broker_got_free(out);
		amqp_drop(c);
		return -1;
	}
	amqp_done(c);
	return 1;
}

void broker_got_free(struct broker_got *g)
{
	free(g->message_id);
	free(g->type);
	free(g->app_id);
	free(g->exchange);
	free(g->routing_key);
	free(g->body);
	memset(g, 0, sizeof(*g));
}
