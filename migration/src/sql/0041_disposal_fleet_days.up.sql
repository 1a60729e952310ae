-- Disposals per UTC day of every domain together (issue 27): a fleet-wide
-- throughput by day from its own rows, and the day totals read by index only.
--
-- throughput(bucket: DAY) without a domain grouped a fleet's disposal_days
-- over its domains on every read: two years of four domains are 11,680 rows
-- for 2,920 buckets, beside the 2,920 agent counts, where the same read for
-- one domain groups 2,920 of each (docs/BENCHMARKS.md, round 3, session 23).
-- disposal_fleet_days holds disposal_days summed over the domains, kept as
-- disposal_weeks is (0032): the row trigger on disposal_days that appended
-- each delta row to its week now appends it to its fleet's day as well, in
-- one call; the sweeper's fold of disposal_days changes no sum and is not
-- repeated; ledger_fold_disposal_fleet_days (in ledger_fold_totals) folds
-- the table; ledger_rebuild_totals recounts it from the days after their
-- recount; the audit's disposal_days rule reconciles it with the disposed
-- units, as it does the weeks. Only the service's roles may read it, each
-- fleet its own.
CREATE TABLE disposal_fleet_days (
    fleet               text        NOT NULL,
    day                 date,
    disposition         disposition NOT NULL,
    units               bigint      NOT NULL,
    cost_cents          bigint      NOT NULL,
    reworked            bigint      NOT NULL,
    verified_units      bigint      NOT NULL,
    verified_cost_cents bigint      NOT NULL,
    folded              boolean     NOT NULL DEFAULT false
);
CREATE INDEX disposal_fleet_days_day_idx ON disposal_fleet_days (fleet, day)
    INCLUDE (disposition, units, cost_cents);
ALTER TABLE disposal_fleet_days ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON disposal_fleet_days FOR SELECT TO work_ledger_app
    USING (fleet = (SELECT current_fleet()));
CREATE POLICY fleet_reader ON disposal_fleet_days FOR SELECT TO work_ledger_reader
    USING (fleet = (SELECT reader_fleet()));
GRANT SELECT ON disposal_fleet_days TO work_ledger_app, work_ledger_reader;
ALTER TABLE disposal_fleet_days SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                                     autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0);

-- Each delta row of disposal_days, appended to its week and to its
-- fleet's day (one trigger call for both).
CREATE FUNCTION disposal_days_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                verified_cost_cents)
    VALUES (NEW.fleet, date_trunc('week', (NEW.day)::timestamp)::date, NEW.domain, NEW.disposition, NEW.units,
            NEW.cost_cents, NEW.reworked, NEW.verified_units, NEW.verified_cost_cents);
    INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                     verified_cost_cents)
    VALUES (NEW.fleet, NEW.day, NEW.disposition, NEW.units, NEW.cost_cents, NEW.reworked, NEW.verified_units,
            NEW.verified_cost_cents);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION disposal_days_added() FROM PUBLIC;
DROP TRIGGER disposal_days_weeks ON disposal_days;
DROP FUNCTION disposal_weeks_added();
CREATE TRIGGER disposal_days_added AFTER INSERT ON disposal_days FOR EACH ROW WHEN (NOT NEW.folded)
    EXECUTE FUNCTION disposal_days_added();

-- Folds the fleet days with a delta into one row per (fleet, day,
-- disposition); returns the rows folded.
CREATE FUNCTION ledger_fold_disposal_fleet_days() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, disposition FROM disposal_fleet_days WHERE NOT folded),
         gone AS (
             DELETE FROM disposal_fleet_days t USING moved m
              WHERE t.fleet = m.fleet AND t.disposition = m.disposition
                AND coalesce(t.day, '-infinity') = coalesce(m.day, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                              verified_cost_cents, folded)
             SELECT fleet, day, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents), true
               FROM gone GROUP BY 1, 2, 3
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION ledger_fold_disposal_fleet_days() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_disposal_fleet_days() TO work_ledger_app;

-- The fleet days from the days, folded.
CREATE FUNCTION ledger_recount_disposal_fleet_days() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE disposal_days, disposal_fleet_days IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM disposal_fleet_days;
    INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                     verified_cost_cents, folded)
    SELECT fleet, day, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
           sum(verified_cost_cents), true
      FROM disposal_days GROUP BY 1, 2, 3
    HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
        OR sum(verified_cost_cents) <> 0;
END
$$;
REVOKE ALL ON FUNCTION ledger_recount_disposal_fleet_days() FROM PUBLIC;

CREATE OR REPLACE FUNCTION ledger_fold_totals() RETURNS bigint LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT ledger_compact_totals() + ledger_fold_cost_days() + ledger_fold_event_days()
         + ledger_fold_disposal_weeks() + ledger_fold_disposal_fleet_days() + ledger_fold_cycle_weeks()
$$;

-- 0040's rebuild, with the fleet days recounted after the days.
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_recount_disposal_weeks();
    PERFORM ledger_recount_disposal_fleet_days();
    PERFORM ledger_recount_agent_latest();
    PERFORM ledger_fold_totals();
END
$$;

SELECT ledger_recount_disposal_fleet_days();
ANALYZE disposal_fleet_days;

