-- v_claiming_agents_daily as 0007 defined it (a view cannot lose columns by CREATE OR REPLACE).
DROP VIEW IF EXISTS v_claiming_agents_daily;
CREATE VIEW v_claiming_agents_daily WITH (security_invoker = true) AS
SELECT fleet, date_trunc('day', started_at, 'UTC') AS day, count(DISTINCT agent_id) AS agents, count(*) AS claims
  FROM work_unit_attempts
 GROUP BY 1, 2;
GRANT SELECT ON v_claiming_agents_daily TO work_ledger_app, work_ledger_reader;

DROP VIEW IF EXISTS v_agents;
DROP FUNCTION IF EXISTS agent_tokens();
DROP INDEX IF EXISTS work_unit_attempts_agent_started_idx;
-- api_tokens.last_used_at stays: it belongs to the tokens migration (0015),
-- which this one only made sure of.
