-- The admin API's saga list and detail (SPEC §9), and the reasons operators
-- give when they cancel a saga.

-- Paging is newest first by (created_at, saga_id); each filter has an index
-- that yields its sagas in that order, so a page reads about `limit` rows
-- whatever the table holds. The composite index replaces the plain one on
-- created_at. Stuck sagas are the few not finished: a partial index.
CREATE INDEX saga_instances_page_idx ON saga_instances (created_at, saga_id);
DROP INDEX saga_instances_created_idx;
CREATE INDEX saga_instances_state_page_idx ON saga_instances (state, created_at, saga_id);
CREATE INDEX saga_instances_customer_page_idx ON saga_instances (customer_id, created_at, saga_id);
CREATE INDEX saga_instances_item_page_idx ON saga_instances (item_id, created_at, saga_id);
CREATE INDEX saga_instances_stuck_idx ON saga_instances (updated_at)
    WHERE state IN ('PendingPayment', 'PendingInventory', 'Compensating');
COMMENT ON INDEX saga_instances_page_idx IS 'Admin API: the saga list, newest first, by cursor';
COMMENT ON INDEX saga_instances_state_page_idx IS 'Admin API: the saga list of one state; counts per state';
COMMENT ON INDEX saga_instances_customer_page_idx IS 'Admin API: the saga list of one customer';
COMMENT ON INDEX saga_instances_item_page_idx IS 'Admin API: the saga list of one item';
COMMENT ON INDEX saga_instances_stuck_idx IS 'Admin API: unfinished sagas by last change (stuckSeconds)';

CREATE TABLE saga_cancellations (
    saga_id      uuid PRIMARY KEY REFERENCES saga_instances ON DELETE CASCADE,
    reason       text NOT NULL,
    cancelled_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE saga_cancellations IS 'Sagas an operator cancelled (POST /admin/api/sagas/{id}/cancel), written with the Cancelled transition.';
COMMENT ON COLUMN saga_cancellations.saga_id IS 'The saga.';
COMMENT ON COLUMN saga_cancellations.reason IS 'What the operator wrote.';
COMMENT ON COLUMN saga_cancellations.cancelled_at IS 'When the cancellation committed.';

-- One page of the list and the counts per state. The WHERE clause is built
-- from the filters given (EXECUTE plans it with their values, so each
-- filter finds its index; a prepared statement with "p IS NULL OR ..."
-- would not). Values travel as parameters, never in the text. The counts
-- apply every filter but the state and the cursor. Times arrive as text:
-- one that does not parse answers {"invalidField": name} instead of raising.
CREATE FUNCTION admin_sagas(p_states text[], p_customer text, p_item text, p_since text,
                            p_until text, p_stuck_s int, p_limit int, p_cursor_us bigint,
                            p_cursor_id uuid) RETURNS json
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_since timestamptz;
    v_until timestamptz;
    v_where text := 'true';
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
        v_where := v_where || ' AND state IN (''PendingPayment'', ''PendingInventory'','
                           || ' ''Compensating'') AND updated_at <= now() - $6 * interval ''1 second''';
    END IF;

    EXECUTE 'SELECT json_object_agg(s, coalesce(c.n, 0) ORDER BY o)'
            || ' FROM unnest(ARRAY[''PendingPayment'', ''PendingInventory'', ''Compensating'','
            || '                   ''Completed'', ''Failed'', ''Compensated'']) WITH ORDINALITY AS t(s, o)'
            || ' LEFT JOIN (SELECT state, count(*) AS n FROM saga_instances WHERE ' || v_where
            || '            GROUP BY state) c ON c.state = t.s'
       INTO v_counts
      USING p_states, p_customer, p_item, v_since, v_until, p_stuck_s;

    IF p_states IS NOT NULL THEN v_where := v_where || ' AND state = ANY ($1)'; END IF;
    IF p_cursor_us IS NOT NULL THEN
        v_where := v_where || ' AND (created_at, saga_id) < (''epoch''::timestamptz'
                           || ' + $8 * interval ''1 microsecond'', $9)';
    END IF;
    EXECUTE 'SELECT coalesce(json_agg(json_build_object('
            || '''sagaId'', saga_id, ''state'', state, ''version'', version,'
            || ' ''customerId'', customer_id, ''itemId'', item_id, ''qty'', qty,'
            || ' ''amount'', amount, ''createdAt'', rfc3339(created_at),'
            || ' ''updatedAt'', rfc3339(updated_at)) ORDER BY created_at DESC, saga_id DESC),'
            || ' ''[]''), count(*),'
            || ' (array_agg((extract(epoch FROM created_at) * 1000000)::bigint::text'
            || '            || ''.'' || saga_id ORDER BY created_at, saga_id))[1]'
            || ' FROM (SELECT * FROM saga_instances WHERE ' || v_where
            || '        ORDER BY created_at DESC, saga_id DESC LIMIT $7) p'
       INTO v_page, v_n, v_next
      USING p_states, p_customer, p_item, v_since, v_until, p_stuck_s, p_limit, p_cursor_us,
            p_cursor_id;
    RETURN json_build_object('sagas', v_page, 'counts', v_counts,
                             'next', CASE WHEN v_n = p_limit THEN v_next END);
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
