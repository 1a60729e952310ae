ALTER TABLE work_unit_events DROP CONSTRAINT work_unit_events_cost_delta_bounded;
DROP POLICY writer_authenticates ON api_tokens;
REVOKE SELECT ON api_tokens FROM work_ledger_writer;
