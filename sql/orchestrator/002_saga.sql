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

-- One transition, guarded by the state and version the caller read. The
-- event's id goes into the inbox in the same transaction, so a redelivered
-- event finds it and changes nothing ('duplicate'). When the saga moved on
-- since it was read, the transaction fails with serialization_failure
-- (40001): the caller reads again and decides again; nothing of this
-- attempt, inbox row included, survives.
CREATE FUNCTION saga_transition(p_event_id uuid, p_saga_id uuid, p_from text, p_version int,
                                p_to text, p_compensation text, p_cause text,
                                p_deadline_ms bigint,
                                p_out_id uuid, p_out_dest text, p_out_type text,
                                p_out_payload jsonb, p_lease_ms int)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_trace text;
BEGIN
    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN 'duplicate';
        END IF;
    END IF;

    UPDATE saga_instances
       SET state = p_to, version = version + 1, compensation = p_compensation,
           deadline_at = CASE WHEN p_deadline_ms IS NULL THEN NULL
                              ELSE now() + p_deadline_ms * interval '1 millisecond' END,
           updated_at = now()
     WHERE saga_id = p_saga_id AND state = p_from AND version = p_version
    RETURNING trace_id INTO v_trace;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, p_from, p_version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, p_version + 1, p_from, p_to, p_cause, p_event_id);

    IF p_out_id IS NOT NULL THEN
        -- claimed at birth by the caller, which sends it at once
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (p_out_id, 'command', p_out_dest, p_out_type, p_out_payload, v_trace,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    RETURN 'applied';
END
$$;
COMMENT ON FUNCTION saga_transition(uuid, uuid, text, int, text, text, text, bigint, uuid, text, text, jsonb, int)
    IS 'Applies one saga transition guarded by state and version, with its inbox row, history row and outgoing command.';

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
