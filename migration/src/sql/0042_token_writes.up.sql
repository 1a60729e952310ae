-- No login can forge a disposition or stall the cluster (issue 60, SPEC §8).
--
-- Who acts is the token: every write of a fleet now takes the hash of the
-- caller's bearer token and authenticates it itself (ledger_begin,
-- sql/repeatable/writes.sql). The writer role reads every token for that,
-- through the write functions it owns and nothing else (it cannot log in).
GRANT SELECT ON api_tokens TO work_ledger_writer;
CREATE POLICY writer_authenticates ON api_tokens FOR SELECT TO work_ledger_writer USING (true);

-- One cost record is at most 1,000,000,000 cents (SPEC §9), whoever writes it.
ALTER TABLE work_unit_events ADD CONSTRAINT work_unit_events_cost_delta_bounded
    CHECK (cost_delta_cents <= 1000000000) NOT VALID;
ALTER TABLE work_unit_events VALIDATE CONSTRAINT work_unit_events_cost_delta_bounded;

-- The reader warden's function now ends more than overlong transactions
-- (sql/repeatable/warden.sql); the old one goes.
DROP FUNCTION end_overlong_reader_sessions(interval);
