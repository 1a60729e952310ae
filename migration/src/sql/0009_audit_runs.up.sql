-- The results of `work-ledger audit`, one row per run, so that the service
-- exports the last one of each scope as metrics (work_ledger_audit_findings,
-- work_ledger_audit_last_run_timestamp_seconds). The audit's checks stay
-- read-only; it records its result afterwards, in a transaction of its own.
-- Not fleet data: no row-level security, no grant to the application role
-- (the service reads it as its own login, as the sweeper writes).
CREATE TABLE audit_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The fleet audited, '*' for all fleets.
    scope       text NOT NULL CHECK (length(scope) BETWEEN 1 AND 256),
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Findings per rule, every rule named (zeros included): {"cost_rollup": 0, ...}.
    findings    jsonb NOT NULL CHECK (jsonb_typeof(findings) = 'object')
);

CREATE INDEX audit_runs_last_idx ON audit_runs (scope, finished_at DESC);
