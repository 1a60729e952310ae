-- Disposals per UTC week (issue 27): the weekly reads from a week's rows.
--
-- weeklyMetrics, throughput(bucket: WEEK) and the weekly panels summed a
-- fleet's disposal_days into weeks on every read: two years are 11,680 day
-- rows (days x domains x dispositions), 7 ms of SQL per sum, and
-- weeklyMetrics sums them twice (rework and verified throughput).
-- disposal_weeks holds the same totals per week (1,680 rows for two years):
-- 1 ms.
--
-- It is disposal_days summed by week, kept so by a row trigger on
-- disposal_days: each delta row written there (the disposals' triggers,
-- unfolded) is appended here under its week. The sweeper's fold of
-- disposal_days (deleting a group's rows, inserting their sum as folded)
-- changes no week, and is not repeated here; disposal_weeks has a fold of its
-- own (ledger_fold_disposal_weeks). A recount of the day totals rewrites
-- disposal_days unfolded, so ledger_rebuild_totals recounts the weeks from
-- the days after it (ledger_recount_disposal_weeks). The audit's
-- disposal_days rule reconciles both tables with the disposed units.
CREATE TABLE disposal_weeks (
    fleet               text        NOT NULL,
    week                date,
    domain              text        NOT NULL,
    disposition         disposition NOT NULL,
    units               bigint      NOT NULL,
    cost_cents          bigint      NOT NULL,
    reworked            bigint      NOT NULL,
    verified_units      bigint      NOT NULL,
    verified_cost_cents bigint      NOT NULL,
    folded              boolean     NOT NULL DEFAULT false
);
-- Read by index only: a fleet's weeks together whatever the heap's order.
CREATE INDEX disposal_weeks_week_idx ON disposal_weeks (fleet, week)
    INCLUDE (domain, disposition, units, cost_cents, reworked, verified_units, verified_cost_cents);
ALTER TABLE disposal_weeks ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON disposal_weeks FOR SELECT TO work_ledger_app USING (fleet = (SELECT current_fleet()));
CREATE POLICY fleet_reader ON disposal_weeks FOR SELECT TO work_ledger_reader USING (fleet = (SELECT reader_fleet()));
GRANT SELECT ON disposal_weeks TO work_ledger_app, work_ledger_reader;
ALTER TABLE disposal_weeks SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                                autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0);

CREATE FUNCTION disposal_weeks_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                verified_cost_cents)
    VALUES (NEW.fleet, date_trunc('week', (NEW.day)::timestamp)::date, NEW.domain, NEW.disposition, NEW.units,
            NEW.cost_cents, NEW.reworked, NEW.verified_units, NEW.verified_cost_cents);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION disposal_weeks_added() FROM PUBLIC;
CREATE TRIGGER disposal_days_weeks AFTER INSERT ON disposal_days FOR EACH ROW WHEN (NOT NEW.folded)
    EXECUTE FUNCTION disposal_weeks_added();

-- Folds the weeks with a delta into one row per (fleet, week, domain,
-- disposition); returns the rows folded.
CREATE FUNCTION ledger_fold_disposal_weeks() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH moved AS (SELECT DISTINCT fleet, week, domain, disposition FROM disposal_weeks WHERE NOT folded),
         gone AS (
             DELETE FROM disposal_weeks t USING moved m
              WHERE t.fleet = m.fleet AND t.domain = m.domain AND t.disposition = m.disposition
                AND coalesce(t.week, '-infinity') = coalesce(m.week, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                         verified_cost_cents, folded)
             SELECT fleet, week, domain, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents), true
               FROM gone GROUP BY 1, 2, 3, 4
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION ledger_fold_disposal_weeks() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_disposal_weeks() TO work_ledger_app;

-- The weeks from the days, folded.
CREATE FUNCTION ledger_recount_disposal_weeks() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE disposal_days, disposal_weeks IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM disposal_weeks;
    INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                verified_cost_cents, folded)
    SELECT fleet, date_trunc('week', (day)::timestamp)::date, domain, disposition, sum(units), sum(cost_cents),
           sum(reworked), sum(verified_units), sum(verified_cost_cents), true
      FROM disposal_days GROUP BY 1, 2, 3, 4
    HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
        OR sum(verified_cost_cents) <> 0;
END
$$;
REVOKE ALL ON FUNCTION ledger_recount_disposal_weeks() FROM PUBLIC;

-- Every fold in one call, the sweeper's and the rebuild's: a roll-up's fold
-- is added here once (the sweeper named each fold itself, the rebuild its
-- own list). Returns the rows folded and kept.
CREATE FUNCTION ledger_fold_totals() RETURNS bigint LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT ledger_compact_totals() + ledger_fold_cost_days() + ledger_fold_event_days()
         + ledger_fold_disposal_weeks() + ledger_fold_cycle_weeks()
$$;
REVOKE ALL ON FUNCTION ledger_fold_totals() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_totals() TO work_ledger_app;

-- The recount writes disposal_days unfolded, which the trigger appends to
-- the weeks as well; the weeks' own recount replaces them. The rows arrive
-- unfolded, one per group; the fold marks them, so the sweeper's next pass
-- rewrites none.
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_recount_disposal_weeks();
    PERFORM ledger_fold_totals();
END
$$;

SELECT ledger_recount_disposal_weeks();
ANALYZE disposal_weeks;

-- The North Star views of 0020 from the weeks (same columns).
CREATE OR REPLACE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT fleet, (week)::timestamp AT TIME ZONE 'UTC' AS week, sum(verified_units)::bigint AS units,
       sum(verified_cost_cents)::bigint AS cost_cents
  FROM disposal_weeks
 GROUP BY 1, 2
HAVING sum(verified_units) <> 0;

CREATE OR REPLACE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT fleet, week, disposed, reworked, round(reworked::numeric / disposed, 4) AS rework_rate
  FROM (SELECT fleet, (week)::timestamp AT TIME ZONE 'UTC' AS week, sum(units)::bigint AS disposed,
               sum(reworked)::bigint AS reworked
          FROM disposal_weeks GROUP BY 1, 2) w
 WHERE disposed <> 0;

-- throughput (0030) takes its whole weeks from disposal_weeks, its whole
-- days from disposal_days as before.
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
    low_end timestamptz;
    high_start timestamptz;
BEGIN
    SELECT d.lo, d.hi, d.low_end, d.high_start INTO dlo, dhi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) d;
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
             WHERE p_bucket = 'day' AND d.day >= lo::date AND d.day < hi::date
               AND (p_domain IS NULL OR d.domain = p_domain)
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
             WHERE d.day >= dlo AND d.day < dhi AND NOT (whole AND d.day >= lo::date AND d.day < hi::date)
               AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM disposal_agents a
             WHERE NOT a.week AND a.domain = coalesce(p_domain, '') AND a.start >= dlo AND a.start < dhi
               AND NOT (whole AND a.start >= lo::date AND a.start < hi::date)
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 1, k.cost_cents, NULL FROM cut k
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 0, 0, t.agent_id
              FROM cut k JOIN work_unit_attempts t ON t.unit_id = k.id) c
     GROUP BY c.fleet, c.start, c.disposition
    HAVING sum(c.units) <> 0;
END
$$;
