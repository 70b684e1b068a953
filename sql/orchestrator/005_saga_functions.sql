-- The orchestrator's functions over the tables of 004_saga_tables.sql (and
-- the messaging ones of 001_outbox.sql): the saga engine's one transition,
-- retention of idempotency keys, and the admin API's saga list and detail.

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
--
-- The saga row and the inbox test are read by one statement; then the
-- inbox row, the guarded UPDATE, the history row and the outgoing command,
-- in that order, in the caller's transaction (src/orchestrator: the saga
-- engine calls it once per event).
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

-- One page of the list and the counts per state. The WHERE clause is built
-- from the filters given (EXECUTE plans it with their values, so each
-- filter finds its index; a prepared statement with "p IS NULL OR ..."
-- would not). Values travel as parameters, never in the text. The counts
-- apply every filter but the state and the cursor. Times arrive as text:
-- one that does not parse answers {"invalidField": name} instead of raising.
--
-- Every query runs over the unfinished sagas and over the finished ones
-- apart, each part with the state condition that lets the planner take its
-- partial index (004_saga_tables.sql); a part that the filters exclude
-- (finished sagas are never stuck) is left out. The page is the newest
-- $7 + 1 of the parts' newest $7 + 1: the one row more than the page is
-- what says that another page follows, so the next cursor is null on the
-- last page, also when that page is full.
CREATE FUNCTION admin_sagas(p_states text[], p_customer text, p_item text, p_since text,
                            p_until text, p_stuck_s int, p_limit int, p_cursor_us bigint,
                            p_cursor_id uuid) RETURNS json
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    c_open constant text[] := ARRAY['PendingPayment', 'PendingInventory', 'Compensating'];
    c_ended constant text[] := ARRAY['Completed', 'Failed', 'Compensated'];
    c_in_open constant text := 'state IN (''PendingPayment'', ''PendingInventory'', ''Compensating'')';
    c_in_ended constant text := 'state IN (''Completed'', ''Failed'', ''Compensated'')';
    v_since timestamptz;
    v_until timestamptz;
    v_where text := '';
    v_ended boolean := p_stuck_s IS NULL;
    v_state text;
    v_counts_sql text;
    v_rows text;
    v_page json;
    v_counts json;
    v_next text;
    v_n int;
