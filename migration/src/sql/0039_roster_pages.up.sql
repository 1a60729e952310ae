-- A page of the roster computes its own names only (issue 27).
--
-- `agents(first: 100)` read the whole of v_agents and cut the page from it:
-- every name the fleet ever had went through the name walk and four probes
-- (its held unit, its latest attempt, that attempt's last heartbeat, its
-- claims today) before the first 100 were kept. Agents come and go over the
-- life of a ledger, so a page cost grew with every name ever seen: 200 names
-- in the 1,000,000-unit bench fleet, 7.9 ms of SQL for a page of 100.
--
-- roster(p_fleet, p_after, p_limit) is v_agents' one definition, bounded: the
-- names of p_fleet after p_after (every name of every visible fleet when
-- p_fleet is NULL; p_after counts with a fleet only), at most p_limit of them
-- (every one when NULL), in (fleet, name) order, then their probes. The name
-- walk stops after p_limit names; a claim token's name that never made an
-- attempt joins the walk's names before the cut. v_agents is
-- roster(NULL, NULL, NULL). The function runs as its caller (security
-- invoker), so row-level security applies to every table as in the view.
CREATE FUNCTION roster(p_fleet text, p_after text, p_limit bigint)
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
REVOKE ALL ON FUNCTION roster(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION roster(text, text, bigint) TO work_ledger_app, work_ledger_reader;

-- The roster of 0017 and 0020 (status first match wins, as described there),
-- now the unbounded call of its one definition.
CREATE OR REPLACE VIEW v_agents WITH (security_invoker = true) AS
SELECT r.fleet, r.name, r.status, r.held_unit_id, r.held_external_ref, r.held_state, r.lease_expires_at,
       r.last_claim_at, r.last_heartbeat_at, r.claims_today, r.cost_cents_today, r.token_last_used_at
  FROM roster(NULL, NULL, NULL) r;
