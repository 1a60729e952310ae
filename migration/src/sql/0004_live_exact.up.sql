-- Exact and isolated live events (issue 9, SPEC §6). Migration 0003 ordered
-- the log by (tx_id, seq) and delivered what lay below the reading snapshot's
-- xmin. That watermark is cluster-wide (any transaction anywhere in the
-- cluster held delivery back), and transaction ids belong to one cluster (a
-- restored ledger's positions meant nothing in the new one). This migration
-- replaces both.
--
-- Positions. Each transaction that appends events draws one number, its
-- batch, from a sequence of this database when it appends its first event;
-- delivery order is (batch, tx_id, seq). A sequence is dumped and restored
-- with its value, so positions survive pg_dump / pg_restore into another
-- cluster and new batches continue after the restored ones. Events written
-- before this migration keep batch 0 and their old (tx_id, seq) order, so
-- cursors handed out before it still resume exactly.
--
-- The watermark. Before it draws its batch, the transaction marks itself as
-- an in-flight event writer, visibly to every other session: a
-- transaction-scoped advisory lock whose key carries L, the sequence's last
-- value at that moment (so its batch is > L). A reader then computes:
--   1. C := the sequence's last value;
--   2. M := the smallest L among the markers held in this database;
--   3. W := least(C, M) + 1;
-- and reads the log in a LATER statement (a newer snapshot), delivering only
-- batches below W. Why no event can be missed:
--   * a batch b <= C was drawn before step 1, by a writer that had taken its
--     marker before drawing it; at step 2 that writer either still holds it
--     (then M <= L < b, and b is not delivered) or had ended: locks are
--     released only after the commit is visible, so the later snapshot of the
--     read sees its events (or it aborted and they never exist);
--   * a batch drawn after step 1 is > C >= W - 1: not delivered either.
-- So the delivered part of the log only ever grows at its end. Nothing but
-- in-flight event writers of this database holds delivery back: other
-- databases have other sequences and their locks carry another database oid,
-- and transactions that append no event take no marker. The sequence must
-- keep CACHE 1 (one global order of nextval calls).
--
-- Markers are visible in pg_locks: locktype 'advisory', this database,
-- objsubid 1 (a bigint key), key = (0x776c << 48) | L. A foreign lock that
-- happened to use such a key could only hold delivery back, never lose an
-- event. Transactions that append events cannot be prepared (PREPARE
-- TRANSACTION refuses transactions that issued NOTIFY, and every event
-- notifies), so a marker never outlives its session.
CREATE SEQUENCE work_unit_events_batch_seq AS bigint MINVALUE 1 MAXVALUE 281474976710655 CACHE 1 NO CYCLE;

-- A constant default sets no existing row (no rewrite, no UPDATE for the
-- append-only trigger to refuse); the trigger below sets every new row.
ALTER TABLE work_unit_events ADD COLUMN batch bigint NOT NULL DEFAULT 0;

CREATE INDEX work_unit_events_position_idx ON work_unit_events (fleet, batch, tx_id, seq);
DROP INDEX work_unit_events_delivery_idx;

-- Sets tx_id (as 0003 did) and batch; takes the marker and draws the batch
-- on the transaction's first event. The transaction-local setting
-- work_ledger.live_batch remembers "<xid>:<batch>"; the xid check makes a
-- setting left at session level by anyone worthless. A subtransaction that
-- rolls back undoes the setting and releases the marker it took together,
-- so the next event simply marks and draws again.
CREATE FUNCTION work_unit_events_position() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    xid text := pg_current_xact_id()::text;
    mark text := current_setting('work_ledger.live_batch', true);
    drawn bigint;
BEGIN
    IF mark IS NOT NULL AND split_part(mark, ':', 1) = xid THEN
        drawn := split_part(mark, ':', 2)::bigint;
    ELSE
        PERFORM pg_advisory_xact_lock_shared(
            (x'776c'::bigint << 48) | coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0));
        drawn := nextval('work_unit_events_batch_seq');
        PERFORM set_config('work_ledger.live_batch', xid || ':' || drawn, true);
    END IF;
    NEW.tx_id := xid::bigint;
    NEW.batch := drawn;
    RETURN NEW;
END
$$;
DROP TRIGGER work_unit_events_tx_id ON work_unit_events;
CREATE TRIGGER work_unit_events_position BEFORE INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION work_unit_events_position();

-- The markers held in this database: one row per in-flight event writer.
CREATE VIEW live_event_writers AS
    SELECT l.pid, ((l.classid::bigint & 65535) << 32) | l.objid::bigint AS batch_floor
      FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
       AND l.classid::bigint >> 16 = x'776c'::bigint
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());

