-- Nothing outside the service can stop or stall the ledger (issue 23,
-- SPEC §6).
--
-- 1. The in-flight writer marker (migration 0004) is an advisory lock, and
-- any session of the database can take advisory locks. A session that held
-- the exact key the next writer asks for (exclusively) made every write wait
-- for it; one that held any key of the marker space (even shared, even
-- idle) held live delivery back for every fleet. Now:
--   - a writer only tries its marker key, and when some other session holds
--     that key it takes the next lower one: a lower floor is still a true
--     floor (it can only hold delivery back a little longer, until this
--     writer commits), so no foreign lock can make a write wait;
--   - only markers held by the service's own sessions count: the backend
--     must belong to a login that is a member of work_ledger_app (the
--     service's logins are; reader logins and other applications are not).
-- CONNECT on the database is not granted to PUBLIC either (migrate sets
-- that on every run, with the database-wide privileges), so a login of
-- another application cannot take locks here at all.

CREATE OR REPLACE FUNCTION work_unit_events_position() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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

-- The markers of the service's in-flight event writers: the one-key form
-- carries the floor, the two-key form (0x776c0000, pid) is floor 0.
CREATE OR REPLACE VIEW live_event_writers AS
    SELECT l.pid,
           CASE WHEN l.objsubid = 1 THEN ((l.classid::bigint & 65535) << 32) | l.objid::bigint ELSE 0 END AS batch_floor
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted
       AND ((l.objsubid = 1 AND l.classid::bigint >> 16 = x'776c'::bigint)
            OR (l.objsubid = 2 AND l.classid = 2003566592::oid AND l.objid::bigint = l.pid))
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND pg_has_role(a.usesysid, 'work_ledger_app', 'MEMBER');

-- 2. Notifications reveal nothing, not even which fleet is busy: an event
-- notification's payload is a fresh random nonce and a MAC of it under the
-- fleet's secret tag (live_fleet_tag, which only the service may compute).
-- Two notifications of one fleet look as unrelated as two of two fleets; a
-- server tells its fleets' notifications from the rest by computing the MAC
-- with each tag it knows. One payload per fleet per transaction (cached in
-- the transaction, so PostgreSQL still folds a batch's notifications).
CREATE FUNCTION live_fleet_signal(p_fleet text) RETURNS text LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT n.nonce || encode(substring(sha256(convert_to(public.live_fleet_tag(p_fleet) || n.nonce, 'UTF8')) FROM 1 FOR 16), 'hex')
      FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS nonce) n
$$;
REVOKE ALL ON FUNCTION live_fleet_signal(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_fleet_signal(text) TO work_ledger_app, work_ledger_writer;

CREATE OR REPLACE FUNCTION work_unit_events_notify() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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
