/*
 * metrics_reader: the tests' one reader of a service's GET /metrics (the
 * Prometheus text format of src/lib/base/metrics.c: "# HELP"/"# TYPE" comments,
 * then one "SERIES VALUE" line per series, no timestamps).
 *
 * A series is a metric's name with its labels exactly as the service writes
 * them, e.g. saga_amqp_deliveries_total{outcome="acked"}; a metric is the
 * name alone (saga_amqp_deliveries_total), whose series are all the label
 * sets it has.
 */
#ifndef PGSAGA_TEST_METRICS_READER_H
#define PGSAGA_TEST_METRICS_READER_H

/*
 * The value of one series, -1 when the page has no such series. The service
 * must answer: fails the test when GET /metrics is not a 200.
 */
double metrics_read_series(int port, const char *series);

/*
 * The sum of the values of every series of metric name, whatever their
 * labels (0 when it has none), or -1 when the service did not answer 200:
 * for a test that scrapes services it may have just killed.
 */
double metrics_read_sum(int port, const char *name);

#endif
