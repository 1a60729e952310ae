-- Drops everything 0001 created except the cluster-wide role work_ledger_app,
-- which other databases of the cluster may still use.
DROP FUNCTION IF EXISTS authenticate_token(bytea);
DROP TABLE IF EXISTS api_tokens, blocking_questions, work_unit_events CASCADE;
ALTER TABLE IF EXISTS work_units DROP CONSTRAINT IF EXISTS work_units_current_attempt_fk;
DROP TABLE IF EXISTS work_unit_attempts, work_units CASCADE;
DROP FUNCTION IF EXISTS current_fleet(), work_unit_events_notify(), refuse_history_rewrite(),
    work_unit_attempts_rollup(), work_unit_attempts_guard(), work_units_insert_guard(), work_units_guard();
DROP TYPE IF EXISTS question_status, event_type, attempt_outcome, disposition, work_state;
