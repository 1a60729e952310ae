-- Live reads below a watermark the server already knows (issue 27).
--
-- Every read of the live log computed the delivery watermark itself
-- (live_delivery_watermark(): the sequence's last value, then a scan of
-- pg_locks for the in-flight event writers' markers, migration 0004). A
-- feed woken by a commit needs a watermark taken after that commit; a
-- subscriber catching up from a cursor does not: the newest watermark the
-- server's reads returned, as it stands once the subscriber has joined its
-- fleet's broadcast, reaches every event the broadcast did not carry to it
-- (a feed notes its read's watermark before it broadcasts the events). When 10,000 subscribers reconnect at once, each one's resume
-- and catch-up pages scanned pg_locks again while the server's feeds were
-- computing the same watermark many times a second.
--
-- live_events_below() is the read of one fleet's events after a position
-- and below a watermark given by the caller; it is the only copy of the
-- rows' SQL. A watermark is final forever once taken (the delivered part of
-- the log only grows at its end), so the server may pass the newest one any
-- of its reads returned, and its statements start after that read ended,
-- as migration 0004 requires. The function still clamps the given watermark
-- to the batch sequence (a watermark never exceeds its last value + 1), so
-- no caller reaches past the batches drawn so far. A NULL watermark is
-- computed here, first, as live_events_after() did.
--
-- It replaces live_events_after() (the same read, always with a watermark
-- of its own; a feed's read now passes NULL) and live_events_resumed()
-- takes the caller's watermark too. The reads of many fleets in one
-- statement (0033's live_events_after_each) are gone:
-- measured on two cores they made both the feeds and the reconnecting
-- subscribers slower (docs/BENCHMARKS.md, round 3, session 15), and the
-- server has read one fleet a statement since.
--
-- As before, these functions take the app role and the given fleet for the
-- rest of the caller's transaction (in autocommit, for the statement), so
-- only roles that may already do both may execute them.
CREATE FUNCTION live_events_below(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_watermark bigint,
                                  p_limit integer)
RETURNS TABLE (watermark bigint, held boolean, event work_unit_events)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    w bigint;
    waiting boolean;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the rows would be read in a
    -- snapshot that may predate the watermark (0004).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'live_events_below() needs READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'WL010';
    END IF;
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true);
    IF p_watermark IS NULL THEN
        w := live_delivery_watermark();
    ELSE
        w := least(p_watermark, coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0) + 1);
    END IF;
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
REVOKE ALL ON FUNCTION live_events_below(text, bigint, bigint, bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_below(text, bigint, bigint, bigint, bigint, integer) TO work_ledger_app;

DROP FUNCTION live_events_after(text, bigint, bigint, bigint, integer);
DROP FUNCTION live_events_after_each(text[], bigint[], bigint[], bigint[], integer);

-- As 0033's, with the caller's watermark (NULL: computed here).
DROP FUNCTION live_events_resumed(text, uuid, bigint, integer);
CREATE FUNCTION live_events_resumed(p_fleet text, p_event uuid, p_floor bigint, p_watermark bigint, p_limit integer)
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
    RETURN QUERY
        SELECT b, t, s, r.watermark, r.held, r.event FROM live_events_below(p_fleet, b, t, s, p_watermark, p_limit) AS r;
END
$$;
REVOKE ALL ON FUNCTION live_events_resumed(text, uuid, bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_resumed(text, uuid, bigint, bigint, integer) TO work_ledger_app;
