-- minimal.sql: the yardstick scripts/bench measures pgsaga against. One
-- pgbench "transaction" is five of the cheapest commits that still do what
-- each of a saga's five commits must do at the least: write one uuid-keyed
-- state row and one outbox row, atomically, durably (synchronous commit).
-- A saga commits five times, so tps = "minimal sagas"/s and the latency is
-- that of five minimal commits one after the other. Five stays fixed: a
-- pgsaga that needed fewer commits would be ahead by that much.
--
--   psql -f bench/minimal-schema.sql DBURL
--   pgbench -n -M prepared -f bench/minimal.sql -c N -j 2 -T S DBURL
--
-- What makes it the cheapest: one statement per transaction (one round
-- trip, the two inserts in one CTE); two tables with a primary key each
-- and nothing else (no secondary index, trigger, foreign key or check);
-- time-ordered keys (48-bit millisecond clock, then random bits, as a
-- version 7 UUID: every insert lands on the right-most leaf of the index,
-- so after a checkpoint only that page needs a full-page image, not one
-- page per insert); rows about as wide as pgsaga's (a 95-byte jsonb body
-- and a 130-byte jsonb payload); no NOTIFY. See minimal-schema.sql for the
-- tables and docs/performance.md for what it leaves out on purpose
-- (idempotency, the inbox, the business rows, acknowledgements).

-- commit 1 of 5
WITH k AS (SELECT minimal.uuid_v7() AS sid, minimal.uuid_v7() AS oid),
     s AS (INSERT INTO minimal.state (id, body)
           SELECT sid, '{"customerId":"pgb-c00001","itemId":"it-0001","qty":1,"amount":100,"state":"PendingPayment"}'::jsonb
             FROM k)
INSERT INTO minimal.outbox (message_id, payload)
SELECT oid, ('{"commandId":"' || oid || '","sagaId":"' || sid
             || '","customerId":"pgb-c00001","amount":100}')::jsonb
  FROM k;

-- commit 2 of 5
WITH k AS (SELECT minimal.uuid_v7() AS sid, minimal.uuid_v7() AS oid),
     s AS (INSERT INTO minimal.state (id, body)
           SELECT sid, '{"customerId":"pgb-c00001","itemId":"it-0001","qty":1,"amount":100,"state":"PendingPayment"}'::jsonb
             FROM k)
INSERT INTO minimal.outbox (message_id, payload)
SELECT oid, ('{"commandId":"' || oid || '","sagaId":"' || sid
             || '","customerId":"pgb-c00001","amount":100}')::jsonb
  FROM k;

-- commit 3 of 5
WITH k AS (SELECT minimal.uuid_v7() AS sid, minimal.uuid_v7() AS oid),
     s AS (INSERT INTO minimal.state (id, body)
           SELECT sid, '{"customerId":"pgb-c00001","itemId":"it-0001","qty":1,"amount":100,"state":"PendingPayment"}'::jsonb
             FROM k)
INSERT INTO minimal.outbox (message_id, payload)
SELECT oid, ('{"commandId":"' || oid || '","sagaId":"' || sid
             || '","customerId":"pgb-c00001","amount":100}')::jsonb
  FROM k;

-- commit 4 of 5
WITH k AS (SELECT minimal.uuid_v7() AS sid, minimal.uuid_v7() AS oid),
     s AS (INSERT INTO minimal.state (id, body)
           SELECT sid, '{"customerId":"pgb-c00001","itemId":"it-0001","qty":1,"amount":100,"state":"PendingPayment"}'::jsonb
             FROM k)
INSERT INTO minimal.outbox (message_id, payload)
SELECT oid, ('{"commandId":"' || oid || '","sagaId":"' || sid
             || '","customerId":"pgb-c00001","amount":100}')::jsonb
  FROM k;

-- commit 5 of 5
WITH k AS (SELECT minimal.uuid_v7() AS sid, minimal.uuid_v7() AS oid),
     s AS (INSERT INTO minimal.state (id, body)
           SELECT sid, '{"customerId":"pgb-c00001","itemId":"it-0001","qty":1,"amount":100,"state":"PendingPayment"}'::jsonb
             FROM k)
INSERT INTO minimal.outbox (message_id, payload)
SELECT oid, ('{"commandId":"' || oid || '","sagaId":"' || sid
             || '","customerId":"pgb-c00001","amount":100}')::jsonb
  FROM k;
