DROP FUNCTION IF EXISTS ledger_dispose(text, text, text, text, uuid, text, text, text, text, text[], text[], text);
DROP FUNCTION IF EXISTS ledger_verify(text, text, text, text, uuid, text, text);
DROP FUNCTION IF EXISTS ledger_heartbeat(text, text, text, text, integer, uuid, text, text);
DROP FUNCTION IF EXISTS ledger_start(text, text, text, text, uuid, text);
DROP FUNCTION IF EXISTS ledger_scope(text, text);
CREATE INDEX work_unit_attempts_unit_idx ON work_unit_attempts (unit_id, attempt_no);
