-- The saga list's next cursor is null on the last page, also when that page
-- is full: the page is read with one row more, whose presence says that
-- another page follows (the first version offered a cursor to an empty page
-- whenever the sagas left filled the page exactly). Otherwise as in
-- 004_admin_sagas.sql.
CREATE OR REPLACE FUNCTION admin_sagas(p_states text[], p_customer text, p_item text, p_since text,
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
            || '        FROM (SELECT * FROM saga_instances WHERE ' || v_where
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
