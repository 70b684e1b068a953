-- Payment's own tables and its two command handlers. Each handler is one
-- transaction: the command's id into the inbox, the effect, and the event
-- that answers it into the outbox. Unqualified names: migrate.c runs this
-- with search_path set to the payment schema.

CREATE TABLE accounts (
    customer_id      text PRIMARY KEY,
    balance          bigint NOT NULL CHECK (balance >= 0),
    starting_balance bigint NOT NULL CHECK (starting_balance >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE accounts IS 'Customer balances; an account is opened with PAYMENT_DEFAULT_CREDIT the first time it pays.';
COMMENT ON COLUMN accounts.customer_id IS 'The customer.';
COMMENT ON COLUMN accounts.balance IS 'Current balance in minor units; never negative.';
COMMENT ON COLUMN accounts.starting_balance IS 'Balance when opened: balance + captured amounts always equals it.';
COMMENT ON COLUMN accounts.created_at IS 'When the account was opened.';

CREATE TABLE payments (
    saga_id     uuid PRIMARY KEY,
    customer_id text,
    amount      bigint CHECK (amount > 0),
    status      text NOT NULL CHECK (status IN ('captured', 'declined', 'refunded', 'voided')),
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (status = 'voided' OR (customer_id IS NOT NULL AND amount IS NOT NULL))
);
COMMENT ON TABLE payments IS 'At most one payment per saga.';
COMMENT ON COLUMN payments.saga_id IS 'The saga paying.';
COMMENT ON COLUMN payments.customer_id IS 'Who paid; null for a voided row (a refund that came before its payment).';
COMMENT ON COLUMN payments.amount IS 'Amount in minor units; null for a voided row.';
COMMENT ON COLUMN payments.status IS 'captured, declined, refunded, or voided (refund arrived first; a late payment is declined).';
COMMENT ON COLUMN payments.reason IS 'Why it was declined.';
COMMENT ON COLUMN payments.created_at IS 'When the row was written.';
COMMENT ON COLUMN payments.updated_at IS 'When its status last changed.';

-- The answer to a command, in the outbox for the orchestrator, claimed at
-- birth for p_lease_ms by the caller, which sends it at once.
CREATE FUNCTION emit_event(p_type text, p_saga_id uuid, p_reason text, p_trace text,
                           p_lease_ms int, OUT event_id uuid, OUT payload jsonb)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    SELECT id, 'event', 'orchestrator', p_type,
           jsonb_strip_nulls(jsonb_build_object('eventId', id, 'sagaId', p_saga_id,
                                                'reason', p_reason)),
           p_trace, now() + p_lease_ms * interval '1 millisecond'
      FROM gen_random_uuid() AS id
    RETURNING message_id, payload
$$;
COMMENT ON FUNCTION emit_event(text, uuid, text, text, int) IS 'Writes an event for the orchestrator into the outbox; returns its id and payload.';

-- PayCommand. result is 'duplicate' when the command was handled before,
-- else the type of the event it answered with (event_id, payload).
CREATE FUNCTION handle_pay(p_command_id uuid, p_saga_id uuid, p_customer_id text,
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
    -- One saga's pay and refund never interleave, whatever their ids.
    PERFORM pg_advisory_xact_lock(hashtextextended('payment:' || p_saga_id::text, 0));

    SELECT status, reason INTO v_status, v_reason FROM payments WHERE saga_id = p_saga_id;
    IF NOT FOUND THEN
        INSERT INTO accounts (customer_id, balance, starting_balance)
        VALUES (p_customer_id, p_default_credit, p_default_credit)
        ON CONFLICT DO NOTHING;
        UPDATE accounts SET balance = balance - p_amount
         WHERE customer_id = p_customer_id AND balance >= p_amount;
        IF FOUND THEN
            v_status := 'captured';
        ELSE
            v_status := 'declined';
            v_reason := 'insufficient_funds';
        END IF;
        INSERT INTO payments (saga_id, customer_id, amount, status, reason)
        VALUES (p_saga_id, p_customer_id, p_amount, v_status, v_reason);
    ELSIF v_status IN ('voided', 'refunded') THEN
        -- compensated before this command came: it must not charge
        v_reason := v_status;
    END IF;

    IF v_status = 'captured' THEN
        SELECT e.event_id, e.payload INTO event_id, payload
          FROM emit_event('PaymentSucceeded', p_saga_id, NULL, p_trace, p_lease_ms) e;
        result := 'PaymentSucceeded';
        RETURN;
    END IF;
    SELECT e.event_id, e.payload INTO event_id, payload
      FROM emit_event('PaymentFailed', p_saga_id, v_reason, p_trace, p_lease_ms) e;
    result := 'PaymentFailed';
END
$$;
COMMENT ON FUNCTION handle_pay(uuid, uuid, text, bigint, bigint, text, int)
    IS 'Handles a PayCommand once: inbox row, charge (or decline), and the answering event.';

-- RefundPaymentCommand: undo a capture; before any payment, leave a voided
-- row so that a late PayCommand is declined.
CREATE FUNCTION handle_refund(p_command_id uuid, p_saga_id uuid, p_trace text,
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
    SELECT e.event_id, e.payload INTO event_id, payload
      FROM emit_event('PaymentRefunded', p_saga_id, NULL, p_trace, p_lease_ms) e;
    result := 'PaymentRefunded';
END
$$;
COMMENT ON FUNCTION handle_refund(uuid, uuid, text, int)
    IS 'Handles a RefundPaymentCommand once: refunds a capture at most once, or voids the saga''s payment.';
