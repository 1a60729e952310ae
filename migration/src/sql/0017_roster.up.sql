-- The fleet roster (issue 26, SPEC §7): one row per agent name of a fleet,
-- with what it holds and how alive it is (v_agents, `agents` in GraphQL, a
-- Grafana panel), and `claimingAgents` telling live agents from silent ones.
-- Nothing is stored: every column is computed from the ledger's rows at
-- read time, in the reader's snapshot and under its row-level security.

-- When a token was last used: the tokens work (migration 0015) adds it and
-- writes it (at most once a minute per token). Added here too, IF NOT
-- EXISTS, so the roster can read it whichever of the two migrations runs
-- first.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS last_used_at timestamptz;

-- The token facts of each name of the caller's fleet, for the roster.
-- Reader logins may not read api_tokens at all (it holds the credentials),
-- so this function, owned by the migrating role, is their narrow door: it
-- returns counts and times per name, never an id, a hash or a permission
-- list, and only of the caller's own fleet. Which fleet is that is decided
-- by the login (session_user; SECURITY DEFINER changes current_user, not
-- the login), never by a setting a reader could change:
--   - a reader login (fleet_readers) gets its own fleet, whatever it SETs;
--   - a login of the service (a member of work_ledger_app) gets the fleet
--     of its transaction's setting, as row-level security would give it;
--   - anyone else gets nothing.
CREATE FUNCTION agent_tokens()
RETURNS TABLE (fleet text, name text, tokens bigint, live_tokens bigint, claim_tokens bigint,
               last_used_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT t.fleet, t.name, count(*),
           count(*) FILTER (WHERE t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())),
           count(*) FILTER (WHERE 'units:claim' = ANY (t.permissions)), max(t.last_used_at)
      FROM public.api_tokens t
     WHERE t.fleet = CASE
               WHEN EXISTS (SELECT 1 FROM public.fleet_readers r WHERE r.role_name = session_user)
                   THEN (SELECT r.fleet FROM public.fleet_readers r WHERE r.role_name = session_user)
               WHEN pg_has_role(session_user, 'work_ledger_app', 'MEMBER') THEN public.current_fleet()
           END
     GROUP BY t.fleet, t.name
$$;
REVOKE ALL ON FUNCTION agent_tokens() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent_tokens() TO work_ledger_app, work_ledger_reader;

-- The attempts of an agent, newest last: its latest claim, its claims of
-- today and what they cost, and the distinct names of a fleet's attempts,
-- from the index alone (one more index entry per claim on the write path).
CREATE INDEX work_unit_attempts_agent_started_idx ON work_unit_attempts (fleet, agent_id, started_at)
    INCLUDE (cost_cents, unit_id, id);

-- The roster. The agents of a fleet are the names of its tokens that may
-- claim (`units:claim`) and every name that ever made an attempt. Status,
-- first match wins:
--   BLOCKED  holds a BLOCKED unit (its lease is suspended, it waits for triage);
--   ACTIVE   holds a CLAIMED or IN_PROGRESS unit under a live lease;
--   SILENT   holds a CLAIMED or IN_PROGRESS unit whose lease expired (the
--            condition of v_stall_list: reclaimable by anyone);
--   REVOKED  holds nothing, and every token of that name is revoked or expired;
--   IDLE     holds nothing (a VERIFIED unit awaiting disposition is not held).
-- An agent holds at most one unit (work_units_one_live_claim_per_agent).
-- last_heartbeat_at is the last renewal of its latest attempt's lease: the
-- held unit's (as v_stall_list shows it), else the latest heartbeat event of
-- its latest attempt, else that attempt's claim. "Today" is the current UTC
-- day: claims_today are the attempts started today, cost_cents_today what
-- those attempts cost (whenever recorded).
CREATE VIEW v_agents WITH (security_invoker = true) AS
WITH RECURSIVE
-- The distinct names of the attempts, one index probe per name (a loose
-- index scan of work_unit_attempts_agent_started_idx) rather than reading
-- every attempt of the fleet: the next name of the same fleet, else the
-- first name of the next fleet.
attempted (fleet, name) AS (
    (SELECT a.fleet, a.agent_id FROM work_unit_attempts a ORDER BY a.fleet, a.agent_id LIMIT 1)
    UNION ALL
    SELECT x.fleet, x.agent_id
      FROM attempted p
     CROSS JOIN LATERAL (
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE a.fleet = p.fleet AND a.agent_id > p.name ORDER BY a.agent_id LIMIT 1)
         UNION ALL
         (SELECT a.fleet, a.agent_id FROM work_unit_attempts a
           WHERE a.fleet > p.fleet ORDER BY a.fleet, a.agent_id LIMIT 1)
         LIMIT 1
     ) x
),
t AS (SELECT * FROM agent_tokens())
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
  FROM (SELECT k.fleet, k.name FROM t k WHERE k.claim_tokens > 0
        UNION
        SELECT p.fleet, p.name FROM attempted p) n
  LEFT JOIN t ON t.fleet = n.fleet AND t.name = n.name
  LEFT JOIN work_units h
         ON h.claimed_by = n.name AND h.fleet = n.fleet AND h.state IN ('claimed', 'in_progress', 'blocked')
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
  ) d ON true;

-- Distinct agents that claimed, per UTC day (as in 0007), and, on the
-- current day's row only, how many of them now hold a unit with a live
-- lease, a BLOCKED unit, or a unit whose lease expired (their v_agents
-- status); the rest hold nothing. Earlier days have NULL there: a lease is
-- a fact of now, not of a past day.
CREATE OR REPLACE VIEW v_claiming_agents_daily WITH (security_invoker = true) AS
SELECT c.fleet, c.day, c.agents, c.claims, s.live, s.blocked, s.silent
  FROM (SELECT a.fleet, date_trunc('day', a.started_at, 'UTC') AS day, count(DISTINCT a.agent_id) AS agents,
               count(*) AS claims
          FROM work_unit_attempts a
         GROUP BY 1, 2) c
  LEFT JOIN (SELECT v.fleet, count(*) FILTER (WHERE v.status = 'ACTIVE') AS live,
                    count(*) FILTER (WHERE v.status = 'BLOCKED') AS blocked,
                    count(*) FILTER (WHERE v.status = 'SILENT') AS silent
               FROM v_agents v
              WHERE v.claims_today > 0
              GROUP BY v.fleet) s
         ON s.fleet = c.fleet AND c.day = date_trunc('day', now(), 'UTC');

GRANT SELECT ON v_agents TO work_ledger_app, work_ledger_reader;
