/* inmsg: the answers to a message that do not depend on its transport. */
#include "transport.h"

#include <stdarg.h>
#include <stdio.h>

#include "db.h"
#include "log.h"

void inmsg_error(struct inmsg m, int status, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m.ops->error(m.h, status, code, msg);
}

void inmsg_db_error(struct inmsg m, const struct db_error *err, const char *what)
{
	if (err->status == DB_UNAVAILABLE) {
		inmsg_unavailable(m);
		return;
	}
	log_error("%s: database error %s: %s", what, err->sqlstate, err->message);
	inmsg_error(m, 500, "internal", "database error %s", err->sqlstate);
}

void reply_db_error(struct evhttp_request *req, const struct db_error *err, const char *what)
{
	inmsg_db_error(inmsg_http(req), err, what);
}
