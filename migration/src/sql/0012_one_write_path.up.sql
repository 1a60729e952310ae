-- One write path, owned by the database (issue 22, SPEC §2).
--
-- The application role (work_ledger_app) keeps SELECT and loses every
-- INSERT, UPDATE and DELETE on the ledger's tables. Every write is one call
-- of a SQL function (the repeatable file sql/repeatable/writes.sql) that
-- runs as the NOLOGIN role work_ledger_writer (SECURITY DEFINER). That role
-- does not own the tables, so row-level security applies inside the
-- functions as it does to the application: each function scopes itself to
-- the fleet it is given, and another fleet's ids are simply not there.
--
-- The triggers stay, as the second line for anyone writing as the owner or
-- a superuser, and now hold whatever the caller's settings say: every
-- function has a pinned search_path with pg_temp last (a temporary table
-- can no longer stand in for a ledger table), and the triggers that read
-- other rows (the cost roll-up and its check, the holder checks, the
-- change log check) run as the tables' owner, which row-level security
-- does not filter, so emptying the fleet setting cannot switch them off.

DO $$
BEGIN
    CREATE ROLE work_ledger_writer NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- roles are cluster-wide: another database of this cluster made it
END
$$;
-- The migrating login hands the write functions to the writer role, which
-- needs membership (a superuser needs none).
DO $$
BEGIN
    EXECUTE format('GRANT work_ledger_writer TO %I', current_user);
EXCEPTION WHEN OTHERS THEN
    NULL;
END
$$;

-- The application reads; only the write functions write.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER
    ON work_units, work_unit_attempts, work_unit_events, blocking_questions, api_tokens FROM work_ledger_app;
REVOKE USAGE ON SEQUENCE work_unit_events_batch_seq FROM work_ledger_app;

GRANT USAGE ON SCHEMA public TO work_ledger_writer;
GRANT SELECT, INSERT, UPDATE ON work_units, work_unit_attempts, blocking_questions TO work_ledger_writer;
GRANT SELECT, INSERT ON work_unit_events TO work_ledger_writer;
GRANT USAGE, SELECT ON SEQUENCE work_unit_events_batch_seq TO work_ledger_writer;
GRANT EXECUTE ON FUNCTION live_fleet_tag(text) TO work_ledger_writer;

ALTER POLICY fleet_isolation ON work_units TO work_ledger_app, work_ledger_writer;
ALTER POLICY fleet_isolation ON work_unit_attempts TO work_ledger_app, work_ledger_writer;
ALTER POLICY fleet_isolation ON work_unit_events TO work_ledger_app, work_ledger_writer;
ALTER POLICY fleet_isolation ON blocking_questions TO work_ledger_app, work_ledger_writer;

-- The functions of migrations 0010 and 0011 ran as the caller and needed
-- its table grants; the repeatable writes replace them.
DROP FUNCTION ledger_claim_next(text, text, integer, text);
DROP FUNCTION ledger_heartbeat(text, text, text, text, integer, uuid, text, text);
DROP FUNCTION ledger_start(text, text, text, text, uuid, text);
DROP FUNCTION ledger_verify(text, text, text, text, uuid, text, text);
DROP FUNCTION ledger_dispose(text, text, text, text, uuid, text, text, text, text, text[], text[], text);
DROP FUNCTION ledger_scope(text, text);

-- ---------------------------------------------------------------------------
-- Evidence: valid links only, and frozen once the work is verified.
-- ---------------------------------------------------------------------------

-- An absolute http(s) link of at most 2048 characters with no space or
-- control character (the service checks more; this is the floor a hand-made
-- row must meet, so that whatever the table holds, the API can read).
CREATE FUNCTION ledger_is_link(p_url text) RETURNS boolean LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp AS $$
    SELECT char_length(p_url) <= 2048 AND p_url ~* '^https?://[^[:space:][:cntrl:]/?#]+([/?#][^[:space:][:cntrl:]]*)?$'
$$;
-- Every element a link (no NULL element either).
CREATE FUNCTION ledger_are_links(p_urls text[]) RETURNS boolean LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT coalesce(bool_and(x IS NOT NULL AND public.ledger_is_link(x)), true) FROM unnest(p_urls) AS x
$$;
ALTER TABLE work_units ADD CONSTRAINT work_units_evidence_links CHECK (ledger_are_links(evidence_urls));
ALTER TABLE work_unit_attempts ADD CONSTRAINT work_unit_attempts_evidence_link
    CHECK (evidence_url IS NULL OR ledger_is_link(evidence_url));

-- Evidence is added only by the change that settles the unit (VERIFIED, or
-- a disposition), and only ever appended: a VERIFIED unit's links cannot be
-- swapped before its disposition certifies them.
CREATE FUNCTION work_units_evidence_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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
CREATE TRIGGER work_units_evidence_guard BEFORE UPDATE OF evidence_urls ON work_units
    FOR EACH ROW WHEN (NEW.evidence_urls IS DISTINCT FROM OLD.evidence_urls)
    EXECUTE FUNCTION work_units_evidence_guard();

-- ---------------------------------------------------------------------------
-- The holder changes only with a claim: a new holder or attempt needs the
-- attempt's `claimed` event in the same transaction, and the attempt it
-- replaces must have ended by then. Checked at commit, on the row as the
-- transaction leaves it.
-- ---------------------------------------------------------------------------
CREATE FUNCTION work_units_claim_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
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
CREATE CONSTRAINT TRIGGER work_units_claim_recorded AFTER UPDATE OF claimed_by, current_attempt_id ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.claimed_by IS NOT NULL AND (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                                                       OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id))
    EXECUTE FUNCTION work_units_claim_recorded();

-- The triggers that read other rows run as the tables' owner: row-level
-- security (and so the caller's fleet setting) cannot hide the rows they
-- check or update. The roll-up in particular updates its unit whatever the
-- setting says.
ALTER FUNCTION work_unit_attempts_rollup() SECURITY DEFINER;
ALTER FUNCTION work_units_guard() SECURITY DEFINER;
ALTER FUNCTION work_units_holder_guard() SECURITY DEFINER;
ALTER FUNCTION work_units_change_recorded() SECURITY DEFINER;

-- Every function of this schema (trigger functions included) resolves names
-- in a fixed path with pg_temp last, whoever calls it with whatever
-- search_path. Functions that pinned their own path keep it.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
           AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c LIKE 'search_path=%')
           AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                                                      AND d.deptype = 'e')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, public, pg_temp', f);
    END LOOP;
END
$$;
