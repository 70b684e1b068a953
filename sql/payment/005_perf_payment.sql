-- emit_event as PL/pgSQL, same name, arguments and results as in 002 (issue
-- #11). As LANGUAGE sql (an INSERT, so never inlined) PostgreSQL 15 parsed
-- and planned it again at every call, which cost more than the INSERT
-- (pg_stat_statements: about 340 us per call against 140 us for the INSERT
-- inside); PL/pgSQL keeps the plan for the session. The event id is a
-- version 7 UUID (uuid_v7(), 005_perf_outbox.sql), so the outbox's key
-- index and the receiver's inbox grow at their right edge.
CREATE OR REPLACE FUNCTION emit_event(p_type text, p_saga_id uuid, p_reason text, p_trace text,
                                      p_lease_ms int, OUT event_id uuid, OUT payload jsonb)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    event_id := uuid_v7();
    payload := jsonb_strip_nulls(jsonb_build_object('eventId', event_id, 'sagaId', p_saga_id,
                                                    'reason', p_reason));
    INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,
                                 next_attempt_at)
    VALUES (event_id, 'event', 'orchestrator', p_type, payload, p_trace,
            now() + p_lease_ms * interval '1 millisecond');
END
$$;
