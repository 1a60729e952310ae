CREATE OR REPLACE VIEW v_queue_depth WITH (security_invoker = true) AS
SELECT fleet, domain,
       count(*) FILTER (WHERE state = 'ready')       AS ready,
       count(*) FILTER (WHERE state = 'claimed')     AS claimed,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE state = 'blocked')     AS blocked,
       count(*) FILTER (WHERE state = 'verified')    AS verified,
       count(*) FILTER (WHERE state IN ('claimed', 'in_progress') AND lease_expires_at < now()) AS stalled
  FROM work_units
 WHERE state NOT IN ('done', 'abandoned')
 GROUP BY fleet, domain;

CREATE OR REPLACE VIEW v_disposition_summary WITH (security_invoker = true) AS
SELECT fleet, domain, disposition, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 WHERE disposition IS NOT NULL
 GROUP BY fleet, domain, disposition;

CREATE OR REPLACE VIEW v_cost_groups WITH (security_invoker = true) AS
SELECT fleet, domain, state, disposition, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 GROUP BY fleet, domain, state, disposition;

DROP VIEW v_unit_totals;
DROP FUNCTION ledger_rebuild_totals();
DROP FUNCTION ledger_compact_totals();
DROP TRIGGER work_units_totals_moved ON work_units;
DROP TRIGGER work_units_totals_added ON work_units;
DROP FUNCTION unit_totals_moved();
DROP FUNCTION unit_totals_added();
DROP TABLE unit_totals;
