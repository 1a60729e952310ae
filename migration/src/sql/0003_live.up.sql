-- Live events (SPEC §6): what the database must record so that a resumed
-- subscription never skips an event, even when transactions commit in a
-- different order than they wrote.
--
-- `seq` (an identity) is handed out at INSERT time, not at commit time: a
-- transaction holding seq 10 may commit after one holding seq 11, so "every
-- event after seq 11" can miss 10 for good. Each event therefore records the
-- top-level transaction id that wrote it. A reader takes its snapshot's xmin
-- (`pg_snapshot_xmin(pg_current_snapshot())`): every transaction below it has
-- finished, so the events with tx_id < xmin are final and no event below it
-- can appear later. Readers deliver only those, ordered by (tx_id, seq); that
-- order's delivered part only ever grows at the end, so a cursor on it is
-- exact. An event of a transaction still running (or of one that started
-- before a running one) waits until the older transactions end.
--
-- Existing rows were all committed before this migration: tx_id 0 puts them
-- first, in seq order. ADD COLUMN with a constant default sets no row (no
-- rewrite, and no UPDATE for the append-only trigger to refuse). A bigint,
-- not xid8: plain integer comparisons and decoding (xid8 fits below 2^63).
ALTER TABLE work_unit_events ADD COLUMN tx_id bigint NOT NULL DEFAULT 0;

-- The delivery guarantee rests on tx_id, so the database sets it: an INSERT
-- cannot place an event before the transactions that finished already.
CREATE FUNCTION work_unit_events_tx_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tx_id := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$;
CREATE TRIGGER work_unit_events_tx_id BEFORE INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION work_unit_events_tx_id();

-- The feed of a fleet and resumed streams read in delivery order.
CREATE INDEX work_unit_events_delivery_idx ON work_unit_events (fleet, tx_id, seq);

-- Revoking (or deleting) a token closes its live subscriptions: every
-- server process LISTENs on this channel. A trigger, so that a revocation by
-- hand in SQL closes them too.
CREATE FUNCTION api_tokens_notify_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('work_ledger_tokens', OLD.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER api_tokens_notify_revoked AFTER UPDATE OF revoked_at ON api_tokens
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION api_tokens_notify_revoked();
CREATE TRIGGER api_tokens_notify_deleted AFTER DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION api_tokens_notify_revoked();
