CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_compact_totals();
    PERFORM ledger_fold_cost_days();
END
$$;
DROP FUNCTION events_counted_in(text, text[], timestamptz, timestamptz);
DROP FUNCTION ledger_recount_event_days();
DROP FUNCTION ledger_fold_event_days();
CREATE OR REPLACE FUNCTION event_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, agent_id, events)
    SELECT a.fleet, a.event_type, a.agent_id, count(*) FROM added a GROUP BY 1, 2, 3;
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
DROP TABLE event_days;
