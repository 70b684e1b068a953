-- saga.sql: the SQL of one happy-path saga, as pgsaga's services run it,
-- without HTTP: the ceiling scripts/bench measures pgsaga against.
--
--   pgbench -n -M prepared -f bench/saga.sql -c N -j 2 -T S \
--           -D customers=1000 -D items=100 -D prefix=pgb \
--           -D p_event_id=00000000-0000-0000-0000-000000000000 \
--           -D i_event_id=00000000-0000-0000-0000-000000000000 DBURL
--
-- One pgbench "transaction" is one saga: 5 committing statements (the
-- create, handle_pay, the transition to PendingInventory, handle_reserve,
-- the transition to Completed; each transition reads and writes in one
-- call of saga_apply) and 1 read-only prelude that makes the ids. There is
-- no claiming statement: a service writes its own outbox rows claimed at
-- birth (next_attempt_at one lease ahead) and sends them from memory; the
-- claim runs only in sweeps. tps = sagas/s; latency = per-saga latency.
--
-- The services run this way with MARK_RIDE=1; by default (MARK_RIDE=0,
-- README) they write the marks of a 50 ms window in one outbox_ack instead
-- (about 0.1 statement per saga, asynchronous commit, off the saga's path),
-- which measured faster end to end; the ceiling keeps the riding shape.
--
-- Delivery marks ride on each service's next write (outbox_query in
-- src/lib/outbox.c: a data-modifying CTE "ack" in front of the statement,
-- the ids one uuid[] parameter), not in transactions of their own: the
-- orchestrator's PayCommand mark on the first saga_apply, its
-- ReserveInventoryCommand mark on the second; payment's and inventory's
-- marks on their next handle_pay / handle_reserve, which belongs to the
-- client's next saga. So p_event_id and i_event_id, set by \gset, carry
-- the previous saga's event ids into the next transaction; the two -D
-- options above define them (as the nil UUID, which marks nothing) for a
-- client's first saga, since pgbench cannot test whether a variable is
-- defined.
--
-- Variants, chosen per session by PGOPTIONS (the services set the same
-- option on their own connections, see db_pool_new in src/lib/db.c):
--   ceiling:      PGOPTIONS='-c pgsaga.local_wake=on'   the outbox triggers
--                 send no NOTIFY (the services wake their own dispatcher)
--   with NOTIFY:  PGOPTIONS='-c pgsaga.local_wake=off'  every transaction
--                 that writes a pending outbox row (create, handle_pay, the
--                 transition to PendingInventory, handle_reserve) notifies
--
-- Needs: the three schemas migrated (start each service once on the
-- database), stock for it-0001.. (-D items), a superuser (the script writes
-- in all three schemas), -M prepared (the services prepare each statement
-- once per connection, see src/lib/db.c).
--
-- KEEP IN SYNC with the C code: every statement below names its source (as
-- of the commit that made the marks ride on the services' writes). The
-- services use unqualified names (search_path is their schema); here they
-- are schema-qualified. Functions carry SET search_path FROM CURRENT, so
-- qualified calls behave the same.
--
-- Deliberate differences, none changing a statement's cost shape:
--  * Constants the services bind as parameters (state names, NULLs) are
--    literals here: pgbench cannot bind NULL.
--  * pgbench numbers each :var occurrence as its own parameter where the C
--    code reuses $n.
--  * A statement's marks are one id (ARRAY[...]); the services bind the
--    ids of every delivery finished since their last write as one
--    '{...}' text ($n::uuid[]), at high load sometimes none or several.
--  * No ":" right before a letter inside a string literal: pgbench would
--    take it for a variable.
--  * Everything runs one statement after the other; in pgsaga a mark waits
--    while the receiver already works on the message it acknowledges.

\set c random(1, :customers)
\set i random(1, :items)
\set amount 100
\set qty 1
\set ttl 86400
\set step_ms 120000
\set lease_ms 30000
\set credit 1000000

-- Prelude (not in the services: they make ids in C, version 7 UUIDs like
-- these, with uuid_new_v7(); the trace id is random, uuid_new()).
SELECT sid, pcid, rcid, cust, item, trace,
       '{"sagaId":"' || sid || '","state":"PendingPayment","duplicated":' || 'false}' AS resp,
       '{"amount":' || :amount::text || ',"customerId":"' || cust || '","itemId":"' || item
         || '","qty":' || :qty::text || '}' AS canon,
       '{"commandId":"' || pcid || '","sagaId":"' || sid || '","customerId":"' || cust
         || '","amount":' || :amount::text || '}' AS ppayload,
       '{"commandId":"' || rcid || '","sagaId":"' || sid || '"}' AS rbase
  FROM (SELECT orchestrator.uuid_v7()::text AS sid, orchestrator.uuid_v7()::text AS pcid,
               orchestrator.uuid_v7()::text AS rcid,
               replace(gen_random_uuid()::text, '-', '') AS trace,
               :prefix::text || '-c' || lpad(:c::text, 5, '0') AS cust,
               'it-' || lpad(:i::text, 4, '0') AS item) ids
\gset

-- 1. POST /orders: src/orchestrator/main.c create_sql (orchestrator's pool,
--    through outbox_query: no marks wait here, the previous saga's rode on
--    its transitions, so the statement runs as it is).
--    Params: $1 key, $2 canonical body, $3 saga id, $4 response, $5 ttl,
--    $6 customer, $7 item, $8 qty, $9 amount, $10 step ms, $11 trace,
--    $12 command id, $13 payload, $14 LEASE_MS (the row is born claimed).
WITH rec AS (
  INSERT INTO orchestrator.idempotency_records AS r
         (key, request_hash, saga_id, status, response, expires_at)
  VALUES (:sid, encode(sha256(convert_to(:canon, 'UTF8')), 'hex'), :sid, 201, :resp::jsonb,
          now() + :ttl::int * interval '1 second')
  ON CONFLICT (key) DO UPDATE SET
    request_hash = CASE WHEN r.expires_at <= now() THEN excluded.request_hash
                        ELSE r.request_hash END,
    saga_id = CASE WHEN r.expires_at <= now() THEN excluded.saga_id ELSE r.saga_id END,
    status = CASE WHEN r.expires_at <= now() THEN excluded.status ELSE r.status END,
    response = CASE WHEN r.expires_at <= now() THEN excluded.response ELSE r.response END,
    created_at = CASE WHEN r.expires_at <= now() THEN now() ELSE r.created_at END,
    expires_at = CASE WHEN r.expires_at <= now() THEN excluded.expires_at
                      ELSE r.expires_at END
  RETURNING saga_id, request_hash, status, response),
 s AS (
  INSERT INTO orchestrator.saga_instances (saga_id, state, version, customer_id, item_id, qty,
                                           amount, deadline_at, trace_id)
  SELECT :sid, 'PendingPayment', 1, :cust, :item, :qty::int, :amount::bigint,
         now() + :step_ms::bigint * interval '1 millisecond', :trace
    FROM rec WHERE rec.saga_id = :sid::uuid
  RETURNING saga_id),
 h AS (
  INSERT INTO orchestrator.saga_history (saga_id, version, from_state, to_state, cause)
  SELECT saga_id, 1, NULL, 'PendingPayment', 'OrderPlaced' FROM s),
 o AS (
  INSERT INTO orchestrator.outbox_messages (message_id, kind, destination, type, payload,
                                            trace_id, next_attempt_at)
  SELECT :pcid, 'command', 'payment', 'PayCommand', :ppayload::jsonb, :trace,
         now() + :lease_ms::int * interval '1 millisecond' FROM s)
SELECT rec.saga_id = :sid::uuid AS fresh,
       rec.request_hash = encode(sha256(convert_to(:canon, 'UTF8')), 'hex') AS same,
       rec.status, jsonb_set(rec.response, '{duplicated}', 'true')::text AS replay,
       rec.saga_id
  FROM rec;
-- @end-create (scripts/bench cuts here, with lease_ms 0, for its NOTIFY
-- wake-up script: a row written from outside is due at once)

-- 2. payment receives PayCommand: src/payment/main.c commands[] PayCommand,
--    run by src/lib/command.c through outbox_query ($5 PAYMENT_DEFAULT_CREDIT,
--    $7 LEASE_MS, $8 the marks: the previous saga's PaymentSucceeded, whose
--    delivery payment's dispatcher has seen finish); the PaymentSucceeded it
--    writes is born claimed and sent at once.
WITH ack AS (UPDATE payment.outbox_messages SET processed_at = now(), last_error = NULL
              WHERE message_id = ANY (ARRAY[:p_event_id]::uuid[]) AND processed_at IS NULL)
SELECT * FROM payment.handle_pay(:pcid, :sid, :cust, :amount::bigint, :credit::bigint, :trace,
                                 :lease_ms::int)
\gset p_

-- 3. orchestrator receives PaymentSucceeded: src/orchestrator/main.c
--    apply_sql (saga_apply) through outbox_query, with what
--    transition_decide computes for the one state the event acts in
--    (saga_expected); the command's body gets itemId and qty from the saga
--    (p_with_item). $15 the marks: PayCommand, delivered meanwhile.
WITH ack AS (UPDATE orchestrator.outbox_messages SET processed_at = now(), last_error = NULL
              WHERE message_id = ANY (ARRAY[:pcid]::uuid[]) AND processed_at IS NULL)
SELECT * FROM orchestrator.saga_apply(:p_event_id, :sid, 'PendingPayment', NULL,
                                      'PendingInventory', NULL, 'PaymentSucceeded',
                                      :step_ms::bigint, :rcid, 'inventory',
                                      'ReserveInventoryCommand', :rbase::jsonb, true,
                                      :lease_ms::int);

-- 4. inventory receives ReserveInventoryCommand: src/inventory/main.c
--    commands[] ReserveInventoryCommand, run by src/lib/command.c through
--    outbox_query ($7 the marks: the previous saga's InventoryReserved).
WITH ack AS (UPDATE inventory.outbox_messages SET processed_at = now(), last_error = NULL
              WHERE message_id = ANY (ARRAY[:i_event_id]::uuid[]) AND processed_at IS NULL)
SELECT * FROM inventory.handle_reserve(:rcid, :sid, :item, :qty::int, :trace, :lease_ms::int)
\gset i_

-- 5. orchestrator receives InventoryReserved: main.c apply_sql through
--    outbox_query ($15 the marks: ReserveInventoryCommand).
WITH ack AS (UPDATE orchestrator.outbox_messages SET processed_at = now(), last_error = NULL
              WHERE message_id = ANY (ARRAY[:rcid]::uuid[]) AND processed_at IS NULL)
SELECT * FROM orchestrator.saga_apply(:i_event_id, :sid, 'PendingInventory', NULL,
                                      'Completed', NULL, 'InventoryReserved',
                                      NULL, NULL, NULL, NULL, NULL, false, :lease_ms::int);
