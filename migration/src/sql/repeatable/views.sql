-- The read views of SPEC §7 that Grafana and the operator read (each with
-- security_invoker: a reader sees its own fleet's rows only).
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

CREATE OR REPLACE VIEW v_agents WITH (security_invoker='true') AS
 SELECT r.fleet,
    r.name,
    r.status,
    r.held_unit_id,
    r.held_external_ref,
    r.held_state,
    r.lease_expires_at,
    r.last_claim_at,
    r.last_heartbeat_at,
    r.claims_today,
    r.cost_cents_today,
    r.token_last_used_at
   FROM roster(NULL::text, NULL::text, NULL::bigint) r(fleet, name, status, held_unit_id, held_external_ref, held_state, lease_expires_at, last_claim_at, last_heartbeat_at, claims_today, cost_cents_today, token_last_used_at);

CREATE OR REPLACE VIEW v_attempt_end WITH (security_invoker='true') AS
 SELECT a.id AS attempt_id,
    a.fleet,
    a.unit_id,
    a.attempt_no,
    a.agent_id,
    a.outcome,
    a.ended_at,
    x.agent_id AS ended_by,
    (x.detail ->> 'reason'::text) AS end_reason,
    x.event_type AS end_event
   FROM (work_unit_attempts a
     LEFT JOIN LATERAL ( SELECT e.agent_id,
            e.detail,
            e.event_type
           FROM work_unit_events e
          WHERE ((e.unit_id = a.unit_id) AND (e.attempt_id = a.id) AND ((e.event_type = ANY (ARRAY['released'::event_type, 'disposed'::event_type, 'stale_reclaimed'::event_type])) OR ((e.event_type = 'transitioned'::event_type) AND (e.to_state = 'verified'::work_state))))
          ORDER BY e.created_at, e.id
         LIMIT 1) x ON (true))
  WHERE (a.outcome IS NOT NULL);

CREATE OR REPLACE VIEW v_claimed_never_transitioned WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, u.external_ref, u.domain, a.attempt_no, a.agent_id, a.outcome,
       n.started_at, a.ended_at
  FROM (SELECT s.attempt_id, s.started_at FROM never_started s
        UNION ALL
        SELECT t.attempt_id, t.started_at FROM never_started_tail(NULL) t) n
  JOIN work_unit_attempts a ON a.id = n.attempt_id
  JOIN work_units u ON u.id = a.unit_id;

CREATE OR REPLACE VIEW v_claiming_agents_daily WITH (security_invoker = true) AS
SELECT c.fleet, c.day, c.agents, c.claims, s.live, s.blocked, s.silent
  FROM (SELECT d.fleet, (d.day::timestamp AT TIME ZONE 'UTC') AS day, sum(d.agents)::bigint AS agents,
               sum(d.claims)::bigint AS claims
          FROM claim_days_now() d
         GROUP BY d.fleet, d.day
        HAVING sum(d.claims) <> 0) c
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE v.status = 'ACTIVE') AS live, count(*) FILTER (WHERE v.status = 'BLOCKED') AS blocked,
               count(*) FILTER (WHERE v.status = 'SILENT') AS silent
          FROM v_agents v
         WHERE c.day = date_trunc('day', now(), 'UTC') AND v.fleet = c.fleet AND v.claims_today > 0
        HAVING c.day = date_trunc('day', now(), 'UTC')) s ON true;

CREATE OR REPLACE VIEW v_claims_weekly WITH (security_invoker = true) AS
SELECT w.fleet, w.week, w.claims, w.verified, round(w.verified::numeric / w.claims::numeric, 4) AS conversion, w.stale,
       round(w.stale::numeric / w.claims::numeric, 4) AS stale_rate, w.never_transitioned
  FROM (SELECT c.fleet, (date_trunc('week', c.day::timestamp)::date::timestamp AT TIME ZONE 'UTC') AS week,
               sum(c.claims)::bigint AS claims, sum(c.verified)::bigint AS verified, sum(c.stale)::bigint AS stale,
               sum(c.never_started)::bigint AS never_transitioned
          FROM claim_days_now() c
         GROUP BY c.fleet, (date_trunc('week', c.day::timestamp)::date::timestamp AT TIME ZONE 'UTC')) w
 WHERE w.claims <> 0;

