-- The claim path's own statements, cheaper (issue 28). Measured one claim at
-- a time with pgbench (`ledger_claim` as the owner, the service's
-- after-commit notification mode), where PostgreSQL's own time per claim
-- went into statements that re-plan or re-parse on every call:
--
-- 1. Row-level security called current_fleet(), a SQL function with a pinned
--    search_path, which PostgreSQL can neither inline nor keep a plan for:
--    its body was parsed and planned again by every statement of every
--    write, once per policy. The policies of the tables the writes touch now
--    hold the same expression inline. A policy is stored as a parsed
--    expression (every name resolved when it is created), so no caller's
--    search_path can change what it calls; current_fleet() itself stays,
--    pinned, for the views and the read-only totals.
-- 2. The guard triggers (SPEC §2's invariants, checked row by row in
--    PL/pgSQL) no longer run for the write functions' own statements. The
--    application role writes no table; every write it makes is one of those
--    functions (SECURITY DEFINER, as work_ledger_writer), whose statements
--    carry the same rules in their own WHERE clauses and are tested through
--    every surface. The triggers stay for everyone else: the owner, a
--    superuser, the triggers that run as the owner (the cost roll-up, the
--    sweeper's stall reports). Each trigger's condition gains
--    "current_user <> 'work_ledger_writer'", which PostgreSQL evaluates
--    without calling PL/pgSQL; for the deferred checks it keeps the event
--    from being queued at all. Only the owner's login is a member of the
--    writer role (it hands the functions over), and it could disable the
--    triggers anyway. Measured at 64 concurrent claims: about 30% of the
--    claim statement's time. The guard used to stamp updated_at; the write
--    functions now set it in each of their updates of a unit.
-- 3. The claim's totals (migration 0020) in one statement instead of three:
--    the attempts' units are read once (their domain for the agent totals,
--    their disposition for the rare back-filled attempt), and an agent's
--    earlier attempt on the unit is looked up among the unit's own attempts
--    (a handful, on the unit's index). That was the last use of
--    work_unit_attempts_agent_idx on any path (costSummary(AGENT) reads
--    agent_totals, the roster reads work_unit_attempts_agent_started_idx),
--    so it goes: one index and one lock fewer for every claim.
-- 4. A dispose adds its unit's agents to the disposal sets (migration 0020)
--    through disposal_agents_noted(), a SQL function: planned again on every
--    call (1.6 ms), and with the units given as "u.id = ANY(p_units)" the
--    planner could walk every disposed unit of the fleet on the disposal
--    index and filter them by id (2.5 ms per dispose at 3,700 disposed units;
--    proportional to the fleet's history; the planner took that partial
--    index, which it believed empty, because the statement repeated its
--    predicate). It is PL/pgSQL now, driven by the array, each unit found by
--    its primary key. Its callers pass disposed units only (the disposal
--    trigger, and the attempts' trigger after its own check), and the sets'
--    disposition column is NOT NULL, so a unit without one fails loudly.
-- 5. The evidence links CHECK called ledger_are_links() on every UPDATE of a
--    unit (a claim, a heartbeat), parsing its body each time, although only
--    a unit that carries links has any to check. It now calls it only then;
--    the rule is the same (an empty or absent list passes, as before).

-- 1. Row-level security without a function call.
ALTER POLICY fleet_isolation ON work_units
    USING (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''))
    WITH CHECK (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''));
ALTER POLICY fleet_isolation ON work_unit_attempts
    USING (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''))
    WITH CHECK (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''));
ALTER POLICY fleet_isolation ON work_unit_events
    USING (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''))
    WITH CHECK (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''));
ALTER POLICY fleet_isolation ON blocking_questions
    USING (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''))
    WITH CHECK (fleet = NULLIF(pg_catalog.current_setting('work_ledger.fleet', true), ''));

-- 2. The guards, for everyone but the write functions.
DROP TRIGGER work_units_guard ON work_units;
CREATE TRIGGER work_units_guard BEFORE UPDATE ON work_units
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer')
    EXECUTE FUNCTION work_units_guard();
DROP TRIGGER work_units_insert_guard ON work_units;
CREATE TRIGGER work_units_insert_guard BEFORE INSERT ON work_units
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer')
    EXECUTE FUNCTION work_units_insert_guard();
DROP TRIGGER work_units_holder_guard ON work_units;
CREATE TRIGGER work_units_holder_guard BEFORE UPDATE OF claimed_by, current_attempt_id ON work_units
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer'
                       AND (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                            OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id))
    EXECUTE FUNCTION work_units_holder_guard();
DROP TRIGGER work_units_evidence_guard ON work_units;
CREATE TRIGGER work_units_evidence_guard BEFORE UPDATE OF evidence_urls ON work_units
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer' AND NEW.evidence_urls IS DISTINCT FROM OLD.evidence_urls)
    EXECUTE FUNCTION work_units_evidence_guard();
DROP TRIGGER work_units_change_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_change_recorded AFTER UPDATE OF state ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer' AND NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION work_units_change_recorded();
DROP TRIGGER work_units_claim_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_claim_recorded AFTER UPDATE OF claimed_by, current_attempt_id ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer' AND NEW.claimed_by IS NOT NULL
                       AND (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                            OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id))
    EXECUTE FUNCTION work_units_claim_recorded();
DROP TRIGGER work_unit_attempts_guard ON work_unit_attempts;
CREATE TRIGGER work_unit_attempts_guard BEFORE INSERT OR UPDATE ON work_unit_attempts
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer')
    EXECUTE FUNCTION work_unit_attempts_guard();
