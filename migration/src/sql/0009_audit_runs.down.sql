DROP TABLE audit_runs;
