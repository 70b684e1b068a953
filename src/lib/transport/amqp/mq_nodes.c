/* mq_nodes: see mq_nodes.h. */
#include "mq_nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return s;
}

int mq_nodes_parse(struct mq_nodes *ns, const char *urls, char *err, size_t errlen)
{
	char *p, *comma;

	memset(ns, 0, sizeof(*ns));
	ns->buf = strdup(urls);
	if (!ns->buf)
		abort();
	for (p = ns->buf;; p = comma + 1) {
		char *one;
		struct amqp_connection_info *ci = &ns->ci[ns->n];

		comma = strchr(p, ',');
		if (comma)
			*comma = '\0';
		one = trim(p);
		if (ns->n == MQ_NODES_MAX) {
			snprintf(err, errlen, "AMQP_URL: more than %d nodes", MQ_NODES_MAX);
			goto fail;
		}
		amqp_default_connection_info(ci);
		if (!*one || amqp_parse_url(one, ci) != AMQP_STATUS_OK || !*ci->host) {
			snprintf(err, errlen,
				 "AMQP_URL: node %zu: expected amqp://user:password@host:port/vhost,"
				 " nodes separated by commas",
				 ns->n + 1);
			goto fail;
		}
		if (strspn(ci->host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				     "0123456789.-_:") != strlen(ci->host)) {
			/* the name goes into /readyz and a metric label as it is */
			snprintf(err, errlen, "AMQP_URL: node %zu: the host name has a character"
				 " no host name has", ns->n + 1);
			goto fail;
		}
		if (ns->n && strcmp(ci->vhost, ns->ci[0].vhost) != 0) {
			snprintf(err, errlen,
				 "AMQP_URL: node %zu names another virtual host than node 1"
				 " (the nodes of one cluster share it)",
				 ns->n + 1);
			goto fail;
		}
		snprintf(ns->name[ns->n], sizeof(ns->name[ns->n]),
			 strchr(ci->host, ':') ? "[%s]:%d" : "%s:%d", ci->host, ci->port);
		ns->n++;
		if (!comma)
			return 0;
	}
fail:
	mq_nodes_free(ns);
	return -1;
}

void mq_nodes_free(struct mq_nodes *ns)
{
	free(ns->buf);
	memset(ns, 0, sizeof(*ns));
}

size_t mq_nodes_next(const struct mq_nodes *ns, size_t i)
{
	return ns->n ? (i + 1) % ns->n : 0;
}

int mq_nodes_group_size(const struct mq_nodes *ns)
{
	return ns->n > MQ_NODES_GROUP_MAX ? MQ_NODES_GROUP_MAX : (int)ns->n;
}
