-- Totals per UTC day (issue 27): the operator's reads over time at any size.
--
-- throughput, claimingAgents, weeklyMetrics, the dispositions of a range and
-- their dashboard panels grouped every disposal or attempt of the fleet's
-- history at read time: 1.5 to over 10 seconds at 500,000 units of a fleet
-- with 16 readers. They now read totals per UTC day, kept exact in the
-- writing transaction the way the unit totals are (0018): triggers append
-- delta rows, ledger_compact_totals() folds them in every sweeper pass,
-- ledger_rebuild_totals() recounts them after a bulk load, and the audit
-- reconciles each with the rows (rules disposal_days, disposal_agents,
-- claim_days).
--
-- Distinct agents cannot be summed: a day's agents are a set. The sets
-- (disposal_agents, claim_agents) are tables with a primary key, written
-- with ON CONFLICT DO NOTHING; a row that is new adds one to the day's
-- count. Only the same agent's own writes can meet on a set row.
--
-- Days are UTC dates, weeks the UTC dates of their Monday. Timestamps are
-- taken to UTC wall time before any arithmetic, so the session's TimeZone
-- never moves a bucket.

-- The first Monday 00:00 UTC at or after a time (NULL and infinities as they are).
CREATE FUNCTION ledger_week_at_or_after(timestamptz) RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, public, pg_temp
RETURN CASE WHEN $1 IS NULL OR NOT isfinite($1) THEN $1
            WHEN date_trunc('week', $1 AT TIME ZONE 'UTC') = $1 AT TIME ZONE 'UTC' THEN $1
            ELSE (date_trunc('week', $1 AT TIME ZONE 'UTC') + interval '1 week') AT TIME ZONE 'UTC' END;

-- Disposals per (day, domain, disposition): units, cost, reworked units,
-- and the verified throughput (units with cost and evidence).
CREATE TABLE disposal_days (
    fleet               text        NOT NULL,
    day                 date,
    domain              text        NOT NULL,
    disposition         disposition NOT NULL,
    units               bigint      NOT NULL,
    cost_cents          bigint      NOT NULL,
    reworked            bigint      NOT NULL,
    verified_units      bigint      NOT NULL,
    verified_cost_cents bigint      NOT NULL
);
CREATE INDEX disposal_days_day_idx ON disposal_days (fleet, day);

-- The distinct agents of the units disposed per bucket: per day and per
-- week, per domain and for every domain (''). Written once per disposal.
CREATE TABLE disposal_agents (
    fleet       text        NOT NULL,
    week        boolean     NOT NULL,
    start       date        NOT NULL,
    domain      text        NOT NULL,
    disposition disposition NOT NULL,
    agent_id    text        NOT NULL,
    PRIMARY KEY (fleet, week, domain, start, disposition, agent_id)
);
CREATE TABLE disposal_agent_counts (
    fleet       text        NOT NULL,
    week        boolean     NOT NULL,
    start       date        NOT NULL,
    domain      text        NOT NULL,
    disposition disposition NOT NULL,
    agents      bigint      NOT NULL
);
CREATE INDEX disposal_agent_counts_idx ON disposal_agent_counts (fleet, week, domain, start);

