/*
 * traceparent: the W3C Trace Context header, "00-<trace id>-<parent id>-<flags>"
 * (2, 32, 16 and 2 lowercase hex digits). A saga's trace id comes from the
 * traceparent of the POST /orders that started it, or is made new; it is
 * kept with the saga and its outbox rows, and every hop (an HTTP POST, an
 * AMQP message) carries it on in a traceparent with a new parent id.
 */
#ifndef PGSAGA_TRACEPARENT_H
#define PGSAGA_TRACEPARENT_H

#include <stdbool.h>

#define TRACE_ID_LEN 33    /* 32 hex digits and the NUL */
#define TRACEPARENT_LEN 56 /* 55 characters and the NUL */

/*
 * The trace id of a traceparent header value; false when tp is NULL or
 * malformed (uppercase hex and the all-zero trace id included).
 */
bool traceparent_parse(const char *tp, char trace[TRACE_ID_LEN]);

/*
 * The traceparent for the next hop of trace: the same trace, a new parent
 * id, sampled. False when trace is NULL or not a trace id as parsed above.
 */
bool traceparent_build(const char *trace, char out[TRACEPARENT_LEN]);

/* A new random trace id. */
void trace_id_new(char out[TRACE_ID_LEN]);

#endif
