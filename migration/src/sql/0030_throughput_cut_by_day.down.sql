-- Back to 0024's throughput.
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
             WHERE d.day >= lo::date AND d.day < hi::date AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT g.fleet, g.start::timestamp, g.disposition, 0, 0, g.agents
              FROM disposal_agent_counts g
             WHERE g.week = (p_bucket = 'week') AND g.domain = coalesce(p_domain, '')
               AND g.start >= lo::date AND g.start < hi::date) x
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
