-- Cost per UTC day (issue 27): costSummary and costTotal over a range at any
-- size.
--
-- Over a range they read every cost record of the range and joined each to
-- its unit (or attempt) for the group: 1.5-4.7 s p99 for 30 days of a
-- 500,000-unit fleet with 16 readers. They now read totals per UTC day for
-- the days the range holds whole, and the records themselves only for the
-- part of a day the range cuts at each end, as throughput does (0020, 0024).
--
-- Two things keep those totals from being plain sums per day:
--
-- * `units` is the number of distinct units with cost recorded in the range.
--   Let a unit's days with cost recorded be d1 < d2 < ...; each day's row
--   also carries the unit's previous such day (`prior_day`, NULL for d1). The
--   unit has cost recorded in the whole days [lo, hi) exactly when one of
--   its days in [lo, hi) has its prior_day before lo (or none), and then only
--   one does: the units of [lo, hi) are the sum of `units` over the day rows
--   in it whose prior_day is before lo.
-- * DOMAIN, STATE and DISPOSITION group a unit by what it is now, not when
--   the cost was recorded. So a unit's day rows are kept under its current
--   group: when it changes group they move (minus under the old group, plus
--   under the new), which is a few rows, a unit having few days with cost.
--
-- AGENT groups by the agent of the attempt the cost was recorded on, which
-- never changes: agent_cost_days keeps the same days and priors per (agent,
-- unit), cost recorded without an attempt counting for no agent.
--
-- Kept exact like the other totals: the write path appends delta rows
-- (triggers, in the writing transaction, ordered by the unit's row lock),
-- the sweeper folds them (ledger_fold_cost_days), ledger_rebuild_totals
-- recounts them, and the audit reconciles them with the records (rule
-- cost_days).

CREATE TABLE cost_days (
    fleet       text        NOT NULL,
    day         date        NOT NULL,
    domain      text        NOT NULL,
    state       work_state  NOT NULL,
    disposition disposition,
    prior_day   date,
    units       bigint      NOT NULL,
    cost_cents  bigint      NOT NULL,
    folded      boolean     NOT NULL DEFAULT false
);
-- A range's whole days from the index alone.
CREATE INDEX cost_days_day_idx ON cost_days (fleet, day)
    INCLUDE (domain, state, disposition, prior_day, units, cost_cents);

CREATE TABLE agent_cost_days (
    fleet      text    NOT NULL,
    day        date    NOT NULL,
    agent_id   text    NOT NULL,
    domain     text    NOT NULL,
    prior_day  date,
    units      bigint  NOT NULL,
    cost_cents bigint  NOT NULL,
    folded     boolean NOT NULL DEFAULT false
);
CREATE INDEX agent_cost_days_day_idx ON agent_cost_days (fleet, day)
    INCLUDE (agent_id, domain, prior_day, units, cost_cents);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['cost_days', 'agent_cost_days'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY fleet_isolation ON %I FOR SELECT TO work_ledger_app
                        USING (fleet = (SELECT current_fleet()))', t);
        EXECUTE format('CREATE POLICY fleet_reader ON %I FOR SELECT TO work_ledger_reader
                        USING (fleet = (SELECT reader_fleet()))', t);
        EXECUTE format('GRANT SELECT ON %I TO work_ledger_app, work_ledger_reader', t);
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                        autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0)', t);
    END LOOP;
END
$$;

-- A unit's cost records in the order they were written (the unit's row lock
-- orders its writers, and seq is taken at the insert), from the index alone
-- once visible to all: the triggers below, and whether a unit cut at a
-- range's end also has cost in its whole days.
CREATE INDEX work_unit_events_unit_cost_idx ON work_unit_events (unit_id, seq)
    INCLUDE (created_at, attempt_id, cost_delta_cents) WHERE event_type = 'cost_recorded';

-- The days with cost recorded of these units, counting their records up to
-- event seq p_upto: per unit (agent_id NULL) and per agent of the attempts
-- the cost was recorded on, each day's cost and the previous such day. The
-- one definition behind the triggers, the recount and the audit.
CREATE FUNCTION cost_unit_days(p_units uuid[], p_upto bigint)
RETURNS TABLE (fleet text, unit_id uuid, agent_id text, day date, prior_day date, cost_cents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT d.fleet, d.unit_id, d.agent_id, d.day,
           lag(d.day) OVER (PARTITION BY d.unit_id, d.agent_id ORDER BY d.day), d.cost
      FROM (SELECT e.fleet, e.unit_id, k.agent_id, ((e.created_at) AT TIME ZONE 'UTC')::date AS day,
                   sum(e.cost_delta_cents)::bigint AS cost
              FROM work_unit_events e
              LEFT JOIN work_unit_attempts t ON t.id = e.attempt_id
             CROSS JOIN LATERAL unnest(CASE WHEN t.agent_id IS NULL THEN ARRAY[NULL::text]
                                            ELSE ARRAY[NULL::text, t.agent_id] END) AS k(agent_id)
             WHERE e.event_type = 'cost_recorded' AND e.unit_id = ANY(p_units) AND e.seq <= p_upto
             GROUP BY 1, 2, 3, 4) d;
END
$$;
REVOKE ALL ON FUNCTION cost_unit_days(uuid[], bigint) FROM PUBLIC;

-- A cost record: the unit's days with it, minus its days without it (a new
-- day, or more cost on a day it had), under the unit's group now.
CREATE FUNCTION cost_days_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    WITH delta AS (
             SELECT d.fleet, d.agent_id, d.day, d.prior_day, sum(d.sign) AS units, sum(d.sign * d.cost_cents) AS cost
               FROM (SELECT c.*, 1 AS sign FROM cost_unit_days(ARRAY[NEW.unit_id], NEW.seq) c
                     UNION ALL
                     SELECT c.*, -1 FROM cost_unit_days(ARRAY[NEW.unit_id], NEW.seq - 1) c) d
              GROUP BY 1, 2, 3, 4
             HAVING sum(d.sign) <> 0 OR sum(d.sign * d.cost_cents) <> 0),
         unit_rows AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
             SELECT x.fleet, x.day, u.domain, u.state, u.disposition, x.prior_day, x.units, x.cost
               FROM delta x JOIN work_units u ON u.id = NEW.unit_id
              WHERE x.agent_id IS NULL)
    INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
    SELECT x.fleet, x.day, x.agent_id, u.domain, x.prior_day, x.units, x.cost
      FROM delta x JOIN work_units u ON u.id = NEW.unit_id
     WHERE x.agent_id IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_events_cost_days AFTER INSERT ON work_unit_events FOR EACH ROW
    WHEN (NEW.event_type = 'cost_recorded') EXECUTE FUNCTION cost_days_recorded();

