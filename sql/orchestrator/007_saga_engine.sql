-- 1.1.0: the engine of every saga definition. saga_engine.c decides, from
-- the definition (saga_machine.c), what an event, a deadline or a
-- cancellation does to a saga; these functions apply it in one round trip.
-- saga_apply (005) stays, with its meaning, for 1.0 orchestrators running
-- beside 1.1 ones during a rolling upgrade.

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
-- An event does not name its saga's definition, so the caller sends the
-- plan of the definition it knows the saga by (saga_engine.c), else a plan
-- for each definition version loaded in which the event acts
-- (saga_machine_expected: the one position where it does), keyed
-- "<name>/<version>":
--   {"from", "undo", "to", "newUndo", "cause", "deadlineMs",
--    "step":  the step whose output p_output is (a succeeded event), or null,
--    "out":   {"id", "dest", "type", "fields"} the message to send, or null;
--             fields is [[name, step or null, ref], ...]: each field the
--             command's body carries besides commandId and sagaId, under
--             its name, from the saga's input (step null) or from that
--             earlier step's output; ref is the field as the definition
--             writes it ("Shipping.trackingId"), named in missing,
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
-- again. Every command's body is built here but a saga's first, which the
-- start builds from the input it holds (saga_first_body, saga_engine.c).
--
-- The plan's fields are read by the statement that reads the saga, and the
-- body is built in a loop here rather than by a function of its own: each
-- PL/pgSQL expression and each call of a function with SET costs a few
-- microseconds. The order saga's two calls took 1 060 us with a function
-- for the body and the plan read field by field, 890 us as written, 1.0.0's
-- two saga_apply 810 us (pg_stat_statements, one client, median of four;
-- docs/performance.md).
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
    v_from text;
    v_undo_from text;
    v_out jsonb;
    v_outputs jsonb;
    v_version int;
    v_to text;
    v_undo text;
    v_deadline bigint;
    v_cause text;
    v_step text;
    f jsonb;
    v jsonb;
BEGIN
    SELECT i.state, i.compensation, i.version, saga_input(i), i.outputs, i.trace_id,
           i.definition_name, i.definition_version,
           p_event_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM processed_messages m WHERE m.message_id = p_event_id),
           pl.p, pl.p->>'from', pl.p->>'undo', pl.p->>'to', pl.p->>'newUndo',
           (pl.p->>'deadlineMs')::bigint, pl.p->>'cause', pl.p->'out', pl.p->>'step'
      INTO s_state, s_compensation, s_version, s_input, v_outputs, trace_id, def_name,
           def_version, v_dup, v_plan, v_from, v_undo_from, v_to, v_undo, v_deadline, v_cause,
           v_out, v_step
      FROM saga_instances i
      CROSS JOIN LATERAL (SELECT p_plans->(i.definition_name || '/' || i.definition_version) AS p) pl
     WHERE i.saga_id = p_saga_id;
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
    state := s_state;
    compensation := s_compensation;
    IF v_plan IS NULL THEN
        result := 'no_plan';
        RETURN;
    END IF;
    IF s_state <> v_from OR s_compensation IS DISTINCT FROM v_undo_from THEN
        result := 'ignored';
        RETURN;
    END IF;

    IF p_event_id IS NOT NULL THEN
        INSERT INTO processed_messages (message_id) VALUES (p_event_id) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            result := 'duplicate';
            state := NULL;
            compensation := NULL;
            def_name := NULL;
            def_version := NULL;
            RETURN;
        END IF;
    END IF;

    IF p_output IS NOT NULL AND v_step IS NOT NULL THEN
        v_outputs := coalesce(v_outputs, '{}') || jsonb_build_object(v_step, p_output);
    END IF;
    from_state := s_state;
    v_version := s_version + 1;
    IF v_out IS NOT NULL AND jsonb_typeof(v_out) = 'object' THEN
        out_id := (v_out->>'id')::uuid;
        payload := jsonb_build_object('commandId', out_id, 'sagaId', p_saga_id);
        FOR i IN 0 .. coalesce(jsonb_array_length(v_out->'fields'), 0) - 1 LOOP
            f := v_out->'fields'->i;
            IF jsonb_typeof(f->1) = 'string' THEN
                v := v_outputs->(f->>1)->(f->>0);
            ELSE
                v := s_input->(f->>0);
            END IF;
            IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
                missing := f->>2;
                EXIT;
            END IF;
            payload := payload || jsonb_build_object(f->>0, v);
        END LOOP;
        IF missing IS NOT NULL THEN
            -- the next step cannot be sent: it fails, and what came before is undone
            INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
            VALUES (p_saga_id, v_version, from_state, v_to, v_cause, p_event_id);
            v_plan := v_plan->'alt';
            from_state := v_to;
            v_to := v_plan->>'to';
            v_undo := v_plan->>'newUndo';
            v_cause := v_plan->>'cause';
            v_deadline := NULL;
            v_out := v_plan->'out';
            v_version := v_version + 1;
            out_id := (v_out->>'id')::uuid;
            payload := CASE WHEN out_id IS NOT NULL
                            THEN jsonb_build_object('commandId', out_id, 'sagaId', p_saga_id)
                       END;
        END IF;
    END IF;

    UPDATE saga_instances i
       SET state = v_to, version = v_version, compensation = v_undo, outputs = v_outputs,
           deadline_at = now() + v_deadline * interval '1 millisecond',
           updated_at = now()
     WHERE i.saga_id = p_saga_id AND i.state = s_state AND i.version = s_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'saga % is no longer % at version %', p_saga_id, s_state, s_version
            USING ERRCODE = 'serialization_failure';
    END IF;

    INSERT INTO saga_history (saga_id, version, from_state, to_state, cause, message_id)
    VALUES (p_saga_id, v_version, from_state, v_to, v_cause,
            CASE WHEN missing IS NULL THEN p_event_id END);

    IF out_id IS NOT NULL THEN
        out_dest := v_out->>'dest';
        out_type := v_out->>'type';
        INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                     next_attempt_at)
        VALUES (out_id, 'command', out_dest, out_type, payload, trace_id,
                now() + p_lease_ms * interval '1 millisecond');
    END IF;
    result := 'applied';
    from_state := s_state;
    state := v_to;
    compensation := v_undo;
    to_state := v_to;
    ending := v_to IN ('Completed', 'Failed', 'Compensated');
END
$$;
COMMENT ON FUNCTION saga_advance(uuid, uuid, jsonb, jsonb, int)
    IS 'Applies one saga transition planned by the caller for the saga''s definition, guarded by state and version, with its inbox row, history rows and outgoing command, in one round trip.';
