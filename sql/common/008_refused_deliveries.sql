-- Refused deliveries (TRANSPORT=amqp) become dead letters of the receiver.
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

-- A retried refusal is published, confirmed and refused again at about the
-- same time: the confirm's delivery mark must not turn the new dead letter
-- into a delivered row (retry_dead_letter would then never send it).
CREATE OR REPLACE FUNCTION outbox_ack(p_ids uuid[]) RETURNS void
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