-- Claims per day of their start: how many, by how many distinct agents,
-- how many ended verified, went stale (superseded, or reported stalled),
-- or ended without the unit ever being started under them.
CREATE TABLE claim_days (
    fleet         text   NOT NULL,
    day           date   NOT NULL,
    claims        bigint NOT NULL,
    agents        bigint NOT NULL,
    verified      bigint NOT NULL,
    stale         bigint NOT NULL,
    never_started bigint NOT NULL
);
CREATE TABLE claim_agents (
    fleet    text NOT NULL,
    day      date NOT NULL,
    agent_id text NOT NULL,
    PRIMARY KEY (fleet, day, agent_id)
);
-- The anti-metric row by row: ended attempts with no `transitioned` event.
CREATE TABLE never_started (
    attempt_id uuid        PRIMARY KEY,
    fleet      text        NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX never_started_started_idx ON never_started (fleet, started_at);

-- Units and cost per agent and domain (costSummary(groupBy: AGENT) without
-- a range): the units an agent made attempts on, each once, and the cost of
-- its attempts.
CREATE TABLE agent_totals (
    fleet      text   NOT NULL,
    agent_id   text   NOT NULL,
    domain     text   NOT NULL,
    units      bigint NOT NULL,
    cost_cents bigint NOT NULL
);

-- Events per agent as well (events { totalCount } of an agentId).
ALTER TABLE event_totals ADD COLUMN agent_id text;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['disposal_days', 'disposal_agents', 'disposal_agent_counts', 'claim_days',
                             'claim_agents', 'never_started', 'agent_totals'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY fleet_isolation ON %I FOR SELECT TO work_ledger_app USING (fleet = current_fleet())', t);
        EXECUTE format('CREATE POLICY fleet_reader ON %I FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet())', t);
        EXECUTE format('GRANT SELECT ON %I TO work_ledger_app, work_ledger_reader', t);
    END LOOP;
    -- The delta tables: vacuumed at a fixed number of dead rows, whatever their size.
    FOREACH t IN ARRAY ARRAY['disposal_days', 'disposal_agent_counts', 'claim_days', 'agent_totals'] LOOP
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                        autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0)', t);
    END LOOP;
END
$$;

-- The agents of these units' attempts, for the units that are disposed,
-- added to the disposal sets; a new set row counts one.
CREATE FUNCTION disposal_agents_noted(p_units uuid[]) RETURNS void LANGUAGE sql VOLATILE SECURITY DEFINER
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
REVOKE ALL ON FUNCTION disposal_agents_noted(uuid[]) FROM PUBLIC;

-- New units: their totals (0018), and the disposed ones (an import) per day.
CREATE OR REPLACE FUNCTION unit_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT a.fleet, a.domain, a.state, a.disposition, a.attempt_count > 1, count(*), sum(a.cost_cents)
      FROM added a GROUP BY 1, 2, 3, 4, 5;
    INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                               verified_cost_cents)
    SELECT a.fleet, ((a.disposed_at) AT TIME ZONE 'UTC')::date, a.domain, a.disposition, count(*), sum(a.cost_cents),
           count(*) FILTER (WHERE a.attempt_count > 1),
           count(*) FILTER (WHERE a.cost_cents > 0 AND cardinality(a.evidence_urls) > 0),
           coalesce(sum(a.cost_cents) FILTER (WHERE a.cost_cents > 0 AND cardinality(a.evidence_urls) > 0), 0)
      FROM added a WHERE a.disposition IS NOT NULL GROUP BY 1, 2, 3, 4;
    PERFORM cycle_week_reopened(a.fleet, min(date_trunc('week', (((a.disposed_at) AT TIME ZONE 'UTC')::date)::timestamp)::date))
       FROM added a WHERE a.disposition IS NOT NULL AND ledger_in_ended_week(a.disposed_at) GROUP BY a.fleet;
    RETURN NULL;
END
$$;

-- A disposed unit, or one whose disposal changes (cost recorded later, an
-- owner's repair): minus what it counted, plus what it counts now.
CREATE FUNCTION disposal_days_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                               verified_cost_cents)
    SELECT r.fleet, ((r.disposed_at) AT TIME ZONE 'UTC')::date, r.domain, r.disposition, s.sign, s.sign * r.cost_cents,
           s.sign * (r.attempt_count > 1)::int, s.sign * v.verified::int, s.sign * v.verified::int * r.cost_cents
      FROM (VALUES (OLD, -1), (NEW, 1)) AS s(unit, sign)
      CROSS JOIN LATERAL (SELECT (s.unit).*) r
      CROSS JOIN LATERAL (SELECT r.cost_cents > 0 AND cardinality(r.evidence_urls) > 0 AS verified) v
     WHERE r.disposition IS NOT NULL;
    IF OLD.disposition IS NULL AND NEW.disposition IS NOT NULL THEN
        PERFORM disposal_agents_noted(ARRAY[NEW.id]);
    END IF;
    -- The cycle time of an ended week changes with its disposals' dates.
    IF OLD.disposed_at IS DISTINCT FROM NEW.disposed_at OR OLD.fleet IS DISTINCT FROM NEW.fleet THEN
        PERFORM cycle_week_reopened(r.fleet, date_trunc('week', (((r.disposed_at) AT TIME ZONE 'UTC')::date)::timestamp)::date)
           FROM (VALUES (OLD.fleet, OLD.disposed_at), (NEW.fleet, NEW.disposed_at)) AS r(fleet, disposed_at)
          WHERE r.disposed_at IS NOT NULL AND ledger_in_ended_week(r.disposed_at);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_units_disposal_days AFTER UPDATE ON work_units FOR EACH ROW
    WHEN ((OLD.disposition IS NOT NULL OR NEW.disposition IS NOT NULL)
          AND (OLD.disposition IS DISTINCT FROM NEW.disposition OR OLD.disposed_at IS DISTINCT FROM NEW.disposed_at
               OR OLD.cost_cents IS DISTINCT FROM NEW.cost_cents OR OLD.domain IS DISTINCT FROM NEW.domain
               OR OLD.fleet IS DISTINCT FROM NEW.fleet
               OR (OLD.attempt_count > 1) IS DISTINCT FROM (NEW.attempt_count > 1)
               OR (cardinality(OLD.evidence_urls) > 0) IS DISTINCT FROM (cardinality(NEW.evidence_urls) > 0)))
    EXECUTE FUNCTION disposal_days_moved();

