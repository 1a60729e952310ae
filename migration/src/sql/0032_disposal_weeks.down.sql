-- Back to 0031's rebuild, 0020's weekly views and 0030's throughput.
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

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_compact_totals();
    PERFORM ledger_fold_cost_days();
    PERFORM ledger_fold_event_days();
END
$$;

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
      FROM (SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp) AS start, d.disposition, d.units, d.cost_cents,
                   0::bigint AS agents
              FROM disposal_days d
             WHERE d.day >= lo::date AND d.day < hi::date AND (p_domain IS NULL OR d.domain = p_domain)
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

DROP FUNCTION ledger_fold_totals();
DROP FUNCTION ledger_recount_disposal_weeks();
DROP FUNCTION ledger_fold_disposal_weeks();
DROP TRIGGER disposal_days_weeks ON disposal_days;
DROP FUNCTION disposal_weeks_added();
DROP TABLE disposal_weeks;
