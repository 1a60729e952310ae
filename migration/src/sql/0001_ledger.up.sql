-- work-ledger schema: the five tables of SPEC §2 and every invariant the
-- database itself must enforce. The Rust code is the second line of defence
-- (and the source of good error messages), never the only one.

CREATE TYPE work_state AS ENUM
    ('ready', 'claimed', 'in_progress', 'blocked', 'verified', 'done', 'abandoned');
CREATE TYPE disposition AS ENUM ('MIGRATED', 'DROPPED', 'DEFERRED', 'DEAD');
CREATE TYPE attempt_outcome AS ENUM ('verified', 'blocked', 'failed', 'abandoned', 'superseded');
CREATE TYPE event_type AS ENUM
    ('registered', 'claimed', 'heartbeat', 'transitioned', 'blocked', 'unblocked',
     'cost_recorded', 'disposed', 'released', 'stale_reclaimed', 'stalled');
CREATE TYPE question_status AS ENUM ('open', 'answered', 'cancelled');

-- The fleet is the tenant key on every table. Kept to a safe alphabet
-- (checked where it enters, in api_tokens) so it can appear in role names,
-- settings and log lines without quoting surprises.

CREATE TABLE work_units (
    id                 uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    fleet              text        NOT NULL,
    external_ref       text        NOT NULL,
    domain             text        NOT NULL DEFAULT 'default',
    state              work_state  NOT NULL DEFAULT 'ready',
    disposition        disposition,
    disposed_at        timestamptz,
    workflow_id        text,
    claimed_by         text,
    current_attempt_id uuid,
    lease_expires_at   timestamptz,
    last_heartbeat_at  timestamptz,
    attempt_count      integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    cost_cents         bigint      NOT NULL DEFAULT 0 CHECK (cost_cents >= 0),
    evidence_urls      text[]      NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- SPEC §9: 1..256 printable characters.
    CONSTRAINT work_units_external_ref_shape
        CHECK (char_length(external_ref) BETWEEN 1 AND 256 AND external_ref !~ '[[:cntrl:]]'),
    CONSTRAINT work_units_fleet_id_key UNIQUE (fleet, id),
    CONSTRAINT work_units_fleet_external_ref_key UNIQUE (fleet, external_ref),
    -- A disposition exists exactly when the unit is terminal: done iff MIGRATED,
    -- abandoned iff DROPPED, DEFERRED or DEAD. disposed_at goes with it.
    CONSTRAINT work_units_disposition_matches_state CHECK (
        (state = 'done' AND disposition = 'MIGRATED')
        OR (state = 'abandoned' AND disposition IN ('DROPPED', 'DEFERRED', 'DEAD'))
        OR (state NOT IN ('done', 'abandoned') AND disposition IS NULL)
    ),
    CONSTRAINT work_units_disposed_at_with_disposition
        CHECK ((disposition IS NULL) = (disposed_at IS NULL)),
    -- A live claim always has a holder and an attempt; CLAIMED and IN_PROGRESS
    -- always have a lease (BLOCKED suspends it, VERIFIED clears it).
    CONSTRAINT work_units_live_claim_has_holder CHECK (
        state NOT IN ('claimed', 'in_progress')
        OR (claimed_by IS NOT NULL AND current_attempt_id IS NOT NULL AND lease_expires_at IS NOT NULL)
    ),
    CONSTRAINT work_units_ready_has_no_holder CHECK (
        state <> 'ready' OR (claimed_by IS NULL AND lease_expires_at IS NULL)
    ),
    CONSTRAINT work_units_lease_only_while_working CHECK (
        lease_expires_at IS NULL OR state IN ('claimed', 'in_progress')
    )
);

-- claimNext: the oldest READY unit of a fleet (optionally of one domain).
CREATE INDEX work_units_claimable_idx ON work_units (fleet, created_at, id) WHERE state = 'ready';
CREATE INDEX work_units_claimable_domain_idx ON work_units (fleet, domain, created_at, id) WHERE state = 'ready';
-- Stale reclaim and the sweeper: live leases ordered by expiry.
CREATE INDEX work_units_live_lease_idx ON work_units (fleet, lease_expires_at)
    WHERE state IN ('claimed', 'in_progress');
-- One live claim per agent per fleet (SPEC §3). claimed_by leads so that the
-- planner never mistakes this index for a way to scan a fleet's live claims
-- (the stale-lease search must use work_units_live_lease_idx).
CREATE UNIQUE INDEX work_units_one_live_claim_per_agent ON work_units (claimed_by, fleet)
    WHERE state IN ('claimed', 'in_progress', 'blocked');