CREATE OR REPLACE VIEW v_unit_totals WITH (security_invoker = true) AS
SELECT t.fleet, t.domain, t.state, t.disposition, t.reworked, sum(t.units)::bigint AS units,
       sum(t.cost_cents)::bigint AS cost_cents
  FROM unit_totals_now(NULL) t
 GROUP BY t.fleet, t.domain, t.state, t.disposition, t.reworked
HAVING sum(t.units) <> 0;

CREATE OR REPLACE VIEW v_cost_groups WITH (security_invoker='true') AS
 SELECT v_unit_totals.fleet,
    v_unit_totals.domain,
    v_unit_totals.state,
    v_unit_totals.disposition,
    (sum(v_unit_totals.units))::bigint AS units,
    (sum(v_unit_totals.cost_cents))::bigint AS cost_cents
   FROM v_unit_totals
  GROUP BY v_unit_totals.fleet, v_unit_totals.domain, v_unit_totals.state, v_unit_totals.disposition;

CREATE OR REPLACE VIEW v_cost_per_unit WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.state,
    work_units.disposition,
    work_units.cost_cents,
    work_units.attempt_count,
    work_units.created_at
   FROM work_units;

CREATE OR REPLACE VIEW v_cycle_time_weekly WITH (security_invoker='true') AS
 SELECT cycle_time_weekly.fleet,
    cycle_time_weekly.week,
    cycle_time_weekly.units,
    cycle_time_weekly.median_seconds,
    cycle_time_weekly.p90_seconds
   FROM cycle_time_weekly(NULL::timestamp with time zone, NULL::timestamp with time zone) cycle_time_weekly(fleet, week, units, median_seconds, p90_seconds);

CREATE OR REPLACE VIEW v_disposals WITH (security_invoker='true') AS
 SELECT u.id AS unit_id,
    u.fleet,
    u.external_ref,
    u.domain,
    u.disposition,
    u.disposed_at,
    u.cost_cents,
    u.attempt_count,
    u.evidence_urls[cardinality(u.evidence_urls)] AS evidence_url,
    d.agent_id AS disposed_by,
    (d.detail ->> 'reason'::text) AS disposition_reason
   FROM (work_units u
     LEFT JOIN LATERAL ( SELECT e.agent_id,
            e.detail
           FROM work_unit_events e
          WHERE ((e.unit_id = u.id) AND (e.event_type = 'disposed'::event_type))
          ORDER BY e.created_at, e.id
         LIMIT 1) d ON (true))
  WHERE (u.disposition IS NOT NULL);

CREATE OR REPLACE VIEW v_disposition_detail WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.disposition,
    work_units.evidence_urls[cardinality(work_units.evidence_urls)] AS evidence_url,
    work_units.cost_cents,
    work_units.disposed_at,
    work_units.created_at
   FROM work_units
  WHERE (work_units.disposition IS NOT NULL);

CREATE OR REPLACE VIEW v_disposition_summary WITH (security_invoker='true') AS
 SELECT v_unit_totals.fleet,
    v_unit_totals.domain,
    v_unit_totals.disposition,
    (sum(v_unit_totals.units))::bigint AS units,
    (sum(v_unit_totals.cost_cents))::bigint AS cost_cents
   FROM v_unit_totals
  WHERE (v_unit_totals.disposition IS NOT NULL)
  GROUP BY v_unit_totals.fleet, v_unit_totals.domain, v_unit_totals.disposition;

-- Work per domain from the totals: a column per open state (every state
-- that is not terminal, in the type's order, read from work_state so that
-- a new state is counted without being named here), then the finished
-- units (`done`: DONE; `disposed`: every unit with a disposition, DONE ones
-- included), so a finished domain reads as finished rather than as absent;
-- stalled (a lease that ran out, a fact of now) from the live-lease index,
-- which holds only live claims. A new column may fall between others, so
-- the view is made again rather than replaced (nothing depends on it; the
-- grants follow on every migrate).
DO $queue_depth$
DECLARE
    columns text;
    counts text;
