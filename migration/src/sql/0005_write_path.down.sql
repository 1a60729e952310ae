CREATE UNIQUE INDEX work_unit_events_fleet_source_event_id_key ON work_unit_events (fleet, source_event_id)
    WHERE source_event_id IS NOT NULL;
DROP INDEX work_unit_events_agent_source_event_id_key;
ALTER TABLE work_unit_events DROP CONSTRAINT work_unit_events_key_has_agent;
DROP TRIGGER blocking_questions_guard ON blocking_questions;
DROP FUNCTION blocking_questions_guard();
DROP TRIGGER work_unit_attempts_history_guard ON work_unit_attempts;
DROP FUNCTION work_unit_attempts_history_guard();
DROP TRIGGER work_units_change_recorded ON work_units;
DROP FUNCTION work_units_change_recorded();
DROP TRIGGER work_units_holder_guard ON work_units;
DROP FUNCTION work_units_holder_guard();
ALTER TABLE work_unit_attempts DROP CONSTRAINT work_unit_attempts_verified_has_evidence;
ALTER TABLE work_units DROP CONSTRAINT work_units_settled_has_evidence;
