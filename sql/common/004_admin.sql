-- The admin API's reads and writes over a service's messaging tables (SPEC
-- §9), the same in each schema. Each function returns the JSON the service
-- answers with, so the C side only passes parameters and forwards text.

-- Times as the HTTP API shows them (the orchestrator had it already).
CREATE OR REPLACE FUNCTION rfc3339(t timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
COMMENT ON FUNCTION rfc3339(timestamptz) IS 'A timestamp as RFC 3339 text in UTC, as the HTTP API shows it.';

-- A saga's messages. Every payload carries its sagaId; lower() because the
-- text is whatever case the message that caused the row used.
CREATE INDEX outbox_messages_saga_idx ON outbox_messages (lower(payload->>'sagaId'));
COMMENT ON INDEX outbox_messages_saga_idx IS
	'Admin API: a saga''s outbox rows (GET /admin/api/sagas/{id})';

-- Outbox rows about the saga (direction out) and the inbox rows of p_in,
-- the ids of messages sent to this service about it (direction in: the inbox
-- keeps ids only, so the caller, who knows the senders' rows, names them).
CREATE FUNCTION admin_messages(p_saga uuid, p_service text, p_in uuid[]) RETURNS json
	LANGUAGE sql STABLE
	SET search_path FROM CURRENT
	AS $$
	SELECT coalesce(json_agg(m ORDER BY m."createdAt"), '[]')
	  FROM (SELECT p_service AS service, o.message_id AS "messageId", 'out' AS direction,
		       o.type, o.destination, o.attempt_count AS "attemptCount",
		       rfc3339(o.created_at) AS "createdAt", rfc3339(o.processed_at) AS "processedAt",
		       rfc3339(o.dead_at) AS "deadAt", o.last_error AS "lastError"
		  FROM outbox_messages o
		 WHERE lower(o.payload->>'sagaId') = p_saga::text
		UNION ALL
		SELECT p_service, i.message_id, 'in', NULL, NULL, NULL,
		       rfc3339(i.processed_at), rfc3339(i.processed_at), NULL, NULL
		  FROM processed_messages i
		 WHERE i.message_id = ANY (coalesce(p_in, '{}'))) m
$$;
COMMENT ON FUNCTION admin_messages(uuid, text, uuid[]) IS
	'Admin API: the saga''s outbox rows and the given inbox rows, as a JSON array';

-- Delivery health per destination; p_destinations (the configured peers)
-- appear even when nothing waits for them. leased counts pending rows not
-- due yet: claimed by a dispatcher, or waiting out a backoff.
CREATE FUNCTION admin_deliveries(p_service text, p_destinations text[]) RETURNS json
	LANGUAGE sql STABLE
	SET search_path FROM CURRENT
	AS $$
	WITH m AS (
		SELECT destination, next_attempt_at, created_at, false AS dead
		  FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL
		UNION ALL
		SELECT destination, next_attempt_at, created_at, true
		  FROM outbox_messages WHERE dead_at IS NOT NULL),
	s AS (
		SELECT destination, count(*) FILTER (WHERE NOT dead) AS pending,
		       count(*) FILTER (WHERE NOT dead AND next_attempt_at > now()) AS leased,
		       count(*) FILTER (WHERE dead) AS dead,
		       round(extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT dead)), 3)
			       AS oldest
		  FROM m GROUP BY destination),
	d AS (SELECT unnest(p_destinations) AS destination UNION SELECT destination FROM s)
	SELECT coalesce(json_agg(json_build_object(
			'service', p_service, 'destination', d.destination,
			'pending', coalesce(s.pending, 0), 'leased', coalesce(s.leased, 0),
			'dead', coalesce(s.dead, 0), 'oldestPendingSeconds', coalesce(s.oldest, 0))
		ORDER BY d.destination), '[]')
	  FROM d LEFT JOIN s USING (destination)
$$;
COMMENT ON FUNCTION admin_deliveries(text, text[]) IS
	'Admin API: pending, leased and dead outbox rows and the oldest pending age, per destination';

-- Dead letters (the newest p_limit) and their groups by type and error.
CREATE FUNCTION admin_dead_letters(p_service text, p_type text, p_limit int) RETURNS json
	LANGUAGE sql STABLE
	SET search_path FROM CURRENT
	AS $$
	SELECT json_build_object(
		'deadLetters', coalesce((
			SELECT json_agg(json_build_object(
					'service', p_service, 'messageId', d.message_id,
					'sagaId', d.payload->>'sagaId', 'type', d.type,
					'destination', d.destination, 'attemptCount', d.attempt_count,
					'deadAt', rfc3339(d.dead_at), 'lastError', d.last_error)
				ORDER BY d.dead_at DESC, d.message_id)
			  FROM (SELECT * FROM outbox_messages
				 WHERE dead_at IS NOT NULL AND (p_type IS NULL OR type = p_type)
				 ORDER BY dead_at DESC, message_id LIMIT p_limit) d), '[]'),
		'groups', coalesce((
			SELECT json_agg(json_build_object('service', p_service, 'type', g.type,
							  'lastError', g.last_error, 'count', g.n)
				ORDER BY g.n DESC, g.type, g.last_error)
			  FROM (SELECT type, last_error, count(*) AS n FROM outbox_messages
				 WHERE dead_at IS NOT NULL AND (p_type IS NULL OR type = p_type)
				 GROUP BY type, last_error) g), '[]'))
$$;
COMMENT ON FUNCTION admin_dead_letters(text, text, int) IS
	'Admin API: the newest dead letters and the count of each (type, last error) group';

-- Dead letters back to pending, due now (attempts reset): the ids given, or
-- with p_all every one (of p_type, of p_type and p_error when given). The
-- caller wakes its own dispatcher; other instances hear the NOTIFY.
CREATE FUNCTION admin_retry(p_ids uuid[], p_all boolean, p_type text, p_error text)
	RETURNS integer
	LANGUAGE plpgsql
	SET search_path FROM CURRENT
	AS $$
DECLARE
	v_count integer;
BEGIN
	UPDATE outbox_messages
	   SET dead_at = NULL, attempt_count = 0, next_attempt_at = now()
	 WHERE dead_at IS NOT NULL AND processed_at IS NULL
	   AND (CASE WHEN p_all THEN (p_type IS NULL OR type = p_type)
				     AND (p_error IS NULL OR last_error = p_error)
		     ELSE message_id = ANY (p_ids) END);
	GET DIAGNOSTICS v_count = ROW_COUNT;
	IF v_count > 0 THEN
		PERFORM pg_notify(current_schema() || '_outbox', '');
	END IF;
	RETURN v_count;
END
$$;
COMMENT ON FUNCTION admin_retry(uuid[], boolean, text, text) IS
	'Admin API: puts the given dead letters (or all, of a type and error) back to pending; returns how many';
