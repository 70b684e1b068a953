-- saga.sql: the SQL of one happy-path saga, as pgsaga's services run it,
-- without HTTP: the ceiling scripts/bench measures pgsaga against.
--
--   pgbench -n -M prepared -f bench/saga.sql -c N -j 2 -T S \
--           -D customers=1000 -D items=100 -D prefix=pgb DBURL
--
-- One pgbench "transaction" is one saga: 5 committing statements (the
-- create, handle_pay, the transition to PendingInventory, handle_reserve,
-- the transition to Completed; each transition reads and writes in one
-- call of saga_apply) and 1 read-only prelude that makes the ids. There is
-- no claiming statement: a service writes its own outbox rows claimed at
-- birth (next_attempt_at one lease ahead) and sends them from memory; the
-- claim runs only in sweeps. tps = sagas/s; latency = per-saga latency.
--
-- Delivery marks are not in the ceiling. The services write them apart
-- from the saga's statements: every MARK_WINDOW_MS (50 ms) window's marks
-- in one outbox_ack statement per service, with asynchronous commit, off
-- the path of the sagas (docs/architecture.md, "Delivery marks"): about 20 statements/s
-- per service whatever the load, a small fraction of a statement per saga
-- at the rates measured, though each still updates 4 rows per saga. Left
-- out, they make the ceiling a little higher than a faithful copy, never
-- lower.
--
-- Variants, chosen per session by PGOPTIONS (the services set the same
-- option on their own connections, see db_pool_new in src/lib/pg/db.c):
--   ceiling:      PGOPTIONS='-c pgsaga.local_wake=on'   the outbox triggers
--                 send no NOTIFY (the services wake their own dispatcher)
--   with NOTIFY:  PGOPTIONS='-c pgsaga.local_wake=off'  every transaction
--                 that writes a pending outbox row (create, handle_pay, the
--                 transition to PendingInventory, handle_reserve) notifies
--
-- Needs: the three schemas migrated (start each service once on the
-- database), stock for it-0001.. (-D items), a superuser (the script writes
-- in all three schemas), -M prepared (the services prepare each statement
-- once per connection, see src/lib/pg/db.c).
--
-- KEEP IN SYNC with the C code: every statement below names its source (as
-- of the commit that removed the marks riding on the services' writes). The
-- services use unqualified names (search_path is their schema); here they
-- are schema-qualified. Functions carry SET search_path FROM CURRENT, so
-- qualified calls behave the same.
--
-- Deliberate differences, none changing a statement's cost shape:
--  * Constants the services bind as parameters (state names, NULLs) are
--    literals here: pgbench cannot bind NULL.
--  * pgbench numbers each :var occurrence as its own parameter where the C
--    code reuses $n.
--  * No ":" right before a letter inside a string literal: pgbench would
--    take it for a variable.
--  * Everything runs one statement after the other.

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

-- 1. POST /orders: src/orchestrator/orders.c create_sql (orchestrator's pool).
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
--    run by src/lib/service/command.c ($5 PAYMENT_DEFAULT_CREDIT, $7 LEASE_MS); the
--    PaymentSucceeded it writes is born claimed and sent at once.
SELECT * FROM payment.handle_pay(:pcid, :sid, :cust, :amount::bigint, :credit::bigint, :trace,
                                 :lease_ms::int)
\gset p_

-- 3. orchestrator receives PaymentSucceeded: src/orchestrator/saga_engine.c
--    apply_sql (saga_apply), with what transition_decide computes for the
--    one state the event acts in (saga_expected); the command's body gets
--    itemId and qty from the saga (p_with_item).
SELECT * FROM orchestrator.saga_apply(:p_event_id, :sid, 'PendingPayment', NULL,
                                      'PendingInventory', NULL, 'PaymentSucceeded',
                                      :step_ms::bigint, :rcid, 'inventory',
                                      'ReserveInventoryCommand', :rbase::jsonb, true,
                                      :lease_ms::int);

-- 4. inventory receives ReserveInventoryCommand: src/inventory/main.c
--    commands[] ReserveInventoryCommand, run by src/lib/service/command.c.
SELECT * FROM inventory.handle_reserve(:rcid, :sid, :item, :qty::int, :trace, :lease_ms::int)
\gset i_

-- 5. orchestrator receives InventoryReserved: saga_engine.c apply_sql.
SELECT * FROM orchestrator.saga_apply(:i_event_id, :sid, 'PendingInventory', NULL,
                                      'Completed', NULL, 'InventoryReserved',
                                      NULL, NULL, NULL, NULL, NULL, false, :lease_ms::int);