BEGIN
    SELECT string_agg(format('t.%I', s), ', ' ORDER BY s),
           string_agg(format('coalesce(sum(units) FILTER (WHERE state = %L), 0)::bigint AS %I', s, s), ', ' ORDER BY s)
      INTO columns, counts
      FROM unnest(enum_range(NULL::work_state)) AS s
     WHERE NOT s = ANY (ledger_terminal_states());
    DROP VIEW IF EXISTS v_queue_depth;
    EXECUTE format($view$
        CREATE VIEW v_queue_depth WITH (security_invoker = true) AS
        SELECT t.fleet, t.domain, %s, coalesce(s.stalled, 0) AS stalled, t.done, t.disposed
          FROM (SELECT fleet, domain, %s,
                       coalesce(sum(units) FILTER (WHERE state = 'done'), 0)::bigint          AS done,
                       coalesce(sum(units) FILTER (WHERE disposition IS NOT NULL), 0)::bigint AS disposed
                  FROM v_unit_totals
                 GROUP BY fleet, domain) t
          LEFT JOIN (SELECT fleet, domain, count(*) AS stalled
                       FROM work_units
                      WHERE state = ANY (ledger_working_states()) AND lease_expires_at < now()
                      GROUP BY fleet, domain) s
            ON s.fleet = t.fleet AND s.domain = t.domain$view$, columns, counts);
END
$queue_depth$;

CREATE OR REPLACE VIEW v_rework WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.state,
    work_units.disposition,
    work_units.attempt_count,
    work_units.cost_cents,
    work_units.created_at
   FROM work_units
  WHERE (work_units.attempt_count > 1);

CREATE OR REPLACE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT w.fleet, w.week, w.disposed, w.reworked, round(w.reworked::numeric / w.disposed::numeric, 4) AS rework_rate
  FROM (SELECT d.fleet, (d.week::timestamp AT TIME ZONE 'UTC') AS week, sum(d.units)::bigint AS disposed,
               sum(d.reworked)::bigint AS reworked
          FROM disposal_weeks_now() d
         GROUP BY d.fleet, (d.week::timestamp AT TIME ZONE 'UTC')) w
 WHERE w.disposed <> 0;

CREATE OR REPLACE VIEW v_stall_list WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.state,
    work_units.claimed_by,
    work_units.current_attempt_id,
    work_units.last_heartbeat_at,
    work_units.lease_expires_at,
    (now() - work_units.lease_expires_at) AS stalled_for,
    work_units.created_at
   FROM work_units
  WHERE ((work_units.state = ANY (ledger_working_states())) AND (work_units.lease_expires_at < now()));

CREATE OR REPLACE VIEW v_throughput_daily WITH (security_invoker='true') AS
 SELECT throughput.fleet,
    throughput.start,
    throughput.disposition,
    throughput.units,
    throughput.cost_cents,
    throughput.distinct_agents
   FROM throughput('day'::text, NULL::timestamp with time zone, NULL::timestamp with time zone, NULL::text) throughput(fleet, start, disposition, units, cost_cents, distinct_agents);

CREATE OR REPLACE VIEW v_throughput_weekly WITH (security_invoker='true') AS
 SELECT throughput.fleet,
    throughput.start,
    throughput.disposition,
    throughput.units,
    throughput.cost_cents,
    throughput.distinct_agents
   FROM throughput('week'::text, NULL::timestamp with time zone, NULL::timestamp with time zone, NULL::text) throughput(fleet, start, disposition, units, cost_cents, distinct_agents);

CREATE OR REPLACE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT w.fleet, (w.week::timestamp AT TIME ZONE 'UTC') AS week, sum(w.verified_units)::bigint AS units,
       sum(w.verified_cost_cents)::bigint AS cost_cents
  FROM disposal_weeks_now() w
 GROUP BY w.fleet, (w.week::timestamp AT TIME ZONE 'UTC')
HAVING sum(w.verified_units) <> 0;
