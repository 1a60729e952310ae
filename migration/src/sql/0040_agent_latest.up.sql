-- The roster's names and their last claims kept as attempts are written,
-- its plan made once per session, and no heartbeat probe for a name that
-- holds a unit (issue 27).
--
-- The "Fleet roster" panel was the slowest in every run of the reads bench
-- (docs/BENCHMARKS.md, round 3, session 22): the whole roster of the
-- 200-name bench fleet took 6.1-7.1 ms as a reader login, a page of 100
-- 3.7 ms, and 16 readers queued for it past 50 ms.
--
-- Plan. roster() was a SQL function: a function that pins its search_path
-- is never inlined, and PostgreSQL plans a SQL function's statement on
-- every call. Planning its walk and five probes was about a third of a
-- call. A PL/pgSQL function keeps the plan of its statement for the
-- session. Its plan is generic, made once for every call shape: left to
-- choose, PostgreSQL first plans the first five calls for their values,
-- and the plan it made for a page of one fleet took 35 ms (against 2.3 for
-- the generic one).
--
-- Heartbeats. The last heartbeat of a name's last attempt is only read for
-- a name that holds nothing (a holder's comes from its unit); its probe
-- now runs for those names alone (and not for a name without attempts).
--
-- Names. The roster found its names by a walk of the attempts' index (one
-- probe per name) and then each name's latest attempt (another): 2.4 of
-- the 4.4 ms a call took with the two changes above. It now reads them
-- from agent_latest. With all three, the whole roster takes 2.4-2.6 ms, a
-- page of 100 1.4 ms, with the same rows.
--
-- agent_latest has one row per (fleet, name) that made an attempt: its
-- latest attempt by (started_at, id), so that two attempts started at the
-- same instant have one answer. Every insert of attempts (ledger_claim's,
-- the only one the service makes, and any other) keeps it in the same
-- statement, through a statement trigger that moves a row forward only;
-- nothing else writes it (the service's roles may read it, under the fleet
-- policies of the other totals). The audit's rule `agent_latest` compares
-- it with the attempts, and ledger_rebuild_totals() recounts it.
--
-- Unlike the delta totals, this is one row per name, so a claim holds its
-- name's row until it commits. Two claims by one name wait for each other
-- already (the second waits on the first's entry in
-- work_units_one_live_claim_per_agent, then is refused), so no claim waits
-- longer. No other write locks these rows (a recount locks the attempts
-- before this table), so the lock joins no cycle.
CREATE TABLE agent_latest (
    fleet      text        NOT NULL,
    agent_id   text        NOT NULL,
    started_at timestamptz NOT NULL,
    attempt_id uuid        NOT NULL,
    unit_id    uuid        NOT NULL,
    PRIMARY KEY (fleet, agent_id)
);
ALTER TABLE agent_latest ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON agent_latest FOR SELECT TO work_ledger_app USING (fleet = (SELECT current_fleet()));
CREATE POLICY fleet_reader ON agent_latest FOR SELECT TO work_ledger_reader USING (fleet = (SELECT reader_fleet()));
GRANT SELECT ON agent_latest TO work_ledger_app, work_ledger_reader;

-- The latest of the inserted attempts of each name, where it is later than
-- the one kept.
CREATE FUNCTION agent_latest_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO agent_latest AS k (fleet, agent_id, started_at, attempt_id, unit_id)
    SELECT DISTINCT ON (a.fleet, a.agent_id) a.fleet, a.agent_id, a.started_at, a.id, a.unit_id
      FROM added a
     ORDER BY a.fleet, a.agent_id, a.started_at DESC, a.id DESC
    ON CONFLICT (fleet, agent_id) DO UPDATE
       SET started_at = excluded.started_at, attempt_id = excluded.attempt_id, unit_id = excluded.unit_id
     WHERE (excluded.started_at, excluded.attempt_id) > (k.started_at, k.attempt_id);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION agent_latest_added() FROM PUBLIC;
