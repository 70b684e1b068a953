-- saga_apply with fewer statements, and saga_history without its foreign
-- key to saga_instances (issue #11). Same name, arguments, results and
-- semantics as in 002_saga.sql.
--
-- The saga row and the inbox test are read by one statement instead of
-- two; the rest is unchanged: the inbox row, the guarded UPDATE, the
-- history row and the outgoing command, in that order, in the caller's
-- transaction.
--
-- The foreign key: every saga_history row is written by the statement or
-- transaction that inserts or updates its saga_instances row (the create
-- statement of POST /orders, and this function right after its guarded
-- UPDATE found the row), and nothing deletes sagas, so the key checked
-- nothing that can fail; yet its check ran an SPI query and took a row
-- lock (a WAL record) three times per saga: 170-250 us of PostgreSQL CPU
-- per saga, 6-8 % (docs/performance.md). The README ("The timeline without
-- a foreign key") says why the timeline stays whole without it, and
-- scripts/audit checks it (sql/audit.sql, 4e). saga_cancellations keeps
-- its key.
ALTER TABLE saga_history DROP CONSTRAINT saga_history_saga_id_fkey;
COMMENT ON COLUMN saga_history.saga_id IS
    'The saga (no foreign key: each row is written with its saga_instances row, and sagas are never deleted).';

CREATE OR REPLACE FUNCTION saga_apply(p_event_id uuid, p_saga_id uuid, p_from text, p_undo text,
                           p_to text, p_new_undo text, p_cause text, p_deadline_ms bigint,
                           p_out_id uuid, p_out_dest text, p_out_type text,
                           p_out_payload jsonb, p_with_item boolean, p_lease_ms int,
                           OUT result text, OUT state text, OUT compensation text,
                           OUT payload jsonb, OUT trace_id text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_version int;
    v_item text;
    v_qty int;
    v_dup boolean;
BEGIN
    SELECT s.state, s.compensation, s.version, s.item_id, s.qty, s.trace_id,
           p_event_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM processed_messages m WHERE m.message_id = p_event_id)
      INTO state, compensation, v_version, v_item, v_qty, trace_id, v_dup
      FROM saga_instances s WHERE s.saga_id = p_saga_id;
    IF NOT FOUND THEN
        result := 'not_found';
        RETURN;
    END IF;
    IF v_dup THEN
        result := 'duplicate';
        state := NULL; compensation := NULL; trace_id := NULL;
        RETURN;
    END IF;
    IF state <> p_from OR compensation IS DISTINCT FROM p_undo THEN
        result := 'ignored';
        trace_id := NULL;
        RETURN;
    END IF;

    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            result := 'duplicate';
            state := NULL; compensation := NULL; trace_id := NULL;
            RETURN;
        END IF;
    END IF;

    UPDATE saga_instances s
       SET state = p_to, version = s.version + 1, compensation = p_new_undo,
           deadline_at = CASE WHEN p_deadline_ms IS NULL THEN NULL
                              ELSE now() + p_deadline_ms * interval '1 millisecond' END,
           updated_at = now()
     WHERE s.saga_id = p_saga_id AND s.state = p_from AND s.version = v_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, p_from, v_version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, v_version + 1, p_from, p_to, p_cause, p_event_id);

    IF p_out_id IS NOT NULL THEN
        payload := p_out_payload;
        IF p_with_item THEN
            payload := payload || jsonb_build_object('itemId', v_item, 'qty', v_qty);
        END IF;
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (p_out_id, 'command', p_out_dest, p_out_type, payload, trace_id,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    result := 'applied';
    state := p_to;
    compensation := p_new_undo;
END
$$;
COMMENT ON FUNCTION saga_apply(uuid, uuid, text, text, text, text, text, bigint, uuid, text, text, jsonb, boolean, int)
    IS 'Applies one saga transition decided by the caller, guarded by state and version, with its inbox row, history row and outgoing command, in one round trip.';