-- The day totals read by index only, whatever the heap's order (as
-- disposal_weeks' index since 0032): the same keys, with the values a read
-- of throughput takes. Each replaces its index, so a disposal writes no
-- more entries than before, only wider ones.
DROP INDEX disposal_days_day_idx;
CREATE INDEX disposal_days_day_idx ON disposal_days (fleet, day) INCLUDE (domain, disposition, units, cost_cents);
DROP INDEX disposal_agent_counts_idx;
CREATE INDEX disposal_agent_counts_idx ON disposal_agent_counts (fleet, week, domain, start)
    INCLUDE (disposition, agents);

-- throughput (0032): its whole days of every domain from disposal_fleet_days,
-- and the days of a bucket the range cuts as two ranges of days.
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
    whole boolean := lo < hi;
    -- The whole days [dlo, dhi) (those outside [lo, hi) belong to a cut
    -- bucket) and the parts of a day the range cuts at each end.
    dlo date;
    dhi date;
    -- Those whole days less [lo, hi): at most two ranges, [c1, c2) and
    -- [c3, c4), each read as an index range whatever the plan (in a generic
    -- plan, 0032's condition on `whole` inside the statement became a
    -- filter over every day of the fleet: 11,680 day rows and 350,310 agents
    -- for the bench fleet, where a custom plan reads none).
    c1 date;
    c2 date;
    c3 date;
    c4 date;
    dom text := coalesce(p_domain, '');
    low_end timestamptz;
    high_start timestamptz;
BEGIN
    SELECT d.lo, d.hi, d.low_end, d.high_start INTO dlo, dhi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) d;
    IF whole THEN
        c1 := dlo; c2 := least(dhi, lo::date); c3 := greatest(dlo, hi::date); c4 := dhi;
    ELSE
        c1 := dlo; c2 := dhi; c3 := dhi; c4 := dhi;
    END IF;
    RETURN QUERY
    WITH cut AS (
             SELECT w.fleet, w.id, w.disposition, w.cost_cents,
                    date_trunc(p_bucket, w.disposed_at AT TIME ZONE 'UTC') AS start
               FROM work_units w
              WHERE w.disposition IS NOT NULL AND (p_domain IS NULL OR w.domain = p_domain)
                AND w.disposed_at >= coalesce(p_from, '-infinity') AND w.disposed_at < low_end
             UNION ALL
             SELECT w.fleet, w.id, w.disposition, w.cost_cents,
                    date_trunc(p_bucket, w.disposed_at AT TIME ZONE 'UTC')
               FROM work_units w
              WHERE w.disposition IS NOT NULL AND (p_domain IS NULL OR w.domain = p_domain)
                AND w.disposed_at >= high_start AND w.disposed_at < coalesce(p_until, 'infinity'))
    SELECT x.fleet, x.start AT TIME ZONE 'UTC', x.disposition, sum(x.units)::bigint, sum(x.cost_cents)::bigint,
           sum(x.agents)::bigint
      FROM (SELECT d.fleet, d.day::timestamp AS start, d.disposition, d.units, d.cost_cents, 0::bigint AS agents
              FROM disposal_days d
             WHERE p_bucket = 'day' AND p_domain IS NOT NULL AND d.domain = p_domain
               AND d.day >= lo::date AND d.day < hi::date
            UNION ALL
            SELECT d.fleet, d.day::timestamp, d.disposition, d.units, d.cost_cents, 0
              FROM disposal_fleet_days d
             WHERE p_bucket = 'day' AND p_domain IS NULL AND d.day >= lo::date AND d.day < hi::date
            UNION ALL
            SELECT d.fleet, d.week::timestamp, d.disposition, d.units, d.cost_cents, 0
              FROM disposal_weeks d
             WHERE p_bucket = 'week' AND d.week >= lo::date AND d.week < hi::date
               AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT g.fleet, g.start::timestamp, g.disposition, 0, 0, g.agents
              FROM disposal_agent_counts g
             WHERE g.week = (p_bucket = 'week') AND g.domain = coalesce(p_domain, '')
               AND g.start >= lo::date AND g.start < hi::date) x
     GROUP BY x.fleet, x.start, x.disposition
    HAVING sum(x.units) <> 0
    UNION ALL
    SELECT c.fleet, c.start AT TIME ZONE 'UTC', c.disposition, sum(c.units)::bigint, sum(c.cost_cents)::bigint,
           count(DISTINCT c.agent_id)
      FROM (SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp) AS start, d.disposition, d.units, d.cost_cents,
                   NULL::text AS agent_id
              FROM disposal_days d
             WHERE d.day >= c1 AND d.day < c2 AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp), d.disposition, d.units, d.cost_cents, NULL
              FROM disposal_days d
             WHERE d.day >= c3 AND d.day < c4 AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM disposal_agents a
             WHERE NOT a.week AND a.domain = dom AND a.start >= c1 AND a.start < c2
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM disposal_agents a
             WHERE NOT a.week AND a.domain = dom AND a.start >= c3 AND a.start < c4
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 1, k.cost_cents, NULL FROM cut k
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 0, 0, t.agent_id
              FROM cut k JOIN work_unit_attempts t ON t.unit_id = k.id) c
     GROUP BY c.fleet, c.start, c.disposition
    HAVING sum(c.units) <> 0;
END
$$;
