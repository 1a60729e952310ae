-- The write path under attack (issue 10): the invariants of SPEC §2 on every
-- column that matters, so that hand-written SQL as the application role
-- cannot break what the API never does.

-- A settled unit (VERIFIED, DONE, ABANDONED) always carries its evidence:
-- verification needs a link, and so does every dispose.
ALTER TABLE work_units ADD CONSTRAINT work_units_settled_has_evidence
    CHECK (state NOT IN ('verified', 'done', 'abandoned') OR cardinality(evidence_urls) > 0);
-- An attempt that ended verified names its evidence.
ALTER TABLE work_unit_attempts ADD CONSTRAINT work_unit_attempts_verified_has_evidence
    CHECK (outcome IS DISTINCT FROM 'verified' OR evidence_url IS NOT NULL);

-- The holder of a unit is the agent of its current attempt: a claim sets
-- both from one fresh attempt of this very unit, and neither is rewritten
-- alone afterwards. Checked only when either column changes (claims), so
-- other writes pay nothing.
CREATE FUNCTION work_units_holder_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.claimed_by IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM work_unit_attempts a
         WHERE a.id = NEW.current_attempt_id AND a.unit_id = NEW.id AND a.agent_id = NEW.claimed_by
           AND a.outcome IS NULL AND a.attempt_no = NEW.attempt_count
    ) THEN
        RAISE EXCEPTION 'unit % may only be held by the agent of its current, running attempt', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_is_attempt_agent';
    END IF;
    IF NEW.claimed_by IS NULL AND NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id THEN
        RAISE EXCEPTION 'the current attempt of unit % changes only with a claim', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_is_attempt_agent';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER work_units_holder_guard BEFORE UPDATE OF claimed_by, current_attempt_id ON work_units
    FOR EACH ROW WHEN (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                       OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id)
    EXECUTE FUNCTION work_units_holder_guard();

-- Every state change is logged in the transaction that makes it (an event
-- from the old state to the new one), and a unit reaches VERIFIED only with
-- its current attempt ended as verified. Checked at commit: a transaction
-- may write the unit, its attempt and its event in any order. The row is
-- re-read, so only what the transaction leaves behind counts.
CREATE FUNCTION work_units_change_recorded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM work_unit_events e
         WHERE e.unit_id = NEW.id AND e.tx_id = pg_current_xact_id()::text::bigint
           AND e.from_state = OLD.state AND e.to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'unit % went % -> % without its event in the same transaction', NEW.id, OLD.state, NEW.state
            USING ERRCODE = 'WL011', CONSTRAINT = 'work_units_change_has_event';
    END IF;
    IF NEW.state = 'verified' AND NOT EXISTS (
        SELECT 1 FROM work_units u JOIN work_unit_attempts a ON a.id = u.current_attempt_id
         WHERE u.id = NEW.id AND (u.state <> 'verified' OR a.outcome = 'verified')
    ) THEN
        RAISE EXCEPTION 'unit % is VERIFIED but its current attempt did not end verified', NEW.id
            USING ERRCODE = 'WL011', CONSTRAINT = 'work_units_verified_attempt_ended';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER work_units_change_recorded AFTER UPDATE OF state ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION work_units_change_recorded();

-- Attempts: started_at is part of the record from the start; an ended
-- attempt is history except for late cost (bills arrive late).
CREATE FUNCTION work_unit_attempts_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
        RAISE EXCEPTION 'attempt identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_unit_attempts_identity_immutable';
    END IF;
    IF OLD.outcome IS NOT NULL AND NEW.evidence_url IS DISTINCT FROM OLD.evidence_url THEN
        RAISE EXCEPTION 'attempt % has ended (%): only late cost may still be added', OLD.id, OLD.outcome
            USING ERRCODE = 'WL008', CONSTRAINT = 'work_unit_attempts_ended_frozen';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER work_unit_attempts_history_guard BEFORE UPDATE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION work_unit_attempts_history_guard();

-- Questions: what was asked, by whom, about what, is fixed; a question is
-- answered or cancelled once, and then it is history.
CREATE FUNCTION blocking_questions_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.id, NEW.fleet, NEW.unit_id, NEW.attempt_id, NEW.question, NEW.asked_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.fleet, OLD.unit_id, OLD.attempt_id, OLD.question, OLD.asked_by, OLD.created_at) THEN
        RAISE EXCEPTION 'question identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'blocking_questions_identity_immutable';
    END IF;
    IF OLD.status <> 'open' AND (NEW.status, NEW.answer, NEW.answered_by, NEW.answered_at, NEW.cancelled_at,
       NEW.assignee_group) IS DISTINCT FROM (OLD.status, OLD.answer, OLD.answered_by, OLD.answered_at,
       OLD.cancelled_at, OLD.assignee_group) THEN
        RAISE EXCEPTION 'question % is % and cannot change', OLD.id, OLD.status USING ERRCODE = 'WL012',
            CONSTRAINT = 'blocking_questions_closed_immutable';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER blocking_questions_guard BEFORE UPDATE ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION blocking_questions_guard();

-- Idempotency keys belong to the agent (SPEC §3): unique per (fleet, agent)
-- rather than per fleet, so two agents may pick the same key and no agent
-- can replay another's. Every key so far was unique per fleet, so it stays
-- unique per (fleet, agent) and keeps answering replays of the agent that
-- used it: no row changes.
ALTER TABLE work_unit_events ADD CONSTRAINT work_unit_events_key_has_agent
    CHECK (source_event_id IS NULL OR agent_id IS NOT NULL);
CREATE UNIQUE INDEX work_unit_events_agent_source_event_id_key ON work_unit_events (fleet, agent_id, source_event_id)
    WHERE source_event_id IS NOT NULL;
DROP INDEX work_unit_events_fleet_source_event_id_key;
