-- The orchestrator's own tables: saga instances, their timeline, the
-- operators' cancellations, and the idempotency records of POST /orders.
-- Unqualified names: migrate.c runs this with search_path set to the
-- orchestrator schema. The functions over them are in 005_saga_functions.sql.

CREATE TABLE saga_instances (
    saga_id      uuid PRIMARY KEY,
    state        text NOT NULL CHECK (state IN ('PendingPayment', 'PendingInventory',
                     'Completed', 'Failed', 'Compensating', 'Compensated')),
    version      int NOT NULL CHECK (version >= 1),
    customer_id  text NOT NULL,
    item_id      text NOT NULL,
    qty          int NOT NULL CHECK (qty BETWEEN 1 AND 1000),
    amount       bigint NOT NULL CHECK (amount BETWEEN 1 AND 1000000000000),
    compensation text CHECK (compensation IN ('release', 'refund')),
    deadline_at  timestamptz,
    trace_id     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'Compensating') = (compensation IS NOT NULL))
);
COMMENT ON TABLE saga_instances IS 'One row per order saga: its current state and optimistic version.';
COMMENT ON COLUMN saga_instances.saga_id IS 'The saga''s id, returned by POST /orders.';
COMMENT ON COLUMN saga_instances.state IS 'PendingPayment, PendingInventory, Completed, Failed, Compensating or Compensated.';
COMMENT ON COLUMN saga_instances.version IS 'Bumped by every transition; a transition applies only to the version it read.';
COMMENT ON COLUMN saga_instances.customer_id IS 'Paying customer.';
COMMENT ON COLUMN saga_instances.item_id IS 'Item to reserve.';
COMMENT ON COLUMN saga_instances.qty IS 'Quantity to reserve.';
COMMENT ON COLUMN saga_instances.amount IS 'Amount to charge, in minor units.';
COMMENT ON COLUMN saga_instances.compensation IS 'While Compensating: the undo step awaited, release (inventory) then refund (payment).';
COMMENT ON COLUMN saga_instances.deadline_at IS 'When the current step times out and the saga compensates; null outside PendingPayment/PendingInventory.';
COMMENT ON COLUMN saga_instances.trace_id IS 'W3C trace id carried on every message of the saga.';
COMMENT ON COLUMN saga_instances.created_at IS 'When the order was accepted.';
COMMENT ON COLUMN saga_instances.updated_at IS 'When the saga last changed state.';

CREATE INDEX saga_instances_deadline_idx ON saga_instances (deadline_at)
    WHERE state IN ('PendingPayment', 'PendingInventory');

-- The admin API's saga list (admin_sagas), one index entry per saga
-- instead of one per version.
--
-- A transition changes state, deadline_at and updated_at, which indexes
-- cover, so PostgreSQL writes a new entry in every index of saga_instances
-- for every transition, not only at the insert: with an index per filter of
-- the list over every saga, 22 entries per saga that completes, 17 of them
-- for the list. A finished saga never changes again, so an index restricted
-- to finished sagas takes one entry per saga, written when it finishes. The
-- unfinished ones are the sagas in flight, few by nature (they finish or
-- time out), and one partial index holds them all, in the order the list
-- wants within each state. admin_sagas reads the two parts and merges them.
-- 12 entries per completed saga instead of 22; docs/performance.md has what
-- it did to throughput, and scripts/console-cost what it did to the list's
-- cost.
--
-- Paging is newest first by (created_at, saga_id); each filter has an index
-- that yields its sagas in that order, so a page reads about `limit` rows
-- whatever the table holds.
CREATE INDEX saga_instances_open_idx ON saga_instances (state, created_at, saga_id)
    WHERE state IN ('PendingPayment', 'PendingInventory', 'Compensating');
