-- The messaging tables every schema has (orchestrator, payment, inventory):
-- the transactional outbox, the inbox, the triggers that wake the
-- dispatchers, and the operator views. Their functions follow in
-- 002_outbox_functions.sql.
--
-- Applied in each schema by the schema's own role, with search_path set to
-- that schema (src/lib/pg/migrate.c). Names are therefore unqualified and
-- nothing here may depend on which schema it lands in. Functions that read
-- tables carry "SET search_path FROM CURRENT", which pins the schema they
-- were created in, so an operator can call payment.retry_dead_letters()
-- whatever their own search_path is.

-- The outbox. A row is written in the same transaction as the state change
-- that causes it; the dispatcher delivers it and marks it.
--
--   pending:   processed_at IS NULL AND dead_at IS NULL
--   delivered: processed_at set
--   dead:      dead_at set (attempts exhausted or refused by the receiver)
CREATE TABLE outbox_messages (
	message_id uuid PRIMARY KEY,
	kind text NOT NULL CHECK (kind IN ('command', 'event')),
	destination text NOT NULL,
	type text NOT NULL,
	payload jsonb NOT NULL,
	trace_id text,
	attempt_count int NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL DEFAULT now(),
	processed_at timestamptz,
	dead_at timestamptz,
	last_error text,
	created_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE outbox_messages IS
	'Transactional outbox: messages to deliver, written in the transaction of the change that causes them';
COMMENT ON COLUMN outbox_messages.message_id IS
	'Message id (the commandId or eventId in the payload); receivers deduplicate on it';
COMMENT ON COLUMN outbox_messages.kind IS
	'command (sent to POST /commands/{type}) or event (sent to POST /events/{type})';
COMMENT ON COLUMN outbox_messages.destination IS
	'Receiving service, e.g. payment, inventory, orchestrator';
COMMENT ON COLUMN outbox_messages.type IS
	'Message name, e.g. PayCommand, PaymentSucceeded';
COMMENT ON COLUMN outbox_messages.payload IS
	'JSON body sent as is';
COMMENT ON COLUMN outbox_messages.trace_id IS
	'Trace id carried along with the message for logs, if any';
COMMENT ON COLUMN outbox_messages.attempt_count IS
	'Delivery attempts made so far; reset to 0 by retry_dead_letter(s)';
COMMENT ON COLUMN outbox_messages.next_attempt_at IS
	'Not to be claimed before this time: backoff after a failure, or the lease of a dispatcher that claimed it';
COMMENT ON COLUMN outbox_messages.processed_at IS
	'When the receiver accepted it (2xx); null while pending';
COMMENT ON COLUMN outbox_messages.dead_at IS
	'When it became a dead letter (refused, or attempts exhausted); null otherwise';
COMMENT ON COLUMN outbox_messages.last_error IS
	'Why the last attempt failed; kept across retry_dead_letter(s) until the next attempt replaces it';
COMMENT ON COLUMN outbox_messages.created_at IS
	'When the row was written';

-- The dispatcher's claim: "pending and due, oldest first". A partial index
-- stays as small as the backlog however many delivered rows are kept.
CREATE INDEX outbox_messages_pending_idx ON outbox_messages (next_attempt_at)
	WHERE processed_at IS NULL AND dead_at IS NULL;
COMMENT ON INDEX outbox_messages_pending_idx IS
	'Dispatcher claim: pending rows by next_attempt_at';

-- purge_processed finds old delivered rows without scanning the table.
-- Entries arrive in processed_at order, so they append at the right edge.
CREATE INDEX outbox_messages_processed_idx ON outbox_messages (processed_at)
	WHERE processed_at IS NOT NULL;
COMMENT ON INDEX outbox_messages_processed_idx IS
	'Retention: delivered rows by processed_at (purge_processed)';

-- dead_letters and retry_dead_letters read only the few dead rows.
CREATE INDEX outbox_messages_dead_idx ON outbox_messages (dead_at)
	WHERE dead_at IS NOT NULL;
COMMENT ON INDEX outbox_messages_dead_idx IS
	'Dead letters by dead_at (dead_letters, retry_dead_letters)';

-- A saga's outbox rows (the admin API's saga detail) through an index of
-- the delivered rows only. Marking a row delivered writes a new row version
-- with an entry in every index of the table (processed_at is indexed, so
-- the update cannot be HOT); an index of every row by sagaId would take two
-- entries per message, at the insert and at the mark. Indexed only once
-- delivered, it takes one. The rows not delivered (pending or dead) are the
-- backlog, which the dispatcher's and the dead letters' partial indexes
-- already hold and which stays small; admin_messages reads them there.
-- Every payload carries its sagaId; lower() because the text is whatever
-- case the message that caused the row used.
CREATE INDEX outbox_messages_saga_idx ON outbox_messages (lower(payload->>'sagaId'))
	WHERE processed_at IS NOT NULL;
