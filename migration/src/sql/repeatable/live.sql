-- Live delivery: each event's stream position, the in-flight writer
-- markers and the watermark below which no open transaction can still
-- write, the reads of a fleet's events below it, and the notifications.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

CREATE OR REPLACE VIEW live_event_writers AS
 SELECT l.pid,
        CASE
            WHEN (l.objsubid = 1) THEN ((((l.classid)::bigint & (65535)::bigint) << 32) | (l.objid)::bigint)
            ELSE (0)::bigint
        END AS batch_floor
   FROM (pg_locks l
     JOIN pg_stat_activity a ON ((a.pid = l.pid)))
  WHERE ((l.locktype = 'advisory'::text) AND l.granted AND (((l.objsubid = 1) AND (((l.classid)::bigint >> 16) = ('0111011101101100'::"bit")::bigint)) OR ((l.objsubid = 2) AND (l.classid = (2003566592)::oid) AND ((l.objid)::bigint = l.pid))) AND (l.database = ( SELECT d.oid
           FROM pg_database d
          WHERE (d.datname = current_database()))) AND pg_has_role(a.usesysid, 'work_ledger_app'::name, 'MEMBER'::text));

CREATE OR REPLACE FUNCTION live_fleet_tag(p_fleet text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT encode(substring(sha256(s.outer_key || sha256(s.inner_key || convert_to(p_fleet, 'UTF8'))) FROM 1 FOR 16), 'hex')
      FROM live_notify_secret s
$$;
COMMENT ON FUNCTION live_fleet_tag(text) IS 'callers: app, writer';

-- 2. Notifications reveal nothing, not even which fleet is busy: an event
-- notification's payload is a fresh random nonce and a MAC of it under the
-- fleet's secret tag (live_fleet_tag, which only the service may compute).
-- Two notifications of one fleet look as unrelated as two of two fleets; a
-- server tells its fleets' notifications from the rest by computing the MAC
-- with each tag it knows. One payload per fleet per transaction (cached in
-- the transaction, so PostgreSQL still folds a batch's notifications).
CREATE OR REPLACE FUNCTION live_fleet_signal(p_fleet text) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT n.nonce || encode(substring(sha256(convert_to(public.live_fleet_tag(p_fleet) || n.nonce, 'UTF8')) FROM 1 FOR 16), 'hex')
      FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS nonce) n
$$;
COMMENT ON FUNCTION live_fleet_signal(text) IS 'callers: app, writer';

-- W: every batch below it is final (see above). The caller reads the log in
-- a later statement of a READ COMMITTED transaction (or in autocommit). VOLATILE and plpgsql so that step 1 runs before step 2.
CREATE OR REPLACE FUNCTION live_delivery_watermark() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    last_drawn bigint;
    oldest_writer bigint;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the caller's later statement
    -- would reuse a snapshot older than this function's reads.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'live_delivery_watermark() needs READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'WL010';
    END IF;
    last_drawn := coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0);
    SELECT min(w.batch_floor) INTO oldest_writer FROM live_event_writers w;
    RETURN least(last_drawn, oldest_writer) + 1;
END
$$;

-- Live reads below a watermark the server already knows (issue 27).
--
-- Every read of the live log computed the delivery watermark itself
-- (live_delivery_watermark(): the sequence's last value, then a scan of
-- pg_locks for the in-flight event writers' markers). A
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
-- as live delivery requires. The function still clamps the given watermark
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
CREATE OR REPLACE FUNCTION live_events_below(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_watermark bigint, p_limit integer) RETURNS TABLE(watermark bigint, held boolean, event work_unit_events)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    w bigint;
    waiting boolean;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the rows would be read in a
    -- snapshot that may predate the watermark.
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
COMMENT ON FUNCTION live_events_below(text,bigint,bigint,bigint,bigint,integer) IS 'callers: app';

CREATE OR REPLACE FUNCTION live_events_resumed(p_fleet text, p_event uuid, p_floor bigint, p_watermark bigint, p_limit integer) RETURNS TABLE(from_batch bigint, from_tx bigint, from_seq bigint, watermark bigint, held boolean, event work_unit_events)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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
COMMENT ON FUNCTION live_events_resumed(text,uuid,bigint,bigint,integer) IS 'callers: app';

CREATE OR REPLACE FUNCTION work_unit_events_position() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    xid text := pg_current_xact_id()::text;
    mark text := current_setting('work_ledger.live_batch', true);
    drawn bigint;
    floor_ bigint;
BEGIN
    IF mark IS NOT NULL AND split_part(mark, ':', 1) = xid THEN
        drawn := split_part(mark, ':', 2)::bigint;
    ELSE
        floor_ := coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0);
        WHILE floor_ > 0 AND NOT pg_try_advisory_xact_lock_shared((x'776c'::bigint << 48) | floor_) LOOP
            floor_ := floor_ - 1;
        END LOOP;
        IF floor_ = 0 AND NOT pg_try_advisory_xact_lock_shared(x'776c'::bigint << 48) THEN
            -- Every key down to 0 is held by someone else: mark floor 0
            -- under a key of this backend's own (the two-key form).
            PERFORM pg_advisory_xact_lock_shared(2003566592, pg_backend_pid());
        END IF;
        drawn := nextval('work_unit_events_batch_seq');
        PERFORM set_config('work_ledger.live_batch', xid || ':' || drawn, true);
    END IF;
    NEW.tx_id := xid::bigint;
    NEW.batch := drawn;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION work_unit_events_notify() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    cached text := current_setting('work_ledger.live_tag', true);
    signal text;
BEGIN
    IF cached IS NOT NULL AND substr(cached, 66) = NEW.fleet THEN
        signal := left(cached, 64);
    ELSE
        signal := live_fleet_signal(NEW.fleet);
        PERFORM set_config('work_ledger.live_tag', signal || ':' || NEW.fleet, true);
    END IF;
    PERFORM pg_notify('work_ledger_events', signal);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER work_unit_events_position BEFORE INSERT ON work_unit_events FOR EACH ROW EXECUTE FUNCTION work_unit_events_position();

CREATE OR REPLACE TRIGGER work_unit_events_notify AFTER INSERT ON work_unit_events FOR EACH ROW WHEN ((current_setting('work_ledger.notify'::text, true) IS DISTINCT FROM 'after-commit'::text)) EXECUTE FUNCTION work_unit_events_notify();
