-- 1.1.0: the admin API's saga list and detail for sagas of every
-- definition (src/orchestrator/admin_sagas.c). admin_sagas and admin_saga
-- (005) stay as they are, for the 1.0 orchestrators that run beside 1.1
-- ones during a rolling upgrade; these are their successors.

-- The unfinished states that hold sagas at this moment, in order: a skip
-- scan of saga_instances_running_idx (006), one probe of the index per
-- state found, however many sagas are in flight. The list walks each of
-- them on its own (admin_sagas_v2), whatever definitions are registered:
-- a definition's Pending<Step> shows up here once a saga of it runs.
CREATE FUNCTION saga_running_states() RETURNS text[]
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE r(state) AS (
        SELECT min(state) FROM saga_instances
         WHERE state NOT IN ('Completed', 'Failed', 'Compensated')
        UNION ALL
        SELECT (SELECT min(i.state) FROM saga_instances i
                 WHERE i.state NOT IN ('Completed', 'Failed', 'Compensated')
                   AND i.state > r.state)
          FROM r WHERE r.state IS NOT NULL)
    SELECT coalesce(array_agg(state ORDER BY state), '{}') FROM r WHERE state IS NOT NULL
$$;
COMMENT ON FUNCTION saga_running_states()
    IS 'The states of the sagas not finished now (Pending<Step> of any definition, Compensating), by a skip scan of their index.';

-- definition= on the finished sagas of a definition other than the order
-- saga's: its page newest first, and its counts per state (index-only:
-- the state is included). Partial, so that the order saga, most of the
-- sagas in most deployments and the one the benchmarks run, writes no
-- entry into it: the order saga's finished counts are every finished
-- saga's less the others' (admin_sagas_v2), and its page walks
-- saga_instances_ended_page_idx. Another definition's saga writes one entry
-- more when it ends; a transition that does not end it writes none.
CREATE INDEX saga_instances_ended_definition_idx
    ON saga_instances (definition_name, created_at, saga_id) INCLUDE (state)
    WHERE state IN ('Completed', 'Failed', 'Compensated') AND definition_name <> 'order';
COMMENT ON INDEX saga_instances_ended_definition_idx IS
    'Admin API: the finished sagas of one definition other than order, newest first, and their states';

