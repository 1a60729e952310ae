-- Back to 0033's live reads.
DROP FUNCTION live_events_resumed(text, uuid, bigint, bigint, integer);
DROP FUNCTION live_events_below(text, bigint, bigint, bigint, bigint, integer);
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

CREATE FUNCTION live_events_after(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_limit integer)
RETURNS TABLE (watermark bigint, held boolean, event work_unit_events)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT r.watermark, r.held, r.event
      FROM live_events_after_each(ARRAY[p_fleet], ARRAY[p_batch], ARRAY[p_tx], ARRAY[p_seq], p_limit) AS r;
$$;
REVOKE ALL ON FUNCTION live_events_after(text, bigint, bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_events_after(text, bigint, bigint, bigint, integer) TO work_ledger_app;

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
