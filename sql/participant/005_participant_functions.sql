-- A generic participant's command handlers (saga-participant). The
-- operator's functions do the effect; these do everything around it, the
-- same for every participant: the inbox, the lock on the saga, voiding, the
-- record of each command in participant_steps, and the answering event in
-- the outbox, claimed at birth for p_lease_ms by the caller, which sends it
-- at once. One transaction each, as payment's and inventory's handlers.
--
-- saga-participant passes the names from PARTICIPANT_COMMANDS (the
-- command's function and event types), which it checked against pg_proc at
-- start; format('%I') quotes the function's name all the same. The
-- handlers reach the operator's functions through participant_call and
-- participant_undo: as this migration leaves them they EXECUTE the call,
-- planned anew each time (about 45 us); at start saga-participant has
-- participant_compile write them again with a static call for each function
-- it was given (about 15 us, the plan kept for the session), the EXECUTE
-- staying for any other name.
--
-- The advisory lock on the saga is its own statement before the read of
-- participant_steps (READ COMMITTED: the read must start after the lock is
-- held to see what the saga's other message committed while we waited), so
-- a command and its compensation arriving together never miss each other.

-- Reading a command's fields in an operator's function: each raises
-- SQLSTATE SG400, which saga-participant answers 400 invalid_field naming
-- the field, with nothing committed (the inbox row included).
CREATE FUNCTION participant_text(p_body jsonb, p_field text, p_max_length int DEFAULT 1024)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF jsonb_typeof(p_body -> p_field) IS DISTINCT FROM 'string'
       OR length(p_body ->> p_field) > p_max_length THEN
        RAISE EXCEPTION USING ERRCODE = 'SG400',
            MESSAGE = p_field || ' is missing or invalid';
    END IF;
    RETURN p_body ->> p_field;
END
$$;
COMMENT ON FUNCTION participant_text(jsonb, text, int) IS
    'A command''s string field (at most p_max_length characters); else SQLSTATE SG400 (400 invalid_field)';

CREATE FUNCTION participant_id(p_body jsonb, p_field text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF jsonb_typeof(p_body -> p_field) IS DISTINCT FROM 'string'
       OR (p_body ->> p_field) !~ '^[A-Za-z0-9_-]{1,64}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'SG400',
            MESSAGE = p_field || ' is missing or invalid';
    END IF;
    RETURN p_body ->> p_field;
END
$$;
COMMENT ON FUNCTION participant_id(jsonb, text) IS
    'A command''s id field (1-64 of [A-Za-z0-9_-]); else SQLSTATE SG400 (400 invalid_field)';

CREATE FUNCTION participant_int(p_body jsonb, p_field text, p_min bigint, p_max bigint)
    RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v numeric;
BEGIN
    IF jsonb_typeof(p_body -> p_field) = 'number' THEN
        v := (p_body ->> p_field)::numeric;
    END IF;
    IF v IS NULL OR v <> trunc(v) OR v < p_min OR v > p_max THEN
        RAISE EXCEPTION USING ERRCODE = 'SG400',
            MESSAGE = p_field || ' is missing or invalid';
    END IF;
    RETURN v::bigint;
END
$$;
COMMENT ON FUNCTION participant_int(jsonb, text, bigint, bigint) IS
    'A command''s integer field within [p_min, p_max]; else SQLSTATE SG400 (400 invalid_field)';

-- participant_call (a command's function: reason, output) and
-- participant_undo (a compensation's), written by participant_compile: a
-- CASE with a static call of each function in p_commands and p_undos (names
-- the caller checked against pg_proc), then the EXECUTE for any other name;
-- the EXECUTE alone for empty arrays, as this migration leaves them (a CASE
-- needs a WHEN). Each is replaced only when that changes it; true when one
-- was. Serialised on the schema, so that instances starting together do not
-- update the same catalog rows at once.
CREATE FUNCTION participant_compile(p_commands text[], p_undos text[]) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := current_schema();
    v_head text[] := ARRAY['participant_call(p_function text, p_body jsonb, OUT reason text,'
                           ' OUT output jsonb)',
                           'participant_undo(p_function text, p_body jsonb) RETURNS void'];
    v_signature text[] := ARRAY['participant_call(text, jsonb)', 'participant_undo(text, jsonb)'];
    v_query text[] := ARRAY['SELECT r.reason, r.output FROM %I.%I($1) r', 'SELECT %I.%I($1)'];
    v_into text[] := ARRAY[' INTO reason, output', ''];
    v_when text[] := ARRAY['', ''];
    v_body text;
    v_fn text;
    v_changed boolean := false;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(v_schema || ':participant_compile', 0));
    FOREACH v_fn IN ARRAY p_commands LOOP
        v_when[1] := v_when[1] || format(E'    WHEN %L THEN\n        SELECT r.reason, r.output'
                                         || E' INTO reason, output FROM %I.%I(p_body) r;\n',
                                         v_fn, v_schema, v_fn);
    END LOOP;
    FOREACH v_fn IN ARRAY p_undos LOOP
        v_when[2] := v_when[2] || format(E'    WHEN %L THEN\n        PERFORM %I.%I(p_body);\n',
                                         v_fn, v_schema, v_fn);
    END LOOP;
    FOR i IN 1..2 LOOP
        v_body := format('EXECUTE format(%L, %L, p_function)%s USING p_body;',
                         v_query[i], v_schema, v_into[i]);
        IF v_when[i] <> '' THEN
            v_body := format(E'CASE p_function\n%s    ELSE\n        %s\n    END CASE;',
                             v_when[i], v_body);
        END IF;
        v_body := format(E'\nBEGIN\n    %s\nEND\n', v_body);
        IF v_body IS DISTINCT FROM (SELECT prosrc FROM pg_proc WHERE oid =
                                    to_regprocedure(format('%I.%s', v_schema, v_signature[i]))) THEN
            EXECUTE format('CREATE OR REPLACE FUNCTION %I.%s LANGUAGE plpgsql AS %L',
                           v_schema, v_head[i], v_body);
            v_changed := true;
        END IF;
    END LOOP;
    RETURN v_changed;
END
$$;
COMMENT ON FUNCTION participant_compile(text[], text[]) IS
    'Writes participant_call and participant_undo: a static call for each function named, an EXECUTE for any other; true when that changed them.';

SELECT participant_compile('{}', '{}');

-- A command. result is 'duplicate' when the command was handled before,
-- else the type of the event it answered with (event_id, payload). The
-- operator's function runs only for a saga this command has not met: after
-- a compensation (a voided or compensated row) the command is declined with
-- the failed event, reason voided (or compensated), and the function is not
-- called; the same command under another id is answered as the first was.
CREATE FUNCTION participant_command(p_command_id uuid, p_saga_id uuid, p_command text,
                                    p_function text, p_succeeded text, p_failed text,
                                    p_body jsonb, p_trace text, p_lease_ms int,
                                    OUT result text, OUT event_id uuid, OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_step participant_steps%ROWTYPE;
BEGIN
    INSERT INTO processed_messages (message_id) VALUES (p_command_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        result := 'duplicate';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || p_saga_id::text, 0));

    SELECT * INTO v_step FROM participant_steps WHERE saga_id = p_saga_id AND command = p_command;
    IF NOT FOUND THEN
        SELECT r.reason, r.output INTO v_step.reason, v_step.output
          FROM participant_call(p_function, p_body) r;
        IF v_step.reason IS NOT NULL THEN
            v_step.status := 'failed';
            v_step.event := p_failed;
            v_step.reason := coalesce(nullif(v_step.reason, ''), 'failed');
            v_step.output := NULL;
        ELSE
            IF v_step.output IS NOT NULL AND jsonb_typeof(v_step.output) <> 'object' THEN
                RAISE EXCEPTION '%(jsonb) returned an output that is not a JSON object: %',
                    p_function, v_step.output;
            END IF;
            v_step.status := 'succeeded';
            v_step.event := p_succeeded;
        END IF;
        INSERT INTO participant_steps (saga_id, command, status, command_id, event, reason, output)
        VALUES (p_saga_id, p_command, v_step.status, p_command_id, v_step.event, v_step.reason,
                v_step.output);
    ELSIF v_step.status IN ('voided', 'compensated') THEN
        v_step.event := p_failed;
        v_step.reason := v_step.status;
        v_step.output := NULL;
    END IF;

    result := v_step.event;
    event_id := uuid_v7();
    payload := jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id);
    IF v_step.reason IS NOT NULL THEN
        payload := payload || jsonb_build_object('reason', v_step.reason);
    ELSIF v_step.output IS NOT NULL THEN
        payload := payload || jsonb_build_object('output', v_step.output);
    END IF;
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', result, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
COMMENT ON FUNCTION participant_command(uuid, uuid, text, text, text, text, jsonb, text, int)
    IS 'Handles a command once: inbox row, the operator''s function unless the saga''s command was voided, and the answering event.';

-- A compensation of the command p_command. Before that command: a voided
-- row, so that the late command is declined. After it succeeded: the
-- operator's undo function, once. Otherwise (it failed, or was undone or
-- voided already): nothing more. Always answered with p_compensated.
CREATE FUNCTION participant_compensation(p_command_id uuid, p_saga_id uuid, p_command text,
                                         p_function text, p_compensated text, p_body jsonb,
                                         p_trace text, p_lease_ms int, OUT result text,
                                         OUT event_id uuid, OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_status text;
BEGIN
    INSERT INTO processed_messages (message_id) VALUES (p_command_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        result := 'duplicate';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || p_saga_id::text, 0));

    SELECT status INTO v_status FROM participant_steps
     WHERE saga_id = p_saga_id AND command = p_command;
    IF NOT FOUND THEN
        INSERT INTO participant_steps (saga_id, command, status)
        VALUES (p_saga_id, p_command, 'voided');
    ELSIF v_status = 'succeeded' THEN
        PERFORM participant_undo(p_function, p_body);
        UPDATE participant_steps SET status = 'compensated', updated_at = now()
         WHERE saga_id = p_saga_id AND command = p_command;
    END IF;
    result := p_compensated;
    event_id := uuid_v7();
    payload := jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id);
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', result, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
COMMENT ON FUNCTION participant_compensation(uuid, uuid, text, text, text, jsonb, text, int)
    IS 'Handles a compensation once: undoes its command once if it succeeded, or voids it if it has not come yet; answers the compensated event.';
