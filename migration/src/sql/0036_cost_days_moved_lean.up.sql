-- A unit's cost days moved without its attempts (issue 27's writes at size).
--
-- The cost days keep each unit's cost under its group now (0029), so every
-- state change of a unit that has cost moves its day rows from the old group
-- to the new one. cost_days_moved read them with cost_unit_days, which also
-- joins each cost record to its attempt and makes a row per agent: rows a
-- state change does not use (the agent rows move only with the domain or
-- the fleet). Claim, start and dispose of a unit with cost ran it three times,
-- 0.28-0.35 ms a time, most of it in cost_unit_days: a claim-and-finish of
-- such a unit cost the database 2.4 ms against 1.4 ms for a unit without cost
-- (300 jobs in one transaction, pg_stat_xact_user_functions, the 1M-unit
-- ledger). A change of group that keeps the domain and the fleet now reads
-- the unit's days from its cost records alone (work_unit_events_unit_cost_idx)
-- and moves the unit rows; the rest is 0029's.
CREATE OR REPLACE FUNCTION cost_days_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF OLD.domain IS NOT DISTINCT FROM NEW.domain AND OLD.fleet IS NOT DISTINCT FROM NEW.fleet THEN
        -- cost_unit_days' rows without an agent: the unit's cost per UTC
        -- day, each with the unit's previous day with cost.
        INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
        SELECT g.fleet, d.day, g.domain, g.state, g.disposition, d.prior_day, g.sign, g.sign * d.cost
          FROM (SELECT x.day, lag(x.day) OVER (ORDER BY x.day) AS prior_day, x.cost
                  FROM (SELECT ((e.created_at) AT TIME ZONE 'UTC')::date AS day, sum(e.cost_delta_cents)::bigint AS cost
                          FROM work_unit_events e
                         WHERE e.unit_id = NEW.id AND e.event_type = 'cost_recorded'
                         GROUP BY 1) x) d
         CROSS JOIN (VALUES (OLD.fleet, OLD.domain, OLD.state, OLD.disposition, -1),
                            (NEW.fleet, NEW.domain, NEW.state, NEW.disposition, 1))
                    AS g(fleet, domain, state, disposition, sign);
        RETURN NULL;
    END IF;
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
     WHERE d.agent_id IS NOT NULL;
    RETURN NULL;
END
$$;