-- One page of the list and the counts per state, as admin_sagas (005) with
-- what sagas of every definition need:
--
-- - the unfinished part walks each unfinished state that holds sagas
--   (saga_running_states), not the order saga's three: still one walk of
--   saga_instances_running_idx per state in the page's order, stopping at
--   the page;
-- - p_definition keeps the sagas of one definition (any version). The
--   unfinished part filters the few sagas in flight as it walks them. The
--   finished part of another definition than order walks
--   saga_instances_ended_definition_idx (above; the query repeats its
--   predicate, definition_name <> 'order', so that the planner may use
--   it); the order saga's walks saga_instances_ended_page_idx newest first
--   and filters as it goes (it reads about limit / share rows, the share
--   being its part of the finished sagas), and its finished counts, with
--   no other filter but the state, are every finished saga's less the
--   other definitions' (two index-only scans); with another filter they
--   read the rows that filter's index finds;
-- - counts: the order saga's six states always, in the order clients rely
--   on, then the other states that hold sagas under the filters, by name;
-- - each saga names its definition and version.
CREATE FUNCTION admin_sagas_v2(p_states text[], p_customer text, p_item text, p_since text,
                               p_until text, p_stuck_s int, p_limit int, p_cursor_us bigint,
                               p_cursor_id uuid, p_definition text) RETURNS json
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    c_keys constant text[] := ARRAY['PendingPayment', 'PendingInventory', 'Compensating',
                                    'Completed', 'Failed', 'Compensated'];
    c_ended constant text[] := ARRAY['Completed', 'Failed', 'Compensated'];
    -- the predicates of the partial indexes, as they write them, so that
    -- the planner proves each part may use its index
    c_running constant text := 'state NOT IN (''Completed'', ''Failed'', ''Compensated'')';
    c_in_ended constant text := 'state IN (''Completed'', ''Failed'', ''Compensated'')';
    c_not_order constant text := ' AND definition_name <> ''order''';
    v_since timestamptz;
    v_until timestamptz;
    v_where text := '';
    v_ended boolean := p_stuck_s IS NULL;
    -- the order saga's finished counts by subtraction (above)
    v_order_only boolean := p_definition = 'order' AND p_customer IS NULL AND p_item IS NULL
                            AND p_since IS NULL AND p_until IS NULL AND p_stuck_s IS NULL;
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
    IF p_definition IS NOT NULL THEN
        v_where := v_where || ' AND definition_name = $10';
        IF p_definition <> 'order' THEN
            v_where := v_where || c_not_order;
        END IF;
    END IF;

    v_counts_sql := 'SELECT state, count(*) AS n FROM saga_instances WHERE ' || c_running
                    || v_where || ' GROUP BY state';
    IF v_ended AND v_order_only THEN
        v_counts_sql := v_counts_sql || ' UNION ALL SELECT e.state, e.n - coalesce(o.n, 0)'
                        || ' FROM (SELECT state, count(*) AS n FROM saga_instances'
                        || '        WHERE ' || c_in_ended || ' GROUP BY state) e'
                        || ' LEFT JOIN (SELECT state, count(*) AS n FROM saga_instances'
                        || '        WHERE ' || c_in_ended || c_not_order || ' GROUP BY state) o'
                        || ' USING (state) WHERE e.n > coalesce(o.n, 0)';
    ELSIF v_ended THEN
        v_counts_sql := v_counts_sql || ' UNION ALL SELECT state, count(*) FROM saga_instances'
                        || ' WHERE ' || c_in_ended || v_where || ' GROUP BY state';
    END IF;
    EXECUTE 'WITH c AS (' || v_counts_sql || ')'
            || ' SELECT json_object_agg(k.s, k.n ORDER BY k.o, k.s COLLATE "C")'
            || ' FROM (SELECT t.s, coalesce(c.n, 0) AS n, t.o'
            || '         FROM unnest($11::text[]) WITH ORDINALITY AS t(s, o)'
            || '         LEFT JOIN c ON c.state = t.s'
            || '       UNION ALL'
            || '       SELECT c.state, c.n, 7 FROM c WHERE c.state <> ALL ($11::text[])) k'
       INTO v_counts
      USING p_states, p_customer, p_item, v_since, v_until, p_stuck_s, p_limit, p_cursor_us,
            p_cursor_id, p_definition, c_keys;

    IF p_states IS NOT NULL THEN
        v_where := v_where || ' AND state = ANY ($1)';
        v_ended := v_ended AND p_states && c_ended;
    END IF;
    IF p_cursor_us IS NOT NULL THEN
        v_where := v_where || ' AND (created_at, saga_id) < (''epoch''::timestamptz'
                           || ' + $8 * interval ''1 microsecond'', $9)';
    END IF;
    -- each unfinished state on its own, so that each part is a walk of
    -- saga_instances_running_idx in the page's order that stops at the page
    v_rows := 'SELECT * FROM saga_instances WHERE false';
    FOREACH v_state IN ARRAY saga_running_states() LOOP
        IF p_states IS NULL OR v_state = ANY (p_states) THEN
            v_rows := v_rows || ' UNION ALL (SELECT * FROM saga_instances WHERE state = '
                      || quote_literal(v_state) || ' AND ' || c_running || v_where
                      || ' ORDER BY created_at DESC, saga_id DESC LIMIT $7 + 1)';
        END IF;
    END LOOP;
    IF v_ended THEN
        v_rows := v_rows || ' UNION ALL (SELECT * FROM saga_instances WHERE ' || c_in_ended
                  || v_where || ' ORDER BY created_at DESC, saga_id DESC LIMIT $7 + 1)';
    END IF;
    -- one row more than the page: its presence is what says a next page exists
    EXECUTE 'SELECT coalesce(json_agg(json_build_object('
            || '''sagaId'', saga_id, ''definition'', json_build_object(''name'','
            || ' definition_name, ''version'', definition_version),'
            || ' ''state'', state, ''version'', version,'
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
            p_cursor_id, p_definition;
    RETURN json_build_object('sagas', v_page, 'counts', v_counts,
                             'next', CASE WHEN v_n > p_limit THEN v_next END);
END
$$;
COMMENT ON FUNCTION admin_sagas_v2(text[], text, text, text, text, int, int, bigint, uuid, text)
    IS 'Admin API: one page of sagas of any definition (newest first, after the cursor) and the counts per state, filtered';

-- A saga as admin_saga (005) shows it, with its definition, its input (the
-- order saga's from its columns, saga_input) and what its steps output.
CREATE FUNCTION admin_saga_v2(p_saga uuid) RETURNS json
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT json_build_object(
        'sagaId', s.saga_id,
        'definition', json_build_object('name', s.definition_name,
                                        'version', s.definition_version),
        'state', s.state, 'version', s.version,
        'customerId', s.customer_id, 'itemId', s.item_id, 'qty', s.qty, 'amount', s.amount,
        'input', saga_input(s), 'outputs', coalesce(s.outputs, '{}'),
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
COMMENT ON FUNCTION admin_saga_v2(uuid)
    IS 'Admin API: a saga of any definition with its input, outputs, history, cancellation and this service''s messages';
