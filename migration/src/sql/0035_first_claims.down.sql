-- Back to 0020's cycle times (a probe of attempt 1 per disposal) and 0022's
-- disposal index. ledger_claim writes the column, so it goes first and
-- writes.sql is marked as not applied: the next `migrate` (of whichever
-- release) applies its own again (as 0015's down does).
DROP FUNCTION IF EXISTS ledger_claim(text, text, text, text, text, integer, text, uuid);
DELETE FROM schema_repeatable WHERE name = 'writes';

CREATE OR REPLACE FUNCTION cycle_time_by_rows(p_from timestamptz, p_until timestamptz)
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

DROP INDEX work_units_disposed_at_idx;
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at)
    INCLUDE (disposition, domain, cost_cents, id, created_at) WHERE disposition IS NOT NULL;

DROP TRIGGER work_units_first_claim_recorded ON work_units;
DROP FUNCTION work_units_first_claim_recorded();
DROP TRIGGER work_units_first_claim_guard ON work_units;
DROP FUNCTION work_units_first_claim_guard();
ALTER TABLE work_units DROP COLUMN first_claimed_at;
