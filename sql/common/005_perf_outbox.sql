-- The dispatcher's statements as PL/pgSQL, same names, arguments and
-- effects as in 001_messaging.sql (issue #11).
--
-- A LANGUAGE sql function whose body is more than one expression is not
-- inlined, and PostgreSQL 15 parses and plans its body again every time the
-- calling statement runs: for outbox_ack, run once per delivered message,
-- that planning cost more than the UPDATE itself (pg_stat_statements: about
-- 320 us per call against 140 us for the UPDATE inside). PL/pgSQL keeps
-- each statement's plan for the life of the session, and the services'
-- sessions are long-lived pool connections.
--
-- A one-row version 7 UUID generator for ids made in SQL, time first, so
-- that they, like the ids the services make in C (src/lib/uuid.c), append
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

CREATE OR REPLACE FUNCTION outbox_ack(p_ids uuid[]) RETURNS void
	LANGUAGE plpgsql SECURITY INVOKER
	SET search_path FROM CURRENT
	AS $$
BEGIN
	-- asynchronous commit: a lost mark only makes the row due again, and
	-- the receiver's inbox answers the copy as a duplicate
	PERFORM set_config('synchronous_commit', 'off', true);
	UPDATE outbox_messages SET processed_at = now(), last_error = NULL
	 WHERE message_id = ANY (p_ids) AND processed_at IS NULL;
END
$$;

CREATE OR REPLACE FUNCTION outbox_claim(p_limit int, p_lease_ms int)
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
