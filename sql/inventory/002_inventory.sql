-- Inventory's own tables and its two command handlers. Each handler is one
-- transaction: the command's id into the inbox, the effect, and the event
-- that answers it into the outbox. Unqualified names: migrate.c runs this
-- with search_path set to the inventory schema.

CREATE TABLE stock (
    item_id        text PRIMARY KEY,
    available      int NOT NULL CHECK (available >= 0),
    starting_stock int CHECK (starting_stock >= 0), -- set by stock_track_start
    updated_at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE stock IS 'Items and how many can still be reserved. Seed with INSERT INTO inventory.stock (item_id, available).';
COMMENT ON COLUMN stock.item_id IS 'The item.';
COMMENT ON COLUMN stock.available IS 'Units not reserved; never negative.';
COMMENT ON COLUMN stock.starting_stock IS 'Units when the row was inserted (plus restocks): available + reserved units always equals it.';
COMMENT ON COLUMN stock.updated_at IS 'When available last changed.';

-- Operators insert (item_id, available): the starting stock follows, and a
-- restock (available raised by hand) raises it too, so the audit holds.
CREATE FUNCTION stock_track_start() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.starting_stock := coalesce(NEW.starting_stock, NEW.available);
    ELSIF current_setting('pgsaga.reserving', true) IS DISTINCT FROM 'on' THEN
        NEW.starting_stock := OLD.starting_stock + (NEW.available - OLD.available);
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION stock_track_start() IS 'Keeps stock.starting_stock in step with inserts and restocks made by hand.';
CREATE TRIGGER stock_track_start BEFORE INSERT OR UPDATE ON stock
    FOR EACH ROW EXECUTE FUNCTION stock_track_start();

CREATE TABLE reservations (
    saga_id    uuid PRIMARY KEY,
    item_id    text,
    qty        int CHECK (qty > 0),
    status     text NOT NULL CHECK (status IN ('reserved', 'rejected', 'released', 'voided')),
    reason     text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (status = 'voided' OR (item_id IS NOT NULL AND qty IS NOT NULL))
);
COMMENT ON TABLE reservations IS 'At most one reservation per saga.';
COMMENT ON COLUMN reservations.saga_id IS 'The saga reserving.';
COMMENT ON COLUMN reservations.item_id IS 'Item reserved; null for a voided row (a release that came before its reservation).';
COMMENT ON COLUMN reservations.qty IS 'Units; null for a voided row.';
COMMENT ON COLUMN reservations.status IS 'reserved, rejected, released, or voided (release arrived first; a late reservation is rejected).';
COMMENT ON COLUMN reservations.reason IS 'Why it was rejected: out_of_stock or unknown_item.';
COMMENT ON COLUMN reservations.created_at IS 'When the row was written.';
COMMENT ON COLUMN reservations.updated_at IS 'When its status last changed.';

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

CREATE FUNCTION handle_reserve(p_command_id uuid, p_saga_id uuid, p_item_id text, p_qty int,
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
        -- a reservation is not a restock: keep starting_stock (the setting
        -- lasts until the end of this transaction)
        PERFORM set_config('pgsaga.reserving', 'on', true);
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
        SELECT e.event_id, e.payload INTO event_id, payload
          FROM emit_event('InventoryReserved', p_saga_id, NULL, p_trace, p_lease_ms) e;
        result := 'InventoryReserved';
        RETURN;
    END IF;
    SELECT e.event_id, e.payload INTO event_id, payload
      FROM emit_event('InventoryReservationFailed', p_saga_id, v_reason, p_trace, p_lease_ms) e;
    result := 'InventoryReservationFailed';
END
$$;
COMMENT ON FUNCTION handle_reserve(uuid, uuid, text, int, text, int)
    IS 'Handles a ReserveInventoryCommand once: inbox row, reservation (or rejection), and the answering event.';

CREATE FUNCTION handle_release(p_command_id uuid, p_saga_id uuid, p_trace text,
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
        PERFORM set_config('pgsaga.reserving', 'on', true);
        UPDATE stock SET available = available + v_res.qty, updated_at = now()
         WHERE item_id = v_res.item_id;
        UPDATE reservations SET status = 'released', updated_at = now()
         WHERE saga_id = p_saga_id;
    END IF;
    SELECT e.event_id, e.payload INTO event_id, payload
      FROM emit_event('InventoryReleased', p_saga_id, NULL, p_trace, p_lease_ms) e;
    result := 'InventoryReleased';
END
$$;
COMMENT ON FUNCTION handle_release(uuid, uuid, text, int)
    IS 'Handles a ReleaseInventoryCommand once: releases a reservation at most once, or voids the saga''s reservation.';
