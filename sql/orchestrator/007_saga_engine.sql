-- 1.1.0: the engine of every saga definition. saga_engine.c decides, from
-- the definition (saga_machine.c), what an event, a deadline or a
-- cancellation does to a saga; these functions apply it in one round trip.
-- saga_apply (005) stays, with its meaning, for 1.0 orchestrators running
-- beside 1.1 ones during a rolling upgrade.

-- A command's body: commandId, sagaId, then each field the step carries,
-- under its own name, from the saga's input or from an earlier step's
-- output. p_fields is [[name, step or null, ref], ...] (saga_engine.c
-- writes it from the definition). saga_advance calls it for every command
-- but a saga's first, whose body the start builds from the input it holds
-- (saga_first_body, saga_engine.c). When a
-- value is missing (an output an event did not carry), payload is null and
-- missing is the field as the definition writes it ("Shipping.trackingId").
CREATE FUNCTION saga_command_payload(p_command_id uuid, p_saga_id uuid, p_fields jsonb,
                                     p_input jsonb, p_outputs jsonb,
                                     OUT payload jsonb, OUT missing text)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    f jsonb;
    v jsonb;
BEGIN
    payload := jsonb_build_object('commandId', p_command_id, 'sagaId', p_saga_id);
    -- by index, not jsonb_array_elements: no query per call
    FOR i IN 0 .. coalesce(jsonb_array_length(p_fields), 0) - 1 LOOP
        f := p_fields->i;
        IF jsonb_typeof(f->1) = 'string' THEN
            v := p_outputs->(f->>1)->(f->>0);
        ELSE
            v := p_input->(f->>0);
        END IF;
        IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
            payload := NULL;
            missing := f->>2;
            RETURN;
        END IF;
        payload := payload || jsonb_build_object(f->>0, v);
    END LOOP;
END
$$;
COMMENT ON FUNCTION saga_command_payload(uuid, uuid, jsonb, jsonb, jsonb)
    IS 'A command''s body from the saga''s input and its steps'' outputs, or the field that is missing.';

-- A saga's input as its definition declares it: the order saga keeps its
-- own in columns (operators query them), the others in `input`.
-- STABLE (jsonb_build_object is) and without SET, so that PostgreSQL
-- inlines it: declared otherwise, saga_advance's read of the saga took
-- 58 us instead of 11.
CREATE FUNCTION saga_input(s saga_instances) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(s.input, jsonb_build_object('customerId', s.customer_id, 'itemId', s.item_id,
                                                'qty', s.qty, 'amount', s.amount))
$$;
COMMENT ON FUNCTION saga_input(saga_instances) IS 'The saga''s input: `input`, or the order saga''s columns.';

