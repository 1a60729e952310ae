-- The operator's reads (SPEC §7, issue 14): reasons and who as columns of
-- views derived from the event log, date-range indexes, and the North Star
-- metrics as views. Like every view here, each is security_invoker: it runs
-- with the row-level security of whoever reads it.
--
-- Reasons are derived from the events, not stored again: the event that
-- ended an attempt or disposed a unit already records who did it and why,
-- and a second copy in a column could disagree with it.

-- Date ranges: dispositions by when they happened (`dispositions(from:,
-- until:)`, `throughput`); costs by when they were recorded (`costSummary(from:,
-- to:)`). Units, events and questions range over created_at, which their
-- keyset indexes already lead with after the fleet.
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at) WHERE disposition IS NOT NULL;
CREATE INDEX work_unit_events_cost_idx ON work_unit_events (fleet, created_at) WHERE event_type = 'cost_recorded';

-- How each ended attempt ended: the first event that ended it (a release,
-- the verification, a reclaim by another agent, or a dispose). `ended_by` is
-- the agent (or operator) whose write ended it; `end_reason` the reason that
-- write gave (release and dispose take one), NULL when none was given.
CREATE VIEW v_attempt_end WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, a.attempt_no, a.agent_id, a.outcome, a.ended_at,
       x.agent_id AS ended_by, x.detail ->> 'reason' AS end_reason, x.event_type AS end_event
  FROM work_unit_attempts a
  LEFT JOIN LATERAL (
      SELECT e.agent_id, e.detail, e.event_type
        FROM work_unit_events e
       WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id
         AND (e.event_type IN ('released', 'disposed', 'stale_reclaimed')
              OR (e.event_type = 'transitioned' AND e.to_state = 'verified'))
       ORDER BY e.created_at, e.id
       LIMIT 1
  ) x ON true
 WHERE a.outcome IS NOT NULL;

-- Every disposition with who made it and why (the `disposed` event, one per unit).
CREATE VIEW v_disposals WITH (security_invoker = true) AS
SELECT u.id AS unit_id, u.fleet, u.external_ref, u.domain, u.disposition, u.disposed_at, u.cost_cents,
       u.attempt_count, u.evidence_urls[cardinality(u.evidence_urls)] AS evidence_url,
       d.agent_id AS disposed_by, d.detail ->> 'reason' AS disposition_reason
  FROM work_units u
  LEFT JOIN LATERAL (
      SELECT e.agent_id, e.detail
        FROM work_unit_events e
       WHERE e.unit_id = u.id AND e.event_type = 'disposed'
       ORDER BY e.created_at, e.id
       LIMIT 1
  ) d ON true
 WHERE u.disposition IS NOT NULL;

-- Units disposed per bucket ('day' or 'week', UTC; weeks start on Monday)
-- and disposition: how many, their cost, and how many distinct agents worked
-- on them. The one definition behind `throughput` in GraphQL and the
-- v_throughput_* views; a STABLE SQL function is inlined into the calling
-- query, so its range uses work_units_disposed_at_idx. NULL bounds are open.
CREATE FUNCTION throughput(p_bucket text, p_from timestamptz, p_until timestamptz, p_domain text)
RETURNS TABLE (fleet text, start timestamptz, disposition disposition, units bigint, cost_cents bigint,
               distinct_agents bigint)
LANGUAGE sql STABLE AS $$
    -- One row per (unit, attempt), or one with no attempt: a unit's cost is
    -- counted once, on its first attempt's row (or its only row).
    SELECT u.fleet, date_trunc(p_bucket, u.disposed_at, 'UTC'), u.disposition, count(DISTINCT u.id),
           coalesce(sum(u.cost_cents) FILTER (WHERE coalesce(a.attempt_no, 1) = 1), 0)::bigint,
           count(DISTINCT a.agent_id)
      FROM work_units u
      LEFT JOIN work_unit_attempts a ON a.unit_id = u.id
     WHERE u.disposition IS NOT NULL
       AND u.disposed_at >= coalesce(p_from, '-infinity') AND u.disposed_at < coalesce(p_until, 'infinity')
       AND (p_domain IS NULL OR u.domain = p_domain)
     GROUP BY 1, 2, 3
$$;

-- Throughput and disposition mix (one row per disposition: stack them, never blend).
CREATE VIEW v_throughput_daily WITH (security_invoker = true) AS
SELECT * FROM throughput('day', NULL, NULL, NULL);
CREATE VIEW v_throughput_weekly WITH (security_invoker = true) AS
SELECT * FROM throughput('week', NULL, NULL, NULL);

-- Verified throughput: units that reached a terminal disposition with
-- evidence and a recorded cost, per week of disposition.
CREATE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT fleet, date_trunc('week', disposed_at, 'UTC') AS week, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 WHERE disposition IS NOT NULL AND cost_cents > 0 AND cardinality(evidence_urls) > 0
 GROUP BY 1, 2;

-- Cycle time: first claim to disposition, per week of disposition (units
-- never claimed, e.g. dropped by an operator, have no cycle).
CREATE VIEW v_cycle_time_weekly WITH (security_invoker = true) AS
SELECT u.fleet, date_trunc('week', u.disposed_at, 'UTC') AS week, count(*) AS units,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at)) AS median_seconds,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - a.started_at)) AS p90_seconds
  FROM work_units u
  JOIN work_unit_attempts a ON a.unit_id = u.id AND a.attempt_no = 1
 WHERE u.disposition IS NOT NULL
 GROUP BY 1, 2;

-- Distinct agents that claimed, per UTC day.
CREATE VIEW v_claiming_agents_daily WITH (security_invoker = true) AS
SELECT fleet, date_trunc('day', started_at, 'UTC') AS day, count(DISTINCT agent_id) AS agents, count(*) AS claims
  FROM work_unit_attempts
 GROUP BY 1, 2;

-- Of the claims made in a week, how many ended verified (conversion), how
-- many went stale (reported stalled, or superseded by a reclaim), and how
-- many ended without ever being started (the anti-metric).
CREATE VIEW v_claims_weekly WITH (security_invoker = true) AS
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

-- Rework rate: of the units disposed in a week, how many needed more than one attempt.
CREATE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT fleet, date_trunc('week', disposed_at, 'UTC') AS week, count(*) AS disposed,
       count(*) FILTER (WHERE attempt_count > 1) AS reworked,
       round(count(*) FILTER (WHERE attempt_count > 1)::numeric / count(*), 4) AS rework_rate
  FROM work_units
 WHERE disposition IS NOT NULL
 GROUP BY 1, 2;

-- The anti-metric, row by row: claims that ended without the unit ever
-- being started (CLAIMED -> IN_PROGRESS) under them.
CREATE VIEW v_claimed_never_transitioned WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, u.external_ref, u.domain, a.attempt_no, a.agent_id, a.outcome,
       a.started_at, a.ended_at
  FROM work_unit_attempts a
  JOIN work_units u ON u.id = a.unit_id
 WHERE a.outcome IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                    WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id AND e.event_type = 'transitioned');

GRANT SELECT ON v_attempt_end, v_disposals, v_throughput_daily, v_throughput_weekly, v_verified_throughput_weekly,
    v_cycle_time_weekly, v_claiming_agents_daily, v_claims_weekly, v_rework_rate_weekly,
    v_claimed_never_transitioned TO work_ledger_app, work_ledger_reader;
