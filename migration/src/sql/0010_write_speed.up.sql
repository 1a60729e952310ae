-- Claims at the speed of the database (issue 13).
--
-- 1. Notifications after the commit. A NOTIFY issued inside a writing
-- transaction takes a database-wide lock in PreCommit_Notify and holds it
-- through the commit's WAL flush, so notifying transactions cannot share a
-- flush (no group commit). SPEC §6 lets the server notify right after its
-- commits instead, coalesced per fleet, since every listener re-reads the
-- table at least once a second. A transaction that sets
-- work_ledger.notify = 'after-commit' (the service does, in the same
-- set_config that scopes the fleet) promises that notification; the trigger
-- then does not fire at all (its WHEN is evaluated without calling PL/pgSQL).
-- Everything else (hand-written SQL, the sweeper, an older server) still
-- notifies in the transaction, as before.
--
-- A transaction that appends events without notifying could in principle be
-- prepared (PREPARE TRANSACTION refuses one that notified, which migration
-- 0004 relied on so that an in-flight writer marker never outlives its
-- session). The service never prepares transactions; a prepared event writer
-- would only hold live delivery back until it is committed or rolled back,
-- never lose an event.
DROP TRIGGER work_unit_events_notify ON work_unit_events;
CREATE TRIGGER work_unit_events_notify AFTER INSERT ON work_unit_events
    FOR EACH ROW WHEN (current_setting('work_ledger.notify', true) IS DISTINCT FROM 'after-commit')
    EXECUTE FUNCTION work_unit_events_notify();

-- 2. claimNext in one round trip. The service used to send BEGIN,
-- set_config(role, fleet), the claim, COMMIT (four round trips, each a
-- context switch on both sides). This function sets the role, the fleet and
-- the notification mode transaction-locally and runs the same claim
-- statement as db::claims::claim_next_sql(false) (keep the two alike), so the
-- service calls it as one autocommit statement: row-level security applies
-- exactly as before (the statements run as work_ledger_app with the fleet
-- set) and one statement still decides each claim. When nothing was claimed
-- it renews the unit the agent already holds (as the heartbeat statement of
-- db::claims does) or returns what it holds, as claimNext always did.
-- SECURITY INVOKER: the caller must be allowed to become work_ledger_app.
CREATE FUNCTION ledger_claim_next(p_fleet text, p_agent text, p_lease integer, p_notify text)
RETURNS TABLE (outcome text, unit work_units) LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true),
            set_config('work_ledger.notify', coalesce(p_notify, ''), true);
    RETURN QUERY
    WITH held AS (
         SELECT w.id FROM work_units w
          WHERE w.fleet = p_fleet AND w.claimed_by = p_agent AND w.state IN ('claimed', 'in_progress', 'blocked')
     ), stale AS (
         SELECT w.id, w.state, w.current_attempt_id, w.attempt_count, w.claimed_by FROM work_units w
          WHERE w.fleet = p_fleet AND w.state IN ('claimed', 'in_progress') AND w.lease_expires_at < now()
            AND NOT EXISTS (SELECT 1 FROM held)
          ORDER BY w.lease_expires_at, w.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
     ), ready AS (
         SELECT w.id, w.state, w.current_attempt_id, w.attempt_count, w.claimed_by FROM work_units w
          WHERE w.fleet = p_fleet AND w.state = 'ready'
            AND NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS (SELECT 1 FROM stale)
          ORDER BY w.created_at, w.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
     ), pick AS (
         SELECT * FROM stale UNION ALL SELECT * FROM ready
     ), superseded AS (
         UPDATE work_unit_attempts a SET outcome = 'superseded', ended_at = now()
           FROM pick WHERE a.id = pick.current_attempt_id AND pick.state <> 'ready'
         RETURNING a.id
     ), attempt AS (
         INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
         SELECT p_fleet, pick.id, pick.attempt_count + 1, p_agent FROM pick
         RETURNING work_unit_attempts.id, work_unit_attempts.unit_id, work_unit_attempts.attempt_no
     ), taken AS (
         UPDATE work_units u
            SET state = 'claimed', claimed_by = p_agent, current_attempt_id = attempt.id,
                attempt_count = attempt.attempt_no, lease_expires_at = now() + p_lease * interval '1 second',
                last_heartbeat_at = now()
           FROM attempt WHERE u.id = attempt.unit_id
         RETURNING u.*
     ), events AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, p.id, p.current_attempt_id, 'stale_reclaimed'::event_type, p.state, 'claimed'::work_state, p_agent,
                jsonb_build_object('previous_agent', p.claimed_by, 'previous_attempt_id', p.current_attempt_id),
                NULL::text, NULL::text
           FROM pick p WHERE p.state <> 'ready'
         UNION ALL
         SELECT p_fleet, u.id, u.current_attempt_id, 'claimed'::event_type, p.state, 'claimed'::work_state, p_agent,
                jsonb_build_object('attempt_no', u.attempt_count, 'lease_seconds', p_lease), NULL::text, NULL::text
           FROM taken u JOIN pick p ON p.id = u.id
     )
     SELECT CASE WHEN p.state <> 'ready' THEN 'reclaimed' ELSE 'claimed' END, u::work_units
       FROM taken u JOIN pick p ON p.id = u.id;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Nothing claimed: the agent holds a unit already (renewed, as a
    -- heartbeat via claimNext), or nothing is claimable.
    RETURN QUERY
    WITH renewed AS (
         UPDATE work_units w SET lease_expires_at = now() + p_lease * interval '1 second', last_heartbeat_at = now()
          WHERE w.fleet = p_fleet AND w.claimed_by = p_agent AND w.state IN ('claimed', 'in_progress')
         RETURNING w.*
     ), ev AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, r.id, r.current_attempt_id, 'heartbeat', r.state, r.state, p_agent,
                jsonb_build_object('lease_seconds', p_lease, 'via', 'claimNext'), NULL, NULL
           FROM renewed r
     )
     SELECT 'renewed'::text, r::work_units FROM renewed r;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT 'held'::text, w FROM work_units w
     WHERE w.fleet = p_fleet AND w.claimed_by = p_agent AND w.state IN ('claimed', 'in_progress', 'blocked');
END
$$;
REVOKE ALL ON FUNCTION ledger_claim_next(text, text, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_claim_next(text, text, integer, text) TO work_ledger_app;
