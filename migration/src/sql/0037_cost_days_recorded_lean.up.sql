-- A cost record written as the unit's latest adds its day without
-- recounting the unit's days (issue 27's writes at size).
--
-- cost_days_recorded added each cost record's delta to the cost days as the
-- unit's days with the record minus its days without it: two calls of
-- cost_unit_days, each joining every cost record of the unit to its attempt,
-- 0.43-0.57 ms a record, about 15% of the database's time for a
-- claim-and-finish that records cost (300 jobs in one transaction on the
-- 1M-unit ledger, pg_stat_xact_user_functions). A record the write path
-- makes is dated now, so no earlier record of its unit is on a later day,
-- and its delta is at most one row per level (the unit; the agent of its
-- attempt, if it has one): its day, the last earlier day with cost, one unit
-- if the day is new at that level, and its cost (no row for no cost on a day
-- that had some). A record written after one on a later day (an owner's hand
-- writing history) still takes 0029's recount. The audit's cost_days rule
-- reconciles both with cost_unit_days.
CREATE OR REPLACE FUNCTION cost_days_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_day date := ((NEW.created_at) AT TIME ZONE 'UTC')::date;
    v_agent text := (SELECT t.agent_id FROM work_unit_attempts t WHERE t.id = NEW.attempt_id);
    was record;
BEGIN
    -- The unit's earlier records: its last day with cost before this one,
    -- whether this day had cost, whether a record is on a later day; the
    -- same for the agent of this record's attempt.
    SELECT max(x.day) FILTER (WHERE x.day < v_day) AS unit_prior,
           coalesce(bool_or(x.day = v_day), false) AS unit_had,
           coalesce(bool_or(x.day > v_day), false) AS later,
           max(x.day) FILTER (WHERE x.day < v_day AND x.agent_id = v_agent) AS agent_prior,
           coalesce(bool_or(x.day = v_day AND x.agent_id = v_agent), false) AS agent_had
      INTO was
      FROM (SELECT ((e.created_at) AT TIME ZONE 'UTC')::date AS day, t.agent_id
              FROM work_unit_events e LEFT JOIN work_unit_attempts t ON v_agent IS NOT NULL AND t.id = e.attempt_id
             WHERE e.unit_id = NEW.unit_id AND e.event_type = 'cost_recorded' AND e.seq < NEW.seq) x;
    IF NOT was.later THEN
        INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
        SELECT NEW.fleet, v_day, u.domain, u.state, u.disposition, was.unit_prior,
               CASE WHEN was.unit_had THEN 0 ELSE 1 END, NEW.cost_delta_cents
          FROM work_units u
         WHERE u.id = NEW.unit_id AND (NOT was.unit_had OR NEW.cost_delta_cents <> 0);
        INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
        SELECT NEW.fleet, v_day, v_agent, u.domain, was.agent_prior,
               CASE WHEN was.agent_had THEN 0 ELSE 1 END, NEW.cost_delta_cents
          FROM work_units u
         WHERE v_agent IS NOT NULL AND u.id = NEW.unit_id AND (NOT was.agent_had OR NEW.cost_delta_cents <> 0);
        RETURN NULL;
    END IF;
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