-- Keyset pagination (units oldest first).
CREATE INDEX work_units_keyset_idx ON work_units (fleet, created_at, id);
-- A queue table: every claim moves rows out of the claimable index. Vacuum and
-- analyze it far more often than the defaults (20% / 10% of rows changed) so
-- dead index entries and stale statistics never pile up under load.
ALTER TABLE work_units SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.01);

CREATE TABLE work_unit_attempts (
    id           uuid            PRIMARY KEY DEFAULT gen_random_uuid(),
    fleet        text            NOT NULL,
    unit_id      uuid            NOT NULL,
    attempt_no   integer         NOT NULL CHECK (attempt_no >= 1),
    agent_id     text            NOT NULL,
    outcome      attempt_outcome,
    cost_cents   bigint          NOT NULL DEFAULT 0 CHECK (cost_cents >= 0),
    evidence_url text,
    started_at   timestamptz     NOT NULL DEFAULT clock_timestamp(),
    ended_at     timestamptz,
    CONSTRAINT work_unit_attempts_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES work_units (fleet, id),
    CONSTRAINT work_unit_attempts_unit_attempt_no_key UNIQUE (unit_id, attempt_no),
    CONSTRAINT work_unit_attempts_fleet_id_key UNIQUE (fleet, id),
    CONSTRAINT work_unit_attempts_outcome_ends CHECK ((outcome IS NULL) = (ended_at IS NULL))
);
CREATE INDEX work_unit_attempts_unit_idx ON work_unit_attempts (unit_id, attempt_no);

ALTER TABLE work_units ADD CONSTRAINT work_units_current_attempt_fk
    FOREIGN KEY (fleet, current_attempt_id) REFERENCES work_unit_attempts (fleet, id)
    DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE work_unit_events (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    fleet            text        NOT NULL,
    unit_id          uuid        NOT NULL,
    attempt_id       uuid,
    event_type       event_type  NOT NULL,
    from_state       work_state,
    to_state         work_state,
    agent_id         text,
    cost_delta_cents bigint      NOT NULL DEFAULT 0 CHECK (cost_delta_cents >= 0),
    detail           jsonb       NOT NULL DEFAULT '{}',
    -- Idempotency key of the write that produced this event (SPEC §3).
    source_event_id  text,
    -- Fingerprint of the operation and arguments behind source_event_id, so a
    -- key replayed with other arguments is recognised.
    request_hash     text,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT work_unit_events_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES work_units (fleet, id),
    CONSTRAINT work_unit_events_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES work_unit_attempts (fleet, id),
    CONSTRAINT work_unit_events_key_has_hash CHECK (source_event_id IS NULL OR request_hash IS NOT NULL)
);
CREATE UNIQUE INDEX work_unit_events_fleet_source_event_id_key ON work_unit_events (fleet, source_event_id)
    WHERE source_event_id IS NOT NULL;
-- Keyset pagination (events newest first) and per-unit history.
CREATE INDEX work_unit_events_keyset_idx ON work_unit_events (fleet, created_at DESC, id DESC);
CREATE INDEX work_unit_events_unit_idx ON work_unit_events (unit_id, created_at DESC, id DESC);
-- The sweeper reports each expired attempt once, whatever the number of replicas.
CREATE UNIQUE INDEX work_unit_events_one_stall_per_attempt ON work_unit_events (attempt_id)
    WHERE event_type = 'stalled';

CREATE TABLE blocking_questions (
    id             uuid            PRIMARY KEY DEFAULT gen_random_uuid(),
    fleet          text            NOT NULL,
    unit_id        uuid            NOT NULL,
    attempt_id     uuid            NOT NULL,
    question       text            NOT NULL CHECK (char_length(question) BETWEEN 1 AND 8000),
    status         question_status NOT NULL DEFAULT 'open',
    answer         text            CHECK (char_length(answer) BETWEEN 1 AND 8000),
    assignee_group text            NOT NULL DEFAULT 'agent-questions',
    asked_by       text            NOT NULL,
    answered_by    text,
    created_at     timestamptz     NOT NULL DEFAULT clock_timestamp(),
    answered_at    timestamptz,
    cancelled_at   timestamptz,
    CONSTRAINT blocking_questions_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES work_units (fleet, id),
    CONSTRAINT blocking_questions_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES work_unit_attempts (fleet, id),
    CONSTRAINT blocking_questions_answered_has_answer CHECK (
        (status = 'answered') = (answer IS NOT NULL AND answered_by IS NOT NULL AND answered_at IS NOT NULL)
    ),
    CONSTRAINT blocking_questions_cancelled_has_time CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL))
);
-- At most one open question per unit (SPEC §2).
CREATE UNIQUE INDEX blocking_questions_one_open_per_unit ON blocking_questions (unit_id) WHERE status = 'open';
CREATE INDEX blocking_questions_keyset_idx ON blocking_questions (fleet, created_at, id);
CREATE INDEX blocking_questions_unit_idx ON blocking_questions (unit_id, created_at);

