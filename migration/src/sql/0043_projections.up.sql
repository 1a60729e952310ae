-- A write pays only for the write (issue 55, SPEC §7): the read models are
-- projections of the event log folded after commit by the projector
-- (sql/repeatable/projections.sql, src/projector/), no longer kept by
-- triggers in every write's own transaction.
--
-- Where each projection's fold stands: every event whose batch is below
-- `mark` is folded into its tables. `version` is the checksum of the
-- definition it was built with (a changed definition is rebuilt from the
-- log by `migrate`); no version yet: built by the first `migrate`.
CREATE TABLE projection_marks (
    name          text        PRIMARY KEY,
    mark          bigint      NOT NULL DEFAULT 0,
    version       text,
    folded_events bigint      NOT NULL DEFAULT 0,
    folded_at     timestamptz
);
GRANT SELECT ON projection_marks TO work_ledger_app, work_ledger_reader;

-- The projector reads the log by batch across fleets.
CREATE INDEX work_unit_events_batch_idx ON work_unit_events (batch);

-- The triggers that kept the read tables in the writes' transactions, and
-- what only they used. The tables stay, rebuilt from the log.
DROP TRIGGER work_units_totals_added ON work_units;
DROP TRIGGER work_units_totals_moved ON work_units;
DROP TRIGGER work_units_disposal_days ON work_units;
DROP TRIGGER work_units_cost_days_moved ON work_units;
DROP TRIGGER work_unit_attempts_claim_days ON work_unit_attempts;
DROP TRIGGER work_unit_attempts_totals_moved ON work_unit_attempts;
DROP TRIGGER work_unit_attempts_agent_latest ON work_unit_attempts;
DROP TRIGGER work_unit_events_totals ON work_unit_events;
DROP TRIGGER work_unit_events_cost_days ON work_unit_events;
DROP TRIGGER disposal_days_added ON disposal_days;
DROP FUNCTION unit_totals_added();
DROP FUNCTION unit_totals_moved();
DROP FUNCTION disposal_days_moved();
DROP FUNCTION claim_days_added();
DROP FUNCTION attempt_totals_moved();
DROP FUNCTION agent_latest_added();
DROP FUNCTION event_totals_added();
DROP FUNCTION cost_days_recorded();
DROP FUNCTION cost_days_moved();
DROP FUNCTION disposal_days_added();
DROP FUNCTION disposal_agents_noted(uuid[]);
DROP FUNCTION ledger_rebuild_totals();
DROP FUNCTION ledger_recount_totals();
DROP FUNCTION ledger_recount_cost_days();
DROP FUNCTION ledger_recount_event_days();
DROP FUNCTION ledger_recount_disposal_weeks();
DROP FUNCTION ledger_recount_disposal_fleet_days();
DROP FUNCTION ledger_recount_agent_latest();
DROP FUNCTION cost_unit_days(uuid[], bigint);
