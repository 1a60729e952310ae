DO $$
BEGIN
    ALTER ROLE work_ledger_app RESET statement_timeout;
    ALTER ROLE work_ledger_app RESET idle_in_transaction_session_timeout;
EXCEPTION WHEN insufficient_privilege THEN
    NULL;
END
$$;

CREATE OR REPLACE FUNCTION api_tokens_notify_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('work_ledger_tokens', OLD.id::text);
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION work_unit_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('work_ledger_events', json_build_object(
        'fleet', NEW.fleet, 'id', NEW.id, 'seq', NEW.seq, 'unit_id', NEW.unit_id,
        'type', NEW.event_type)::text);
    RETURN NULL;
END
$$;
DROP FUNCTION live_fleet_tag(text);
DROP TABLE live_notify_secret;

DROP FUNCTION live_delivery_watermark();
DROP VIEW live_event_writers;
DROP TRIGGER work_unit_events_position ON work_unit_events;
DROP FUNCTION work_unit_events_position();
CREATE TRIGGER work_unit_events_tx_id BEFORE INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION work_unit_events_tx_id();
CREATE INDEX work_unit_events_delivery_idx ON work_unit_events (fleet, tx_id, seq);
DROP INDEX work_unit_events_position_idx;
ALTER TABLE work_unit_events DROP COLUMN batch;
DROP SEQUENCE work_unit_events_batch_seq;
