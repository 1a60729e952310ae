-- Back to 0040's fold and rebuild, 0032's trigger and throughput, 0020's indexes.
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

DROP INDEX disposal_days_day_idx;
CREATE INDEX disposal_days_day_idx ON disposal_days (fleet, day);
DROP INDEX disposal_agent_counts_idx;
CREATE INDEX disposal_agent_counts_idx ON disposal_agent_counts (fleet, week, domain, start);

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_recount_disposal_weeks();
    PERFORM ledger_recount_agent_latest();
    PERFORM ledger_fold_totals();
END
$$;

CREATE OR REPLACE FUNCTION ledger_fold_totals() RETURNS bigint LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT ledger_compact_totals() + ledger_fold_cost_days() + ledger_fold_event_days()
         + ledger_fold_disposal_weeks() + ledger_fold_cycle_weeks()
$$;

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
DROP TRIGGER disposal_days_added ON disposal_days;
DROP FUNCTION disposal_days_added();
CREATE TRIGGER disposal_days_weeks AFTER INSERT ON disposal_days FOR EACH ROW WHEN (NOT NEW.folded)
    EXECUTE FUNCTION disposal_weeks_added();

DROP FUNCTION ledger_recount_disposal_fleet_days();
DROP FUNCTION ledger_fold_disposal_fleet_days();
DROP TABLE disposal_fleet_days;