CREATE TABLE api_tokens (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    fleet       text        NOT NULL CHECK (fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    name        text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 256 AND name !~ '[[:cntrl:]]'),
    permissions text[]      NOT NULL,
    -- SHA-256 of the secret; the secret itself is shown once and never stored.
    token_hash  bytea       NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_at  timestamptz,
    CONSTRAINT api_tokens_known_permissions CHECK (
        permissions <@ ARRAY['ledger:read', 'units:register', 'units:claim', 'questions:answer',
                             'units:dispose-any', 'tokens:manage']::text[]
    )
);

-- ---------------------------------------------------------------------------
-- Triggers: what CHECK constraints cannot express.
-- ---------------------------------------------------------------------------

-- The state machine of SPEC §3 as the set of legal (old, new) pairs. A row
-- may keep its state (lease renewals, stale reclaim CLAIMED -> CLAIMED), but a
-- terminal unit is frozen except for late cost roll-ups.
CREATE FUNCTION work_units_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.fleet <> OLD.fleet OR NEW.external_ref <> OLD.external_ref
       OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'work unit identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_units_identity_immutable';
    END IF;
    IF OLD.disposition IS NOT NULL AND (NEW.disposition IS DISTINCT FROM OLD.disposition
       OR NEW.disposed_at IS DISTINCT FROM OLD.disposed_at) THEN
        RAISE EXCEPTION 'disposition of unit % is permanent', OLD.id USING ERRCODE = 'WL002',
            CONSTRAINT = 'work_units_disposition_immutable';
    END IF;
    IF OLD.state IN ('done', 'abandoned') AND (NEW.state, NEW.claimed_by, NEW.current_attempt_id,
       NEW.lease_expires_at, NEW.attempt_count, NEW.evidence_urls, NEW.domain, NEW.workflow_id)
       IS DISTINCT FROM (OLD.state, OLD.claimed_by, OLD.current_attempt_id, OLD.lease_expires_at,
       OLD.attempt_count, OLD.evidence_urls, OLD.domain, OLD.workflow_id) THEN
        RAISE EXCEPTION 'unit % is terminal (%)', OLD.id, OLD.state USING ERRCODE = 'WL003',
            CONSTRAINT = 'work_units_terminal_frozen';
    END IF;
    IF NEW.state <> OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('ready', 'claimed'), ('ready', 'abandoned'),
        ('claimed', 'in_progress'), ('claimed', 'ready'), ('claimed', 'abandoned'),
        ('in_progress', 'verified'), ('in_progress', 'blocked'), ('in_progress', 'ready'),
        ('in_progress', 'claimed'), ('in_progress', 'abandoned'),
        ('blocked', 'in_progress'), ('blocked', 'ready'), ('blocked', 'abandoned'),
        ('verified', 'done'), ('verified', 'abandoned')
    ) THEN
        RAISE EXCEPTION 'illegal state transition % -> % for unit %', OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'WL004', CONSTRAINT = 'work_units_legal_transition';
    END IF;
    -- work_units.cost_cents is a roll-up of its attempts, maintained by the
    -- attempts trigger below; any other change to it is refused.
    IF NEW.cost_cents <> OLD.cost_cents AND NEW.cost_cents <> (
        SELECT coalesce(sum(a.cost_cents), 0) FROM work_unit_attempts a WHERE a.unit_id = NEW.id
    ) THEN
        RAISE EXCEPTION 'cost_cents of unit % must equal the sum of its attempts', NEW.id
            USING ERRCODE = 'WL005', CONSTRAINT = 'work_units_cost_rollup';
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;
CREATE TRIGGER work_units_guard BEFORE UPDATE ON work_units
    FOR EACH ROW EXECUTE FUNCTION work_units_guard();

