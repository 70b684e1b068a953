-- 1.1.0: moving in-flight sagas to another version of their definition
-- (POST /admin/api/definitions/{name}/migrate, src/orchestrator/
-- definitions_migrate.c). The orchestrator decides which sagas may move
-- from their definitions; these functions read the candidates a page at a
-- time and move one saga, guarded by what was read.

-- A page of the sagas of definition (p_name, p_version) that have not
-- finished, in saga_id order after p_after (null: from the start), only
-- those of p_ids when it is not null. The input is the one the saga
-- started with; an order saga keeps its input in its own columns.
CREATE FUNCTION saga_migrate_candidates(p_name text, p_version int, p_after uuid,
                                        p_ids uuid[], p_limit int)
RETURNS TABLE (saga_id uuid, state text, compensation text, version int, input jsonb)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.saga_id, s.state, s.compensation, s.version,
           coalesce(s.input, jsonb_build_object('customerId', s.customer_id,
                                                'itemId', s.item_id,
                                                'qty', s.qty, 'amount', s.amount))
      FROM saga_instances s
     WHERE s.definition_name = p_name AND s.definition_version = p_version
       AND s.state NOT IN ('Completed', 'Failed', 'Compensated')
       AND (p_after IS NULL OR s.saga_id > p_after)
       AND (p_ids IS NULL OR s.saga_id = ANY (p_ids))
     ORDER BY s.saga_id
     LIMIT p_limit
$$;
COMMENT ON FUNCTION saga_migrate_candidates(text, int, uuid, uuid[], int)
    IS 'A page of the unfinished sagas of one definition version, in saga_id order, with their input (an order saga''s from its columns).';

-- Moves one saga from version p_from of its definition to p_to, as a
-- transition: its version grows by one and a history row says so (cause
-- Migrated, same from and to state); its state, compensation and deadline
-- stay. Only if it is still where it was read (p_version, p_state) and
-- still on p_from: true when it moved, false when it had changed (nothing
-- written). One statement, so one transaction per saga.
CREATE FUNCTION saga_migrate(p_saga uuid, p_name text, p_from int, p_to int, p_version int,
                             p_state text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH moved AS (
        UPDATE saga_instances s
           SET definition_version = p_to, version = s.version + 1, updated_at = now()
         WHERE s.saga_id = p_saga AND s.definition_name = p_name
           AND s.definition_version = p_from AND s.version = p_version AND s.state = p_state
        RETURNING s.saga_id, s.version, s.state
    ), written AS (
        INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
        SELECT m.saga_id, m.version, m.state, m.state, 'Migrated', NULL FROM moved m
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM written)
$$;
COMMENT ON FUNCTION saga_migrate(uuid, text, int, int, int, text)
    IS 'Moves one saga to another version of its definition if it is still at the version and state read: a Migrated history row, the saga''s version + 1.';
