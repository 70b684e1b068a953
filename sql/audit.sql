-- pgsaga audit: the invariants of docs/protocol.md, as queries that return the rows
-- violating them. Run as saga_auditor (read-only on the three schemas), all
-- in one REPEATABLE READ READ ONLY transaction so that every query sees the
-- same snapshot: each service writes its effect, its inbox row and its
-- outbox row in one transaction, so the invariants hold in any snapshot,
-- also while sagas are running.
--
-- Used by scripts/audit (operators) and tests/chaos/chaos.c. Format, which
-- both parse: a line "-- check: ID | label" (a violation when it returns
-- rows) or "-- info: ID | label" (reported, never a violation) starts a
-- query; the query ends at the first line ending with ';'. Anything outside
-- a query is a comment. psql -f sql/audit.sql runs it as is.

-- A saga of another definition than order keeps its input in `input`, not in
-- the order saga's columns; a definition without a payment (or inventory)
-- step leaves no payment (or reservation) to look for. An input that does
-- not carry the value (a field taken from an earlier step's output) is not
-- compared.
-- check: 1 | Completed => payment captured and reservation reserved (amount, customer, item, qty as ordered), for a definition with those steps
WITH s AS (
  SELECT s.saga_id, s.state,
         coalesce(s.customer_id, s.input->>'customerId') AS customer_id,
         coalesce(s.item_id, s.input->>'itemId') AS item_id,
         coalesce(s.qty, CASE WHEN jsonb_typeof(s.input->'qty') = 'number'
                              THEN (s.input->>'qty')::numeric END) AS qty,
         coalesce(s.amount, CASE WHEN jsonb_typeof(s.input->'amount') = 'number'
                                 THEN (s.input->>'amount')::numeric END) AS amount,
         d.name IS NULL OR EXISTS (SELECT 1 FROM jsonb_array_elements(d.definition->'steps') st
                                    WHERE st->>'participant' = 'payment') AS pays,
         d.name IS NULL OR EXISTS (SELECT 1 FROM jsonb_array_elements(d.definition->'steps') st
                                    WHERE st->>'participant' = 'inventory') AS reserves
    FROM orchestrator.saga_instances s
    LEFT JOIN orchestrator.saga_definitions d
           ON d.name = s.definition_name AND d.version = s.definition_version
   WHERE s.state = 'Completed')
SELECT s.saga_id, s.state, p.status AS payment, p.amount, s.amount AS ordered_amount,
       r.status AS reservation, r.qty, s.qty AS ordered_qty
  FROM s
  LEFT JOIN payment.payments p ON p.saga_id = s.saga_id
  LEFT JOIN inventory.reservations r ON r.saga_id = s.saga_id
 WHERE (s.pays AND (p.status IS DISTINCT FROM 'captured'
                    OR (s.amount IS NOT NULL AND p.amount IS DISTINCT FROM s.amount)
                    OR (s.customer_id IS NOT NULL AND p.customer_id IS DISTINCT FROM s.customer_id)))
    OR (s.reserves AND (r.status IS DISTINCT FROM 'reserved'
                        OR (s.qty IS NOT NULL AND r.qty IS DISTINCT FROM s.qty)
                        OR (s.item_id IS NOT NULL AND r.item_id IS DISTINCT FROM s.item_id)))
 ORDER BY s.saga_id;

-- check: 2 | Failed/Compensated => no captured payment and no reserved reservation
SELECT s.saga_id, s.state, p.status AS payment, r.status AS reservation
  FROM orchestrator.saga_instances s
  LEFT JOIN payment.payments p ON p.saga_id = s.saga_id
  LEFT JOIN inventory.reservations r ON r.saga_id = s.saga_id
 WHERE s.state IN ('Failed', 'Compensated')
   AND (p.status = 'captured' OR r.status = 'reserved')
 ORDER BY s.saga_id;

-- check: 3a | every account: balance + captured amounts = starting balance
SELECT coalesce(a.customer_id, c.customer_id) AS customer_id, a.balance, c.captured,
       a.starting_balance,
       coalesce(a.balance, 0) + coalesce(c.captured, 0) - coalesce(a.starting_balance, 0) AS off_by
  FROM payment.accounts a
  FULL JOIN (SELECT customer_id, sum(amount) AS captured
               FROM payment.payments WHERE status = 'captured'
              GROUP BY customer_id) c ON c.customer_id = a.customer_id
 WHERE a.customer_id IS NULL
    OR a.balance + coalesce(c.captured, 0) <> a.starting_balance
 ORDER BY 1;

-- check: 3b | every item: available + reserved qty = starting stock
SELECT coalesce(st.item_id, rv.item_id) AS item_id, st.available, rv.reserved,
       st.starting_stock,
       coalesce(st.available, 0) + coalesce(rv.reserved, 0) - coalesce(st.starting_stock, 0) AS off_by
  FROM inventory.stock st
  FULL JOIN (SELECT item_id, sum(qty) AS reserved
               FROM inventory.reservations WHERE status = 'reserved'
              GROUP BY item_id) rv ON rv.item_id = st.item_id
 WHERE st.item_id IS NULL
    OR st.starting_stock IS NULL
    OR st.available + coalesce(rv.reserved, 0) <> st.starting_stock
 ORDER BY 1;

-- check: 4a | at most one payment per saga
SELECT saga_id, count(*) AS payments
  FROM payment.payments GROUP BY saga_id HAVING count(*) > 1
 ORDER BY saga_id;

-- check: 4b | at most one reservation per saga
SELECT saga_id, count(*) AS reservations
  FROM inventory.reservations GROUP BY saga_id HAVING count(*) > 1
 ORDER BY saga_id;

-- check: 4c | no refund without a payment, no release without a reservation
SELECT 'payment' AS effect, saga_id, status, customer_id AS owner, amount AS units
  FROM payment.payments
 WHERE status = 'refunded' AND (amount IS NULL OR customer_id IS NULL)
UNION ALL
SELECT 'reservation', saga_id, status, item_id, qty
  FROM inventory.reservations
 WHERE status = 'released' AND (qty IS NULL OR item_id IS NULL)
 ORDER BY 1, 2;

-- check: 4d | no effect standing without its saga (captured payment or reserved stock of an unknown saga)
SELECT 'payment' AS effect, p.saga_id, p.status
  FROM payment.payments p
 WHERE p.status = 'captured'
   AND NOT EXISTS (SELECT 1 FROM orchestrator.saga_instances s WHERE s.saga_id = p.saga_id)
UNION ALL
SELECT 'reservation', r.saga_id, r.status
  FROM inventory.reservations r
 WHERE r.status = 'reserved'
   AND NOT EXISTS (SELECT 1 FROM orchestrator.saga_instances s WHERE s.saga_id = r.saga_id)
 ORDER BY 1, 2;

-- check: 4e | every history row belongs to its saga, at a version the saga has reached (saga_history has no foreign key since migration 006)
SELECT h.saga_id, h.version, h.to_state, s.version AS saga_version
  FROM orchestrator.saga_history h
  LEFT JOIN orchestrator.saga_instances s ON s.saga_id = h.saga_id
 WHERE s.saga_id IS NULL OR h.version > s.version
 ORDER BY 1, 2;

-- info: in_flight | sagas not in a terminal state (a violation only once the system is meant to be idle)
SELECT saga_id, state, compensation, version, updated_at, deadline_at
  FROM orchestrator.saga_instances
 WHERE state NOT IN ('Completed', 'Failed', 'Compensated')
 ORDER BY updated_at;

-- info: dead_letters | outbox messages given up on, in the three schemas
SELECT 'orchestrator' AS schema, message_id, type, attempt_count, last_error, dead_at
  FROM orchestrator.outbox_messages WHERE dead_at IS NOT NULL
UNION ALL
SELECT 'payment', message_id, type, attempt_count, last_error, dead_at
  FROM payment.outbox_messages WHERE dead_at IS NOT NULL
UNION ALL
SELECT 'inventory', message_id, type, attempt_count, last_error, dead_at
  FROM inventory.outbox_messages WHERE dead_at IS NOT NULL
 ORDER BY dead_at;