-- New attempts (claims, or an import's history): claims and their agents
-- per day; attempts that arrive ended count as they ended; an attempt of
-- a unit already disposed (an import writes the unit first) adds its agent
-- to the unit's disposal sets.
CREATE FUNCTION claim_days_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
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
CREATE TRIGGER work_unit_attempts_claim_days AFTER INSERT ON work_unit_attempts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION claim_days_added();

-- An attempt that ends, or whose cost grows. Stale is "superseded, or reported stalled": a stall
-- report that came first already counted it (the report's trigger takes the
-- attempt's row lock, so the two cannot both miss each other). Never started:
-- no `transitioned` event names the attempt when it ends (the unit's lock
-- orders both writes).
CREATE FUNCTION attempt_totals_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    stalled boolean;
    unstarted int := 0;
BEGIN
    IF NEW.cost_cents IS DISTINCT FROM OLD.cost_cents THEN
        INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
        SELECT NEW.fleet, NEW.agent_id, u.domain, 0, NEW.cost_cents - OLD.cost_cents
          FROM work_units u WHERE u.id = NEW.unit_id;
    END IF;
    IF OLD.outcome IS NOT DISTINCT FROM NEW.outcome THEN
        RETURN NULL;
    END IF;
    stalled := EXISTS (SELECT 1 FROM work_unit_events e WHERE e.attempt_id = NEW.id AND e.event_type = 'stalled');
    IF OLD.outcome IS NULL AND NEW.outcome IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                        WHERE e.unit_id = NEW.unit_id AND e.attempt_id = NEW.id AND e.event_type = 'transitioned') THEN
        INSERT INTO never_started (attempt_id, fleet, started_at) VALUES (NEW.id, NEW.fleet, NEW.started_at)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS unstarted = ROW_COUNT;
    ELSIF NEW.outcome IS NULL THEN
        DELETE FROM never_started WHERE attempt_id = NEW.id;
        GET DIAGNOSTICS unstarted = ROW_COUNT;
        unstarted := -unstarted;
    END IF;
    INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
    VALUES (NEW.fleet, ((NEW.started_at) AT TIME ZONE 'UTC')::date, 0, 0,
            (NEW.outcome IS NOT DISTINCT FROM 'verified')::int - (OLD.outcome IS NOT DISTINCT FROM 'verified')::int,
            CASE WHEN stalled THEN 0
                 ELSE (NEW.outcome IS NOT DISTINCT FROM 'superseded')::int
                      - (OLD.outcome IS NOT DISTINCT FROM 'superseded')::int END,
            unstarted);
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_attempts_totals_moved AFTER UPDATE ON work_unit_attempts FOR EACH ROW
    WHEN (OLD.outcome IS DISTINCT FROM NEW.outcome OR OLD.cost_cents IS DISTINCT FROM NEW.cost_cents)
    EXECUTE FUNCTION attempt_totals_moved();

-- New events: the totals per type and agent (0019), stall reports (stale
-- unless already superseded; the attempt's row lock orders this against the
-- write that supersedes it) and the first `transitioned` of an attempt that
-- had ended unstarted (an import writes the attempt before its events).
CREATE OR REPLACE FUNCTION event_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, agent_id, events)
    SELECT a.fleet, a.event_type, a.agent_id, count(*) FROM added a GROUP BY 1, 2, 3;
    IF EXISTS (SELECT 1 FROM added a WHERE a.attempt_id IS NOT NULL AND a.event_type IN ('stalled', 'transitioned')) THEN
        WITH stalled AS (
                 SELECT t.fleet, t.started_at, t.outcome FROM work_unit_attempts t
                  WHERE t.id IN (SELECT a.attempt_id FROM added a WHERE a.event_type = 'stalled')
                  FOR SHARE),
             started AS (
                 DELETE FROM never_started n
                  WHERE n.attempt_id IN (SELECT a.attempt_id FROM added a WHERE a.event_type = 'transitioned')
                 RETURNING n.fleet, n.started_at)
        INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
        SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date, 0, 0, 0, sum(stale), sum(unstarted)
          FROM (SELECT fleet, started_at, 1 AS stale, 0 AS unstarted FROM stalled
                 WHERE outcome IS DISTINCT FROM 'superseded'
                UNION ALL
                SELECT fleet, started_at, 0, -1 FROM started) c
         GROUP BY 1, 2;
    END IF;
    RETURN NULL;
END
$$;

