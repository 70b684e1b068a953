-- A saga's outbox rows (the admin API's saga detail) through an index of
-- the delivered rows only. Marking a row delivered writes a new row version
-- with an entry in every index of the table (processed_at is indexed, so
-- the update cannot be HOT); an index of every row by sagaId therefore took
-- two entries per message, at the insert and at the mark. Indexed only once
-- delivered, it takes one. The rows not delivered (pending or dead) are the
-- backlog, which the dispatcher's and the dead letters' partial indexes
-- already hold and which stays small; admin_messages reads them there.
DROP INDEX outbox_messages_saga_idx;
CREATE INDEX outbox_messages_saga_idx ON outbox_messages (lower(payload->>'sagaId'))
	WHERE processed_at IS NOT NULL;
COMMENT ON INDEX outbox_messages_saga_idx IS
	'Admin API: a saga''s delivered outbox rows (GET /admin/api/sagas/{id}); the others are read from the pending and dead indexes';

-- As in 004_admin.sql; the outbox rows are read in three parts, each by
-- the partial index that holds it.
CREATE OR REPLACE FUNCTION admin_messages(p_saga uuid, p_service text, p_in uuid[]) RETURNS json
	LANGUAGE sql STABLE
	SET search_path FROM CURRENT
	AS $$
	SELECT coalesce(json_agg(m ORDER BY m."createdAt"), '[]')
	  FROM (SELECT p_service AS service, o.message_id AS "messageId", 'out' AS direction,
		       o.type, o.destination, o.attempt_count AS "attemptCount",
		       rfc3339(o.created_at) AS "createdAt", rfc3339(o.processed_at) AS "processedAt",
		       rfc3339(o.dead_at) AS "deadAt", o.last_error AS "lastError"
		  FROM (SELECT * FROM outbox_messages WHERE processed_at IS NOT NULL
			UNION ALL
			SELECT * FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL
			UNION ALL
			SELECT * FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NOT NULL) o
		 WHERE lower(o.payload->>'sagaId') = p_saga::text
		UNION ALL
		SELECT p_service, i.message_id, 'in', NULL, NULL, NULL,
		       rfc3339(i.processed_at), rfc3339(i.processed_at), NULL, NULL
		  FROM processed_messages i
		 WHERE i.message_id = ANY (coalesce(p_in, '{}'))) m
$$;
COMMENT ON FUNCTION admin_messages(uuid, text, uuid[]) IS
	'Admin API: the saga''s outbox rows and the given inbox rows, as a JSON array';
