DROP FUNCTION live_events_resumed(text, uuid, bigint, integer);
-- Back to 0028's read of one fleet.
CREATE OR REPLACE FUNCTION live_events_after(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_limit integer)
RETURNS TABLE (watermark bigint, held boolean, event work_unit_events)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    w bigint;
    waiting boolean;
BEGIN
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true);
    w := live_delivery_watermark();
    SELECT EXISTS (SELECT 1 FROM work_unit_events h WHERE h.fleet = p_fleet AND h.batch >= w) INTO waiting;
    RETURN QUERY
        SELECT w, waiting, x
          FROM (SELECT NULL::integer) AS one (n)
          LEFT JOIN LATERAL (
               SELECT x FROM work_unit_events x
                WHERE x.fleet = p_fleet AND (x.batch, x.tx_id, x.seq) > (p_batch, p_tx, p_seq) AND x.batch < w
                ORDER BY x.batch, x.tx_id, x.seq
                LIMIT p_limit
          ) AS rows ON true
         ORDER BY (rows.x).batch, (rows.x).tx_id, (rows.x).seq;
END
$$;
DROP FUNCTION live_events_after_each(text[], bigint[], bigint[], bigint[], integer);
