-- Edited after it was applied, on purpose: it also defined handle_pay,
-- which 006_pay_new_accounts.sql, applied right after it and released with
-- it, replaces whole; that first body was dead on every fresh database and
-- is gone from here. Migrations are recorded by file name, so a database
-- that applied the old text does not apply this one again, and it ends the
-- same: handle_pay as 006_pay_new_accounts.sql defines it.
--
-- handle_refund with fewer statements (issue #11). Same name, arguments,
-- results and semantics as in 002_payment.sql (with 003's
-- starting-value triggers and 005's emit_event): the answering event is
-- written by the handler's own INSERT instead of a nested call of
-- emit_event (another PL/pgSQL function with its own SET search_path,
-- called through a SELECT): same id (uuid_v7()), same payload, same row,
-- claimed for p_lease_ms. emit_event stays for anyone else calling it.
-- handle_pay, changed the same way and charging before it opens an
-- account, is in 006_pay_new_accounts.sql.
--
-- The advisory lock stays its own statement before the read of payments:
-- each statement of a READ COMMITTED transaction reads with a snapshot
-- taken when it starts, so the read must start after the lock is held to
-- see what the saga's other command committed while we waited.

CREATE OR REPLACE FUNCTION handle_refund(p_command_id uuid, p_saga_id uuid, p_trace text,
                                         p_lease_ms int, OUT result text, OUT event_id uuid,
                                         OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pay payments%ROWTYPE;
BEGIN
    INSERT INTO processed_messages (message_id) VALUES (p_command_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        result := 'duplicate';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('payment:' || p_saga_id::text, 0));

    SELECT * INTO v_pay FROM payments WHERE saga_id = p_saga_id;
    IF NOT FOUND THEN
        INSERT INTO payments (saga_id, status) VALUES (p_saga_id, 'voided');
    ELSIF v_pay.status = 'captured' THEN
        UPDATE accounts SET balance = balance + v_pay.amount
         WHERE customer_id = v_pay.customer_id;
        UPDATE payments SET status = 'refunded', updated_at = now()
         WHERE saga_id = p_saga_id;
    END IF;
    result := 'PaymentRefunded';
    event_id := uuid_v7();
    payload := jsonb_strip_nulls(jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id));
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', result, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
COMMENT ON FUNCTION handle_refund(uuid, uuid, text, int)
    IS 'Handles a RefundPaymentCommand once: refunds a capture at most once, or voids the saga''s payment.';