COMMENT ON INDEX outbox_messages_saga_idx IS
	'Admin API: a saga''s delivered outbox rows (GET /admin/api/sagas/{id}); the others are read from the pending and dead indexes';

-- Waking the dispatchers.
--
-- Channel: "<schema>_outbox" (payment_outbox, ...), empty payload, so all
-- notifications of one transaction fold into one. Dispatchers also sweep on
-- a timer and after reconnecting, so a missed notification only costs time.
--
-- A notifying commit takes a database-wide lock, so a service that writes
-- its own outbox rows wakes its own dispatcher in-process and sets
-- pgsaga.local_wake = on in its sessions; the triggers then stay quiet. A
-- row written by any other session (another tool, an operator's psql)
-- notifies.
--
-- Which writes notify:
--  * INSERT (statement level, so a bulk insert costs one call).
--  * UPDATE that makes a row pending and due which was not before: a dead
--    or delivered row brought back, or a waiting row moved forward (an
--    operator's "SET next_attempt_at = now()"). The dispatcher's own updates
--    (claim, backoff, mark delivered or dead) do not match the WHEN clause.
--  * retry_dead_letter(s) notify themselves, whatever pgsaga.local_wake says:
--    operators call them and expect every dispatcher to wake.
-- The local_wake test sits in the triggers' WHEN clauses, evaluated without
-- calling a function: the services' own writes, the hot path, pay for one
-- current_setting() per statement and nothing else. The trigger function
-- uses the table's schema, not current_schema(), so a write through a
-- qualified name from any search_path wakes the right channel.

CREATE FUNCTION outbox_notify() RETURNS trigger
	LANGUAGE plpgsql SECURITY INVOKER
	AS $$
BEGIN
	-- same channel and payload: PostgreSQL sends one per transaction
	PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox_notify() IS
	'Trigger: NOTIFY <schema>_outbox (the triggers'' WHEN clauses decide when)';

CREATE TRIGGER outbox_notify_insert
	AFTER INSERT ON outbox_messages
	FOR EACH STATEMENT
	WHEN (coalesce(lower(current_setting('pgsaga.local_wake', true)), '')
	      NOT IN ('on', 'true', 'yes', '1'))
	EXECUTE FUNCTION outbox_notify();
COMMENT ON TRIGGER outbox_notify_insert ON outbox_messages IS
	'Wakes dispatchers (NOTIFY <schema>_outbox) after an INSERT, unless pgsaga.local_wake is on';

CREATE TRIGGER outbox_notify_due
	AFTER UPDATE ON outbox_messages
	FOR EACH ROW
	WHEN (NEW.processed_at IS NULL AND NEW.dead_at IS NULL AND NEW.next_attempt_at <= now()
	      AND (OLD.processed_at IS NOT NULL OR OLD.dead_at IS NOT NULL
		   OR OLD.next_attempt_at > now())
	      AND coalesce(lower(current_setting('pgsaga.local_wake', true)), '')
		  NOT IN ('on', 'true', 'yes', '1'))
	EXECUTE FUNCTION outbox_notify();
COMMENT ON TRIGGER outbox_notify_due ON outbox_messages IS
	'Wakes dispatchers (NOTIFY <schema>_outbox) when an UPDATE makes a row pending and due, unless pgsaga.local_wake is on';

-- The inbox: a receiver inserts the message id in the transaction of the
-- message's effect; a copy finds the id and has no effect.
CREATE TABLE processed_messages (
	message_id uuid PRIMARY KEY,
	processed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE processed_messages IS
	'Inbox: ids of messages whose effect has been committed, so a copy delivered again has none';
COMMENT ON COLUMN processed_messages.message_id IS
	'Id of the received message (commandId or eventId)';
COMMENT ON COLUMN processed_messages.processed_at IS
	'When its effect was committed; rows older than the retention period are purged';

CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);
COMMENT ON INDEX processed_messages_processed_at_idx IS
	'Retention: inbox rows by processed_at (purge_processed)';

-- Operator views.

CREATE VIEW outbox_backlog AS
	SELECT message_id, destination, type, attempt_count, next_attempt_at, last_error,
	       created_at, now() - created_at AS age, kind, trace_id
	FROM outbox_messages
	WHERE processed_at IS NULL AND dead_at IS NULL
	ORDER BY next_attempt_at, created_at;
COMMENT ON VIEW outbox_backlog IS
	'Messages not yet delivered and not dead, in the order the dispatcher takes them';
COMMENT ON COLUMN outbox_backlog.message_id IS 'Message id';
COMMENT ON COLUMN outbox_backlog.destination IS 'Receiving service';
COMMENT ON COLUMN outbox_backlog.type IS 'Message name';
COMMENT ON COLUMN outbox_backlog.attempt_count IS 'Delivery attempts made so far';
COMMENT ON COLUMN outbox_backlog.next_attempt_at IS
	'Next attempt not before this time (backoff, or a dispatcher''s lease)';
COMMENT ON COLUMN outbox_backlog.last_error IS 'Why the last attempt failed, if one did';
COMMENT ON COLUMN outbox_backlog.created_at IS 'When the message was written';
COMMENT ON COLUMN outbox_backlog.age IS 'How long the message has been waiting';
COMMENT ON COLUMN outbox_backlog.kind IS 'command or event';
COMMENT ON COLUMN outbox_backlog.trace_id IS 'Trace id, if any';

CREATE VIEW outbox_summary AS
	SELECT destination,
	       count(*) FILTER (WHERE dead_at IS NULL) AS pending,
	       count(*) FILTER (WHERE dead_at IS NULL AND next_attempt_at <= now()) AS due,
	       count(*) FILTER (WHERE dead_at IS NULL AND attempt_count > 0) AS retrying,
	       count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead,
	       now() - min(created_at) FILTER (WHERE dead_at IS NULL) AS oldest_pending_age
	FROM outbox_messages
	WHERE processed_at IS NULL
	GROUP BY destination
	ORDER BY destination;
COMMENT ON VIEW outbox_summary IS
	'Undelivered messages per destination: pending, due now, retrying, dead, age of the oldest pending';
COMMENT ON COLUMN outbox_summary.destination IS 'Receiving service';
COMMENT ON COLUMN outbox_summary.pending IS 'Messages not yet delivered and not dead';
COMMENT ON COLUMN outbox_summary.due IS 'Pending messages whose next attempt time has come';
COMMENT ON COLUMN outbox_summary.retrying IS 'Pending messages that failed at least once';
COMMENT ON COLUMN outbox_summary.dead IS 'Dead letters';
COMMENT ON COLUMN outbox_summary.oldest_pending_age IS 'How long the oldest pending message has waited';

CREATE VIEW dead_letters AS
	SELECT message_id, destination, type, payload, attempt_count, last_error, created_at,
	       dead_at, kind, trace_id
	FROM outbox_messages
	WHERE dead_at IS NOT NULL
	ORDER BY dead_at, created_at;
COMMENT ON VIEW dead_letters IS
	'Messages given up on (refused by the receiver or attempts exhausted); retry with retry_dead_letter(s)';
COMMENT ON COLUMN dead_letters.message_id IS 'Message id; pass it to retry_dead_letter()';
COMMENT ON COLUMN dead_letters.destination IS 'Receiving service';
COMMENT ON COLUMN dead_letters.type IS 'Message name';
COMMENT ON COLUMN dead_letters.payload IS 'JSON body';
COMMENT ON COLUMN dead_letters.attempt_count IS 'Delivery attempts made';
COMMENT ON COLUMN dead_letters.last_error IS 'Why the last attempt failed';
COMMENT ON COLUMN dead_letters.created_at IS 'When the message was written';
COMMENT ON COLUMN dead_letters.dead_at IS 'When it was given up on';
COMMENT ON COLUMN dead_letters.kind IS 'command or event';
COMMENT ON COLUMN dead_letters.trace_id IS 'Trace id, if any';
