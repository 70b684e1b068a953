-- Accounts opened and topped up by hand: see sql/common/003_starting_values.sql.

-- starting_balance stays NOT NULL: the constraint is checked after BEFORE
-- triggers, so accounts_start fills it first.

CREATE TRIGGER accounts_start
	BEFORE INSERT ON accounts
	FOR EACH ROW
	WHEN (NEW.starting_balance IS NULL)
	EXECUTE FUNCTION track_starting_value('balance', 'starting_balance');
COMMENT ON TRIGGER accounts_start ON accounts IS
	'An account opened by hand starts at the balance it was given';

CREATE TRIGGER accounts_top_up
	BEFORE UPDATE OF balance ON accounts
	FOR EACH ROW
	WHEN (NEW.balance IS DISTINCT FROM OLD.balance
	      AND current_setting('pgsaga.writer', true) IS DISTINCT FROM 'service')
	EXECUTE FUNCTION track_starting_value('balance', 'starting_balance');
COMMENT ON TRIGGER accounts_top_up ON accounts IS
	'A balance changed by hand (top-up, correction) moves starting_balance with it; charges and refunds do not';

COMMENT ON TABLE accounts IS 'Customer balances. Open one with INSERT INTO payment.accounts (customer_id, balance); top up with an UPDATE of balance. An account that pays without one is opened with PAYMENT_DEFAULT_CREDIT.';
COMMENT ON COLUMN accounts.starting_balance IS 'Balance when opened, plus top-ups made by hand: balance + captured amounts always equals it. Filled by triggers.';
