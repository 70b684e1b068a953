-- Items added and restocked by hand: the same rule as payment.accounts, from
-- the one function in sql/common/003_starting_values.sql. It replaces
-- stock_track_start, which told reservations from restocks by a setting
-- each handler had to remember to set.

DROP TRIGGER stock_track_start ON stock;
DROP FUNCTION stock_track_start();

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

COMMENT ON COLUMN stock.starting_stock IS 'Units when the row was inserted, plus restocks made by hand: available + reserved units always equals it. Filled by triggers.';
