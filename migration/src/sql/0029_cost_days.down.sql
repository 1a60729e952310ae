CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_compact_totals();
END
$$;
DROP FUNCTION cost_recorded_in(text, boolean, timestamptz, timestamptz, text);
DROP FUNCTION ledger_whole_days(timestamptz, timestamptz);
DROP FUNCTION ledger_recount_cost_days();
DROP FUNCTION ledger_fold_cost_days();
DROP TRIGGER work_units_cost_days_moved ON work_units;
DROP FUNCTION cost_days_moved();
DROP TRIGGER work_unit_events_cost_days ON work_unit_events;
DROP FUNCTION cost_days_recorded();
DROP FUNCTION cost_unit_days(uuid[], bigint);
DROP INDEX work_unit_events_unit_cost_idx;
DROP TABLE agent_cost_days;
DROP TABLE cost_days;
