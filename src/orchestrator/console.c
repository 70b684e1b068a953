/* console: see console.h. */
#include "console.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"

static const struct {
	const char *ext;
	const char *type;
} content_types[] = {
	{ ".html", "text/html; charset=utf-8" },
	{ ".js", "text/javascript; charset=utf-8" },
	{ ".css", "text/css; charset=utf-8" },
	{ ".svg", "image/svg+xml" },
};

static const char *content_type(const char *name)
{
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(content_types) / sizeof(content_types[0]); i++)
		if (strcmp(dot, content_types[i].ext) == 0)
			return content_types[i].type;
	return "application/octet-stream";
}

static const struct embedded_file *find_file(const char *name)
{
	if (!*name)
		name = "index.html";
	for (size_t i = 0; i < console_files_count; i++)
		if (strcmp(console_files[i].name, name) == 0)
			return &console_files[i];
	return NULL;
}

void console_redirect(struct evhttp_request *req, void *svc, const char *tail)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Location", "/console/");
	httpd_error(req, 301, "moved", "the console is at /console/");
}

void console_get(struct evhttp_request *req, void *svc, const char *tail)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const struct embedded_file *f;
	const char *inm;
	struct evbuffer *body;

	f = find_file(tail);
	if (!f) {
		httpd_error(req, 404, "not_found", "no such file");
		return;
	}
	evhttp_add_header(out, "Content-Type", content_type(f->name));
	/*
	 * The admin gate said no-store, right for data; a file of the binary
	 * may be kept and revalidated by its entity tag instead, so a new
	 * binary never runs with an old script and an unchanged one costs a 304.
	 */
	evhttp_remove_header(out, "Cache-Control");
	evhttp_add_header(out, "Cache-Control", "no-cache");
	evhttp_add_header(out, "ETag", f->etag);
	body = evbuffer_new();
	if (!body)
		abort();
	inm = httpd_header(req, "If-None-Match");
	if (inm && strcmp(inm, f->etag) == 0) {
		httpd_reply_buf(req, 304, body);
	} else {
		/* the embedded bytes live as long as the process: no copy */
		evbuffer_add_reference(body, f->data, f->len, NULL, NULL);
		httpd_reply_buf(req, 200, body);
	}
	evbuffer_free(body);
}
