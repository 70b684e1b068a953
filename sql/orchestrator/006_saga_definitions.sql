-- 1.1.0: sagas defined as data. A definition (src/orchestrator/saga_def.h
-- says what one holds) is registered once per (name, version) and never
-- changes; each saga runs on the (name, version) it started with.
--
-- Only additions and relaxations, by docs/upgrading.md's rules for a minor
-- release: a 1.0 orchestrator keeps running on this schema next to 1.1
-- ones. Its INSERT names none of the new columns, so its sagas are order
-- sagas of version 1 (the defaults), and the order saga keeps filling
-- customer_id, item_id, qty and amount, which operators query; a saga of
-- another definition leaves them null and keeps its input in `input`.
CREATE TABLE saga_definitions (
    name       text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    version    int NOT NULL CHECK (version >= 1),
    definition jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);
COMMENT ON TABLE saga_definitions IS 'Saga definitions as registered: a (name, version) never changes once stored.';
COMMENT ON COLUMN saga_definitions.name IS 'The saga''s name (POST /sagas/{name}).';
COMMENT ON COLUMN saga_definitions.version IS 'Its version; new sagas take the highest.';
COMMENT ON COLUMN saga_definitions.definition IS 'The definition as registered (JSON).';
COMMENT ON COLUMN saga_definitions.created_at IS 'When it was registered.';

ALTER TABLE saga_instances
    ADD COLUMN definition_name text NOT NULL DEFAULT 'order',
    ADD COLUMN definition_version int NOT NULL DEFAULT 1,
    ADD COLUMN input jsonb,
    ADD COLUMN outputs jsonb,
    ALTER COLUMN customer_id DROP NOT NULL,
    ALTER COLUMN item_id DROP NOT NULL,
    ALTER COLUMN qty DROP NOT NULL,
    ALTER COLUMN amount DROP NOT NULL;
COMMENT ON COLUMN saga_instances.definition_name IS 'The definition the saga runs (order for the order saga).';
COMMENT ON COLUMN saga_instances.definition_version IS 'The version of it the saga runs: the one it started with, or the one it was migrated to.';
COMMENT ON COLUMN saga_instances.input IS 'The start request''s input; null for the order saga, whose input is customer_id, item_id, qty and amount.';
COMMENT ON COLUMN saga_instances.outputs IS 'What its steps'' succeeded events carried, {"<Step>": {...}}; null while none did.';
COMMENT ON COLUMN saga_instances.customer_id IS 'Order saga: the paying customer; null for other definitions.';
COMMENT ON COLUMN saga_instances.item_id IS 'Order saga: the item to reserve; null for other definitions.';
COMMENT ON COLUMN saga_instances.qty IS 'Order saga: the quantity to reserve; null for other definitions.';
COMMENT ON COLUMN saga_instances.amount IS 'Order saga: the amount to charge, in minor units; null for other definitions.';

-- The states of every definition: Pending<Step> while a step runs. The
-- awaited undo is named by its step (the order saga keeps release and
-- refund, which 1.0 orchestrators read).
ALTER TABLE saga_instances
    DROP CONSTRAINT saga_instances_state_check,
    ADD CONSTRAINT saga_instances_state_check CHECK (state ~ '^Pending[A-Za-z0-9]{1,64}$'
        OR state IN ('Completed', 'Failed', 'Compensating', 'Compensated')),
    DROP CONSTRAINT saga_instances_compensation_check,
    ADD CONSTRAINT saga_instances_compensation_check
        CHECK (compensation ~ '^[A-Za-z0-9]{1,64}$');
COMMENT ON COLUMN saga_instances.state IS 'Pending<Step> while a step runs (PendingPayment, PendingInventory), Completed, Failed, Compensating or Compensated.';
COMMENT ON COLUMN saga_instances.compensation IS 'While Compensating: the step whose undo is awaited (its name; the order saga: release for Inventory, refund for Payment).';
COMMENT ON COLUMN saga_instances.deadline_at IS 'When the running step times out and the saga compensates; null unless a step runs.';

-- The partial indexes that named the order saga's running states, for the
-- running states of every definition: the same entries for order sagas
-- (deadline_at is set exactly while a step runs), and PostgreSQL proves
-- that the queries naming the order saga's states (a 1.0 orchestrator's)
-- may use them. Built in the migration's transaction: a scan of the table
-- (about a second per million sagas) during which sagas wait.
CREATE INDEX saga_instances_deadline_any_idx ON saga_instances (deadline_at)
    WHERE deadline_at IS NOT NULL;
DROP INDEX saga_instances_deadline_idx;
CREATE INDEX saga_instances_running_idx ON saga_instances (state, created_at, saga_id)
    WHERE state NOT IN ('Completed', 'Failed', 'Compensated');
DROP INDEX saga_instances_open_idx;
COMMENT ON INDEX saga_instances_running_idx IS
    'Admin API and admission: unfinished sagas by state, newest first (the list''s unfinished part, stuckSeconds, counts)';
