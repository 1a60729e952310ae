-- The Temporal projection's own write (SPEC §12): where it stands in each
-- workflow run. Every ledger event it appends goes through the writes of
-- writes.sql, as the workflow (ledger_begin); this moves the run's mark in
-- the same transaction, so a restart, a second replica or Temporal coming
-- back resumes after the last event projected and projects each once.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- Moves the mark of run p_run of workflow p_workflow (namespace
-- p_namespace, unit p_unit) to event p_event, never back, and records that
-- the run closed (p_closed). Authenticates like every write: a live token
-- with units:project, whose fleet it writes in. Returns the mark as it is
-- now (NULL: the token may not).
CREATE OR REPLACE FUNCTION ledger_temporal_mark(p_token bytea, p_namespace text, p_workflow text, p_run text,
                                                p_unit uuid, p_event bigint, p_closed boolean)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_fleet text;
    mark bigint;
BEGIN
    SELECT t.fleet INTO v_fleet FROM api_tokens t
     WHERE t.token_hash = p_token AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
       AND 'units:project' = ANY (t.permissions);
    IF v_fleet IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('work_ledger.fleet', v_fleet, true);
    INSERT INTO temporal_runs AS r (fleet, namespace, workflow_id, run_id, unit_id, last_event_id, closed)
    VALUES (v_fleet, p_namespace, p_workflow, p_run, p_unit, greatest(p_event, 0), p_closed)
    ON CONFLICT (fleet, namespace, workflow_id, run_id) DO UPDATE
       SET last_event_id = greatest(r.last_event_id, excluded.last_event_id), closed = r.closed OR excluded.closed,
           updated_at = clock_timestamp()
    RETURNING r.last_event_id INTO mark;
    RETURN mark;
END
$$;
