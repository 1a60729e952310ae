-- The agent's hot writes in one round trip (issue 13), as claimNext already
-- is (migration 0010): heartbeat, transition to IN_PROGRESS, transition to
-- VERIFIED and dispose. The service used to send BEGIN, set_config(role, fleet), the
-- statement and COMMIT for each; without an idempotency key or an attemptId
-- fence it now sends one autocommit call of these functions. With a key or a
-- fence it calls the same function inside its request transaction (after the
-- key's replay check and the fence's lock), so each write's SQL exists once,
-- here.
--
-- Each function sets the role, the fleet and (when p_notify is not NULL)
-- the notification mode transaction-locally, then runs the one conditional
-- statement whose WHERE is the invariant (holder, state): no row back means
-- "refused", and the service then reads the unit to say why. Row-level
-- security applies as before: the statement runs as work_ledger_app with
-- the fleet set. SECURITY INVOKER: the caller must be allowed to become
-- work_ledger_app and to execute these functions, which it may as their
-- owner (the service migrates with its own login) or as a member that
-- inherits work_ledger_app's privileges (EXECUTE is checked before the
-- role switch). p_key and p_hash are the idempotency key and the
-- request's fingerprint the write's event carries (NULL without a key).

CREATE FUNCTION ledger_scope(p_fleet text, p_notify text) RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true),
           CASE WHEN p_notify IS NOT NULL THEN set_config('work_ledger.notify', p_notify, true) END;
$$;

-- Renews the lease of the unit p_agent holds (CLAIMED or IN_PROGRESS), of
-- attempt p_attempt when it is given (the heartbeat's fence), and logs the
-- heartbeat; p_via names the operation (heartbeat, claimNext, claimUnit).
CREATE FUNCTION ledger_heartbeat(p_fleet text, p_agent text, p_key text, p_hash text, p_lease integer, p_attempt uuid,
                                 p_via text, p_notify text)
RETURNS SETOF work_units LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM ledger_scope(p_fleet, p_notify);
    RETURN QUERY
    WITH u AS (
         UPDATE work_units w SET lease_expires_at = now() + p_lease * interval '1 second', last_heartbeat_at = now()
          WHERE w.fleet = p_fleet AND w.claimed_by = p_agent AND w.state IN ('claimed', 'in_progress')
            AND (p_attempt IS NULL OR w.current_attempt_id = p_attempt)
         RETURNING w.*
     ), ev AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, u.id, u.current_attempt_id, 'heartbeat', u.state, u.state, p_agent,
                jsonb_build_object('lease_seconds', p_lease, 'via', p_via), p_key, p_hash
           FROM u
     )
     SELECT u.* FROM u;
END
$$;

-- CLAIMED -> IN_PROGRESS by the holder.
CREATE FUNCTION ledger_start(p_fleet text, p_agent text, p_key text, p_hash text, p_unit uuid, p_notify text)
RETURNS SETOF work_units LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM ledger_scope(p_fleet, p_notify);
    RETURN QUERY
    WITH u AS (
         UPDATE work_units w SET state = 'in_progress'
          WHERE w.fleet = p_fleet AND w.id = p_unit AND w.claimed_by = p_agent AND w.state = 'claimed'
         RETURNING w.*
     ), ev AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, u.id, u.current_attempt_id, 'transitioned', 'claimed', 'in_progress', p_agent, '{}', p_key, p_hash
           FROM u
     )
     SELECT u.* FROM u;
END
$$;

-- IN_PROGRESS -> VERIFIED by the holder: ends the attempt as verified with
-- its evidence and clears the lease (done work cannot be reclaimed); the
-- holder stays recorded until dispose.
CREATE FUNCTION ledger_verify(p_fleet text, p_agent text, p_key text, p_hash text, p_unit uuid, p_evidence text,
                              p_notify text)
