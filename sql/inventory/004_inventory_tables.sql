-- Inventory's own tables. Unqualified names: migrate.c runs this with
-- search_path set to the inventory schema. The command handlers are in
-- 005_inventory_functions.sql.

CREATE TABLE stock (
    item_id        text PRIMARY KEY,
    available      int NOT NULL CHECK (available >= 0),
    starting_stock int CHECK (starting_stock >= 0), -- filled by stock_start
    updated_at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE stock IS 'Items and how many can still be reserved. Seed with INSERT INTO inventory.stock (item_id, available).';
COMMENT ON COLUMN stock.item_id IS 'The item.';
COMMENT ON COLUMN stock.available IS 'Units not reserved; never negative.';
COMMENT ON COLUMN stock.starting_stock IS 'Units when the row was inserted, plus restocks made by hand: available + reserved units always equals it. Filled by triggers.';
COMMENT ON COLUMN stock.updated_at IS 'When available last changed.';

-- Items added and restocked by hand (INSERT INTO inventory.stock (item_id,
-- available), UPDATE ... SET available = ...): the same rule as
-- payment.accounts, from the one function in 003_track_starting_value.sql.
-- A service's reservations and releases set pgsaga.writer = service and
-- leave starting_stock alone.
CREATE TRIGGER stock_start
	BEFORE INSERT ON stock
	FOR EACH ROW
	WHEN (NEW.starting_stock IS NULL)
	EXECUTE FUNCTION track_starting_value('available', 'starting_stock');
COMMENT ON TRIGGER stock_start ON stock IS
	'An item added by hand starts at the stock it was given';

CREATE TRIGGER stock_restock
	BEFORE UPDATE OF available ON stock
	FOR EACH ROW
	WHEN (NEW.available IS DISTINCT FROM OLD.available
	      AND current_setting('pgsaga.writer', true) IS DISTINCT FROM 'service')
	EXECUTE FUNCTION track_starting_value('available', 'starting_stock');
COMMENT ON TRIGGER stock_restock ON stock IS
	'Stock changed by hand (restock, correction) moves starting_stock with it; reservations and releases do not';



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
