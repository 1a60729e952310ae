-- Events per fleet and type, for `events { totalCount }` unfiltered or by
-- type (issue 27): 3 to 9 seconds at 5,000,000 events of a fleet when the
-- rows are counted. The same pattern as the unit totals (0018): the events
-- are append-only, so each INSERT statement appends one delta row per type
-- it wrote, the sweeper's ledger_compact_totals() folds them, and the
-- audit's event_totals rule reconciles them with the rows.
CREATE TABLE event_totals (
    fleet      text       NOT NULL,
    event_type event_type NOT NULL,
    events     bigint     NOT NULL
);
ALTER TABLE event_totals SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                              autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0);
ALTER TABLE event_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON event_totals FOR SELECT TO work_ledger_app USING (fleet = current_fleet());
CREATE POLICY fleet_reader ON event_totals FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());
GRANT SELECT ON event_totals TO work_ledger_app, work_ledger_reader;

CREATE FUNCTION event_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, events)
    SELECT a.fleet, a.event_type, count(*) FROM added a GROUP BY 1, 2;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_unit_events_totals AFTER INSERT ON work_unit_events
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION event_totals_added();

-- Folds both totals; returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH gone AS (DELETE FROM unit_totals RETURNING *),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents)
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         gone_events AS (DELETE FROM event_totals RETURNING *),
         kept_events AS (
             INSERT INTO event_totals (fleet, event_type, events)
             SELECT fleet, event_type, sum(events) FROM gone_events GROUP BY 1, 2
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_events)
$$;

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, unit_totals, work_unit_events, event_totals IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM unit_totals;
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT fleet, domain, state, disposition, attempt_count > 1, count(*), sum(cost_cents)
      FROM work_units GROUP BY 1, 2, 3, 4, 5;
    DELETE FROM event_totals;
    INSERT INTO event_totals (fleet, event_type, events)
    SELECT fleet, event_type, count(*) FROM work_unit_events GROUP BY 1, 2;
END
$$;
SELECT ledger_rebuild_totals();