RETURNS SETOF work_units LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM ledger_scope(p_fleet, p_notify);
    RETURN QUERY
    WITH u AS (
         UPDATE work_units w
            SET state = 'verified', lease_expires_at = NULL, evidence_urls = array_append(w.evidence_urls, p_evidence)
          WHERE w.fleet = p_fleet AND w.id = p_unit AND w.claimed_by = p_agent AND w.state = 'in_progress'
         RETURNING w.*
     ), a AS (
         UPDATE work_unit_attempts a SET outcome = 'verified', evidence_url = p_evidence, ended_at = now()
           FROM u WHERE a.id = u.current_attempt_id
     ), ev AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, u.id, u.current_attempt_id, 'transitioned', 'in_progress', 'verified', p_agent,
                jsonb_build_object('evidence_url', p_evidence), p_key, p_hash
           FROM u
     )
     SELECT u.* FROM u;
END
$$;

-- Sets the permanent disposition: p_terminal is the state it leaves the
-- unit in, p_evidence the evidence link (NULL: keep the verification
-- evidence), p_holder_states the states in which the holder may dispose and
-- p_operator_states those in which the caller may as an operator (empty for
-- an agent). Ends an open attempt as abandoned and cancels an open question.
CREATE FUNCTION ledger_dispose(p_fleet text, p_agent text, p_key text, p_hash text, p_unit uuid, p_disposition text,
                               p_terminal text, p_evidence text, p_reason text, p_holder_states text[],
                               p_operator_states text[], p_notify text)
RETURNS SETOF work_units LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM ledger_scope(p_fleet, p_notify);
    RETURN QUERY
    WITH prev AS (
         SELECT w.id, w.state, w.current_attempt_id FROM work_units w
          WHERE w.fleet = p_fleet AND w.id = p_unit
            AND ((w.claimed_by = p_agent AND w.state::text = ANY(p_holder_states)) OR w.state::text = ANY(p_operator_states))
            AND (p_evidence IS NOT NULL OR cardinality(w.evidence_urls) > 0)
          FOR NO KEY UPDATE
     ), u AS (
         UPDATE work_units w
            SET state = p_terminal::work_state, disposition = p_disposition::disposition, disposed_at = now(),
                lease_expires_at = NULL,
                evidence_urls = CASE WHEN p_evidence IS NULL OR p_evidence = ANY(w.evidence_urls) THEN w.evidence_urls
                                     ELSE array_append(w.evidence_urls, p_evidence) END
           FROM prev WHERE w.id = prev.id
         RETURNING w.*
     ), a AS (
         UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now()
           FROM prev WHERE a.id = prev.current_attempt_id AND a.outcome IS NULL
     ), q AS (
         UPDATE blocking_questions q SET status = 'cancelled', cancelled_at = now()
           FROM prev WHERE q.unit_id = prev.id AND q.status = 'open'
     ), ev AS (
         INSERT INTO work_unit_events
                (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail, source_event_id, request_hash)
         SELECT p_fleet, prev.id, prev.current_attempt_id, 'disposed', prev.state, p_terminal::work_state, p_agent,
                jsonb_build_object('disposition', p_disposition,
                                   'evidence_url', coalesce(p_evidence, u.evidence_urls[cardinality(u.evidence_urls)]),
                                   'reason', p_reason),
                p_key, p_hash
           FROM prev JOIN u ON u.id = prev.id
     )
     SELECT u.* FROM u;
END
$$;

REVOKE ALL ON FUNCTION ledger_scope(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_heartbeat(text, text, text, text, integer, uuid, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_start(text, text, text, text, uuid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_verify(text, text, text, text, uuid, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_dispose(text, text, text, text, uuid, text, text, text, text, text[], text[], text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_scope(text, text) TO work_ledger_app;
GRANT EXECUTE ON FUNCTION ledger_heartbeat(text, text, text, text, integer, uuid, text, text) TO work_ledger_app;
GRANT EXECUTE ON FUNCTION ledger_start(text, text, text, text, uuid, text) TO work_ledger_app;
GRANT EXECUTE ON FUNCTION ledger_verify(text, text, text, text, uuid, text, text) TO work_ledger_app;
GRANT EXECUTE ON FUNCTION ledger_dispose(text, text, text, text, uuid, text, text, text, text, text[], text[], text)
    TO work_ledger_app;

-- Index review of the hot tables (issue 13): work_unit_attempts_unit_idx
-- indexed exactly what the unique constraint work_unit_attempts_unit_attempt_no_key
-- indexes, (unit_id, attempt_no); every claim paid for both. The
-- constraint's index serves every read the other did.
DROP INDEX work_unit_attempts_unit_idx;