CREATE TRIGGER work_unit_attempts_agent_latest AFTER INSERT ON work_unit_attempts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION agent_latest_added();

-- The table counted again from the attempts.
CREATE FUNCTION ledger_recount_agent_latest() RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_unit_attempts, agent_latest IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM agent_latest;
    INSERT INTO agent_latest (fleet, agent_id, started_at, attempt_id, unit_id)
    SELECT DISTINCT ON (a.fleet, a.agent_id) a.fleet, a.agent_id, a.started_at, a.id, a.unit_id
      FROM work_unit_attempts a
     ORDER BY a.fleet, a.agent_id, a.started_at DESC, a.id DESC;
END
$$;
REVOKE ALL ON FUNCTION ledger_recount_agent_latest() FROM PUBLIC;

-- The trigger is in place (and the attempts locked until this migration
-- commits), so counting now misses nothing.
SELECT ledger_recount_agent_latest();
ANALYZE agent_latest;

CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_recount_cost_days();
    PERFORM ledger_recount_event_days();
    PERFORM ledger_recount_disposal_weeks();
    PERFORM ledger_recount_agent_latest();
    PERFORM ledger_fold_totals();
END
$$;

-- The roster (0039's columns, meaning and security: security invoker, so
-- row-level security applies as in v_agents), its names and their last
-- claims read from agent_latest: no walk of the attempts, no probe for the
-- latest.
CREATE OR REPLACE FUNCTION roster(p_fleet text, p_after text, p_limit bigint)
RETURNS TABLE (fleet text, name text, status text, held_unit_id uuid, held_external_ref text, held_state work_state,
               lease_expires_at timestamptz, last_claim_at timestamptz, last_heartbeat_at timestamptz,
               claims_today bigint, cost_cents_today bigint, token_last_used_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, public, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
-- The names with attempts, each with its latest attempt (agent_latest),
-- p_limit of them: of p_fleet after p_after, else of every visible fleet,
-- in (fleet, name) order along the table's key. The bounds are plain
-- comparisons of a column with a parameter, which the planner puts into
-- the index range under row-level security (0039).
attempted AS (
    (SELECT g.fleet, g.agent_id AS name, g.attempt_id, g.unit_id, g.started_at FROM agent_latest g
      WHERE g.fleet = p_fleet AND g.agent_id > p_after
      ORDER BY g.agent_id LIMIT p_limit)
    UNION ALL
    (SELECT g.fleet, g.agent_id, g.attempt_id, g.unit_id, g.started_at FROM agent_latest g
      WHERE g.fleet = p_fleet AND p_after IS NULL
      ORDER BY g.agent_id LIMIT p_limit)
    UNION ALL
    (SELECT g.fleet, g.agent_id, g.attempt_id, g.unit_id, g.started_at FROM agent_latest g
      WHERE p_fleet IS NULL
      ORDER BY g.fleet, g.agent_id LIMIT p_limit)
),
t AS (SELECT * FROM agent_tokens()),
-- The page's names: those with attempts and the claim tokens' after p_after.
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
  LEFT JOIN attempted l ON l.fleet = n.fleet AND l.name = n.name
  -- The last heartbeat of the last attempt, wanted only when the name holds
  -- nothing (a holder's is its unit's) and has made an attempt: newest first
  -- along the unit's index.
  LEFT JOIN LATERAL (
      SELECT e.created_at AS at
        FROM work_unit_events e
       WHERE h.id IS NULL AND l.attempt_id IS NOT NULL AND e.unit_id = l.unit_id AND e.attempt_id = l.attempt_id AND e.event_type = 'heartbeat'
       ORDER BY e.created_at DESC, e.id DESC
       LIMIT 1
  ) b ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS claims, sum(a.cost_cents) AS cost_cents
        FROM work_unit_attempts a
       WHERE a.fleet = n.fleet AND a.agent_id = n.name AND a.started_at >= date_trunc('day', now(), 'UTC')
  ) d ON true;
END
$$;
