/*
 * mq_nodes: AMQP_URL as a list of the nodes of one RabbitMQ cluster.
 *
 * AMQP_URL is one URL or several separated by commas, each naming one node
 * of the same cluster: amqp://u:p@10.0.0.1:5672/%2f,amqp://u:p@10.0.0.2:5672/%2f.
 * Every node must name the same virtual host (one cluster, one topology); a
 * comma inside a user name or password is written %2C. Spaces around the
 * commas are ignored.
 *
 * No I/O: the link (mq_link.c) walks the list, this module only parses it
 * and says which node comes next, so a unit test drives it directly.
 */
#ifndef PGSAGA_MQ_NODES_H
#define PGSAGA_MQ_NODES_H

#include <amqp.h>
#include <stddef.h>

#define MQ_NODES_MAX 16
/* x-quorum-initial-group-size at most: RabbitMQ advises 3 or 5 replicas */
#define MQ_NODES_GROUP_MAX 5

struct mq_nodes {
	size_t n;
	struct amqp_connection_info ci[MQ_NODES_MAX]; /* strings point into buf */
	char name[MQ_NODES_MAX][80];                  /* "host:port", no credentials */
	char *buf;
};

/*
 * Parses urls into ns (whose old content is not freed). 0, or -1 with the
 * reason in err and nothing to free. The URL scheme is not checked here:
 * ci[i].ssl says whether a node is amqps.
 */
int mq_nodes_parse(struct mq_nodes *ns, const char *urls, char *err, size_t errlen)
	__attribute__((warn_unused_result));

void mq_nodes_free(struct mq_nodes *ns);

/* The node after i, round the list. */
size_t mq_nodes_next(const struct mq_nodes *ns, size_t i);

/* x-quorum-initial-group-size: the nodes listed, at most MQ_NODES_GROUP_MAX. */
int mq_nodes_group_size(const struct mq_nodes *ns);

#endif