-- W: every batch below it is final (see above). The caller reads the log in
-- a later statement of a READ COMMITTED transaction (or in autocommit). VOLATILE and plpgsql so that step 1 runs before step 2.
CREATE FUNCTION live_delivery_watermark() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
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

GRANT USAGE, SELECT ON SEQUENCE work_unit_events_batch_seq TO work_ledger_app;
GRANT SELECT ON live_event_writers TO work_ledger_app;

-- ---------------------------------------------------------------------------
-- Notifications that reveal nothing across fleets. Any role that can connect
-- can LISTEN, so a payload must not name a fleet, a unit, an event or a
-- token. An event notification carries an opaque per-fleet tag,
-- HMAC-SHA-256(secret, fleet) cut to 128 bits; the secret never leaves this
-- table, which only its owner reads. The server asks live_fleet_tag() for
-- the tags of the fleets it serves, and a tag it does not know is ignored;
-- a forged notification with a known tag costs one re-read of the table
-- under row-level security, which finds nothing new. Identical payloads of
-- one transaction are folded into one notification by PostgreSQL.
-- ---------------------------------------------------------------------------
CREATE TABLE live_notify_secret (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- The HMAC key xor'ed with the inner and outer pads (RFC 2104).
    inner_key bytea   NOT NULL CHECK (octet_length(inner_key) = 64),
    outer_key bytea   NOT NULL CHECK (octet_length(outer_key) = 64)
);
REVOKE ALL ON live_notify_secret FROM PUBLIC;

DO $$
DECLARE
    -- 4 random UUIDs: 488 random bits.
    k bytea := decode(replace(gen_random_uuid()::text || gen_random_uuid()::text
                              || gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex');
    i bytea := k;
    o bytea := k;
BEGIN
    FOR n IN 0..63 LOOP
        i := set_byte(i, n, get_byte(k, n) # 54);  -- 0x36
        o := set_byte(o, n, get_byte(k, n) # 92);  -- 0x5c
    END LOOP;
    INSERT INTO live_notify_secret (inner_key, outer_key) VALUES (i, o);
END
$$;

CREATE FUNCTION live_fleet_tag(p_fleet text) RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT encode(substring(sha256(s.outer_key || sha256(s.inner_key || convert_to(p_fleet, 'UTF8'))) FROM 1 FOR 16), 'hex')
      FROM live_notify_secret s
$$;
REVOKE ALL ON FUNCTION live_fleet_tag(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION live_fleet_tag(text) TO work_ledger_app;

-- The tag of the last fleet notified is remembered for the transaction
-- ("<32 hex>:<fleet>"), so a batch of events of one fleet computes it once.
CREATE OR REPLACE FUNCTION work_unit_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cached text := current_setting('work_ledger.live_tag', true);
    tag text;
BEGIN
    IF cached IS NOT NULL AND substr(cached, 34) = NEW.fleet THEN
        tag := left(cached, 32);
    ELSE
        tag := live_fleet_tag(NEW.fleet);
        PERFORM set_config('work_ledger.live_tag', tag || ':' || NEW.fleet, true);
    END IF;
    PERFORM pg_notify('work_ledger_events', tag);
    RETURN NULL;
END
$$;

-- A revocation says only that some token was revoked: every server checks
-- the tokens of its open subscriptions against the table.
CREATE OR REPLACE FUNCTION api_tokens_notify_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('work_ledger_tokens', '');
    RETURN NULL;
END
$$;

-- ---------------------------------------------------------------------------
-- Nobody pins the notification queue or holds a transaction open forever.
-- The queue only shrinks past its slowest listener; a session that LISTENs
-- and then sits in a transaction (or in one endless statement) stops it, and
-- once it is full every pg_notify fails, i.e. every write. Reader logins get
-- both timeouts (`work-ledger reader create` sets them on new ones; existing
-- ones are set here). The application role gets them as role settings too;
-- the server sets them on its own connections as well, because SET ROLE does
-- not apply role settings.
-- ---------------------------------------------------------------------------
DO $$
DECLARE
    r record;
BEGIN
    BEGIN
        ALTER ROLE work_ledger_app SET statement_timeout = '30s';
        ALTER ROLE work_ledger_app SET idle_in_transaction_session_timeout = '30s';
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'cannot set the timeouts of role work_ledger_app (roles are cluster-wide; ask a superuser)';
    END;
    FOR r IN SELECT role_name FROM fleet_readers LOOP
        BEGIN
            EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', r.role_name, '60s');
            EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', r.role_name, '60s');
        EXCEPTION WHEN undefined_object THEN
            NULL; -- the login was dropped by hand; nothing to set
        WHEN insufficient_privilege THEN
            RAISE WARNING 'cannot set the timeouts of reader login %', r.role_name;
        END;
    END LOOP;
END
$$;