DROP TRIGGER work_unit_attempts_history_guard ON work_unit_attempts;
CREATE TRIGGER work_unit_attempts_history_guard BEFORE UPDATE ON work_unit_attempts
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer')
    EXECUTE FUNCTION work_unit_attempts_history_guard();
DROP TRIGGER blocking_questions_guard ON blocking_questions;
CREATE TRIGGER blocking_questions_guard BEFORE UPDATE ON blocking_questions
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer')
    EXECUTE FUNCTION blocking_questions_guard();

-- 3. The claim's totals in one statement.
CREATE OR REPLACE FUNCTION claim_days_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    disposed boolean;
BEGIN
    WITH claimed AS MATERIALIZED (
             SELECT a.id, a.fleet, a.unit_id, a.agent_id, a.outcome, a.cost_cents, a.started_at,
                    ((a.started_at) AT TIME ZONE 'UTC')::date AS day, u.domain, u.disposition
               FROM added a JOIN work_units u ON u.id = a.unit_id),
         fresh AS (
             INSERT INTO claim_agents (fleet, day, agent_id)
             SELECT DISTINCT c.fleet, c.day, c.agent_id FROM claimed c
             ON CONFLICT DO NOTHING
             RETURNING fleet, day),
         unstarted AS (
             INSERT INTO never_started (attempt_id, fleet, started_at)
             SELECT c.id, c.fleet, c.started_at FROM claimed c WHERE c.outcome IS NOT NULL
             ON CONFLICT DO NOTHING
             RETURNING fleet, started_at),
         days AS (
             INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
             SELECT fleet, day, sum(claims), sum(agents), sum(verified), sum(stale), sum(never_started)
               FROM (SELECT c.fleet, c.day, 1 AS claims, 0 AS agents,
                            (c.outcome IS NOT DISTINCT FROM 'verified')::int AS verified,
                            (c.outcome IS NOT DISTINCT FROM 'superseded')::int AS stale,
                            0 AS never_started
                       FROM claimed c
                     UNION ALL
                     SELECT fleet, day, 0, 1, 0, 0, 0 FROM fresh
                     UNION ALL
                     SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date, 0, 0, 0, 0, 1 FROM unstarted) x
              GROUP BY 1, 2),
         -- An agent's first attempt on a unit adds the unit to its totals.
         agents AS (
             INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
             SELECT n.fleet, n.agent_id, n.domain, count(*) FILTER (WHERE n.first), sum(n.cost)
               FROM (SELECT c.fleet, c.agent_id, c.unit_id, c.domain, sum(c.cost_cents) AS cost,
                            NOT EXISTS (SELECT 1 FROM work_unit_attempts o
                                         WHERE o.unit_id = c.unit_id AND o.agent_id = c.agent_id
                                           AND o.id NOT IN (SELECT d.id FROM added d)) AS first
                       FROM claimed c GROUP BY c.fleet, c.agent_id, c.unit_id, c.domain) n
              GROUP BY 1, 2, 3)
    SELECT bool_or(c.disposition IS NOT NULL) INTO disposed FROM claimed c;
    -- Attempts of units already disposed (an import writes the unit first;
    -- a claim never meets one).
    IF disposed THEN
        PERFORM disposal_agents_noted(array_agg(DISTINCT a.unit_id))
           FROM added a JOIN work_units u ON u.id = a.unit_id
          WHERE u.disposition IS NOT NULL;
        -- A first attempt of a unit disposed in an ended week: that week's cycle time.
        PERFORM cycle_week_reopened(u.fleet, min(date_trunc('week', (((u.disposed_at) AT TIME ZONE 'UTC')::date)::timestamp)::date))
           FROM added a JOIN work_units u ON u.id = a.unit_id
          WHERE a.attempt_no = 1 AND u.disposition IS NOT NULL AND ledger_in_ended_week(u.disposed_at)
          GROUP BY u.fleet;
    END IF;
    RETURN NULL;
END
$$;
DROP INDEX work_unit_attempts_agent_idx;

-- 4. The disposal sets, from the given units by their keys.
CREATE OR REPLACE FUNCTION disposal_agents_noted(p_units uuid[]) RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    WITH fresh AS (
        INSERT INTO disposal_agents (fleet, week, start, domain, disposition, agent_id)
        SELECT DISTINCT u.fleet, k.week, CASE WHEN k.week THEN date_trunc('week', (d.day)::timestamp)::date ELSE d.day END,
               CASE WHEN k.every THEN '' ELSE u.domain END, u.disposition, a.agent_id
          FROM unnest(p_units) AS p(id)
          JOIN work_units u ON u.id = p.id
          JOIN work_unit_attempts a ON a.unit_id = u.id
          CROSS JOIN LATERAL (SELECT ((u.disposed_at) AT TIME ZONE 'UTC')::date AS day) d
          CROSS JOIN (VALUES (false, false), (false, true), (true, false), (true, true)) AS k(week, every)
        ON CONFLICT DO NOTHING
        RETURNING fleet, week, start, domain, disposition)
    INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
    SELECT fleet, week, start, domain, disposition, count(*) FROM fresh GROUP BY 1, 2, 3, 4, 5;
END
$$;

-- 5. Evidence links are checked when there are any.
ALTER TABLE work_units DROP CONSTRAINT work_units_evidence_links;
ALTER TABLE work_units ADD CONSTRAINT work_units_evidence_links
    CHECK (cardinality(evidence_urls) = 0 OR ledger_are_links(evidence_urls)) NOT VALID;
ALTER TABLE work_units VALIDATE CONSTRAINT work_units_evidence_links;
