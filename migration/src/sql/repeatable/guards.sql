-- The guards of the ledger's tables, for every role: what a row may hold
-- and how it may change (the state machine's own guard is in
-- state_machine.sql), history that is never deleted or rewritten, and the
-- roll-up of an attempt's cost into its unit. The write functions run as
-- work_ledger_writer and hold these rules themselves; the guards hold them
-- for everyone else (the owner's hand included).
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- History is append-only: events are never changed; units, attempts and
-- questions are never deleted.
CREATE OR REPLACE FUNCTION refuse_history_rewrite() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION '% on % is not allowed: the ledger is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'WL009', CONSTRAINT = TG_TABLE_NAME || '_append_only';
END
$$;

CREATE OR REPLACE FUNCTION work_units_insert_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF NEW.state <> 'ready' OR NEW.cost_cents <> 0 OR NEW.attempt_count <> 0
       OR NEW.current_attempt_id IS NOT NULL THEN
        RAISE EXCEPTION 'a new unit starts READY with no attempts and no cost' USING ERRCODE = 'WL006',
            CONSTRAINT = 'work_units_insert_ready';
    END IF;
    RETURN NEW;
END
$$;

-- The holder of a unit is the agent of its current attempt: a claim sets
-- both from one fresh attempt of this very unit, and neither is rewritten
-- alone afterwards. Checked only when either column changes (claims), so
-- other writes pay nothing.
CREATE OR REPLACE FUNCTION work_units_holder_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

-- Evidence is added only by the change that settles the unit (VERIFIED, or
-- a disposition), and only ever appended: a VERIFIED unit's links cannot be
-- swapped before its disposition certifies them.
CREATE OR REPLACE FUNCTION work_units_evidence_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF cardinality(NEW.evidence_urls) < cardinality(OLD.evidence_urls)
       OR NEW.evidence_urls[1:cardinality(OLD.evidence_urls)] IS DISTINCT FROM OLD.evidence_urls THEN
        RAISE EXCEPTION 'evidence of unit % is only ever appended', NEW.id
            USING ERRCODE = 'WL013', CONSTRAINT = 'work_units_evidence_append_only';
    END IF;
    IF NEW.state = OLD.state OR NEW.state NOT IN ('verified', 'done', 'abandoned') THEN
        RAISE EXCEPTION 'evidence of unit % is added only when it is verified or disposed', NEW.id
            USING ERRCODE = 'WL013', CONSTRAINT = 'work_units_evidence_frozen';
    END IF;
    RETURN NEW;
END
$$;

-- Anyone but the write functions: a first claim, once there, is history.
CREATE OR REPLACE FUNCTION work_units_first_claim_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'the first claim of unit % is history', NEW.id
        USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_immutable';
END
$$;

-- Every state change is logged in the transaction that makes it (an event
-- from the old state to the new one), and a unit reaches VERIFIED only with
-- its current attempt ended as verified. Checked at commit: a transaction
-- may write the unit, its attempt and its event in any order. The row is
-- re-read, so only what the transaction leaves behind counts.
CREATE OR REPLACE FUNCTION work_units_change_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

-- ---------------------------------------------------------------------------
-- The holder changes only with a claim: a new holder or attempt needs the
-- attempt's `claimed` event in the same transaction, and the attempt it
-- replaces must have ended by then. Checked at commit, on the row as the
-- transaction leaves it.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION work_units_claim_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    now_holder text;
    now_attempt uuid;
BEGIN
    SELECT u.claimed_by, u.current_attempt_id INTO now_holder, now_attempt FROM work_units u WHERE u.id = NEW.id;
    IF now_holder IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM work_unit_events e
         WHERE e.unit_id = NEW.id AND e.attempt_id = now_attempt AND e.event_type = 'claimed'
           AND e.tx_id = pg_current_xact_id()::text::bigint
    ) THEN
        RAISE EXCEPTION 'unit % changed holder without a claim (no claimed event for its attempt)', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_changes_by_claim';
    END IF;
    IF OLD.current_attempt_id IS NOT NULL AND OLD.current_attempt_id IS DISTINCT FROM now_attempt AND EXISTS (
        SELECT 1 FROM work_unit_attempts a WHERE a.id = OLD.current_attempt_id AND a.outcome IS NULL
    ) THEN
        RAISE EXCEPTION 'unit % was claimed again while attempt % still runs', NEW.id, OLD.current_attempt_id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_changes_by_claim';
    END IF;
    RETURN NULL;
END
$$;

-- And the value such a hand sets is attempt 1's start, checked at commit:
-- a hand-written claim inserts the attempt and updates the unit in sibling
-- CTEs of one statement, which cannot see each other's rows, so the check
-- waits for the transaction's end (as work_units_claim_recorded does).
CREATE OR REPLACE FUNCTION work_units_first_claim_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT u.first_claimed_at FROM work_units u WHERE u.id = NEW.id) IS DISTINCT FROM
       (SELECT a.started_at FROM work_unit_attempts a WHERE a.unit_id = NEW.id AND a.attempt_no = 1) THEN
        RAISE EXCEPTION 'the first claim of unit % is the start of its attempt 1', NEW.id
            USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_is_attempt_1';
    END IF;
    RETURN NULL;
END
$$;

