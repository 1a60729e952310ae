-- The Temporal projection's own write (SPEC §12): where it stands in each
-- workflow run. Every ledger event it appends goes through the writes of
-- writes.sql, as the workflow (ledger_begin); this moves the run's mark in
-- the same transaction, so a restart, a second replica or Temporal coming
-- back resumes after the last event projected and projects each once.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- Moves the mark of run p_run of workflow p_workflow (namespace
-- p_namespace, unit p_unit) to event p_event, never back, and records that
-- the run closed (p_closed). Authenticates as every write does
-- (ledger_begin): a live token with units:project, whose fleet it writes
-- in. It appends no event, so it asks for no notification. Returns the
-- mark as it is now (NULL: the token may not).
CREATE OR REPLACE FUNCTION ledger_temporal_mark(p_token bytea, p_namespace text, p_workflow text, p_run text,
                                                p_unit uuid, p_event bigint, p_closed boolean)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    b record;
    mark bigint;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, NULL, '{units:project}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO temporal_runs AS r (fleet, namespace, workflow_id, run_id, unit_id, last_event_id, closed)
    VALUES ((b.who).fleet, p_namespace, p_workflow, p_run, p_unit, greatest(p_event, 0), p_closed)
    ON CONFLICT (fleet, namespace, workflow_id, run_id) DO UPDATE
       SET last_event_id = greatest(r.last_event_id, excluded.last_event_id), closed = r.closed OR excluded.closed,
           updated_at = clock_timestamp()
    RETURNING r.last_event_id INTO mark;
    RETURN mark;
END
$$;
