-- The functions over the messaging tables of 001_outbox.sql, in every
-- schema: ids made in SQL, the dispatcher's claim and acknowledgement, the
-- receiver's refusals, the operator functions, retention, and the admin
-- API's reads and writes.
--
-- Why the dispatcher's functions are PL/pgSQL: a LANGUAGE sql function
-- whose body is more than one expression is not inlined, and PostgreSQL 15
-- parses and plans its body again every time the calling statement runs:
-- for outbox_ack, run once per delivered message, that planning cost more
-- than the UPDATE itself (pg_stat_statements: about 320 us per call against
-- 140 us for the UPDATE inside). PL/pgSQL keeps each statement's plan for
-- the life of the session, and the services' sessions are long-lived pool
-- connections. The same holds for every function the hot path calls.

-- A one-row version 7 UUID generator for ids made in SQL, time first, so
-- that they, like the ids the services make in C (src/lib/base/uuid.c), append
-- to the right-most leaf of the indexes they are keys of.
CREATE FUNCTION uuid_v7() RETURNS uuid
	LANGUAGE sql VOLATILE PARALLEL SAFE
	-- 48 bits of Unix milliseconds over the first six bytes of a v4 UUID,
	-- then the version nibble 7; the variant bits are already right
	RETURN encode(set_byte(overlay(uuid_send(gen_random_uuid())
				       PLACING substring(int8send(
					   floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
					   FROM 3)
				       FROM 1 FOR 6),
			       6, 112 + (random() * 15)::int),
		      'hex')::uuid;
COMMENT ON FUNCTION uuid_v7() IS
	'A new version 7 UUID (Unix milliseconds first, then random bits): keys that append to their index';

-- Times as the HTTP API shows them.
CREATE FUNCTION rfc3339(t timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
    RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
COMMENT ON FUNCTION rfc3339(timestamptz) IS 'A timestamp as RFC 3339 text in UTC, as the HTTP API shows it.';

-- ---------------------------------------------------------------------------
-- The dispatcher
-- ---------------------------------------------------------------------------
-- The claim: up to p_limit due rows, oldest first, pushed one lease ahead
-- instead of held locked across the HTTP call. Asynchronous commit: a claim
-- lost in a crash only makes its rows due again, and a second delivery is
-- deduplicated by the receiver's inbox.
CREATE FUNCTION outbox_claim(p_limit int, p_lease_ms int)
	RETURNS TABLE (message_id uuid, kind text, destination text, type text, payload text,
		       attempt_count int, trace_id text)
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
BEGIN
	-- asynchronous commit, as for outbox_ack: a lost claim only makes its
	-- rows due again
	PERFORM set_config('synchronous_commit', 'off', true);
	RETURN QUERY
	UPDATE outbox_messages o
	   SET next_attempt_at = now() + p_lease_ms * interval '1 millisecond'
	  FROM (SELECT m.message_id FROM outbox_messages m
		 WHERE m.processed_at IS NULL AND m.dead_at IS NULL AND m.next_attempt_at <= now()
		 ORDER BY m.next_attempt_at LIMIT p_limit FOR UPDATE SKIP LOCKED) due
	 WHERE o.message_id = due.message_id
	RETURNING o.message_id, o.kind, o.destination, o.type, o.payload::text, o.attempt_count,
		  o.trace_id;
END
$$;
COMMENT ON FUNCTION outbox_claim(int, int) IS
	'Dispatcher: claims up to p_limit due rows for p_lease_ms and returns them';

-- The acknowledgement: the dispatcher marks delivered rows in batches. Such
-- a mark need not survive a crash: a lost one only makes the row due again,
-- and the receiver's inbox answers the copy as a duplicate. So it commits
-- without waiting for its WAL flush, which takes one fsync per message off
-- the hot path.
--
-- A dead row is never marked delivered: over AMQP a retried refusal is
-- published, confirmed and refused again at about the same time, and the
-- confirm's mark must not turn the new dead letter (outbox_refused, below)
-- into a delivered row, which retry_dead_letter would then never send.
CREATE FUNCTION outbox_ack(p_ids uuid[]) RETURNS void
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
BEGIN
	-- asynchronous commit: a lost mark only makes the row due again, and
	-- the receiver's inbox answers the copy as a duplicate
	PERFORM set_config('synchronous_commit', 'off', true);
	UPDATE outbox_messages SET processed_at = now(), last_error = NULL
	 WHERE message_id = ANY (p_ids) AND processed_at IS NULL AND dead_at IS NULL;
END
$$;
COMMENT ON FUNCTION outbox_ack(uuid[]) IS
	'Marks delivered outbox rows processed (asynchronous commit: a lost mark only causes a deduplicated redelivery)';

-- The receiver's refusals (TRANSPORT=amqp) become its own dead letters.
--
-- Over HTTP a message the receiver refuses for good (malformed, unknown type,
-- unknown saga: a 4xx) is the sender's dead letter, which dead_letters, the
-- admin API and the console list and retry. Over AMQP the sender's row was
-- delivered (the broker confirmed it) and the receiver rejects the message
-- into the broker's pgsaga.dead, out of their sight. So the receiver keeps
-- it here first, in its own outbox, addressed to itself and dead:
-- retry_dead_letter(s) then publishes it to its own queue again.

CREATE FUNCTION outbox_refused(p_id uuid, p_kind text, p_dest text, p_type text,
			       p_body text, p_error text) RETURNS void
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
DECLARE
	v_payload jsonb;
BEGIN
	BEGIN
		v_payload := p_body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		v_payload := to_jsonb(p_body); -- not JSON: kept as a string to read
	END;
	-- a message without a usable id gets one; one refused again after a
	-- retry is the same dead letter, one attempt more
	INSERT INTO outbox_messages (message_id, kind, destination, type, payload,
				     attempt_count, dead_at, last_error)
	VALUES (coalesce(p_id, uuid_v7()), p_kind, p_dest, p_type, v_payload, 1, now(), p_error)
	ON CONFLICT (message_id) DO UPDATE
	   SET dead_at = now(), processed_at = NULL, last_error = excluded.last_error,
	       attempt_count = outbox_messages.attempt_count + 1;
END
$$;
COMMENT ON FUNCTION outbox_refused(uuid, text, text, text, text, text) IS
	'AMQP receiver: keeps a delivery it refused for good as a dead letter addressed to itself';

-- Operator functions. last_error is kept: until the next attempt replaces
-- it, it says why the message died, which is what an operator retrying it
-- wants to see in outbox_backlog.

CREATE FUNCTION retry_dead_letter(p_message_id uuid) RETURNS boolean
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
BEGIN
	UPDATE outbox_messages
	SET dead_at = NULL, attempt_count = 0, next_attempt_at = now()
	WHERE message_id = p_message_id AND dead_at IS NOT NULL AND processed_at IS NULL;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	-- current_schema() is the table's: search_path is pinned to it.
	PERFORM pg_notify(current_schema() || '_outbox', '');
	RETURN true;
END
$$;
COMMENT ON FUNCTION retry_dead_letter(uuid) IS
	'Puts one dead letter back to pending (attempts reset, due now) and wakes the dispatchers; false if no such dead letter';

CREATE FUNCTION retry_dead_letters() RETURNS integer
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
DECLARE
	v_count integer;
BEGIN
	UPDATE outbox_messages
	SET dead_at = NULL, attempt_count = 0, next_attempt_at = now()
	WHERE dead_at IS NOT NULL AND processed_at IS NULL;
	GET DIAGNOSTICS v_count = ROW_COUNT;
	IF v_count > 0 THEN
		PERFORM pg_notify(current_schema() || '_outbox', '');
	END IF;
	RETURN v_count;
END
$$;
COMMENT ON FUNCTION retry_dead_letters() IS
	'Puts every dead letter back to pending (attempts reset, due now) and wakes the dispatchers; returns how many';

-- Retention, run by the services in the background.
--
-- One call deletes at most p_limit delivered outbox rows and at most p_limit
-- inbox rows, older than p_older_than; the caller repeats until it returns
-- 0, each call its own short transaction, so no long lock or huge WAL burst.
-- "= ANY (ARRAY(...))" makes the delete probe the primary key with the
-- batch's ids instead of joining against the whole table. SKIP LOCKED:
-- instances purging at the same time do not wait on each other. Dead
-- letters are never purged: they wait for an operator. An inbox row purged after the retention period no longer
-- deduplicates its message; the period must exceed how long a copy can
-- arrive late (the services' own unique keys remain as a backstop).

CREATE FUNCTION purge_processed(p_older_than interval, p_limit int) RETURNS integer
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
DECLARE
	v_cutoff timestamptz;
	v_outbox integer;
	v_inbox integer;
BEGIN
	IF p_older_than IS NULL OR p_older_than < interval '0' THEN
		RAISE EXCEPTION 'purge_processed: p_older_than must be a non-negative interval, not %',
			coalesce(p_older_than::text, 'NULL');
	END IF;
	IF p_limit IS NULL OR p_limit <= 0 THEN
		RETURN 0;
	END IF;
	v_cutoff := now() - p_older_than;

	DELETE FROM outbox_messages
	WHERE message_id = ANY (ARRAY(SELECT message_id FROM outbox_messages
				      WHERE processed_at < v_cutoff
				      ORDER BY processed_at
				      LIMIT p_limit
				      FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS v_outbox = ROW_COUNT;

	DELETE FROM processed_messages
	WHERE message_id = ANY (ARRAY(SELECT message_id FROM processed_messages
				      WHERE processed_at < v_cutoff
				      ORDER BY processed_at
				      LIMIT p_limit
				      FOR UPDATE SKIP LOCKED));
	GET DIAGNOSTICS v_inbox = ROW_COUNT;

	RETURN v_outbox + v_inbox;
END
$$;
COMMENT ON FUNCTION purge_processed(interval, int) IS
	'Retention: deletes up to p_limit delivered outbox rows and up to p_limit inbox rows older than p_older_than; returns rows deleted (call again until 0)';

-- ---------------------------------------------------------------------------
-- The admin API
-- ---------------------------------------------------------------------------
-- The admin API's reads and writes over a service's messaging tables (the
-- operator console's pages), the same in each schema. Each function returns
-- the JSON the service answers with, so the C side only passes parameters
-- and forwards text.

-- Outbox rows about the saga (direction out) and the inbox rows of p_in,
-- the ids of messages sent to this service about it (direction in: the inbox
-- keeps ids only, so the caller, who knows the senders' rows, names them).
-- The outbox rows are read in three parts, each by the partial index that
-- holds it (outbox_messages_saga_idx holds only the delivered ones).
CREATE FUNCTION admin_messages(p_saga uuid, p_service text, p_in uuid[]) RETURNS json
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