-- Attempts: cost only grows, and every change is rolled up to the unit in the
-- same statement. Attempts are history: never deleted, never re-numbered.
CREATE OR REPLACE FUNCTION work_unit_attempts_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.cost_cents <> 0 THEN
            RAISE EXCEPTION 'a new attempt starts with no cost' USING ERRCODE = 'WL007',
                CONSTRAINT = 'work_unit_attempts_cost_additive';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.fleet <> OLD.fleet OR NEW.unit_id <> OLD.unit_id
       OR NEW.attempt_no <> OLD.attempt_no OR NEW.agent_id <> OLD.agent_id THEN
        RAISE EXCEPTION 'attempt identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_unit_attempts_identity_immutable';
    END IF;
    IF NEW.cost_cents < OLD.cost_cents THEN
        RAISE EXCEPTION 'attempt cost only grows' USING ERRCODE = 'WL007',
            CONSTRAINT = 'work_unit_attempts_cost_additive';
    END IF;
    IF OLD.outcome IS NOT NULL AND (NEW.outcome IS DISTINCT FROM OLD.outcome
       OR NEW.ended_at IS DISTINCT FROM OLD.ended_at) THEN
        RAISE EXCEPTION 'attempt % has ended (%)', OLD.id, OLD.outcome USING ERRCODE = 'WL008',
            CONSTRAINT = 'work_unit_attempts_outcome_immutable';
    END IF;
    RETURN NEW;
END
$$;

-- Attempts: started_at is part of the record from the start; an ended
-- attempt is history except for late cost (bills arrive late).
CREATE OR REPLACE FUNCTION work_unit_attempts_history_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE OR REPLACE FUNCTION work_unit_attempts_rollup() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    UPDATE work_units SET cost_cents = cost_cents + (NEW.cost_cents - OLD.cost_cents)
     WHERE id = NEW.unit_id;
    RETURN NULL;
END
$$;

-- Questions: what was asked, by whom, about what, is fixed; a question is
-- answered or cancelled once, and then it is history.
CREATE OR REPLACE FUNCTION blocking_questions_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

-- ---------------------------------------------------------------------------
-- The triggers.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE TRIGGER work_units_insert_guard BEFORE INSERT ON work_units FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION work_units_insert_guard();

CREATE OR REPLACE TRIGGER work_units_guard BEFORE UPDATE ON work_units FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION work_units_guard();

CREATE OR REPLACE TRIGGER work_units_holder_guard BEFORE UPDATE OF claimed_by, current_attempt_id ON work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND ((new.claimed_by IS DISTINCT FROM old.claimed_by) OR (new.current_attempt_id IS DISTINCT FROM old.current_attempt_id)))) EXECUTE FUNCTION work_units_holder_guard();

CREATE OR REPLACE TRIGGER work_units_evidence_guard BEFORE UPDATE OF evidence_urls ON work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.evidence_urls IS DISTINCT FROM old.evidence_urls))) EXECUTE FUNCTION work_units_evidence_guard();

CREATE OR REPLACE TRIGGER work_units_first_claim_guard BEFORE UPDATE OF first_claimed_at ON work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (old.first_claimed_at IS NOT NULL) AND (new.first_claimed_at IS DISTINCT FROM old.first_claimed_at))) EXECUTE FUNCTION work_units_first_claim_guard();

DROP TRIGGER IF EXISTS work_units_change_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_change_recorded AFTER UPDATE OF state ON work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.state IS DISTINCT FROM old.state))) EXECUTE FUNCTION work_units_change_recorded();

DROP TRIGGER IF EXISTS work_units_claim_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_claim_recorded AFTER UPDATE OF claimed_by, current_attempt_id ON work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.claimed_by IS NOT NULL) AND ((new.claimed_by IS DISTINCT FROM old.claimed_by) OR (new.current_attempt_id IS DISTINCT FROM old.current_attempt_id)))) EXECUTE FUNCTION work_units_claim_recorded();

DROP TRIGGER IF EXISTS work_units_first_claim_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_first_claim_recorded AFTER UPDATE OF first_claimed_at ON work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.first_claimed_at IS DISTINCT FROM old.first_claimed_at))) EXECUTE FUNCTION work_units_first_claim_recorded();

CREATE OR REPLACE TRIGGER work_units_no_delete BEFORE DELETE ON work_units FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();

CREATE OR REPLACE TRIGGER work_unit_attempts_guard BEFORE INSERT OR UPDATE ON work_unit_attempts FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION work_unit_attempts_guard();

CREATE OR REPLACE TRIGGER work_unit_attempts_history_guard BEFORE UPDATE ON work_unit_attempts FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION work_unit_attempts_history_guard();

CREATE OR REPLACE TRIGGER work_unit_attempts_rollup AFTER UPDATE OF cost_cents ON work_unit_attempts FOR EACH ROW WHEN ((new.cost_cents <> old.cost_cents)) EXECUTE FUNCTION work_unit_attempts_rollup();

CREATE OR REPLACE TRIGGER work_unit_attempts_no_delete BEFORE DELETE ON work_unit_attempts FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();

CREATE OR REPLACE TRIGGER work_unit_events_append_only BEFORE DELETE OR UPDATE ON work_unit_events FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();

CREATE OR REPLACE TRIGGER work_unit_events_no_truncate BEFORE TRUNCATE ON work_unit_events FOR EACH STATEMENT EXECUTE FUNCTION refuse_history_rewrite();

CREATE OR REPLACE TRIGGER blocking_questions_guard BEFORE UPDATE ON blocking_questions FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION blocking_questions_guard();

CREATE OR REPLACE TRIGGER blocking_questions_no_delete BEFORE DELETE ON blocking_questions FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();
