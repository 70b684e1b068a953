/*
 * console: the operator console (docs/protocol.md, "admin API"), plain HTML, CSS and JavaScript
 * compiled into the binary (src/orchestrator/console/, embedded by
 * sql/embed.py --files) and served at /console/.
 *
 * Its routes are HTTPD_ADMIN_OPEN admin routes: without ADMIN_TOKEN they
 * do not exist (404), and the admin gate adds the security headers
 * (admin_gate.h), among them the Content-Security-Policy that allows only the
 * console's own files, so nothing inline runs and nothing is loaded from
 * another origin. The files need no credential (the sign-in form is one of
 * them); what needs it is the admin API they call. Each file carries an
 * entity tag, so a browser revalidates instead of downloading again.
 */
#ifndef PGSAGA_CONSOLE_H
#define PGSAGA_CONSOLE_H

#include "embedded.h"

struct evhttp_request;

/*
 * Route handlers. GET /console answers 301 to
 * /console/; GET /console/<name> answers the file (index.html for
 * "") or 404.
 */
void console_redirect(struct evhttp_request *req, void *svc, const char *tail);
void console_get(struct evhttp_request *req, void *svc, const char *tail);

#endif
