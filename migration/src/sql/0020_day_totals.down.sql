-- Back to the totals of 0018/0019 and the views and throughput of 0007, 0008 and 0017.
CREATE OR REPLACE FUNCTION throughput(p_bucket text, p_from timestamptz, p_until timestamptz, p_domain text)
RETURNS TABLE (fleet text, start timestamptz, disposition disposition, units bigint, cost_cents bigint,
               distinct_agents bigint)
LANGUAGE sql STABLE AS $$
    SELECT t.fleet, t.start, t.disposition, t.units, t.cost_cents, coalesce(g.agents, 0)
      FROM (SELECT u.fleet, date_trunc(p_bucket, u.disposed_at, 'UTC') AS start, u.disposition,
                   count(*) AS units, sum(u.cost_cents)::bigint AS cost_cents
              FROM work_units u
             WHERE u.disposition IS NOT NULL
               AND u.disposed_at >= coalesce(p_from, '-infinity') AND u.disposed_at < coalesce(p_until, 'infinity')
               AND (p_domain IS NULL OR u.domain = p_domain)
             GROUP BY 1, 2, 3) t
      LEFT JOIN (
            SELECT w.fleet, w.start, w.disposition, count(*) AS agents
              FROM (SELECT DISTINCT u.fleet, date_trunc(p_bucket, u.disposed_at, 'UTC') AS start, u.disposition,
                           a.agent_id
                      FROM work_units u
                      JOIN work_unit_attempts a ON a.unit_id = u.id AND a.fleet = u.fleet
                     WHERE u.disposition IS NOT NULL
                       AND u.disposed_at >= coalesce(p_from, '-infinity')
                       AND u.disposed_at < coalesce(p_until, 'infinity')
                       AND (p_domain IS NULL OR u.domain = p_domain)) w
             GROUP BY 1, 2, 3) g
        ON g.fleet = t.fleet AND g.start = t.start AND g.disposition = t.disposition
$$;
CREATE OR REPLACE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT fleet, date_trunc('week', disposed_at, 'UTC') AS week, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 WHERE disposition IS NOT NULL AND cost_cents > 0 AND cardinality(evidence_urls) > 0
 GROUP BY 1, 2;
CREATE OR REPLACE VIEW v_claims_weekly WITH (security_invoker = true) AS
SELECT a.fleet, date_trunc('week', a.started_at, 'UTC') AS week, count(*) AS claims,
       count(*) FILTER (WHERE a.outcome = 'verified') AS verified,
       round(count(*) FILTER (WHERE a.outcome = 'verified')::numeric / count(*), 4) AS conversion,
       count(*) FILTER (WHERE a.outcome = 'superseded' OR EXISTS (
           SELECT 1 FROM work_unit_events e WHERE e.attempt_id = a.id AND e.event_type = 'stalled')) AS stale,
       round(count(*) FILTER (WHERE a.outcome = 'superseded' OR EXISTS (
           SELECT 1 FROM work_unit_events e WHERE e.attempt_id = a.id AND e.event_type = 'stalled'))::numeric
             / count(*), 4) AS stale_rate,
       count(*) FILTER (WHERE a.outcome IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM work_unit_events e
            WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id AND e.event_type = 'transitioned'))
         AS never_transitioned
  FROM work_unit_attempts a
 GROUP BY 1, 2;
CREATE OR REPLACE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT fleet, date_trunc('week', disposed_at, 'UTC') AS week, count(*) AS disposed,
       count(*) FILTER (WHERE attempt_count > 1) AS reworked,
       round(count(*) FILTER (WHERE attempt_count > 1)::numeric / count(*), 4) AS rework_rate
  FROM work_units
 WHERE disposition IS NOT NULL
 GROUP BY 1, 2;
CREATE OR REPLACE VIEW v_claimed_never_transitioned WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, u.external_ref, u.domain, a.attempt_no, a.agent_id, a.outcome,
       a.started_at, a.ended_at
  FROM work_unit_attempts a
  JOIN work_units u ON u.id = a.unit_id
 WHERE a.outcome IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                    WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id AND e.event_type = 'transitioned');
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
CREATE OR REPLACE FUNCTION unit_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT a.fleet, a.domain, a.state, a.disposition, a.attempt_count > 1, count(*), sum(a.cost_cents)
      FROM added a GROUP BY 1, 2, 3, 4, 5;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION event_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, events)
    SELECT a.fleet, a.event_type, count(*) FROM added a GROUP BY 1, 2;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH gone AS (DELETE FROM unit_totals RETURNING *),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents)
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         gone_events AS (DELETE FROM event_totals RETURNING *),
         kept_events AS (
             INSERT INTO event_totals (fleet, event_type, events)
             SELECT fleet, event_type, sum(events) FROM gone_events GROUP BY 1, 2
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_events)
$$;
CREATE OR REPLACE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, unit_totals, work_unit_events, event_totals IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM unit_totals;
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT fleet, domain, state, disposition, attempt_count > 1, count(*), sum(cost_cents)
      FROM work_units GROUP BY 1, 2, 3, 4, 5;
    DELETE FROM event_totals;
    INSERT INTO event_totals (fleet, event_type, events)
    SELECT fleet, event_type, count(*) FROM work_unit_events GROUP BY 1, 2;
END
$$;
DROP TRIGGER work_unit_attempts_totals_moved ON work_unit_attempts;
DROP TRIGGER work_unit_attempts_claim_days ON work_unit_attempts;
DROP TRIGGER work_units_disposal_days ON work_units;
DROP FUNCTION attempt_totals_moved();
DROP FUNCTION claim_days_added();
DROP FUNCTION disposal_days_moved();
DROP FUNCTION disposal_agents_noted(uuid[]);
DROP TABLE agent_totals, never_started, claim_agents, claim_days, disposal_agent_counts, disposal_agents, disposal_days;
ALTER TABLE event_totals DROP COLUMN agent_id;
SELECT ledger_rebuild_totals();
CREATE OR REPLACE VIEW v_cycle_time_weekly WITH (security_invoker = true) AS
SELECT u.fleet, date_trunc('week', u.disposed_at, 'UTC') AS week, count(*) AS units,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at)) AS median_seconds,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at)) AS p90_seconds
  FROM work_units u
  JOIN work_unit_attempts a ON a.unit_id = u.id AND a.attempt_no = 1
 WHERE u.disposition IS NOT NULL
 GROUP BY 1, 2;
DROP FUNCTION cycle_time_weekly(timestamptz, timestamptz);
DROP FUNCTION cycle_time_by_rows(timestamptz, timestamptz);
DROP FUNCTION ledger_fold_cycle_weeks();
DROP FUNCTION cycle_week_reopened(text, date);
DROP FUNCTION ledger_in_ended_week(timestamptz);
DROP TABLE cycle_weeks, cycle_weeks_until;
DROP FUNCTION ledger_week_at_or_after(timestamptz);
CREATE OR REPLACE VIEW v_agents WITH (security_invoker = true) AS
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

-- Pinned again, as 0012 pinned it (CREATE OR REPLACE drops a function's settings).
ALTER FUNCTION throughput(text, timestamptz, timestamptz, text) SET search_path = pg_catalog, public, pg_temp;
