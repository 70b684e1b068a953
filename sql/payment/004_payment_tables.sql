-- Payment's own tables. Unqualified names: migrate.c runs this with
-- search_path set to the payment schema. The command handlers are in
-- 005_payment_functions.sql.

CREATE TABLE accounts (
    customer_id      text PRIMARY KEY,
    balance          bigint NOT NULL CHECK (balance >= 0),
    starting_balance bigint NOT NULL CHECK (starting_balance >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE accounts IS 'Customer balances. Open one with INSERT INTO payment.accounts (customer_id, balance); top up with an UPDATE of balance. An account that pays without one is opened with PAYMENT_DEFAULT_CREDIT.';
COMMENT ON COLUMN accounts.starting_balance IS 'Balance when opened, plus top-ups made by hand: balance + captured amounts always equals it. Filled by triggers.';
COMMENT ON COLUMN accounts.customer_id IS 'The customer.';
COMMENT ON COLUMN accounts.balance IS 'Current balance in minor units; never negative.';
COMMENT ON COLUMN accounts.created_at IS 'When the account was opened.';

-- Accounts opened and topped up by hand (INSERT INTO payment.accounts
-- (customer_id, balance), UPDATE ... SET balance = ...): see
-- 003_track_starting_value.sql. starting_balance stays NOT NULL: the
-- constraint is checked after BEFORE triggers, so accounts_start fills it
-- first.
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
