-- Back to 0029's cost_days_moved.
CREATE OR REPLACE FUNCTION cost_days_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
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
     WHERE d.agent_id IS NOT NULL AND (OLD.domain IS DISTINCT FROM NEW.domain OR OLD.fleet IS DISTINCT FROM NEW.fleet);
    RETURN NULL;
END
$$;