-- A unit that changes group takes its day rows along (the agent rows only
-- when its domain changes). The unit's row and its cost records are written
-- by separate statements, so each trigger sees what the other did.
CREATE FUNCTION cost_days_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_unit_events e WHERE e.unit_id = NEW.id AND e.event_type = 'cost_recorded') THEN
        RETURN NULL;
    END IF;
    WITH days AS (SELECT * FROM cost_unit_days(ARRAY[NEW.id], 9223372036854775807)),
         unit_rows AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
             SELECT g.fleet, d.day, g.domain, g.state, g.disposition, d.prior_day, g.sign, g.sign * d.cost_cents
               FROM days d
              CROSS JOIN (VALUES (OLD.fleet, OLD.domain, OLD.state, OLD.disposition, -1),
                                 (NEW.fleet, NEW.domain, NEW.state, NEW.disposition, 1))
                         AS g(fleet, domain, state, disposition, sign)
              WHERE d.agent_id IS NULL)
    INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
    SELECT g.fleet, d.day, d.agent_id, g.domain, d.prior_day, g.sign, g.sign * d.cost_cents
      FROM days d
     CROSS JOIN (VALUES (OLD.fleet, OLD.domain, -1), (NEW.fleet, NEW.domain, 1)) AS g(fleet, domain, sign)
     WHERE d.agent_id IS NOT NULL AND (OLD.domain IS DISTINCT FROM NEW.domain OR OLD.fleet IS DISTINCT FROM NEW.fleet);
    RETURN NULL;
END
$$;
-- Cost is only recorded on an attempt (ledger_record_cost), so a unit with no
-- attempt before the change has none to move: a unit's first claim, the
-- claim path's common case, does not run the trigger.
CREATE TRIGGER work_units_cost_days_moved AFTER UPDATE ON work_units FOR EACH ROW
    WHEN (OLD.attempt_count > 0 AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.disposition IS DISTINCT FROM NEW.disposition
          OR OLD.domain IS DISTINCT FROM NEW.domain OR OLD.fleet IS DISTINCT FROM NEW.fleet))
    EXECUTE FUNCTION cost_days_moved();

