-- participants.sql: payment and inventory as saga-participant runs them, for
-- `scripts/bench --compare participants` (the generic participant against
-- the dedicated saga-payment and saga-inventory). Run by a superuser in a
-- database made by sql/bootstrap.sql where the dedicated services never
-- ran; saga-participant then adds its own tables (inbox, outbox,
-- participant_steps) at start, run as
--
--   PARTICIPANT_NAME=payment
--   PARTICIPANT_COMMANDS='PayCommand[customerId]=pay(PaymentSucceeded|PaymentFailed)/RefundPaymentCommand=refund(PaymentRefunded)'
--   PARTICIPANT_NAME=inventory
--   PARTICIPANT_COMMANDS='ReserveInventoryCommand[itemId]=reserve(InventoryReserved|InventoryReservationFailed)/ReleaseInventoryCommand=release(InventoryReleased)'
--
-- The effects are the dedicated services' (005_payment_functions.sql,
-- 005_inventory_functions.sql) statement for statement: a charge is one
-- UPDATE of the account (a first payment opens it with the default credit,
-- 1 000 000) and one row, a reservation one UPDATE of the stock and one row.
-- What differs is what saga-participant does around them (the inbox, the
-- lock, voiding and the record of each command in participant_steps), and
-- two things left out here: the failures' rows (participant_steps has
-- them) and the audit's triggers on accounts and stock, whose WHEN clause
-- skips the services' own writes.

\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;

BEGIN;

SET LOCAL ROLE saga_payment;
SET LOCAL search_path = payment;

CREATE TABLE accounts (
    customer_id      text PRIMARY KEY,
    balance          bigint NOT NULL CHECK (balance >= 0),
    starting_balance bigint NOT NULL CHECK (starting_balance >= 0)
);

CREATE TABLE payments (
    saga_id     uuid PRIMARY KEY,
    customer_id text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION pay(body jsonb, OUT reason text, OUT output jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_customer text := participant_id(body, 'customerId');
    v_amount bigint := participant_int(body, 'amount', 1, 1000000000000);
    v_credit constant bigint := 1000000;
    v_charged boolean;
BEGIN
    UPDATE accounts SET balance = balance - v_amount
     WHERE customer_id = v_customer AND balance >= v_amount;
    v_charged := FOUND;
    IF NOT v_charged THEN
        INSERT INTO accounts (customer_id, balance, starting_balance)
        VALUES (v_customer,
                CASE WHEN v_credit >= v_amount THEN v_credit - v_amount ELSE v_credit END,
                v_credit)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            v_charged := v_credit >= v_amount;
        ELSE
            UPDATE accounts SET balance = balance - v_amount
             WHERE customer_id = v_customer AND balance >= v_amount;
            v_charged := FOUND;
        END IF;
    END IF;
    IF NOT v_charged THEN
        reason := 'insufficient_funds';
        RETURN;
    END IF;
    INSERT INTO payments (saga_id, customer_id, amount)
    VALUES ((body ->> 'sagaId')::uuid, v_customer, v_amount);
END
$$;

CREATE FUNCTION refund(body jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE accounts a SET balance = a.balance + p.amount
      FROM payments p
     WHERE p.saga_id = (body ->> 'sagaId')::uuid AND a.customer_id = p.customer_id;
END
$$;

SET LOCAL ROLE saga_inventory;
SET LOCAL search_path = inventory;

CREATE TABLE stock (
    item_id    text PRIMARY KEY,
    available  int NOT NULL CHECK (available >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE reservations (
    saga_id    uuid PRIMARY KEY,
    item_id    text NOT NULL,
    qty        int NOT NULL CHECK (qty > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION reserve(body jsonb, OUT reason text, OUT output jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_item text := participant_id(body, 'itemId');
    v_qty int := participant_int(body, 'qty', 1, 1000);
BEGIN
    UPDATE stock SET available = available - v_qty, updated_at = now()
     WHERE item_id = v_item AND available >= v_qty;
    IF NOT FOUND THEN
        reason := CASE WHEN EXISTS (SELECT 1 FROM stock WHERE item_id = v_item)
                       THEN 'out_of_stock' ELSE 'unknown_item' END;
        RETURN;
    END IF;
    INSERT INTO reservations (saga_id, item_id, qty)
    VALUES ((body ->> 'sagaId')::uuid, v_item, v_qty);
END
$$;

CREATE FUNCTION release(body jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE stock s SET available = s.available + r.qty, updated_at = now()
      FROM reservations r
     WHERE r.saga_id = (body ->> 'sagaId')::uuid AND s.item_id = r.item_id;
END
$$;

COMMIT;