CREATE INDEX saga_instances_ended_page_idx ON saga_instances (created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_state_idx ON saga_instances (state, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_customer_idx ON saga_instances (customer_id, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
CREATE INDEX saga_instances_ended_item_idx ON saga_instances (item_id, created_at, saga_id)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
-- the counts per state count every saga (filtered by anything but the
-- state): on a narrow index of the state alone, deduplicated into posting
-- lists, that is an index-only scan several times cheaper than reading the
-- table or a wider index; the unfinished ones are counted on theirs
CREATE INDEX saga_instances_ended_count_idx ON saga_instances (state)
    WHERE state IN ('Completed', 'Failed', 'Compensated');
COMMENT ON INDEX saga_instances_open_idx IS
    'Admin API: unfinished sagas by state, newest first (the list''s unfinished part, stuckSeconds, counts)';
COMMENT ON INDEX saga_instances_ended_page_idx IS 'Admin API: finished sagas, newest first, by cursor';
COMMENT ON INDEX saga_instances_ended_state_idx IS 'Admin API: finished sagas of one state';
COMMENT ON INDEX saga_instances_ended_count_idx IS 'Admin API: counts of finished sagas per state';
COMMENT ON INDEX saga_instances_ended_customer_idx IS 'Admin API: finished sagas of one customer';
COMMENT ON INDEX saga_instances_ended_item_idx IS 'Admin API: finished sagas of one item';

-- The timeline. No foreign key to saga_instances: every saga_history row is
-- written by the statement or transaction that inserts or updates its
-- saga_instances row (the create statement of POST /orders, and saga_apply
-- right after its guarded UPDATE found the row), and nothing deletes sagas,
-- so a key would check nothing that can fail; yet its check ran an SPI
-- query and took a row lock (a WAL record) three times per saga: 170-250 us
-- of PostgreSQL CPU per saga, 6-8 %. docs/architecture.md ("The timeline
-- without a foreign key") says why the timeline stays whole
-- without it, and scripts/audit checks it (sql/audit.sql).
CREATE TABLE saga_history (
    saga_id    uuid NOT NULL,
    version    int NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    cause      text NOT NULL,
    message_id uuid,
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, version)
);
COMMENT ON TABLE saga_history IS 'A saga''s timeline: one row per transition, creation included.';
COMMENT ON COLUMN saga_history.saga_id IS
    'The saga (no foreign key: each row is written with its saga_instances row, and sagas are never deleted).';
COMMENT ON COLUMN saga_history.version IS 'The saga''s version after the transition (1 for creation).';
COMMENT ON COLUMN saga_history.from_state IS 'State before; null for creation.';
COMMENT ON COLUMN saga_history.to_state IS 'State after.';
COMMENT ON COLUMN saga_history.cause IS 'Message type that caused it, or OrderPlaced / StepTimeout.';
COMMENT ON COLUMN saga_history.message_id IS 'Id of that message; null where none.';
COMMENT ON COLUMN saga_history.at IS 'When the transition committed.';

CREATE TABLE saga_cancellations (
    saga_id      uuid PRIMARY KEY REFERENCES saga_instances ON DELETE CASCADE,
    reason       text NOT NULL,
    cancelled_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE saga_cancellations IS 'Sagas an operator cancelled (POST /admin/api/sagas/{id}/cancel), written with the Cancelled transition.';
COMMENT ON COLUMN saga_cancellations.saga_id IS 'The saga.';
COMMENT ON COLUMN saga_cancellations.reason IS 'What the operator wrote.';
COMMENT ON COLUMN saga_cancellations.cancelled_at IS 'When the cancellation committed.';

CREATE TABLE idempotency_records (
    key          text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text NOT NULL,
    saga_id      uuid NOT NULL,
    status       int NOT NULL,
    response     jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX idempotency_records_expires_idx ON idempotency_records (expires_at);
COMMENT ON TABLE idempotency_records IS 'Idempotency-Key of POST /orders: the first answer, replayed for the same key and body.';
COMMENT ON COLUMN idempotency_records.key IS 'The Idempotency-Key header, unquoted.';
COMMENT ON COLUMN idempotency_records.request_hash IS 'sha256 of the canonical JSON body (keys sorted, no white space).';
COMMENT ON COLUMN idempotency_records.saga_id IS 'The saga the first request created.';
COMMENT ON COLUMN idempotency_records.status IS 'HTTP status of the first answer.';
COMMENT ON COLUMN idempotency_records.response IS 'Body of the first answer.';
COMMENT ON COLUMN idempotency_records.created_at IS 'When the key was first used.';
COMMENT ON COLUMN idempotency_records.expires_at IS 'After this the key is forgotten and may start a new saga.';

CREATE VIEW saga_overview AS
    SELECT state, count(*) AS count FROM saga_instances GROUP BY state;
COMMENT ON VIEW saga_overview IS 'How many sagas are in each state.';
