-- Migration 0020's disposal sets function.
CREATE OR REPLACE FUNCTION disposal_agents_noted(p_units uuid[]) RETURNS void LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH fresh AS (
        INSERT INTO disposal_agents (fleet, week, start, domain, disposition, agent_id)
        SELECT DISTINCT u.fleet, k.week, CASE WHEN k.week THEN date_trunc('week', (d.day)::timestamp)::date ELSE d.day END,
               CASE WHEN k.every THEN '' ELSE u.domain END, u.disposition, a.agent_id
          FROM work_units u
          JOIN work_unit_attempts a ON a.unit_id = u.id
          CROSS JOIN LATERAL (SELECT ((u.disposed_at) AT TIME ZONE 'UTC')::date AS day) d
          CROSS JOIN (VALUES (false, false), (false, true), (true, false), (true, true)) AS k(week, every)
         WHERE u.id = ANY(p_units) AND u.disposition IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING fleet, week, start, domain, disposition)
    INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
    SELECT fleet, week, start, domain, disposition, count(*) FROM fresh GROUP BY 1, 2, 3, 4, 5
$$;

-- Migration 0020's claim totals, and the index its agent probe read.
CREATE INDEX work_unit_attempts_agent_idx ON work_unit_attempts (fleet, agent_id, unit_id) INCLUDE (cost_cents, id);
CREATE OR REPLACE FUNCTION claim_days_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    WITH fresh AS (
             INSERT INTO claim_agents (fleet, day, agent_id)
             SELECT DISTINCT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date, a.agent_id FROM added a
             ON CONFLICT DO NOTHING
             RETURNING fleet, day),
         unstarted AS (
             INSERT INTO never_started (attempt_id, fleet, started_at)
             SELECT a.id, a.fleet, a.started_at FROM added a WHERE a.outcome IS NOT NULL
             ON CONFLICT DO NOTHING
             RETURNING fleet, started_at)
    INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
    SELECT fleet, day, sum(claims), sum(agents), sum(verified), sum(stale), sum(never_started)
      FROM (SELECT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date AS day, 1 AS claims, 0 AS agents,
                   (a.outcome IS NOT DISTINCT FROM 'verified')::int AS verified,
                   (a.outcome IS NOT DISTINCT FROM 'superseded')::int AS stale,
                   0 AS never_started
              FROM added a
            UNION ALL
            SELECT fleet, day, 0, 1, 0, 0, 0 FROM fresh
            UNION ALL
            SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date, 0, 0, 0, 0, 1 FROM unstarted) c
     GROUP BY 1, 2;
    -- An agent's first attempt on a unit adds the unit to its totals.
    INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
    SELECT n.fleet, n.agent_id, u.domain, count(*) FILTER (WHERE n.first), sum(n.cost)
      FROM (SELECT a.fleet, a.agent_id, a.unit_id, sum(a.cost_cents) AS cost,
                   NOT EXISTS (SELECT 1 FROM work_unit_attempts o
                                WHERE o.fleet = a.fleet AND o.agent_id = a.agent_id AND o.unit_id = a.unit_id
                                  AND o.id NOT IN (SELECT d.id FROM added d)) AS first
              FROM added a GROUP BY a.fleet, a.agent_id, a.unit_id) n
      JOIN work_units u ON u.id = n.unit_id
     GROUP BY 1, 2, 3;
    -- Attempts of units already disposed (an import writes the unit first;
    -- a claim never meets one).
    IF EXISTS (SELECT 1 FROM added a JOIN work_units u ON u.id = a.unit_id WHERE u.disposition IS NOT NULL) THEN
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

ALTER TABLE work_units DROP CONSTRAINT work_units_evidence_links;
ALTER TABLE work_units ADD CONSTRAINT work_units_evidence_links CHECK (ledger_are_links(evidence_urls));

ALTER POLICY fleet_isolation ON work_units USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
ALTER POLICY fleet_isolation ON work_unit_attempts USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
ALTER POLICY fleet_isolation ON work_unit_events USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());
ALTER POLICY fleet_isolation ON blocking_questions USING (fleet = current_fleet()) WITH CHECK (fleet = current_fleet());

DROP TRIGGER work_units_guard ON work_units;
CREATE TRIGGER work_units_guard BEFORE UPDATE ON work_units
    FOR EACH ROW EXECUTE FUNCTION work_units_guard();
DROP TRIGGER work_units_insert_guard ON work_units;
CREATE TRIGGER work_units_insert_guard BEFORE INSERT ON work_units
    FOR EACH ROW EXECUTE FUNCTION work_units_insert_guard();
DROP TRIGGER work_units_holder_guard ON work_units;
CREATE TRIGGER work_units_holder_guard BEFORE UPDATE OF claimed_by, current_attempt_id ON work_units
    FOR EACH ROW WHEN (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                       OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id)
    EXECUTE FUNCTION work_units_holder_guard();
DROP TRIGGER work_units_evidence_guard ON work_units;
CREATE TRIGGER work_units_evidence_guard BEFORE UPDATE OF evidence_urls ON work_units
    FOR EACH ROW WHEN (NEW.evidence_urls IS DISTINCT FROM OLD.evidence_urls)
    EXECUTE FUNCTION work_units_evidence_guard();
DROP TRIGGER work_units_change_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_change_recorded AFTER UPDATE OF state ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION work_units_change_recorded();
DROP TRIGGER work_units_claim_recorded ON work_units;
CREATE CONSTRAINT TRIGGER work_units_claim_recorded AFTER UPDATE OF claimed_by, current_attempt_id ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.claimed_by IS NOT NULL
                       AND (NEW.claimed_by IS DISTINCT FROM OLD.claimed_by
                            OR NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id))
    EXECUTE FUNCTION work_units_claim_recorded();
DROP TRIGGER work_unit_attempts_guard ON work_unit_attempts;
CREATE TRIGGER work_unit_attempts_guard BEFORE INSERT OR UPDATE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION work_unit_attempts_guard();
DROP TRIGGER work_unit_attempts_history_guard ON work_unit_attempts;
CREATE TRIGGER work_unit_attempts_history_guard BEFORE UPDATE ON work_unit_attempts
    FOR EACH ROW EXECUTE FUNCTION work_unit_attempts_history_guard();
DROP TRIGGER blocking_questions_guard ON blocking_questions;
CREATE TRIGGER blocking_questions_guard BEFORE UPDATE ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION blocking_questions_guard();