-- Folds every delta table into one row per group; returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH gone AS (DELETE FROM unit_totals RETURNING *),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents)
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         gone_events AS (DELETE FROM event_totals RETURNING *),
         kept_events AS (
             INSERT INTO event_totals (fleet, event_type, agent_id, events)
             SELECT fleet, event_type, agent_id, sum(events) FROM gone_events GROUP BY 1, 2, 3
             HAVING sum(events) <> 0
             RETURNING 1),
         gone_disposals AS (DELETE FROM disposal_days RETURNING *),
         kept_disposals AS (
             INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                                        verified_cost_cents)
             SELECT fleet, day, domain, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents)
               FROM gone_disposals GROUP BY 1, 2, 3, 4
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1),
         gone_agents AS (DELETE FROM disposal_agent_counts RETURNING *),
         kept_agents AS (
             INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
             SELECT fleet, week, start, domain, disposition, sum(agents) FROM gone_agents GROUP BY 1, 2, 3, 4, 5
             HAVING sum(agents) <> 0
             RETURNING 1),
         gone_agent_totals AS (DELETE FROM agent_totals RETURNING *),
         kept_agent_totals AS (
             INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
             SELECT fleet, agent_id, domain, sum(units), sum(cost_cents) FROM gone_agent_totals GROUP BY 1, 2, 3
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         gone_claims AS (DELETE FROM claim_days RETURNING *),
         kept_claims AS (
             INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
             SELECT fleet, day, sum(claims), sum(agents), sum(verified), sum(stale), sum(never_started)
               FROM gone_claims GROUP BY 1, 2
             HAVING sum(claims) <> 0 OR sum(agents) <> 0 OR sum(verified) <> 0 OR sum(stale) <> 0
                 OR sum(never_started) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_events) + (SELECT count(*) FROM gone_disposals)
         + (SELECT count(*) FROM gone_agents) + (SELECT count(*) FROM gone_claims)
         + (SELECT count(*) FROM gone_agent_totals)
$$;

-- Recounts every total and set from the rows (after a bulk load that
-- bypassed the triggers). Writers wait for it. The owner's only.
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts, work_unit_events, unit_totals, event_totals, disposal_days,
               disposal_agents, disposal_agent_counts, claim_days, claim_agents, never_started, cycle_weeks,
               cycle_weeks_until, agent_totals
        IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM unit_totals;
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT fleet, domain, state, disposition, attempt_count > 1, count(*), sum(cost_cents)
      FROM work_units GROUP BY 1, 2, 3, 4, 5;
    DELETE FROM event_totals;
    INSERT INTO event_totals (fleet, event_type, agent_id, events)
    SELECT fleet, event_type, agent_id, count(*) FROM work_unit_events GROUP BY 1, 2, 3;
    DELETE FROM disposal_days;
    INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                               verified_cost_cents)
    SELECT fleet, ((disposed_at) AT TIME ZONE 'UTC')::date, domain, disposition, count(*), sum(cost_cents),
           count(*) FILTER (WHERE attempt_count > 1),
           count(*) FILTER (WHERE cost_cents > 0 AND cardinality(evidence_urls) > 0),
           coalesce(sum(cost_cents) FILTER (WHERE cost_cents > 0 AND cardinality(evidence_urls) > 0), 0)
      FROM work_units WHERE disposition IS NOT NULL GROUP BY 1, 2, 3, 4;
    DELETE FROM disposal_agents;
    INSERT INTO disposal_agents (fleet, week, start, domain, disposition, agent_id)
    SELECT DISTINCT u.fleet, k.week, CASE WHEN k.week THEN date_trunc('week', (((u.disposed_at) AT TIME ZONE 'UTC')::date)::timestamp)::date
                                          ELSE ((u.disposed_at) AT TIME ZONE 'UTC')::date END,
           CASE WHEN k.every THEN '' ELSE u.domain END, u.disposition, a.agent_id
      FROM work_units u
      JOIN work_unit_attempts a ON a.unit_id = u.id
     CROSS JOIN (VALUES (false, false), (false, true), (true, false), (true, true)) AS k(week, every)
     WHERE u.disposition IS NOT NULL;
    DELETE FROM disposal_agent_counts;
    INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
    SELECT fleet, week, start, domain, disposition, count(*) FROM disposal_agents GROUP BY 1, 2, 3, 4, 5;
    DELETE FROM never_started;
    INSERT INTO never_started (attempt_id, fleet, started_at)
    SELECT a.id, a.fleet, a.started_at FROM work_unit_attempts a
     WHERE a.outcome IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                        WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id AND e.event_type = 'transitioned');
    DELETE FROM claim_agents;
    INSERT INTO claim_agents (fleet, day, agent_id)
    SELECT DISTINCT fleet, ((started_at) AT TIME ZONE 'UTC')::date, agent_id FROM work_unit_attempts;
    DELETE FROM claim_days;
    INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
    SELECT c.fleet, c.day, c.claims, coalesce(g.agents, 0), c.verified, c.stale, coalesce(n.never, 0)
      FROM (SELECT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date AS day, count(*) AS claims,
                   count(*) FILTER (WHERE a.outcome = 'verified') AS verified,
                   count(*) FILTER (WHERE a.outcome = 'superseded' OR EXISTS (
                       SELECT 1 FROM work_unit_events e WHERE e.attempt_id = a.id AND e.event_type = 'stalled'))
                     AS stale
              FROM work_unit_attempts a GROUP BY 1, 2) c
      LEFT JOIN (SELECT fleet, day, count(*) AS agents FROM claim_agents GROUP BY 1, 2) g
        ON g.fleet = c.fleet AND g.day = c.day
      LEFT JOIN (SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date AS day, count(*) AS never FROM never_started GROUP BY 1, 2) n
        ON n.fleet = c.fleet AND n.day = c.day;
    DELETE FROM agent_totals;
    INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
    SELECT a.fleet, a.agent_id, u.domain, count(DISTINCT a.unit_id), sum(a.cost_cents)
      FROM work_unit_attempts a JOIN work_units u ON u.id = a.unit_id GROUP BY 1, 2, 3;
    DELETE FROM cycle_weeks;
    DELETE FROM cycle_weeks_until;
    PERFORM ledger_fold_cycle_weeks();
