-- Back to 0029's cost_days_recorded.
CREATE OR REPLACE FUNCTION cost_days_recorded() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
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
