-- 1.1.0: saga_step, the engine's transition with its plan as typed
-- parameters, in place of saga_advance (007), whose plans were JSON.
--
-- saga_advance took the plans of every definition in which an event acts,
-- as JSON the server parsed at every call, and answered 14 columns. It cost
-- the order saga about 75 us of server CPU a transition more than 1.0.0's
-- saga_apply (perf, one client, pgbench); saga_step costs about 15 more.
-- The caller now plans for one definition: the saga's, when it knows it,
-- else its best guess, and plans again when the answer is no_plan. No
-- release ever called saga_advance (1.1.0 is its first with this engine),
-- so it goes; saga_apply (005) stays for 1.0 orchestrators during a
-- rolling upgrade.
DROP FUNCTION saga_advance(uuid, uuid, jsonb, jsonb, int);

-- One transition of a saga of any definition, in one round trip: the
-- caller (src/orchestrator/saga_engine.c) has decided from the definition
-- p_def at version p_def_version what the event, deadline or cancellation
-- does to a saga in state p_from (awaiting undo p_undo): go to p_to, await
-- p_new_undo, start the deadline of p_deadline_ms (null: none), record
-- p_cause, keep p_output as the output of step p_step (a succeeded event),
-- and send command p_out_type to p_out_dest as p_out_id (null: none). The
-- command's body is commandId, sagaId and, under each name of p_fields, the
-- saga's input field of that name (its p_field_steps element null) or that
-- earlier step's output field; p_input_drop, when the fields are all the
-- input's, names the input fields it does not carry, and the body is then
-- the input less them (one expression instead of a loop, checked to hold
-- exactly p_fields: a saga migrated from a version with other fields keeps
-- its input). When a field is absent or null, the p_alt_* plan applies
-- instead (its step fails: a second history row, and the compensation
-- p_alt_out_type, sent as p_out_id). Results:
--   not_found   no such saga
--   duplicate   the event was applied before
--   no_plan     the saga runs another definition (or p_def is null)
--   ignored     the saga is elsewhere
--   applied     done: payload the command's body, written into the outbox
--               claimed for p_lease_ms (the caller sends it); missing the
--               ordinal in p_fields of the field that made the p_alt_*
--               plan apply
-- But for not_found and duplicate, state, compensation, def_name and
-- def_version say where the saga is (now, for applied) and trace_id is
-- its trace. Nothing is written but for applied. When the saga moves on
-- between the read and the write, serialization_failure (40001), and the
-- caller tries again. A saga's first command is built by the start
-- (orders.c).
CREATE FUNCTION saga_step(p_event_id uuid, p_saga_id uuid, p_def text, p_def_version int,
                          p_from text, p_undo text, p_to text, p_new_undo text, p_cause text,
                          p_deadline_ms bigint, p_step text, p_output jsonb,
                          p_out_id uuid, p_out_dest text, p_out_type text,
                          p_fields text[], p_field_steps text[], p_input_drop text[],
                          p_alt_to text, p_alt_new_undo text, p_alt_cause text,
                          p_alt_out_dest text, p_alt_out_type text, p_lease_ms int,
                          OUT result text, OUT state text, OUT compensation text,
                          OUT def_name text, OUT def_version int, OUT payload jsonb,
                          OUT trace_id text, OUT missing int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    s_version int;
    v_dup boolean;
    v_outputs jsonb;
    v_payload jsonb;
    v_gap int;
    v_input jsonb;
    v jsonb;
    v_version int;
    v_from text := p_from;
    v_to text := p_to;
    v_undo text := p_new_undo;
    v_cause text := p_cause;
    v_deadline_ms bigint := p_deadline_ms;
    v_dest text := p_out_dest;
    v_type text := p_out_type;
BEGIN
    SELECT i.state, i.compensation, i.version, i.trace_id, i.definition_name,
           i.definition_version,
           p_event_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM processed_messages m WHERE m.message_id = p_event_id),
           i.outputs, CASE WHEN p_fields IS NOT NULL THEN saga_input(i) END
      INTO state, compensation, s_version, trace_id, def_name, def_version, v_dup,
           v_outputs, v_input
      FROM saga_instances i
     WHERE i.saga_id = p_saga_id;
    IF NOT FOUND THEN
        result := 'not_found';
        RETURN;
    END IF;
    IF v_dup THEN
        result := 'duplicate';
        RETURN;
    END IF;
    IF p_def IS NULL OR def_name <> p_def OR def_version <> p_def_version THEN
        result := 'no_plan';
        RETURN;
    END IF;
    IF state <> p_from OR compensation IS DISTINCT FROM p_undo THEN
        result := 'ignored';
        RETURN;
    END IF;

    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            result := 'duplicate';
            RETURN;
        END IF;
    END IF;

    IF p_output IS NOT NULL AND p_step IS NOT NULL THEN
        v_outputs := coalesce(v_outputs, '{}') || jsonb_build_object(p_step, p_output);
    END IF;
    IF p_out_id IS NOT NULL THEN
        v_payload := jsonb_build_object('commandId', p_out_id, 'sagaId', p_saga_id);
        IF p_input_drop IS NOT NULL THEN
            v := v_input - p_input_drop;
            IF v - p_fields = '{}' AND v ?& p_fields THEN
                v_payload := v_payload || v;
                p_fields := NULL;
            END IF;
        END IF;
        FOR k IN 1 .. coalesce(array_length(p_fields, 1), 0) LOOP
            IF p_field_steps[k] IS NULL THEN
                v := v_input->p_fields[k];
            ELSE
                v := v_outputs->p_field_steps[k]->p_fields[k];
            END IF;
            IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
                v_gap := k;
                EXIT;
            END IF;
            v_payload := v_payload || jsonb_build_object(p_fields[k], v);
        END LOOP;
    END IF;
    v_version := s_version + 1;
    IF v_gap IS NOT NULL AND p_alt_to IS NOT NULL THEN
        -- the next step cannot be sent: it fails, and what came before is undone
        INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
        VALUES (p_saga_id, v_version, p_from, p_to, p_cause, p_event_id);
        v_version := v_version + 1;
        v_from := p_to;
        v_to := p_alt_to;
        v_undo := p_alt_new_undo;
        v_cause := p_alt_cause;
        v_deadline_ms := NULL;
        v_dest := p_alt_out_dest;
        v_type := p_alt_out_type;
        v_payload := CASE WHEN v_type IS NOT NULL
                          THEN jsonb_build_object('commandId', p_out_id, 'sagaId', p_saga_id) END;
        missing := v_gap;
    END IF;

    UPDATE saga_instances i
       SET state = v_to, version = v_version, compensation = v_undo, outputs = v_outputs,
           deadline_at = now() + v_deadline_ms * interval '1 millisecond',
           updated_at = now()
     WHERE i.saga_id = p_saga_id AND i.state = p_from AND i.version = s_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, p_from, s_version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, v_version, v_from, v_to, v_cause,
            CASE WHEN missing IS NULL THEN p_event_id END);

    IF v_payload IS NOT NULL THEN
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (p_out_id, 'command', v_dest, v_type, v_payload, trace_id,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    result := 'applied';
    state := v_to;
    compensation := v_undo;
    payload := v_payload;
END
$$;
COMMENT ON FUNCTION saga_step(uuid, uuid, text, int, text, text, text, text, text, bigint, text, jsonb, uuid, text, text, text[], text[], text[], text, text, text, text, text, int)
    IS 'Applies one saga transition planned by the caller for the saga''s definition, guarded by definition, state and version, with its inbox row, history rows and outgoing command, in one round trip.';
