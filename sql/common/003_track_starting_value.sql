-- Starting values that keep the audit true when operators write by hand:
-- payment.accounts and inventory.stock, so payment and inventory apply this
-- file (before their tables, whose triggers call the function).
--
-- Operators open accounts and add items with the documented columns alone
-- (INSERT INTO payment.accounts (customer_id, balance), INSERT INTO
-- inventory.stock (item_id, available)) and top up or restock with an
-- UPDATE of balance / available. The audit checks every row against a
-- starting value (balance + captured = starting_balance, available +
-- reserved = starting_stock), so that value has to follow such writes:
--
--  * an INSERT that leaves the starting value out starts it at the value;
--  * an UPDATE of the value by anyone but a service moves the starting
--    value by the same amount (a top-up, a restock, a manual correction),
--    unless the statement sets the starting value itself.
--
-- A service's own writes (a charge, a refund, a reservation, a release) are
-- effects, not bookkeeping: every service connection sets
-- pgsaga.writer = service (src/lib/pg/db.c), and the triggers' WHEN clauses
-- test it without calling a function, so the hot path pays one
-- current_setting() per row and no PL/pgSQL.
--
-- One function serves both tables; its arguments name the value column and
-- the starting-value column.

CREATE FUNCTION track_starting_value() RETURNS trigger
	LANGUAGE plpgsql SECURITY INVOKER
	AS $$
DECLARE
	v_col text := TG_ARGV[0];
	s_col text := TG_ARGV[1];
	v_new jsonb := to_jsonb(NEW);
	v_old jsonb;
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF v_new->>s_col IS NULL THEN
			NEW := jsonb_populate_record(NEW, jsonb_build_object(s_col, v_new->v_col));
		END IF;
		RETURN NEW;
	END IF;
	v_old := to_jsonb(OLD);
	IF v_new->s_col IS NOT DISTINCT FROM v_old->s_col THEN
		NEW := jsonb_populate_record(NEW, jsonb_build_object(s_col,
			(v_old->>s_col)::numeric + (v_new->>v_col)::numeric
			- (v_old->>v_col)::numeric));
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION track_starting_value() IS
	'Trigger (value column, starting column): fills the starting value on INSERT and moves it with hand-made UPDATEs of the value';
