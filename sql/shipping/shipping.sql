-- shipping: an example participant without C, run by saga-participant
-- (docs/participants.md, "A participant without C"). Everything here is the
-- operator's: the role and schema, the participant's own table and the two
-- functions its commands call. saga-participant adds its generic tables
-- (inbox, outbox, participant_steps) to the schema at start, and runs
--
--   PARTICIPANT_NAME=shipping
--   PARTICIPANT_COMMANDS='ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)/CancelShipmentCommand=cancel_shipment(ShipmentCancelled)'
--
-- Run once by a superuser in pgsaga's database, after sql/bootstrap.sql:
--
--   psql -v ON_ERROR_STOP=1 [-v shipping_password=...] -f sql/shipping/shipping.sql DBNAME
--
-- Running it again is harmless: it creates what is missing and replaces the
-- functions.

\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;

BEGIN;

-- The role, as bootstrap.sql makes the services' roles.
SELECT 'CREATE ROLE saga_shipping LOGIN'
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'saga_shipping')
\gexec
ALTER ROLE saga_shipping LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
COMMENT ON ROLE saga_shipping IS 'pgsaga: saga-participant shipping; owns schema shipping';
\if :{?shipping_password}
ALTER ROLE saga_shipping PASSWORD :'shipping_password';
\endif
ALTER ROLE saga_shipping SET search_path = shipping;
SELECT format('GRANT CONNECT ON DATABASE %I TO saga_shipping', current_database())
\gexec

-- The schema, owned by the role: saga-participant migrates it as its owner.
CREATE SCHEMA IF NOT EXISTS shipping AUTHORIZATION saga_shipping;
ALTER SCHEMA shipping OWNER TO saga_shipping;
COMMENT ON SCHEMA shipping IS 'pgsaga: shipments, outbox and inbox of the shipping participant';
REVOKE ALL ON SCHEMA shipping FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_shipping REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- The auditor reads it as it reads the others (when bootstrap.sql made it).
SELECT 'GRANT USAGE ON SCHEMA shipping TO saga_auditor'
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'saga_auditor')
\gexec
SELECT 'ALTER DEFAULT PRIVILEGES FOR ROLE saga_shipping IN SCHEMA shipping GRANT SELECT ON TABLES TO saga_auditor'
 WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'saga_auditor')
\gexec

-- What follows belongs to the participant's role.
SET LOCAL ROLE saga_shipping;
SET LOCAL search_path = shipping;

CREATE TABLE IF NOT EXISTS shipments (
    saga_id     uuid PRIMARY KEY,
    item_id     text NOT NULL,
    qty         int NOT NULL CHECK (qty > 0),
    address     text NOT NULL,
    status      text NOT NULL CHECK (status IN ('shipped', 'refused', 'cancelled')),
    reason      text,
    tracking_id text UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE shipments IS 'At most one shipment per saga: shipped, refused (with a reason) or cancelled.';

-- ShipOrderCommand {itemId, qty, address}: ships, answering OrderShipped
-- with {"trackingId": "..."}, or refuses, answering ShippingFailed with the
-- reason. saga-participant calls it at most once per saga, never after the
-- saga's CancelShipmentCommand (then it declines the command itself); a bad
-- field raises SQLSTATE SG400 (participant_id and co.), a 400 for the
-- sender.
CREATE OR REPLACE FUNCTION ship_order(body jsonb, OUT reason text, OUT output jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_saga uuid := (body ->> 'sagaId')::uuid;
    v_item text := participant_id(body, 'itemId');
    v_qty int := participant_int(body, 'qty', 1, 1000);
    v_address text := participant_text(body, 'address');
    v_tracking text;
BEGIN
    IF btrim(v_address) = '' OR v_address ILIKE '%nowhere%' THEN
        reason := 'undeliverable_address';
        INSERT INTO shipments (saga_id, item_id, qty, address, status, reason)
        VALUES (v_saga, v_item, v_qty, v_address, 'refused', reason);
        RETURN;
    END IF;
    v_tracking := 'TRK-' || upper(substr(md5(v_saga::text), 1, 12));
    INSERT INTO shipments (saga_id, item_id, qty, address, status, tracking_id)
    VALUES (v_saga, v_item, v_qty, v_address, 'shipped', v_tracking);
    output := jsonb_build_object('trackingId', v_tracking);
END
$$;

-- CancelShipmentCommand: called only for a shipment that was shipped, once;
-- anything else is a bug worth stopping for.
CREATE OR REPLACE FUNCTION cancel_shipment(body jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE shipments SET status = 'cancelled', updated_at = now()
     WHERE saga_id = (body ->> 'sagaId')::uuid AND status = 'shipped';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no shipped shipment for saga %', body ->> 'sagaId';
    END IF;
END
$$;

COMMIT;
