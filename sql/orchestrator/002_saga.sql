-- The orchestrator's own tables: saga instances, their timeline, and the
-- idempotency records of POST /orders. Unqualified names: migrate.c runs
-- this with search_path set to the orchestrator schema.

CREATE TABLE saga_instances (
    saga_id      uuid PRIMARY KEY,
    state        text NOT NULL CHECK (state IN ('PendingPayment', 'PendingInventory',
                     'Completed', 'Failed', 'Compensating', 'Compensated')),
    version      int NOT NULL CHECK (version >= 1),
    customer_id  text NOT NULL,
    item_id      text NOT NULL,
    qty          int NOT NULL CHECK (qty BETWEEN 1 AND 1000),
    amount       bigint NOT NULL CHECK (amount BETWEEN 1 AND 1000000000000),
    compensation text CHECK (compensation IN ('release', 'refund')),
    deadline_at  timestamptz,
    trace_id     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'Compensating') = (compensation IS NOT NULL))
);
COMMENT ON TABLE saga_instances IS 'One row per order saga: its current state and optimistic version.';
COMMENT ON COLUMN saga_instances.saga_id IS 'The saga''s id, returned by POST /orders.';
COMMENT ON COLUMN saga_instances.state IS 'PendingPayment, PendingInventory, Completed, Failed, Compensating or Compensated.';
COMMENT ON COLUMN saga_instances.version IS 'Bumped by every transition; a transition applies only to the version it read.';
COMMENT ON COLUMN saga_instances.customer_id IS 'Paying customer.';
COMMENT ON COLUMN saga_instances.item_id IS 'Item to reserve.';
COMMENT ON COLUMN saga_instances.qty IS 'Quantity to reserve.';
COMMENT ON COLUMN saga_instances.amount IS 'Amount to charge, in minor units.';
COMMENT ON COLUMN saga_instances.compensation IS 'While Compensating: the undo step awaited, release (inventory) then refund (payment).';
COMMENT ON COLUMN saga_instances.deadline_at IS 'When the current step times out and the saga compensates; null outside PendingPayment/PendingInventory.';
COMMENT ON COLUMN saga_instances.trace_id IS 'W3C trace id carried on every message of the saga.';
COMMENT ON COLUMN saga_instances.created_at IS 'When the order was accepted.';
COMMENT ON COLUMN saga_instances.updated_at IS 'When the saga last changed state.';

CREATE INDEX saga_instances_deadline_idx ON saga_instances (deadline_at)
    WHERE state IN ('PendingPayment', 'PendingInventory');
CREATE INDEX saga_instances_created_idx ON saga_instances (created_at);

CREATE TABLE saga_history (
    saga_id    uuid NOT NULL REFERENCES saga_instances ON DELETE CASCADE,
    version    int NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    cause      text NOT NULL,
    message_id uuid,
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, version)
);
COMMENT ON TABLE saga_history IS 'A saga''s timeline: one row per transition, creation included.';
COMMENT ON COLUMN saga_history.saga_id IS 'The saga.';
COMMENT ON COLUMN saga_history.version IS 'The saga''s version after the transition (1 for creation).';
COMMENT ON COLUMN saga_history.from_state IS 'State before; null for creation.';
COMMENT ON COLUMN saga_history.to_state IS 'State after.';
COMMENT ON COLUMN saga_history.cause IS 'Message type that caused it, or OrderPlaced / StepTimeout.';
COMMENT ON COLUMN saga_history.message_id IS 'Id of that message; null where none.';
COMMENT ON COLUMN saga_history.at IS 'When the transition committed.';

