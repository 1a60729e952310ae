CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH gone AS (DELETE FROM unit_totals RETURNING *),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents)
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, unit_totals IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM unit_totals;
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT fleet, domain, state, disposition, attempt_count > 1, count(*), sum(cost_cents)
      FROM work_units GROUP BY 1, 2, 3, 4, 5;
END
$$;
DROP TRIGGER work_unit_events_totals ON work_unit_events;
DROP FUNCTION event_totals_added();
DROP TABLE event_totals;
