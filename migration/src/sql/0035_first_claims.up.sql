-- The first claim kept on the unit (issue 27): cycle times without a probe
-- per disposal.
--
-- A week's cycle times are the median and p90 of (disposed_at - the start of
-- attempt 1) over the week's disposals. The weeks that ended are kept whole
-- (cycle_weeks, 0020); the current week was computed from the rows on every
-- read of weeklyMetrics and of the "Verified throughput and cycle time per
-- week" panel: a range of work_units_disposed_at_idx, then one probe of
-- work_unit_attempts_unit_attempt_no_key and its heap per disposal. At
-- 1,000,000 units, 2,062 disposals in the large fleet's current week cost
-- 8,248 buffers and 8.6 ms of its 11.5 ms.
--
-- first_claimed_at is that start, written once by ledger_claim (in the same
-- statement that moves attempt_count from 0 to 1) and carried by the
-- disposal index, so the current week is an index-only range read.
-- The table refuses a unit claimed without it (or with it and no attempt);
-- a hand other than the write functions sets it to attempt 1's start or not
-- at all, and cannot move it once set; the audit's rule first_claims
-- reconciles it with the attempts.
ALTER TABLE work_units ADD COLUMN first_claimed_at timestamptz;

-- Every unit claimed so far, from its first attempt. The guard would stamp
-- updated_at on each unit: the backfill is not a change of the unit.
ALTER TABLE work_units DISABLE TRIGGER work_units_guard;
UPDATE work_units u SET first_claimed_at = a.started_at
  FROM work_unit_attempts a
 WHERE a.unit_id = u.id AND a.attempt_no = 1;
ALTER TABLE work_units ENABLE TRIGGER work_units_guard;

ALTER TABLE work_units ADD CONSTRAINT work_units_first_claim_when_claimed
    CHECK ((first_claimed_at IS NULL) = (attempt_count = 0));

-- Anyone but the write functions: a first claim, once there, is history.
CREATE FUNCTION work_units_first_claim_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'the first claim of unit % is history', NEW.id
        USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_immutable';
END
$$;
CREATE TRIGGER work_units_first_claim_guard BEFORE UPDATE OF first_claimed_at ON work_units
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer' AND OLD.first_claimed_at IS NOT NULL
                       AND NEW.first_claimed_at IS DISTINCT FROM OLD.first_claimed_at)
    EXECUTE FUNCTION work_units_first_claim_guard();

-- And the value such a hand sets is attempt 1's start, checked at commit:
-- a hand-written claim inserts the attempt and updates the unit in sibling
-- CTEs of one statement, which cannot see each other's rows, so the check
-- waits for the transaction's end (as work_units_claim_recorded does).
CREATE FUNCTION work_units_first_claim_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF (SELECT u.first_claimed_at FROM work_units u WHERE u.id = NEW.id) IS DISTINCT FROM
       (SELECT a.started_at FROM work_unit_attempts a WHERE a.unit_id = NEW.id AND a.attempt_no = 1) THEN
        RAISE EXCEPTION 'the first claim of unit % is the start of its attempt 1', NEW.id
            USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_is_attempt_1';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER work_units_first_claim_recorded AFTER UPDATE OF first_claimed_at ON work_units
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (current_user <> 'work_ledger_writer' AND NEW.first_claimed_at IS DISTINCT FROM OLD.first_claimed_at)
    EXECUTE FUNCTION work_units_first_claim_recorded();

-- 0022's disposal index, carrying the first claim too.
DROP INDEX work_units_disposed_at_idx;
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at)
    INCLUDE (disposition, domain, cost_cents, id, created_at, first_claimed_at) WHERE disposition IS NOT NULL;

-- 0020's cycle times from the rows, read from the index alone. A unit
-- disposed without ever being claimed has no cycle time, as before (the
-- join to attempt 1 left it out).
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
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at)),
           percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at))
      FROM work_units u
     WHERE u.disposition IS NOT NULL AND u.disposed_at >= lo AND u.disposed_at < hi
       AND u.first_claimed_at IS NOT NULL
     GROUP BY 1, 2;
END
$$;
