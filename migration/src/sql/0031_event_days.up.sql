-- Events per UTC day and type (issue 27): events { totalCount } over a range.
--
-- The count of `events(filter: {from, until})` counted the range's rows: 30
-- days of a fleet with 5,000,000 events are about 200,000 index entries, 1.0 s
-- p99 with 16 readers. The events are append-only, so their count per day
-- and type is a plain sum: the events' statement trigger appends one delta
-- row per (fleet, day, type) of the statement's events, the sweeper folds them
-- (ledger_fold_event_days), ledger_rebuild_totals recounts them, and the
-- audit reconciles them with the events (rule event_days). A range's count is
-- its whole days from these totals and the part of a day it cuts at each end
-- from the rows (events_counted_in).
CREATE TABLE event_days (
    fleet      text       NOT NULL,
    day        date       NOT NULL,
    event_type event_type NOT NULL,
    events     bigint     NOT NULL,
    folded     boolean    NOT NULL DEFAULT false
);
CREATE INDEX event_days_day_idx ON event_days (fleet, day) INCLUDE (event_type, events);
ALTER TABLE event_days ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON event_days FOR SELECT TO work_ledger_app USING (fleet = (SELECT current_fleet()));
CREATE POLICY fleet_reader ON event_days FOR SELECT TO work_ledger_reader USING (fleet = (SELECT reader_fleet()));
GRANT SELECT ON event_days TO work_ledger_app, work_ledger_reader;
ALTER TABLE event_days SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                            autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0);

-- The events' statement trigger (0019, 0020) appends the day rows too: one
-- more INSERT in a trigger every event statement already runs, about 30 us
-- per event statement (docs/BENCHMARKS.md).
CREATE OR REPLACE FUNCTION event_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, agent_id, events)
    SELECT a.fleet, a.event_type, a.agent_id, count(*) FROM added a GROUP BY 1, 2, 3;
    INSERT INTO event_days (fleet, day, event_type, events)
    SELECT a.fleet, ((a.created_at) AT TIME ZONE 'UTC')::date, a.event_type, count(*) FROM added a GROUP BY 1, 2, 3;
    IF EXISTS (SELECT 1 FROM added a WHERE a.attempt_id IS NOT NULL AND a.event_type IN ('stalled', 'transitioned')) THEN
        WITH stalled AS (
                 SELECT t.fleet, t.started_at, t.outcome FROM work_unit_attempts t
                  WHERE t.id IN (SELECT a.attempt_id FROM added a WHERE a.event_type = 'stalled')
                  FOR SHARE),
             started AS (
                 DELETE FROM never_started n
                  WHERE n.attempt_id IN (SELECT a.attempt_id FROM added a WHERE a.event_type = 'transitioned')
                 RETURNING n.fleet, n.started_at)
        INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
        SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date, 0, 0, 0, sum(stale), sum(unstarted)
          FROM (SELECT fleet, started_at, 1 AS stale, 0 AS unstarted FROM stalled
                 WHERE outcome IS DISTINCT FROM 'superseded'
                UNION ALL
                SELECT fleet, started_at, 0, -1 FROM started) c
         GROUP BY 1, 2;
    END IF;
    RETURN NULL;
END
$$;

-- Folds the days with a delta into one row per (fleet, day, type); returns the rows folded.
CREATE FUNCTION ledger_fold_event_days() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, event_type FROM event_days WHERE NOT folded),
         gone AS (
             DELETE FROM event_days t USING moved m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.event_type = m.event_type
             RETURNING t.*),
         kept AS (
             INSERT INTO event_days (fleet, day, event_type, events, folded)
             SELECT fleet, day, event_type, sum(events), true FROM gone GROUP BY 1, 2, 3
             HAVING sum(events) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION ledger_fold_event_days() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_fold_event_days() TO work_ledger_app;

CREATE FUNCTION ledger_recount_event_days() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_unit_events, event_days IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM event_days;
    INSERT INTO event_days (fleet, day, event_type, events)
    SELECT fleet, ((created_at) AT TIME ZONE 'UTC')::date, event_type, count(*) FROM work_unit_events GROUP BY 1, 2, 3;
END
$$;
REVOKE ALL ON FUNCTION ledger_recount_event_days() FROM PUBLIC;

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_compact_totals();
    PERFORM ledger_fold_cost_days();
    PERFORM ledger_fold_event_days();
END
$$;

SELECT ledger_recount_event_days();
SELECT ledger_fold_event_days();
ANALYZE event_days;

-- The fleet's events in [p_from, p_until) (NULL: unbounded) of any of
-- p_types (empty: every type): the whole UTC days from event_days, the part
-- of a day cut at each end counted from the rows.
CREATE FUNCTION events_counted_in(p_fleet text, p_types text[], p_from timestamptz, p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    lo date;
    hi date;
    low_end timestamptz;
    high_start timestamptz;
    every boolean := cardinality(p_types) = 0;
BEGIN
    SELECT w.lo, w.hi, w.low_end, w.high_start INTO lo, hi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) w;
    RETURN (SELECT coalesce(sum(d.events), 0) FROM event_days d
             WHERE lo < hi AND d.fleet = p_fleet AND d.day >= lo AND d.day < hi
               AND (every OR d.event_type::text = ANY(p_types)))
         + (SELECT count(*) FROM work_unit_events e
             WHERE e.fleet = p_fleet AND e.created_at >= coalesce(p_from, '-infinity') AND e.created_at < low_end
               AND (every OR e.event_type::text = ANY(p_types)))
         + (SELECT count(*) FROM work_unit_events e
             WHERE e.fleet = p_fleet AND e.created_at >= high_start AND e.created_at < coalesce(p_until, 'infinity')
               AND (every OR e.event_type::text = ANY(p_types)));
END
$$;
REVOKE ALL ON FUNCTION events_counted_in(text, text[], timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION events_counted_in(text, text[], timestamptz, timestamptz) TO work_ledger_app;
