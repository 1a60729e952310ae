-- Back to the grants of migration 0011 (the repeatable write functions are
-- dropped by hand before this runs: `DROP FUNCTION ledger_...`).
DROP TRIGGER work_units_claim_recorded ON work_units;
DROP FUNCTION work_units_claim_recorded();
DROP TRIGGER work_units_evidence_guard ON work_units;
DROP FUNCTION work_units_evidence_guard();
ALTER TABLE work_unit_attempts DROP CONSTRAINT work_unit_attempts_evidence_link;
ALTER TABLE work_units DROP CONSTRAINT work_units_evidence_links;
DROP FUNCTION ledger_are_links(text[]);
DROP FUNCTION ledger_is_link(text);
ALTER FUNCTION work_unit_attempts_rollup() SECURITY INVOKER;
ALTER FUNCTION work_units_guard() SECURITY INVOKER;
ALTER FUNCTION work_units_holder_guard() SECURITY INVOKER;
ALTER FUNCTION work_units_change_recorded() SECURITY INVOKER;
ALTER POLICY fleet_isolation ON work_units TO work_ledger_app;
ALTER POLICY fleet_isolation ON work_unit_attempts TO work_ledger_app;
ALTER POLICY fleet_isolation ON work_unit_events TO work_ledger_app;
ALTER POLICY fleet_isolation ON blocking_questions TO work_ledger_app;
GRANT INSERT, UPDATE ON work_units, work_unit_attempts, blocking_questions TO work_ledger_app;
GRANT INSERT ON work_unit_events TO work_ledger_app;
GRANT USAGE ON SEQUENCE work_unit_events_batch_seq TO work_ledger_app;
REVOKE ALL ON work_units, work_unit_attempts, work_unit_events, blocking_questions FROM work_ledger_writer;
REVOKE ALL ON SEQUENCE work_unit_events_batch_seq FROM work_ledger_writer;
