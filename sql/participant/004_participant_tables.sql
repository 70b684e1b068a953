-- A generic participant's own table (saga-participant, src/participant/):
-- what became of each saga's command here, the record that voiding reads.
-- Unqualified names: migrate.c runs this with search_path set to the
-- participant's schema, which the operator created with the participant's
-- own tables and functions (sql/shipping/shipping.sql is an example). The
-- command handlers are in 005_participant_functions.sql.

CREATE TABLE participant_steps (
    saga_id    uuid NOT NULL,
    command    text NOT NULL,
    status     text NOT NULL CHECK (status IN ('succeeded', 'failed', 'compensated', 'voided')),
    command_id uuid,
    event      text,
    reason     text,
    output     jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, command),
    CHECK (status = 'voided' OR (command_id IS NOT NULL AND event IS NOT NULL))
);
COMMENT ON TABLE participant_steps IS 'One row per saga and command type: how the command ended here, or that its compensation came first.';
COMMENT ON COLUMN participant_steps.saga_id IS 'The saga.';
COMMENT ON COLUMN participant_steps.command IS 'The command type (ShipOrderCommand); its compensation is recorded in the same row.';
COMMENT ON COLUMN participant_steps.status IS 'succeeded, failed, compensated (undone after it succeeded), or voided (the compensation came first: a late command is declined).';
COMMENT ON COLUMN participant_steps.command_id IS 'The command that ran; null for a voided row.';
COMMENT ON COLUMN participant_steps.event IS 'The event that answered the command; null for a voided row.';
COMMENT ON COLUMN participant_steps.reason IS 'Why the command failed (failed), as the function said.';
COMMENT ON COLUMN participant_steps.output IS 'The output the succeeded event carried.';
COMMENT ON COLUMN participant_steps.created_at IS 'When the row was written.';
COMMENT ON COLUMN participant_steps.updated_at IS 'When its status last changed.';
