-- Back to the roster of 0039 (a SQL function walking the attempts), without agent_latest.
CREATE OR REPLACE FUNCTION roster(p_fleet text, p_after text, p_limit bigint)
RETURNS TABLE (fleet text, name text, status text, held_unit_id uuid, held_external_ref text, held_state work_state,
               lease_expires_at timestamptz, last_claim_at timestamptz, last_heartbeat_at timestamptz,
               claims_today bigint, cost_cents_today bigint, token_last_used_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
WITH RECURSIVE
-- The distinct names of the attempts, one index probe per name (a loose
-- index scan of work_unit_attempts_agent_started_idx), p_limit of them: of
-- p_fleet after p_after, else of every visible fleet (the next name of the
-- same fleet, else the first name of the next fleet). The first name is
-- asked in plain comparisons of a column with a parameter, which the planner
-- puts into the index range under row-level security; `agent_id >
-- coalesce(p_after, '')` it left as a filter there, and a page deep in the
-- roster read every attempt of the names before it.
attempted (fleet, name, n) AS (
    (SELECT a.fleet, a.agent_id, 1::bigint FROM work_unit_attempts a
      WHERE a.fleet = p_fleet AND a.agent_id > p_after
      ORDER BY a.agent_id LIMIT 1)
    UNION ALL
    (SELECT a.fleet, a.agent_id, 1::bigint FROM work_unit_attempts a
      WHERE a.fleet = p_fleet AND p_after IS NULL
      ORDER BY a.agent_id LIMIT 1)
    UNION ALL
    (SELECT a.fleet, a.agent_id, 1::bigint FROM work_unit_attempts a
      WHERE p_fleet IS NULL
      ORDER BY a.fleet, a.agent_id LIMIT 1)
    UNION ALL
    SELECT x.fleet, x.agent_id, p.n + 1
      FROM attempted p
     CROSS JOIN LATERAL (
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE a.fleet = p.fleet AND a.agent_id > p.name ORDER BY a.agent_id LIMIT 1)
         UNION ALL
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE p_fleet IS NULL AND a.fleet > p.fleet ORDER BY a.fleet, a.agent_id LIMIT 1)
         LIMIT 1
     ) x
     WHERE p.n < coalesce(p_limit, 9223372036854775807)
),
t AS (SELECT * FROM agent_tokens()),
-- The page's names: the walk's and the claim tokens' after p_after.
n AS (
    SELECT k.fleet, k.name FROM t k
     WHERE k.claim_tokens > 0 AND (p_fleet IS NULL OR k.fleet = p_fleet AND k.name > coalesce(p_after, ''))
    UNION
    SELECT p.fleet, p.name FROM attempted p
    ORDER BY 1, 2
    LIMIT p_limit
)
SELECT n.fleet, n.name,
       CASE WHEN h.state = 'blocked' THEN 'BLOCKED'
            WHEN h.lease_expires_at >= now() THEN 'ACTIVE'
            WHEN h.id IS NOT NULL THEN 'SILENT'
            WHEN t.tokens > 0 AND t.live_tokens = 0 THEN 'REVOKED'
            ELSE 'IDLE'
       END AS status,
       h.id AS held_unit_id, h.external_ref AS held_external_ref, h.state AS held_state, h.lease_expires_at,
       l.started_at AS last_claim_at,
       CASE WHEN h.id IS NOT NULL THEN h.last_heartbeat_at ELSE coalesce(b.at, l.started_at) END AS last_heartbeat_at,
       coalesce(d.claims, 0) AS claims_today, coalesce(d.cost_cents, 0)::bigint AS cost_cents_today,
       t.last_used_at AS token_last_used_at
  FROM n
  LEFT JOIN t ON t.fleet = n.fleet AND t.name = n.name
  -- One probe of the live-claim index per name.
  LEFT JOIN LATERAL (
      SELECT u.id, u.external_ref, u.state, u.lease_expires_at, u.last_heartbeat_at
        FROM work_units u
       WHERE u.claimed_by = n.name AND u.fleet = n.fleet AND u.state IN ('claimed', 'in_progress', 'blocked')
       LIMIT 1
  ) h ON true
  LEFT JOIN LATERAL (
      SELECT a.id, a.unit_id, a.started_at
        FROM work_unit_attempts a
       WHERE a.fleet = n.fleet AND a.agent_id = n.name
       ORDER BY a.started_at DESC
       LIMIT 1
  ) l ON true
  LEFT JOIN LATERAL (
      SELECT e.created_at AS at
        FROM work_unit_events e
       WHERE e.unit_id = l.unit_id AND e.attempt_id = l.id AND e.event_type = 'heartbeat'
       ORDER BY e.created_at DESC
       LIMIT 1
  ) b ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS claims, sum(a.cost_cents) AS cost_cents
        FROM work_unit_attempts a
       WHERE a.fleet = n.fleet AND a.agent_id = n.name AND a.started_at >= date_trunc('day', now(), 'UTC')
  ) d ON true
$$;

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_recount_disposal_weeks();
    PERFORM ledger_fold_totals();
END
$$;
DROP FUNCTION ledger_recount_agent_latest();
DROP TRIGGER work_unit_attempts_agent_latest ON work_unit_attempts;
DROP FUNCTION agent_latest_added();
DROP TABLE agent_latest;
