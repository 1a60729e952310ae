DROP VIEW v_disposition_detail;
CREATE VIEW v_disposition_detail WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, disposition,
       evidence_urls[cardinality(evidence_urls)] AS evidence_url, cost_cents, disposed_at
  FROM work_units
 WHERE disposition IS NOT NULL;
GRANT SELECT ON v_disposition_detail TO work_ledger_app, work_ledger_reader;
CREATE INDEX work_units_cost_groups_idx ON work_units (fleet, domain, state, disposition) INCLUDE (cost_cents, id);
DROP INDEX work_units_cost_idx;
DROP INDEX work_units_disposed_at_idx;
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at)
    INCLUDE (disposition, domain, cost_cents, id) WHERE disposition IS NOT NULL;
