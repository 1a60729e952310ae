-- The live reads of many fleets in one statement, and a resumed
-- subscription's start in one statement (issue 27).
--
-- Measured on this project's 2-core machine with 10,000 subscribers over
-- 100 fleets and two replicas (docs/BENCHMARKS.md, round 3, session 14):
-- a feed's read, live_events_after(), cost as much as the delivery
-- watermark alone (1.09 ms each, with ~100 connections open): nearly all
-- of a read is live_delivery_watermark()'s scan of pg_locks, not the rows.
-- The server sends the notifications of many fleets at once (coalesced
-- after its commits), so the feeds of several fleets wake together and each
-- read the watermark for itself.
--
-- live_events_after_each() reads the watermark once and then, fleet by
-- fleet, what live_events_after() read: it takes the app role, and before
-- each fleet's rows that fleet (row-level security filters each fleet's
-- statements by its own setting). Every fleet's rows are read in statements
-- later than the watermark's, as migration 0004 requires. Rows carry k, the
-- 1-based index of their fleet in p_fleets; each fleet has at least one row
-- (a NULL event when it has nothing to deliver). As for live_events_after,
-- only roles that may already take the app role and set a fleet may call it.
CREATE FUNCTION live_events_after_each(p_fleets text[], p_batches bigint[], p_txs bigint[], p_seqs bigint[],
                                       p_limit integer)
RETURNS TABLE (k integer, watermark bigint, held boolean, event work_unit_events)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    w bigint;
    i integer;
    waiting boolean;
BEGIN
    PERFORM set_config('role', 'work_ledger_app', true);
    w := live_delivery_watermark();
    FOR i IN 1 .. coalesce(array_length(p_fleets, 1), 0) LOOP
        PERFORM set_config('work_ledger.fleet', p_fleets[i], true);
        SELECT EXISTS (SELECT 1 FROM work_unit_events h WHERE h.fleet = p_fleets[i] AND h.batch >= w) INTO waiting;
        RETURN QUERY
            SELECT i, w, waiting, x
              FROM (SELECT NULL::integer) AS one (n)
              LEFT JOIN LATERAL (
                   SELECT x FROM work_unit_events x
                    WHERE x.fleet = p_fleets[i] AND (x.batch, x.tx_id, x.seq) > (p_batches[i], p_txs[i], p_seqs[i])
                      AND x.batch < w
                    ORDER BY x.batch, x.tx_id, x.seq
                    LIMIT p_limit
              ) AS rows ON true
             ORDER BY (rows.x).batch, (rows.x).tx_id, (rows.x).seq;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION live_events_after_each(text[], bigint[], bigint[], bigint[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_after_each(text[], bigint[], bigint[], bigint[], integer) TO work_ledger_app;

-- One fleet's read is the same read of a list of one (one copy of its SQL).
CREATE OR REPLACE FUNCTION live_events_after(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_limit integer)
RETURNS TABLE (watermark bigint, held boolean, event work_unit_events)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT r.watermark, r.held, r.event
      FROM live_events_after_each(ARRAY[p_fleet], ARRAY[p_batch], ARRAY[p_tx], ARRAY[p_seq], p_limit) AS r;
$$;

-- ledgerEvents(after: cursor) looked the cursor's event up in a request
-- transaction of its own (BEGIN; the app role and the fleet; the row;
-- COMMIT), then read its first page in a second call: four round trips and
-- a pooled connection held across them for each of 10,000 subscribers
-- reconnecting at once. live_events_resumed() does both in one call: it
-- takes the app role and the fleet (for the rest of the caller's
-- transaction; in autocommit, for this statement alone), finds the event
-- under row-level security, starts no later than just before batch p_floor
-- when one is given (a list's cursor, see EventCursor), and returns that
-- position with live_events_after()'s columns from it. No row: the event is
-- not one of the fleet's (a foreign or unknown cursor).
CREATE FUNCTION live_events_resumed(p_fleet text, p_event uuid, p_floor bigint, p_limit integer)
RETURNS TABLE (from_batch bigint, from_tx bigint, from_seq bigint, watermark bigint, held boolean,
               event work_unit_events)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    b bigint;
    t bigint;
    s bigint;
BEGIN
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true);
    SELECT e.batch, e.tx_id, e.seq INTO b, t, s FROM work_unit_events e WHERE e.id = p_event AND e.fleet = p_fleet;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_floor IS NOT NULL AND (p_floor, -1::bigint, -1::bigint) < (b, t, s) THEN
        b := p_floor;
        t := -1;
        s := -1;
    END IF;
    RETURN QUERY SELECT b, t, s, r.watermark, r.held, r.event FROM live_events_after(p_fleet, b, t, s, p_limit) AS r;
END
$$;
REVOKE ALL ON FUNCTION live_events_resumed(text, uuid, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_resumed(text, uuid, bigint, integer) TO work_ledger_app;