BEGIN
    BEGIN
        v_since := p_since::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RETURN json_build_object('invalidField', 'since');
    END;
    BEGIN
        v_until := p_until::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RETURN json_build_object('invalidField', 'until');
    END;
    IF p_customer IS NOT NULL THEN v_where := v_where || ' AND customer_id = $2'; END IF;
    IF p_item IS NOT NULL THEN v_where := v_where || ' AND item_id = $3'; END IF;
    IF v_since IS NOT NULL THEN v_where := v_where || ' AND created_at >= $4'; END IF;
    IF v_until IS NOT NULL THEN v_where := v_where || ' AND created_at < $5'; END IF;
    IF p_stuck_s IS NOT NULL THEN
        v_where := v_where || ' AND updated_at <= now() - $6 * interval ''1 second''';
    END IF;

    v_counts_sql := 'SELECT state, count(*) AS n FROM saga_instances WHERE ' || c_in_open
                    || v_where || ' GROUP BY state';
    IF v_ended THEN
        v_counts_sql := v_counts_sql || ' UNION ALL SELECT state, count(*) FROM saga_instances'
                        || ' WHERE ' || c_in_ended || v_where || ' GROUP BY state';
    END IF;
    EXECUTE 'SELECT json_object_agg(s, coalesce(c.n, 0) ORDER BY o)'
            || ' FROM unnest(ARRAY[''PendingPayment'', ''PendingInventory'', ''Compensating'','
            || '                   ''Completed'', ''Failed'', ''Compensated'']) WITH ORDINALITY AS t(s, o)'
            || ' LEFT JOIN (' || v_counts_sql || ') c ON c.state = t.s'
       INTO v_counts
      USING p_states, p_customer, p_item, v_since, v_until, p_stuck_s;

    IF p_states IS NOT NULL THEN
        v_where := v_where || ' AND state = ANY ($1)';
        v_ended := v_ended AND p_states && c_ended;
    END IF;
    IF p_cursor_us IS NOT NULL THEN
        v_where := v_where || ' AND (created_at, saga_id) < (''epoch''::timestamptz'
                           || ' + $8 * interval ''1 microsecond'', $9)';
    END IF;
    -- each unfinished state on its own, so that each part is a walk of
    -- saga_instances_open_idx in the page's order that stops at the page
    v_rows := 'SELECT * FROM saga_instances WHERE false';
    FOREACH v_state IN ARRAY c_open LOOP
        IF p_states IS NULL OR v_state = ANY (p_states) THEN
            v_rows := v_rows || ' UNION ALL (SELECT * FROM saga_instances WHERE state = '
                      || quote_literal(v_state) || v_where
                      || ' ORDER BY created_at DESC, saga_id DESC LIMIT $7 + 1)';
        END IF;
    END LOOP;
    IF v_ended THEN
        v_rows := v_rows || ' UNION ALL (SELECT * FROM saga_instances WHERE ' || c_in_ended
                  || v_where || ' ORDER BY created_at DESC, saga_id DESC LIMIT $7 + 1)';
    END IF;
    -- one row more than the page: its presence is what says a next page exists
    EXECUTE 'SELECT coalesce(json_agg(json_build_object('
            || '''sagaId'', saga_id, ''state'', state, ''version'', version,'
            || ' ''customerId'', customer_id, ''itemId'', item_id, ''qty'', qty,'
            || ' ''amount'', amount, ''createdAt'', rfc3339(created_at),'
            || ' ''updatedAt'', rfc3339(updated_at)) ORDER BY created_at DESC, saga_id DESC)'
            || '   FILTER (WHERE n <= $7), ''[]''), count(*),'
            || ' max((extract(epoch FROM created_at) * 1000000)::bigint::text'
            || '     || ''.'' || saga_id) FILTER (WHERE n = $7)'
            || ' FROM (SELECT *, row_number() OVER (ORDER BY created_at DESC, saga_id DESC) AS n'
            || '        FROM (SELECT * FROM (' || v_rows || ') u'
            || '               ORDER BY created_at DESC, saga_id DESC LIMIT $7 + 1) l) p'
       INTO v_page, v_n, v_next
      USING p_states, p_customer, p_item, v_since, v_until, p_stuck_s, p_limit, p_cursor_us,
            p_cursor_id;
    RETURN json_build_object('sagas', v_page, 'counts', v_counts,
                             'next', CASE WHEN v_n > p_limit THEN v_next END);
END
$$;
COMMENT ON FUNCTION admin_sagas(text[], text, text, text, text, int, int, bigint, uuid)
    IS 'Admin API: one page of sagas (newest first, after the cursor) and the counts per state, filtered';

-- A saga as GET /orders/{id} shows it, with what the admin API adds: its
-- cancellation, if any, and its messages in this service (the inbox rows
-- are the events its history names). payment and reservation are null
-- here; the orchestrator fills them from the peers' answers.
CREATE FUNCTION admin_saga(p_saga uuid) RETURNS json
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT json_build_object(
        'sagaId', s.saga_id, 'state', s.state, 'version', s.version,
        'customerId', s.customer_id, 'itemId', s.item_id, 'qty', s.qty, 'amount', s.amount,
        'createdAt', rfc3339(s.created_at), 'updatedAt', rfc3339(s.updated_at),
        'compensation', s.compensation, 'deadlineAt', rfc3339(s.deadline_at),
        'traceId', s.trace_id,
        'history', (SELECT json_agg(json_build_object(
                        'version', h.version, 'fromState', h.from_state, 'toState', h.to_state,
                        'cause', h.cause, 'messageId', h.message_id, 'at', rfc3339(h.at))
                      ORDER BY h.version)
                      FROM saga_history h WHERE h.saga_id = s.saga_id),
        'cancellation', (SELECT json_build_object('reason', c.reason,
                                                  'at', rfc3339(c.cancelled_at))
                           FROM saga_cancellations c WHERE c.saga_id = s.saga_id),
        'messages', admin_messages(s.saga_id, 'orchestrator',
                                   ARRAY(SELECT h.message_id FROM saga_history h
                                          WHERE h.saga_id = s.saga_id
                                            AND h.message_id IS NOT NULL)),
        'payment', NULL, 'reservation', NULL)
      FROM saga_instances s WHERE s.saga_id = p_saga
$$;
COMMENT ON FUNCTION admin_saga(uuid)
    IS 'Admin API: a saga with its history, cancellation and this service''s messages';
