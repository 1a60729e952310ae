DROP TRIGGER api_tokens_notify_deleted ON api_tokens;
DROP TRIGGER api_tokens_notify_revoked ON api_tokens;
DROP FUNCTION api_tokens_notify_revoked();
DROP INDEX work_unit_events_delivery_idx;
DROP TRIGGER work_unit_events_tx_id ON work_unit_events;
DROP FUNCTION work_unit_events_tx_id();
ALTER TABLE work_unit_events DROP COLUMN tx_id;