END
$$;
REVOKE ALL ON FUNCTION ledger_rebuild_totals() FROM PUBLIC;

-- Units disposed per bucket and disposition, as in 0008, now from the day
-- totals: the buckets that lie whole inside [p_from, p_until) read the
-- totals and the distinct-agent counts; the part of a bucket the range cuts
-- (at most one at each end) is counted from its rows, as before. PL/pgSQL,
-- so that each call is planned with its own bounds (a SQL function with a
-- pinned search_path is planned once for any bounds: a scan of every unit).
CREATE OR REPLACE FUNCTION throughput(p_bucket text, p_from timestamptz, p_until timestamptz, p_domain text)
RETURNS TABLE (fleet text, start timestamptz, disposition disposition, units bigint, cost_cents bigint,
               distinct_agents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    f timestamp := coalesce(p_from, '-infinity') AT TIME ZONE 'UTC';
    u timestamp := coalesce(p_until, 'infinity') AT TIME ZONE 'UTC';
    -- The whole buckets: [lo, hi), in UTC wall time.
    lo timestamp := CASE WHEN date_trunc(p_bucket, f) = f THEN f
                         ELSE date_trunc(p_bucket, f) + ('1 ' || p_bucket)::interval END;
    hi timestamp := date_trunc(p_bucket, u);
    -- The cut ends: [p_from, low_end) and [high_start, p_until); the whole
    -- range when no bucket lies whole inside it.
    low_end timestamptz := CASE WHEN lo < hi THEN lo AT TIME ZONE 'UTC' ELSE coalesce(p_until, 'infinity') END;
    high_start timestamptz := CASE WHEN lo < hi THEN hi AT TIME ZONE 'UTC' ELSE 'infinity' END;
BEGIN
    RETURN QUERY
    SELECT x.fleet, x.start AT TIME ZONE 'UTC', x.disposition, sum(x.units)::bigint, sum(x.cost_cents)::bigint,
           sum(x.agents)::bigint
      FROM (SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp) AS start, d.disposition, d.units, d.cost_cents,
                   0::bigint AS agents
              FROM disposal_days d
             WHERE d.day >= lo AND d.day < hi AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT g.fleet, g.start::timestamp, g.disposition, 0, 0, g.agents
              FROM disposal_agent_counts g
             WHERE g.week = (p_bucket = 'week') AND g.domain = coalesce(p_domain, '')
               AND g.start >= lo AND g.start < hi) x
     GROUP BY x.fleet, x.start, x.disposition
    HAVING sum(x.units) <> 0
    UNION ALL
    SELECT c.fleet, c.start AT TIME ZONE 'UTC', c.disposition, count(*), sum(c.cost_cents)::bigint,
           (SELECT count(DISTINCT a.agent_id) FROM work_unit_attempts a WHERE a.unit_id = ANY (array_agg(c.id)))
      FROM (SELECT w.fleet, date_trunc(p_bucket, w.disposed_at AT TIME ZONE 'UTC') AS start, w.disposition, w.id,
                   w.cost_cents
              FROM work_units w
             WHERE w.disposition IS NOT NULL AND (p_domain IS NULL OR w.domain = p_domain)
               AND ((w.disposed_at >= coalesce(p_from, '-infinity') AND w.disposed_at < low_end)
                    OR (w.disposed_at >= high_start AND w.disposed_at < coalesce(p_until, 'infinity')))) c
     GROUP BY c.fleet, c.start, c.disposition;
END
$$;

