-- The calendar of the weekly reads: whole days and weeks of a range, the
-- weeks that ended, and the cycle times of a week from its disposals.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- The whole UTC days of [p_from, p_until) (NULL: unbounded), [lo, hi), and
-- the parts of a day the range cuts at each end, [p_from, low_end) and
-- [high_start, p_until): the whole range when no day lies whole inside it.
-- The one split behind the reads that take whole days from day totals and
-- the cut ends from the rows (cost_recorded_in, throughput, events_counted_in).
CREATE OR REPLACE FUNCTION ledger_whole_days(p_from timestamp with time zone, p_until timestamp with time zone, OUT lo date, OUT hi date, OUT low_end timestamp with time zone, OUT high_start timestamp with time zone) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

-- The first Monday 00:00 UTC at or after a time (NULL and infinities as they are).
CREATE OR REPLACE FUNCTION ledger_week_at_or_after(timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN CASE WHEN (($1 IS NULL) OR (NOT isfinite($1))) THEN $1 WHEN (date_trunc('week'::text, ($1 AT TIME ZONE 'UTC'::text)) = ($1 AT TIME ZONE 'UTC'::text)) THEN $1 ELSE ((date_trunc('week'::text, ($1 AT TIME ZONE 'UTC'::text)) + '7 days'::interval) AT TIME ZONE 'UTC'::text) END;

-- Whether a disposal dated `at` falls in a week that has already ended.
CREATE OR REPLACE FUNCTION ledger_in_ended_week(p_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN ((date_trunc('week'::text, (((p_at AT TIME ZONE 'UTC'::text))::date)::timestamp without time zone))::date < (date_trunc('week'::text, (((clock_timestamp() AT TIME ZONE 'UTC'::text))::date)::timestamp without time zone))::date);

-- 0020's cycle times from the rows, read from the index alone. A unit
-- disposed without ever being claimed has no cycle time, as before (the
-- join to attempt 1 left it out).
CREATE OR REPLACE FUNCTION cycle_time_by_rows(p_from timestamp with time zone, p_until timestamp with time zone) RETURNS TABLE(fleet text, week timestamp with time zone, units bigint, median_seconds double precision, p90_seconds double precision)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    lo timestamptz := coalesce(ledger_week_at_or_after(p_from), '-infinity');
    hi timestamptz := coalesce(ledger_week_at_or_after(p_until), 'infinity');
BEGIN
    RETURN QUERY
    SELECT u.fleet, date_trunc('week', u.disposed_at, 'UTC'), count(*),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at)),
           percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at))
      FROM work_units u
     WHERE u.disposition IS NOT NULL AND u.disposed_at >= lo AND u.disposed_at < hi
       AND u.first_claimed_at IS NOT NULL
     GROUP BY 1, 2;
END
$$;

-- The weeks of [p_from, p_until): kept ones from cycle_weeks, the others
-- (from the session's mark on) from the rows.
CREATE OR REPLACE FUNCTION cycle_time_weekly(p_from timestamp with time zone, p_until timestamp with time zone) RETURNS TABLE(fleet text, week timestamp with time zone, units bigint, median_seconds double precision, p90_seconds double precision)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

-- A disposal dated in a week that has ended: the next fold computes that
-- week again. The upsert takes the mark's lock even when it does not move it.
CREATE OR REPLACE FUNCTION cycle_week_reopened(p_fleet text, p_week date) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    INSERT INTO cycle_weeks_until AS m (fleet, until) VALUES (p_fleet, '-infinity')
    ON CONFLICT (fleet) DO UPDATE SET until = least(m.until, p_week);
$$;
COMMENT ON FUNCTION cycle_week_reopened(text,date) IS 'callers: owner';