-- One transition of a saga of any definition, in one round trip.
--
-- The caller cannot know the saga's definition before reading it, so it
-- sends a plan for each definition version loaded in which the event acts
-- (saga_machine_expected: the one position where it does), keyed
-- "<name>/<version>":
--   {"from", "undo", "to", "newUndo", "cause", "deadlineMs",
--    "step":  the step whose output p_output is (a succeeded event), or null,
--    "out":   {"id", "dest", "type", "fields"} the message to send, or null,
--    "alt":   what happens instead when out's fields are not all there:
--             {"to", "newUndo", "cause", "out"} (the next step fails with
--             missing_field: a second history row, and the compensation)}
-- The plan of the saga's own definition is applied only if the saga is in
-- its `from` (awaiting `undo`), guarded by the version read; the event's id
-- goes into the inbox in the same transaction. Results:
--   not_found     no such saga
--   duplicate     the event was applied before
--   no_plan       no plan for the saga's definition (def_name, def_version
--                 say which: not loaded by the caller, or without the type)
--   ignored       the saga is elsewhere: state and compensation say where
--   applied       done: from_state, to_state, ending; out_* and payload
--                 the outgoing message (written into the outbox claimed for
--                 p_lease_ms; the caller sends it), missing the field that
--                 made the alt plan apply
-- Nothing is written but for applied. When the saga moves on between the
-- read and the write, serialization_failure (40001), and the caller tries
-- again.
CREATE FUNCTION saga_advance(p_event_id uuid, p_saga_id uuid, p_plans jsonb, p_output jsonb,
                             p_lease_ms int,
                             OUT result text, OUT state text, OUT compensation text,
                             OUT def_name text, OUT def_version int, OUT from_state text,
                             OUT to_state text, OUT ending boolean, OUT out_id uuid,
                             OUT out_dest text, OUT out_type text, OUT payload jsonb,
                             OUT trace_id text, OUT missing text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    s_state text;
    s_compensation text;
    s_version int;
    s_input jsonb;
    v_dup boolean;
    v_plan jsonb;
    v_out jsonb;
    v_outputs jsonb;
    v_version int;
    v_to text;
    v_undo text;
    v_deadline bigint;
    v_body record;
BEGIN
    SELECT i.state, i.compensation, i.version, saga_input(i), i.outputs, i.trace_id,
           i.definition_name, i.definition_version,
           p_event_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM processed_messages m WHERE m.message_id = p_event_id)
      INTO s_state, s_compensation, s_version, s_input, v_outputs, trace_id, def_name,
           def_version, v_dup
      FROM saga_instances i WHERE i.saga_id = p_saga_id;
    IF NOT FOUND THEN
        result := 'not_found';
        RETURN;
    END IF;
    IF v_dup THEN
        result := 'duplicate';
        trace_id := NULL;
        def_name := NULL;
        def_version := NULL;
        RETURN;
    END IF;
    v_plan := p_plans->(def_name || '/' || def_version);
    IF v_plan IS NULL THEN
        result := 'no_plan';
        state := s_state;
        compensation := s_compensation;
        RETURN;
    END IF;
    IF s_state <> v_plan->>'from' OR s_compensation IS DISTINCT FROM v_plan->>'undo' THEN
        result := 'ignored';
        state := s_state;
        compensation := s_compensation;
        RETURN;
    END IF;

    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            result := 'duplicate';
            def_name := NULL;
            def_version := NULL;
            RETURN;
        END IF;
    END IF;

    IF p_output IS NOT NULL AND jsonb_typeof(v_plan->'step') = 'string' THEN
        v_outputs := coalesce(v_outputs, '{}') || jsonb_build_object(v_plan->>'step', p_output);
    END IF;
    from_state := s_state;
    v_to := v_plan->>'to';
    v_undo := v_plan->>'newUndo';
    v_deadline := (v_plan->>'deadlineMs')::bigint;
    v_out := v_plan->'out';
    v_version := s_version + 1;
    IF jsonb_typeof(v_out) = 'object' THEN
        v_body := saga_command_payload((v_out->>'id')::uuid, p_saga_id, v_out->'fields',
                                       s_input, v_outputs);
        payload := v_body.payload;
        missing := v_body.missing;
        IF payload IS NULL THEN
            -- the next step cannot be sent: it fails, and what came before is undone
            INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
            VALUES (p_saga_id, v_version, s_state, v_to, v_plan->>'cause', p_event_id);
            v_plan := v_plan->'alt';
            from_state := v_to;
            v_to := v_plan->>'to';
            v_undo := v_plan->>'newUndo';
            v_deadline := NULL;
            v_out := v_plan->'out';
            v_version := v_version + 1;
            payload := CASE WHEN jsonb_typeof(v_out) = 'object'
                            THEN jsonb_build_object('commandId', v_out->>'id', 'sagaId', p_saga_id)
                       END;
        END IF;
    END IF;

    UPDATE saga_instances i
       SET state = v_to, version = v_version, compensation = v_undo, outputs = v_outputs,
           deadline_at = CASE WHEN v_deadline IS NULL THEN NULL
                              ELSE now() + v_deadline * interval '1 millisecond' END,
           updated_at = now()
     WHERE i.saga_id = p_saga_id AND i.state = s_state AND i.version = s_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, s_state, s_version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, v_version, from_state, v_to, v_plan->>'cause',
            CASE WHEN missing IS NULL THEN p_event_id END);

    IF jsonb_typeof(v_out) = 'object' THEN
        out_id := (v_out->>'id')::uuid;
        out_dest := v_out->>'dest';
        out_type := v_out->>'type';
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (out_id, 'command', out_dest, out_type, payload, trace_id,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    result := 'applied';
    state := v_to;
    compensation := v_undo;
    to_state := v_to;
    from_state := s_state;
    ending := v_to IN ('Completed', 'Failed', 'Compensated');
END
$$;
COMMENT ON FUNCTION saga_advance(uuid, uuid, jsonb, jsonb, int)
    IS 'Applies one saga transition planned by the caller for the saga''s definition, guarded by state and version, with its inbox row, history rows and outgoing command, in one round trip.';
