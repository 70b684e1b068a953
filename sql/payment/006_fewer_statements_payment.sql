-- The payment handlers with fewer statements (issue #11). Same names,
-- arguments, results and semantics as in 002_payment.sql (with 003's
-- starting-value triggers and 005's emit_event):
--
--  * The answering event is written by the handler's own INSERT instead of
--    a nested call of emit_event (another PL/pgSQL function with its own
--    SET search_path, called through a SELECT): same id (uuid_v7()), same
--    payload, same row, claimed for p_lease_ms. emit_event stays for
--    anyone else calling it.
--  * handle_pay charges first and opens the default account only when the
--    charge found no row to charge, instead of an INSERT ... ON CONFLICT DO
--    NOTHING before every charge (an index probe and a statement for an
--    account that exists after the customer's first order). When the
--    charge fails, the account is opened if missing (ON CONFLICT DO
--    NOTHING, as before) and the charge is tried once more, so a missing
--    account, a short one and one opened concurrently end exactly as
--    before: captured if the balance covers the amount, else declined.
--
-- The advisory lock stays its own statement before the read of payments:
-- each statement of a READ COMMITTED transaction reads with a snapshot
-- taken when it starts, so the read must start after the lock is held to
-- see what the saga's other command committed while we waited.

CREATE OR REPLACE FUNCTION handle_pay(p_command_id uuid, p_saga_id uuid, p_customer_id text,
                           p_amount bigint, p_default_credit bigint, p_trace text,
                           p_lease_ms int, OUT result text, OUT event_id uuid,
                           OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_status text;
    v_reason text;
BEGIN
    INSERT INTO processed_messages (message_id) VALUES (p_command_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        result := 'duplicate';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('payment:' || p_saga_id::text, 0));

    SELECT status, reason INTO v_status, v_reason FROM payments WHERE saga_id = p_saga_id;
    IF NOT FOUND THEN
        UPDATE accounts SET balance = balance - p_amount
         WHERE customer_id = p_customer_id AND balance >= p_amount;
        IF NOT FOUND THEN
            INSERT INTO accounts (customer_id, balance, starting_balance)
            VALUES (p_customer_id, p_default_credit, p_default_credit)
            ON CONFLICT DO NOTHING;
            UPDATE accounts SET balance = balance - p_amount
             WHERE customer_id = p_customer_id AND balance >= p_amount;
        END IF;
        IF FOUND THEN
            v_status := 'captured';
        ELSE
            v_status := 'declined';
            v_reason := 'insufficient_funds';
        END IF;
        INSERT INTO payments (saga_id, customer_id, amount, status, reason)
        VALUES (p_saga_id, p_customer_id, p_amount, v_status, v_reason);
    ELSIF v_status IN ('voided', 'refunded') THEN
        v_reason := v_status;
    END IF;

    IF v_status = 'captured' THEN
        result := 'PaymentSucceeded';
        v_reason := NULL;
    ELSE
        result := 'PaymentFailed';
    END IF;
    event_id := uuid_v7();
    payload := jsonb_strip_nulls(jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id,
                                                    'reason', v_reason));
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', result, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
COMMENT ON FUNCTION handle_pay(uuid, uuid, text, bigint, bigint, text, int)
    IS 'Handles a PayCommand once: inbox row, charge (or decline), and the answering event.';

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