-- The North Star views from the day totals (same columns as 0007).
CREATE OR REPLACE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT fleet, date_trunc('week', (day)::timestamp)::date::timestamp AT TIME ZONE 'UTC' AS week, sum(verified_units)::bigint AS units,
       sum(verified_cost_cents)::bigint AS cost_cents
  FROM disposal_days
 GROUP BY 1, 2
HAVING sum(verified_units) <> 0;

CREATE OR REPLACE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT fleet, week, disposed, reworked, round(reworked::numeric / disposed, 4) AS rework_rate
  FROM (SELECT fleet, date_trunc('week', (day)::timestamp)::date::timestamp AT TIME ZONE 'UTC' AS week, sum(units)::bigint AS disposed,
               sum(reworked)::bigint AS reworked
          FROM disposal_days GROUP BY 1, 2) w
 WHERE disposed <> 0;

CREATE OR REPLACE VIEW v_claims_weekly WITH (security_invoker = true) AS
SELECT fleet, week, claims, verified, round(verified::numeric / claims, 4) AS conversion, stale,
       round(stale::numeric / claims, 4) AS stale_rate, never_transitioned
  FROM (SELECT fleet, date_trunc('week', (day)::timestamp)::date::timestamp AT TIME ZONE 'UTC' AS week, sum(claims)::bigint AS claims,
               sum(verified)::bigint AS verified, sum(stale)::bigint AS stale,
               sum(never_started)::bigint AS never_transitioned
          FROM claim_days GROUP BY 1, 2) w
 WHERE claims <> 0;

CREATE OR REPLACE VIEW v_claiming_agents_daily WITH (security_invoker = true) AS
SELECT c.fleet, c.day, c.agents, c.claims, s.live, s.blocked, s.silent
  FROM (SELECT fleet, day::timestamp AT TIME ZONE 'UTC' AS day, sum(agents)::bigint AS agents,
               sum(claims)::bigint AS claims
          FROM claim_days
         GROUP BY fleet, day
        HAVING sum(claims) <> 0) c
  -- The roster is read for the current day's row only.
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE v.status = 'ACTIVE') AS live,
             count(*) FILTER (WHERE v.status = 'BLOCKED') AS blocked,
             count(*) FILTER (WHERE v.status = 'SILENT') AS silent
        FROM v_agents v
       WHERE c.day = date_trunc('day', now(), 'UTC') AND v.fleet = c.fleet AND v.claims_today > 0
      HAVING c.day = date_trunc('day', now(), 'UTC')) s ON true;

CREATE OR REPLACE VIEW v_claimed_never_transitioned WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, u.external_ref, u.domain, a.attempt_no, a.agent_id, a.outcome,
       n.started_at, a.ended_at
  FROM never_started n
  JOIN work_unit_attempts a ON a.id = n.attempt_id
  JOIN work_units u ON u.id = a.unit_id;

-- Cycle time per week of disposition (0007's v_cycle_time_weekly). Medians
-- are not sums, so no delta can keep them; but a week that has ended only
-- changes when a disposal is written into it after the fact (an import), so
-- the weeks before cycle_weeks_until are kept whole in cycle_weeks. The
-- sweeper's fold computes the weeks that ended since; a disposal written
-- into an ended week deletes it and moves the mark back to it. Reads take
-- the kept weeks and compute the rest (the current week, and any week the
-- fold has not reached) from the rows.
CREATE TABLE cycle_weeks (
    fleet          text             NOT NULL,
    week           date             NOT NULL,
    units          bigint           NOT NULL,
    median_seconds double precision NOT NULL,
    p90_seconds    double precision NOT NULL,
    PRIMARY KEY (fleet, week)
);
-- Every week before `until` is in cycle_weeks (a week with no row had no
-- disposal). One row per fleet, '-infinity' until the first fold.
CREATE TABLE cycle_weeks_until (
    fleet text PRIMARY KEY,
    until date NOT NULL
);
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['cycle_weeks', 'cycle_weeks_until'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY fleet_isolation ON %I FOR SELECT TO work_ledger_app USING (fleet = current_fleet())', t);
        EXECUTE format('CREATE POLICY fleet_reader ON %I FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet())', t);
        EXECUTE format('GRANT SELECT ON %I TO work_ledger_app, work_ledger_reader', t);
    END LOOP;
END
$$;

-- The cycle times of the weeks whose Monday is in [p_from, p_until), from
-- the rows: those weeks' disposals are a range of work_units_disposed_at_idx.
CREATE FUNCTION cycle_time_by_rows(p_from timestamptz, p_until timestamptz)
RETURNS TABLE (fleet text, week timestamptz, units bigint, median_seconds double precision,
               p90_seconds double precision)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    lo timestamptz := coalesce(ledger_week_at_or_after(p_from), '-infinity');
    hi timestamptz := coalesce(ledger_week_at_or_after(p_until), 'infinity');
BEGIN
    RETURN QUERY
    SELECT u.fleet, date_trunc('week', u.disposed_at, 'UTC'), count(*),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at)),
           percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at))
      FROM work_units u
      JOIN work_unit_attempts a ON a.unit_id = u.id AND a.attempt_no = 1
     WHERE u.disposition IS NOT NULL AND u.disposed_at >= lo AND u.disposed_at < hi
     GROUP BY 1, 2;