-- Folds the groups with a delta into one row each, as ledger_compact_totals
-- does for the other totals (0023); returns the rows folded.
CREATE FUNCTION ledger_fold_cost_days() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, domain, state, disposition, prior_day FROM cost_days WHERE NOT folded),
         gone AS (
             DELETE FROM cost_days t USING moved m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.domain = m.domain AND t.state = m.state
                AND coalesce(t.disposition::text, '') = coalesce(m.disposition::text, '')
                AND coalesce(t.prior_day, '-infinity') = coalesce(m.prior_day, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents, folded)
             SELECT fleet, day, domain, state, disposition, prior_day, sum(units), sum(cost_cents), true
               FROM gone GROUP BY 1, 2, 3, 4, 5, 6
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         moved_agents AS (SELECT DISTINCT fleet, day, agent_id, domain, prior_day FROM agent_cost_days WHERE NOT folded),
         gone_agents AS (
             DELETE FROM agent_cost_days t USING moved_agents m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.agent_id = m.agent_id AND t.domain = m.domain
                AND coalesce(t.prior_day, '-infinity') = coalesce(m.prior_day, '-infinity')
             RETURNING t.*),
         kept_agents AS (
             INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents, folded)
             SELECT fleet, day, agent_id, domain, prior_day, sum(units), sum(cost_cents), true
               FROM gone_agents GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_agents)
$$;
REVOKE ALL ON FUNCTION ledger_fold_cost_days() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_cost_days() TO work_ledger_app;

-- Recounts the cost days from the records (after a bulk load that bypassed
-- the triggers, or to repair what the audit found).
CREATE FUNCTION ledger_recount_cost_days() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, work_unit_attempts, work_unit_events, cost_days, agent_cost_days
        IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM cost_days;
    DELETE FROM agent_cost_days;
    WITH counted AS (
             SELECT d.*, u.domain, u.state, u.disposition
               FROM cost_unit_days(ARRAY(SELECT id FROM work_units), 9223372036854775807) d
               JOIN work_units u ON u.id = d.unit_id),
         unit_rows AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
             SELECT fleet, day, domain, state, disposition, prior_day, count(*), sum(cost_cents)
               FROM counted WHERE agent_id IS NULL
              GROUP BY 1, 2, 3, 4, 5, 6)
    INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
    SELECT fleet, day, agent_id, domain, prior_day, count(*), sum(cost_cents)
      FROM counted WHERE agent_id IS NOT NULL
     GROUP BY 1, 2, 3, 4, 5;
END
$$;
REVOKE ALL ON FUNCTION ledger_recount_cost_days() FROM PUBLIC;

-- The rebuild (0023) recounts these too and leaves them folded.
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_compact_totals();
    PERFORM ledger_fold_cost_days();
END
$$;

SELECT ledger_recount_cost_days();
SELECT ledger_fold_cost_days();
-- Planned from their statistics before autovacuum first visits them.
ANALYZE cost_days, agent_cost_days;

-- The whole UTC days of [p_from, p_until) (NULL: unbounded), [lo, hi), and
-- the parts of a day the range cuts at each end, [p_from, low_end) and
-- [high_start, p_until): the whole range when no day lies whole inside it.
-- The one split behind the reads that take whole days from day totals and
-- the cut ends from the rows (cost_recorded_in, throughput, events_counted_in).
CREATE FUNCTION ledger_whole_days(p_from timestamptz, p_until timestamptz, OUT lo date, OUT hi date,
                                  OUT low_end timestamptz, OUT high_start timestamptz)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    f timestamp := coalesce(p_from, '-infinity') AT TIME ZONE 'UTC';
    u timestamp := coalesce(p_until, 'infinity') AT TIME ZONE 'UTC';
BEGIN
    lo := CASE WHEN date_trunc('day', f) = f THEN f::date ELSE (date_trunc('day', f) + interval '1 day')::date END;
    hi := date_trunc('day', u)::date;
    low_end := CASE WHEN lo < hi THEN lo::timestamp AT TIME ZONE 'UTC' ELSE coalesce(p_until, 'infinity') END;
    high_start := CASE WHEN lo < hi THEN hi::timestamp AT TIME ZONE 'UTC' ELSE 'infinity' END;
