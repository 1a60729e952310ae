-- A feed's read of its fleet's new events in one statement (issue 27).
--
-- Until now a feed read was a transaction of five round trips on the live
-- pool (BEGIN; the app role and the fleet; the delivery watermark; the rows;
-- COMMIT). With 100 fleets, 500 events a second and a live pool of four
-- connections, the reads queued for the pool faster than they ended, the
-- LISTEN connection could not be taken back after a lost health ping, and
-- delivery fell behind by seconds (docs/BENCHMARKS.md, round 3, session 11).
--
-- live_events_after() does the same in one call: it takes the app role and
-- the fleet for the rest of the caller's transaction (in autocommit, for
-- this statement alone), reads the watermark, then the rows in a LATER
-- statement, as migration 0004 requires: this function is VOLATILE, so
-- under READ COMMITTED each of its statements takes a new snapshot
-- (live_delivery_watermark() refuses any other isolation). It gives no one
-- more than they had: only roles that may already take the app role and
-- set the fleet (the service's login, the app role) may call it.
--
-- Columns: the watermark W, whether committed events of the fleet wait at or
-- above W (`held`), then the events after (p_batch, p_tx, p_seq) below W in
-- delivery order; with no such event, one row whose event is NULL.
CREATE FUNCTION live_events_after(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_limit integer)
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
REVOKE ALL ON FUNCTION live_events_after(text, bigint, bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_after(text, bigint, bigint, bigint, integer) TO work_ledger_app;