END
$$;

-- The weeks of [p_from, p_until): kept ones from cycle_weeks, the others
-- (from the session's mark on) from the rows.
CREATE FUNCTION cycle_time_weekly(p_from timestamptz, p_until timestamptz)
RETURNS TABLE (fleet text, week timestamptz, units bigint, median_seconds double precision,
               p90_seconds double precision)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    -- The earliest mark this session sees (one fleet's under row-level security).
    mark timestamptz := (SELECT min(m.until) FROM cycle_weeks_until m)::timestamp AT TIME ZONE 'UTC';
BEGIN
    RETURN QUERY
    SELECT c.fleet, c.week::timestamp AT TIME ZONE 'UTC', c.units, c.median_seconds, c.p90_seconds
      FROM cycle_weeks c JOIN cycle_weeks_until m ON m.fleet = c.fleet AND c.week < m.until
     WHERE c.week::timestamp AT TIME ZONE 'UTC' >= coalesce(p_from, '-infinity')
       AND c.week::timestamp AT TIME ZONE 'UTC' < coalesce(p_until, 'infinity')
    UNION ALL
    SELECT r.* FROM cycle_time_by_rows(greatest(p_from, mark), p_until) r
     WHERE r.week >= coalesce((SELECT m.until FROM cycle_weeks_until m WHERE m.fleet = r.fleet)::timestamp
                              AT TIME ZONE 'UTC', '-infinity');
END
$$;

CREATE OR REPLACE VIEW v_cycle_time_weekly WITH (security_invoker = true) AS
SELECT * FROM cycle_time_weekly(NULL, NULL);

-- The fold of the cycle weeks: every fleet's weeks from its mark to the
-- week that ended over an hour ago, computed and kept, and the mark moved
-- there. A disposal is dated by its transaction's start and the service's
-- transactions cannot idle for 30 s (0004), so after an hour no transaction
-- of the service is still writing into an ended week; a write into an
-- ended week (an import, an owner's repair, a disposal whose statement
-- runs after the week it is dated in ended) moves the mark back with
-- cycle_week_reopened(). The marks are locked first, so such a write
-- either waits for this fold to commit (and then moves the mark back) or
-- is seen by it.
CREATE FUNCTION ledger_fold_cycle_weeks() RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    ended date := date_trunc('week', (((now() - interval '1 hour') AT TIME ZONE 'UTC')::date)::timestamp)::date;
    kept bigint;
BEGIN
    -- Fleets without a mark, looked for only when a mark is due (a new
    -- fleet's weeks are read from the rows until then).
    IF NOT EXISTS (SELECT 1 FROM cycle_weeks_until) OR EXISTS (SELECT 1 FROM cycle_weeks_until WHERE until < ended) THEN
        INSERT INTO cycle_weeks_until (fleet, until)
        SELECT DISTINCT d.fleet, '-infinity'::date FROM disposal_days d
         WHERE NOT EXISTS (SELECT 1 FROM cycle_weeks_until m WHERE m.fleet = d.fleet)
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM 1 FROM cycle_weeks_until WHERE until < ended ORDER BY fleet FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH due AS (SELECT fleet, until FROM cycle_weeks_until WHERE until < ended),
         fresh AS (
             INSERT INTO cycle_weeks (fleet, week, units, median_seconds, p90_seconds)
             SELECT r.fleet, (r.week AT TIME ZONE 'UTC')::date, r.units, r.median_seconds, r.p90_seconds
               FROM cycle_time_by_rows((SELECT min(until) FROM due)::timestamp AT TIME ZONE 'UTC',
                                       ended::timestamp AT TIME ZONE 'UTC') r
               JOIN due d ON d.fleet = r.fleet AND (r.week AT TIME ZONE 'UTC')::date >= d.until
             ON CONFLICT (fleet, week) DO UPDATE SET units = excluded.units, median_seconds = excluded.median_seconds,
                                                     p90_seconds = excluded.p90_seconds
             RETURNING 1)
    SELECT count(*) INTO kept FROM fresh;
    UPDATE cycle_weeks_until SET until = ended WHERE until < ended;
    RETURN kept;
END
$$;
REVOKE ALL ON FUNCTION ledger_fold_cycle_weeks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_cycle_weeks() TO work_ledger_app;

-- A disposal dated in a week that has ended: the next fold computes that
-- week again. The upsert takes the mark's lock even when it does not move it.
CREATE FUNCTION cycle_week_reopened(p_fleet text, p_week date) RETURNS void LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    INSERT INTO cycle_weeks_until AS m (fleet, until) VALUES (p_fleet, '-infinity')
    ON CONFLICT (fleet) DO UPDATE SET until = least(m.until, p_week);
$$;
REVOKE ALL ON FUNCTION cycle_week_reopened(text, date) FROM PUBLIC;

-- Whether a disposal dated `at` falls in a week that has already ended.
CREATE FUNCTION ledger_in_ended_week(p_at timestamptz) RETURNS boolean LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp
RETURN date_trunc('week', (((p_at) AT TIME ZONE 'UTC')::date)::timestamp)::date < date_trunc('week', (((clock_timestamp()) AT TIME ZONE 'UTC')::date)::timestamp)::date;

-- The roster (0017) found each agent's held unit with a join that the
-- planner ran as a scan of every unit of the fleet (the "Fleet roster" panel
-- at 2.8 s p99 with 16 readers, 500,000 units): now one index probe per name.
CREATE OR REPLACE VIEW v_agents WITH (security_invoker = true) AS
WITH RECURSIVE
-- The distinct names of the attempts, one index probe per name (a loose
-- index scan of work_unit_attempts_agent_started_idx) rather than reading
-- every attempt of the fleet: the next name of the same fleet, else the
-- first name of the next fleet.
attempted (fleet, name) AS (
    (SELECT a.fleet, a.agent_id FROM work_unit_attempts a ORDER BY a.fleet, a.agent_id LIMIT 1)
    UNION ALL
    SELECT x.fleet, x.agent_id
      FROM attempted p
     CROSS JOIN LATERAL (
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE a.fleet = p.fleet AND a.agent_id > p.name ORDER BY a.agent_id LIMIT 1)
         UNION ALL
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE a.fleet > p.fleet ORDER BY a.fleet, a.agent_id LIMIT 1)
         LIMIT 1
     ) x
),
t AS (SELECT * FROM agent_tokens())
SELECT n.fleet, n.name,
       CASE WHEN h.state = 'blocked' THEN 'BLOCKED'
            WHEN h.lease_expires_at >= now() THEN 'ACTIVE'
            WHEN h.id IS NOT NULL THEN 'SILENT'
            WHEN t.tokens > 0 AND t.live_tokens = 0 THEN 'REVOKED'
            ELSE 'IDLE'
       END AS status,
       h.id AS held_unit_id, h.external_ref AS held_external_ref, h.state AS held_state, h.lease_expires_at,
       l.started_at AS last_claim_at,
       CASE WHEN h.id IS NOT NULL THEN h.last_heartbeat_at ELSE coalesce(b.at, l.started_at) END AS last_heartbeat_at,
       coalesce(d.claims, 0) AS claims_today, coalesce(d.cost_cents, 0)::bigint AS cost_cents_today,
       t.last_used_at AS token_last_used_at
  FROM (SELECT k.fleet, k.name FROM t k WHERE k.claim_tokens > 0
        UNION
        SELECT p.fleet, p.name FROM attempted p) n
  LEFT JOIN t ON t.fleet = n.fleet AND t.name = n.name
  -- One probe of the live-claim index per name (a join let the planner
  -- read every unit of the fleet to find the 70 held ones: 285 ms at 500,000).
  LEFT JOIN LATERAL (
      SELECT u.id, u.external_ref, u.state, u.lease_expires_at, u.last_heartbeat_at
        FROM work_units u
       WHERE u.claimed_by = n.name AND u.fleet = n.fleet AND u.state IN ('claimed', 'in_progress', 'blocked')
       LIMIT 1
  ) h ON true
  LEFT JOIN LATERAL (
      SELECT a.id, a.unit_id, a.started_at
        FROM work_unit_attempts a
       WHERE a.fleet = n.fleet AND a.agent_id = n.name
       ORDER BY a.started_at DESC
       LIMIT 1
  ) l ON true
  LEFT JOIN LATERAL (
      SELECT e.created_at AS at
        FROM work_unit_events e
       WHERE e.unit_id = l.unit_id AND e.attempt_id = l.id AND e.event_type = 'heartbeat'
       ORDER BY e.created_at DESC
       LIMIT 1
  ) b ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS claims, sum(a.cost_cents) AS cost_cents
        FROM work_unit_attempts a
       WHERE a.fleet = n.fleet AND a.agent_id = n.name AND a.started_at >= date_trunc('day', now(), 'UTC')
  ) d ON true;

-- Everything counted once from the rows.
SELECT ledger_rebuild_totals();
