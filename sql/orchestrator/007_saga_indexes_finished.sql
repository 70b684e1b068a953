-- The saga list's indexes, one entry per saga instead of one per version.
--
-- A transition changes state, deadline_at and updated_at, which indexes
-- cover, so PostgreSQL writes a new entry in every index of saga_instances
-- for every transition, not only at the insert: with the eight indexes of
-- migrations 002-004, 22 entries per saga that completes, 17 of them for
-- the admin API's list. A finished saga never changes again, so an index
-- restricted to finished sagas takes one entry per saga, written when it
-- finishes. The unfinished ones are the sagas in flight, few by nature
-- (they finish or time out), and one partial index holds them all, in the
-- order the list wants within each state. admin_sagas reads the two parts
-- and merges them (below). 12 entries per completed saga instead of 22;
-- docs/performance.md has what it did to throughput, and scripts/console-cost
-- what it did to the list's cost.
DROP INDEX saga_instances_page_idx;
DROP INDEX saga_instances_state_page_idx;
DROP INDEX saga_instances_customer_page_idx;
DROP INDEX saga_instances_item_page_idx;
DROP INDEX saga_instances_stuck_idx;
DROP INDEX saga_instances_state_idx;

CREATE INDEX saga_instances_open_idx ON saga_instances (state, created_at, saga_id)
    WHERE state IN ('PendingPayment', 'PendingInventory', 'Compensating');
CREATE INDEX saga_instances_ended_page_idx ON saga_instances (created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_state_idx ON saga_instances (state, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_customer_idx ON saga_instances (customer_id, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_item_idx ON saga_instances (item_id, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
-- the counts per state: an index-only scan of a narrow index (see
-- 004_admin_sagas_counts.sql); the unfinished ones are counted on theirs
CREATE INDEX saga_instances_ended_count_idx ON saga_instances (state)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
COMMENT ON INDEX saga_instances_open_idx IS
    'Admin API: unfinished sagas by state, newest first (the list''s unfinished part, stuckSeconds, counts)';
COMMENT ON INDEX saga_instances_ended_page_idx IS 'Admin API: finished sagas, newest first, by cursor';
COMMENT ON INDEX saga_instances_ended_state_idx IS 'Admin API: finished sagas of one state';
COMMENT ON INDEX saga_instances_ended_count_idx IS 'Admin API: counts of finished sagas per state';
COMMENT ON INDEX saga_instances_ended_customer_idx IS 'Admin API: finished sagas of one customer';
COMMENT ON INDEX saga_instances_ended_item_idx IS 'Admin API: finished sagas of one item';

-- As in 004_admin_sagas_next.sql, but every query runs over the unfinished
-- sagas and over the finished ones apart, each part with the state
-- condition that lets the planner take its partial indexes; a part that
-- the filters exclude (finished sagas are never stuck) is left out. The
-- page is the newest $7 + 1 of the parts' newest $7 + 1.
CREATE OR REPLACE FUNCTION admin_sagas(p_states text[], p_customer text, p_item text, p_since text,
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
