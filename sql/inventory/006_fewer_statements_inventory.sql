-- The inventory handlers with fewer statements (issue #11). Same names,
-- arguments, results and semantics as in 002_inventory.sql (with 003's
-- starting-value triggers and 005's emit_event):
--
--  * The answering event is written by the handler's own INSERT instead of
--    a nested call of emit_event (another PL/pgSQL function with its own
--    SET search_path, called through a SELECT): same id (uuid_v7()), same
--    payload, same row, claimed for p_lease_ms. emit_event stays for
--    anyone else calling it.
--  * pgsaga.reserving is no longer set: it told stock_track_start (002) a
--    reservation from a restock, and 003 replaced that trigger by ones that
--    test pgsaga.writer; nothing reads the setting any more.
--
-- The advisory lock stays its own statement before the read of
-- reservations: each statement of a READ COMMITTED transaction reads with
-- a snapshot taken when it starts, so the read must start after the lock
-- is held to see what the saga's other command committed while we waited.

CREATE OR REPLACE FUNCTION handle_reserve(p_command_id uuid, p_saga_id uuid, p_item_id text, p_qty int,
                               p_trace text,
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
    PERFORM pg_advisory_xact_lock(hashtextextended('inventory:' || p_saga_id::text, 0));

    SELECT status, reason INTO v_status, v_reason FROM reservations WHERE saga_id = p_saga_id;
    IF NOT FOUND THEN
        UPDATE stock SET available = available - p_qty, updated_at = now()
         WHERE item_id = p_item_id AND available >= p_qty;
        IF FOUND THEN
            v_status := 'reserved';
        ELSE
            v_status := 'rejected';
            v_reason := CASE WHEN EXISTS (SELECT 1 FROM stock WHERE item_id = p_item_id)
                             THEN 'out_of_stock' ELSE 'unknown_item' END;
        END IF;
        INSERT INTO reservations (saga_id, item_id, qty, status, reason)
        VALUES (p_saga_id, p_item_id, p_qty, v_status, v_reason);
    ELSIF v_status IN ('voided', 'released') THEN
        v_reason := v_status;
    END IF;

    IF v_status = 'reserved' THEN
        result := 'InventoryReserved';
        v_reason := NULL;
    ELSE
        result := 'InventoryReservationFailed';
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
COMMENT ON FUNCTION handle_reserve(uuid, uuid, text, int, text, int)
    IS 'Handles a ReserveInventoryCommand once: inbox row, reservation (or rejection), and the answering event.';

CREATE OR REPLACE FUNCTION handle_release(p_command_id uuid, p_saga_id uuid, p_trace text,
                                          p_lease_ms int, OUT result text, OUT event_id uuid,
                                          OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_res reservations%ROWTYPE;
BEGIN
    INSERT INTO processed_messages (message_id) VALUES (p_command_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        result := 'duplicate';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('inventory:' || p_saga_id::text, 0));

    SELECT * INTO v_res FROM reservations WHERE saga_id = p_saga_id;
    IF NOT FOUND THEN
        INSERT INTO reservations (saga_id, status) VALUES (p_saga_id, 'voided');
    ELSIF v_res.status = 'reserved' THEN
        UPDATE stock SET available = available + v_res.qty, updated_at = now()
         WHERE item_id = v_res.item_id;
        UPDATE reservations SET status = 'released', updated_at = now()
         WHERE saga_id = p_saga_id;
    END IF;
    result := 'InventoryReleased';
    event_id := uuid_v7();
    payload := jsonb_strip_nulls(jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id));
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', result, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
COMMENT ON FUNCTION handle_release(uuid, uuid, text, int)
    IS 'Handles a ReleaseInventoryCommand once: releases a reservation at most once, or voids the saga''s reservation.';