CREATE FUNCTION work_units_insert_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> 'ready' OR NEW.cost_cents <> 0 OR NEW.attempt_count <> 0
       OR NEW.current_attempt_id IS NOT NULL THEN
        RAISE EXCEPTION 'a new unit starts READY with no attempts and no cost' USING ERRCODE = 'WL006',
            CONSTRAINT = 'work_units_insert_ready';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER work_units_insert_guard BEFORE INSERT ON work_units
    FOR EACH ROW EXECUTE FUNCTION work_units_insert_guard();

-- Attempts: cost only grows, and every change is rolled up to the unit in the
-- same statement. Attempts are history: never deleted, never re-numbered.
CREATE FUNCTION work_unit_attempts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER work_unit_attempts_guard BEFORE INSERT OR UPDATE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION work_unit_attempts_guard();

CREATE FUNCTION work_unit_attempts_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE work_units SET cost_cents = cost_cents + (NEW.cost_cents - OLD.cost_cents)
     WHERE id = NEW.unit_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_attempts_rollup AFTER UPDATE OF cost_cents ON work_unit_attempts
    FOR EACH ROW WHEN (NEW.cost_cents <> OLD.cost_cents) EXECUTE FUNCTION work_unit_attempts_rollup();

-- History is append-only: events are never changed; units, attempts and
-- questions are never deleted.
CREATE FUNCTION refuse_history_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % is not allowed: the ledger is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'WL009', CONSTRAINT = TG_TABLE_NAME || '_append_only';
END
$$;
CREATE TRIGGER work_unit_events_append_only BEFORE UPDATE OR DELETE ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER work_unit_events_no_truncate BEFORE TRUNCATE ON work_unit_events
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER work_units_no_delete BEFORE DELETE ON work_units
    FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER work_unit_attempts_no_delete BEFORE DELETE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();
CREATE TRIGGER blocking_questions_no_delete BEFORE DELETE ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION refuse_history_rewrite();

-- Every event notifies in the transaction that wrote it (delivered on commit).
-- The payload carries ids only: listeners re-read rows, and the 8000-byte
-- NOTIFY limit can never be reached.
CREATE FUNCTION work_unit_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('work_ledger_events', json_build_object(
        'fleet', NEW.fleet, 'id', NEW.id, 'seq', NEW.seq, 'unit_id', NEW.unit_id,
        'type', NEW.event_type)::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_events_notify AFTER INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION work_unit_events_notify();

-- ---------------------------------------------------------------------------
-- Fleet isolation (SPEC §8): request transactions run as work_ledger_app with
-- the fleet in the transaction-local setting work_ledger.fleet. Without the
-- setting, every policy compares against NULL and no row is visible.
-- ---------------------------------------------------------------------------

DO $$
BEGIN
    CREATE ROLE work_ledger_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- roles are cluster-wide: another database of this cluster made it
END
$$;
DO $$
BEGIN
    EXECUTE format('GRANT work_ledger_app TO %I', current_user);
EXCEPTION WHEN OTHERS THEN
    NULL; -- already a member, or a superuser that needs no grant
END
$$;

CREATE FUNCTION current_fleet() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('work_ledger.fleet', true), '')
$$;

ALTER TABLE work_units ENABLE ROW LEVEL SECURITY;
ALTER TABLE work_unit_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE work_unit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE blocking_questions ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_tokens ENABLE ROW LEVEL SECURITY;

CREATE POLICY fleet_isolation ON work_units USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
CREATE POLICY fleet_isolation ON work_unit_attempts USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
CREATE POLICY fleet_isolation ON work_unit_events USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
CREATE POLICY fleet_isolation ON blocking_questions USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
CREATE POLICY fleet_isolation ON api_tokens USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());

GRANT USAGE ON SCHEMA public TO work_ledger_app;
GRANT SELECT, INSERT, UPDATE ON work_units, work_unit_attempts, blocking_questions TO work_ledger_app;
GRANT SELECT, INSERT ON work_unit_events TO work_ledger_app;
GRANT SELECT ON api_tokens TO work_ledger_app;

-- Authentication happens before the fleet is known: this function, owned by
-- the migrating role, is the one narrow door through RLS. It takes the hash,
-- never the secret, and returns nothing for an unknown or revoked token.
CREATE FUNCTION authenticate_token(p_hash bytea)
RETURNS TABLE (token_id uuid, fleet text, name text, permissions text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT t.id, t.fleet, t.name, t.permissions FROM api_tokens t
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION authenticate_token(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION authenticate_token(bytea) TO work_ledger_app;