END
$$;

-- Units and cost recorded in [p_from, p_until) (NULL: unbounded) in the
-- fleet, per current (domain, state, disposition) of the units, or with
-- p_agents per (agent of the attempt, domain); p_domain keeps one domain.
-- The whole UTC days of the range read the cost days; the part of a day cut
-- at each end reads its records, and a unit (or agent's unit) found there
-- counts only if it has no cost in the whole days. PL/pgSQL, so that each
-- call is planned with its own bounds.
CREATE FUNCTION cost_recorded_in(p_fleet text, p_agents boolean, p_from timestamptz, p_until timestamptz,
                                 p_domain text)
RETURNS TABLE (fleet text, agent_id text, domain text, state work_state, disposition disposition, units bigint,
               cost_cents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    lo date;
    hi date;
    low_end timestamptz;
    high_start timestamptz;
    whole boolean;
BEGIN
    SELECT d.lo, d.hi, d.low_end, d.high_start INTO lo, hi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) d;
    whole := lo < hi;
    RETURN QUERY
    WITH cut AS (
             SELECT e.unit_id, e.attempt_id, e.cost_delta_cents FROM work_unit_events e
              WHERE e.event_type = 'cost_recorded' AND e.fleet = p_fleet
                AND e.created_at >= coalesce(p_from, '-infinity') AND e.created_at < low_end
             UNION ALL
             SELECT e.unit_id, e.attempt_id, e.cost_delta_cents FROM work_unit_events e
              WHERE e.event_type = 'cost_recorded' AND e.fleet = p_fleet
                AND e.created_at >= high_start AND e.created_at < coalesce(p_until, 'infinity')),
         cut_units AS (
             SELECT c.unit_id, t.agent_id, sum(c.cost_delta_cents) AS cost
               FROM cut c LEFT JOIN work_unit_attempts t ON p_agents AND t.id = c.attempt_id
              WHERE NOT p_agents OR t.agent_id IS NOT NULL
              GROUP BY 1, 2)
    SELECT x.fleet, x.agent_id, x.domain, x.state, x.disposition, sum(x.units)::bigint, sum(x.cost)::bigint
      FROM (SELECT c.fleet, NULL::text AS agent_id, c.domain, c.state, c.disposition,
                   CASE WHEN c.prior_day IS NULL OR c.prior_day < lo THEN c.units ELSE 0 END AS units, c.cost_cents AS cost
              FROM cost_days c
             WHERE NOT p_agents AND whole AND c.fleet = p_fleet AND c.day >= lo AND c.day < hi
               AND (p_domain IS NULL OR c.domain = p_domain)
            UNION ALL
            SELECT c.fleet, c.agent_id, c.domain, NULL, NULL,
                   CASE WHEN c.prior_day IS NULL OR c.prior_day < lo THEN c.units ELSE 0 END, c.cost_cents
              FROM agent_cost_days c
             WHERE p_agents AND whole AND c.fleet = p_fleet AND c.day >= lo AND c.day < hi
               AND (p_domain IS NULL OR c.domain = p_domain)
            UNION ALL
            SELECT w.fleet, r.agent_id, w.domain, CASE WHEN p_agents THEN NULL ELSE w.state END,
                   CASE WHEN p_agents THEN NULL ELSE w.disposition END,
                   CASE WHEN whole AND EXISTS (
                            SELECT 1 FROM work_unit_events m
                              LEFT JOIN work_unit_attempts ma ON p_agents AND ma.id = m.attempt_id
                             WHERE m.unit_id = r.unit_id AND m.event_type = 'cost_recorded'
                               AND m.created_at >= low_end AND m.created_at < high_start
                               AND (NOT p_agents OR ma.agent_id = r.agent_id))
                        THEN 0 ELSE 1 END,
                   r.cost
              FROM cut_units r JOIN work_units w ON w.id = r.unit_id AND w.fleet = p_fleet
             WHERE p_domain IS NULL OR w.domain = p_domain) x
     GROUP BY 1, 2, 3, 4, 5;
END
$$;
REVOKE ALL ON FUNCTION cost_recorded_in(text, boolean, timestamptz, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cost_recorded_in(text, boolean, timestamptz, timestamptz, text) TO work_ledger_app;
