-- The saga list's counts per state count every saga (filtered by anything
-- but the state). On a narrow index of the state alone, deduplicated into
-- posting lists (100,000 sagas: about 700 kB), that is an index-only scan
-- several times cheaper than reading the table or the wider
-- (state, created_at, saga_id) index; scripts/console-cost measures it.
CREATE INDEX saga_instances_state_idx ON saga_instances (state);
COMMENT ON INDEX saga_instances_state_idx IS 'Admin API: counts per state (index-only scan)';