CREATE TABLE idempotency_records (
    key          text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text NOT NULL,
    saga_id      uuid NOT NULL,
    status       int NOT NULL,
    response     jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX idempotency_records_expires_idx ON idempotency_records (expires_at);
COMMENT ON TABLE idempotency_records IS 'Idempotency-Key of POST /orders: the first answer, replayed for the same key and body.';
COMMENT ON COLUMN idempotency_records.key IS 'The Idempotency-Key header, unquoted.';
COMMENT ON COLUMN idempotency_records.request_hash IS 'sha256 of the canonical JSON body (keys sorted, no white space).';
COMMENT ON COLUMN idempotency_records.saga_id IS 'The saga the first request created.';
COMMENT ON COLUMN idempotency_records.status IS 'HTTP status of the first answer.';
COMMENT ON COLUMN idempotency_records.response IS 'Body of the first answer.';
COMMENT ON COLUMN idempotency_records.created_at IS 'When the key was first used.';
COMMENT ON COLUMN idempotency_records.expires_at IS 'After this the key is forgotten and may start a new saga.';

CREATE VIEW saga_overview AS
    SELECT state, count(*) AS count FROM saga_instances GROUP BY state;
COMMENT ON VIEW saga_overview IS 'How many sagas are in each state.';

CREATE FUNCTION rfc3339(t timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
COMMENT ON FUNCTION rfc3339(timestamptz) IS 'A timestamp as RFC 3339 text in UTC, as the HTTP API shows it.';

-- One transition in one round trip. The caller (saga_fsm.c) has decided
-- what the event does to a saga in state p_from (awaiting undo p_undo): go
-- to p_to, await p_new_undo, send command p_out_type. This function reads
-- the saga and applies that decision only if the saga is in p_from, guarded
-- by the version it read; the event's id goes into the inbox in the same
-- transaction, so a redelivered event changes nothing. Results:
--   not_found   no such saga (nothing written)
--   duplicate   the event was applied before (nothing written)
--   ignored     the saga is not in p_from: state and compensation say where
--               it is, so the caller can say why (nothing written)
--   applied     done; payload is the outgoing command's body, written into
--               the outbox claimed for p_lease_ms (the caller sends it, with
--               the saga's trace_id)
-- When the saga moves on between the read and the write, the transaction
-- fails with serialization_failure (40001), inbox row included, and the
-- caller tries again. With p_with_item the command's body gets the saga's
-- itemId and qty (ReserveInventoryCommand).
CREATE FUNCTION saga_apply(p_event_id uuid, p_saga_id uuid, p_from text, p_undo text,
                           p_to text, p_new_undo text, p_cause text, p_deadline_ms bigint,
                           p_out_id uuid, p_out_dest text, p_out_type text,
                           p_out_payload jsonb, p_with_item boolean, p_lease_ms int,
                           OUT result text, OUT state text, OUT compensation text,
                           OUT payload jsonb, OUT trace_id text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v saga_instances%ROWTYPE;
BEGIN
    SELECT * INTO v FROM saga_instances s WHERE s.saga_id = p_saga_id;
    IF NOT FOUND THEN
        result := 'not_found';
        RETURN;
    END IF;
    IF p_event_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM processed_messages m WHERE m.message_id = p_event_id) THEN
        result := 'duplicate';
        RETURN;
    END IF;
    IF v.state <> p_from OR v.compensation IS DISTINCT FROM p_undo THEN
        result := 'ignored';
        state := v.state;
        compensation := v.compensation;
        RETURN;
    END IF;

    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            result := 'duplicate'; -- a copy committed since the check above
            RETURN;
        END IF;
    END IF;

    UPDATE saga_instances s
       SET state = p_to, version = s.version + 1, compensation = p_new_undo,
           deadline_at = CASE WHEN p_deadline_ms IS NULL THEN NULL
                              ELSE now() + p_deadline_ms * interval '1 millisecond' END,
           updated_at = now()
     WHERE s.saga_id = p_saga_id AND s.state = p_from AND s.version = v.version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, p_from, v.version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, v.version + 1, p_from, p_to, p_cause, p_event_id);

    IF p_out_id IS NOT NULL THEN
        payload := p_out_payload;
        IF p_with_item THEN
            payload := payload || jsonb_build_object('itemId', v.item_id, 'qty', v.qty);
        END IF;
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (p_out_id, 'command', p_out_dest, p_out_type, payload, v.trace_id,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    result := 'applied';
    state := p_to;
    compensation := p_new_undo;
    trace_id := v.trace_id;
END
$$;
COMMENT ON FUNCTION saga_apply(uuid, uuid, text, text, text, text, text, bigint, uuid, text, text, jsonb, boolean, int)
    IS 'Applies one saga transition decided by the caller, guarded by state and version, with its inbox row, history row and outgoing command, in one round trip.';

-- Expired idempotency keys, in small batches (called by the service).
CREATE FUNCTION purge_idempotency(p_limit int) RETURNS integer
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH gone AS (
        DELETE FROM idempotency_records
         WHERE key IN (SELECT key FROM idempotency_records WHERE expires_at < now()
                        ORDER BY expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::int FROM gone
$$;
COMMENT ON FUNCTION purge_idempotency(int) IS 'Deletes at most p_limit expired idempotency records; returns how many.';
