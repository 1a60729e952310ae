-- The reads of the projections (SPEC §7): each is the projection's rows
-- plus its tail, the delta of the events past its mark
-- (sql/repeatable/projections.sql), in one statement, so a read right after
-- a write sees it whether or not the projector has folded it yet. The
-- tails are read as the caller: row-level security keeps them to its fleet.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- The door of every read request (SPEC §8: who acts is the token): the
-- request's first statement, `SELECT set_config('role', 'work_ledger_app',
-- true), s.* FROM ledger_session($hash) s`, authenticates the token by its
-- hash and scopes the transaction to the token's fleet, so a read costs no
-- statement of its own for its authentication and a revocation or an expiry
-- refuses the very next read. `refusal`: NULL for a live token with
-- `ledger:read`, else 'unknown' (unknown or revoked), 'expired' (with
-- `expired_at`) or 'forbidden'; a refused token leaves the fleet empty,
-- which row-level security matches with no row.
CREATE OR REPLACE FUNCTION ledger_session(p_token bytea, OUT refusal text, OUT expired_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    who api_tokens;
BEGIN
    SELECT t.* INTO who FROM api_tokens t WHERE t.token_hash = p_token;
    IF who.id IS NULL OR who.revoked_at IS NOT NULL THEN
        refusal := 'unknown';
    ELSIF who.expires_at <= now() THEN
        refusal := 'expired';
        expired_at := who.expires_at;
    ELSIF NOT ('ledger:read' = ANY (who.permissions)) THEN
        refusal := 'forbidden';
    END IF;
    PERFORM set_config('work_ledger.fleet', CASE WHEN refusal IS NULL THEN who.fleet ELSE '' END, true);
END
$$;
REVOKE ALL ON FUNCTION ledger_session(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_session(bytea) TO work_ledger_app;

CREATE OR REPLACE VIEW v_unit_totals WITH (security_invoker = true) AS
SELECT t.fleet, t.domain, t.state, t.disposition, t.reworked, sum(t.units)::bigint AS units,
       sum(t.cost_cents)::bigint AS cost_cents
  FROM (SELECT u.fleet, u.domain, u.state, u.disposition, u.reworked, u.units, u.cost_cents FROM unit_totals u
        UNION ALL
        SELECT u.fleet, u.domain, u.state, u.disposition, u.reworked, u.units, u.cost_cents FROM unit_totals_tail(NULL) u) t
 GROUP BY t.fleet, t.domain, t.state, t.disposition, t.reworked
HAVING sum(t.units) <> 0;

-- Work per domain from the totals: the open states, then the finished
-- units (`done`: DONE; `disposed`: every unit with a disposition, DONE ones
-- included), so a finished domain reads as finished rather than as absent;
-- stalled (a lease that ran out, a fact of now) from the live-lease index,
-- which holds only live claims. (Columns are only ever appended: the view
-- is replaced in place.)
CREATE OR REPLACE VIEW v_queue_depth WITH (security_invoker = true) AS
SELECT t.fleet, t.domain, t.ready, t.claimed, t.in_progress, t.blocked, t.verified, coalesce(s.stalled, 0) AS stalled,
       t.done, t.disposed
  FROM (SELECT fleet, domain,
               coalesce(sum(units) FILTER (WHERE state = 'ready'), 0)::bigint           AS ready,
               coalesce(sum(units) FILTER (WHERE state = 'claimed'), 0)::bigint         AS claimed,
               coalesce(sum(units) FILTER (WHERE state = 'in_progress'), 0)::bigint     AS in_progress,
               coalesce(sum(units) FILTER (WHERE state = 'blocked'), 0)::bigint         AS blocked,
               coalesce(sum(units) FILTER (WHERE state = 'verified'), 0)::bigint        AS verified,
               coalesce(sum(units) FILTER (WHERE state = 'done'), 0)::bigint            AS done,
               coalesce(sum(units) FILTER (WHERE disposition IS NOT NULL), 0)::bigint   AS disposed
          FROM v_unit_totals
         GROUP BY fleet, domain) t
  LEFT JOIN (SELECT fleet, domain, count(*) AS stalled
               FROM work_units
              WHERE state IN ('claimed', 'in_progress') AND lease_expires_at < now()
              GROUP BY fleet, domain) s
    ON s.fleet = t.fleet AND s.domain = t.domain;

-- disposal_weeks with the tail's disposal days under their weeks.
CREATE OR REPLACE FUNCTION disposal_weeks_now()
RETURNS TABLE (fleet text, week date, units bigint, cost_cents bigint, reworked bigint, verified_units bigint,
               verified_cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT w.fleet, w.week, w.units, w.cost_cents, w.reworked, w.verified_units, w.verified_cost_cents FROM disposal_weeks w
    UNION ALL
    SELECT d.fleet, date_trunc('week', (d.day)::timestamp)::date, d.units, d.cost_cents, d.reworked, d.verified_units,
           d.verified_cost_cents
      FROM disposal_days_tail(NULL) d
$$;

CREATE OR REPLACE VIEW v_verified_throughput_weekly WITH (security_invoker = true) AS
SELECT w.fleet, (w.week::timestamp AT TIME ZONE 'UTC') AS week, sum(w.verified_units)::bigint AS units,
       sum(w.verified_cost_cents)::bigint AS cost_cents
  FROM disposal_weeks_now() w
 GROUP BY w.fleet, (w.week::timestamp AT TIME ZONE 'UTC')
HAVING sum(w.verified_units) <> 0;

CREATE OR REPLACE VIEW v_rework_rate_weekly WITH (security_invoker = true) AS
SELECT w.fleet, w.week, w.disposed, w.reworked, round(w.reworked::numeric / w.disposed::numeric, 4) AS rework_rate
  FROM (SELECT d.fleet, (d.week::timestamp AT TIME ZONE 'UTC') AS week, sum(d.units)::bigint AS disposed,
               sum(d.reworked)::bigint AS reworked
          FROM disposal_weeks_now() d
         GROUP BY d.fleet, (d.week::timestamp AT TIME ZONE 'UTC')) w
 WHERE w.disposed <> 0;

-- claim_days with its tail.
CREATE OR REPLACE FUNCTION claim_days_now()
RETURNS TABLE (fleet text, day date, claims bigint, agents bigint, verified bigint, stale bigint, never_started bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT c.fleet, c.day, c.claims, c.agents, c.verified, c.stale, c.never_started FROM claim_days c
    UNION ALL
    SELECT * FROM claim_days_tail(NULL)
$$;

CREATE OR REPLACE VIEW v_claims_weekly WITH (security_invoker = true) AS
SELECT w.fleet, w.week, w.claims, w.verified, round(w.verified::numeric / w.claims::numeric, 4) AS conversion, w.stale,
       round(w.stale::numeric / w.claims::numeric, 4) AS stale_rate, w.never_transitioned
  FROM (SELECT c.fleet, (date_trunc('week', c.day::timestamp)::date::timestamp AT TIME ZONE 'UTC') AS week,
               sum(c.claims)::bigint AS claims, sum(c.verified)::bigint AS verified, sum(c.stale)::bigint AS stale,
               sum(c.never_started)::bigint AS never_transitioned
          FROM claim_days_now() c
         GROUP BY c.fleet, (date_trunc('week', c.day::timestamp)::date::timestamp AT TIME ZONE 'UTC')) w
 WHERE w.claims <> 0;

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

CREATE OR REPLACE VIEW v_claimed_never_transitioned WITH (security_invoker = true) AS
SELECT a.id AS attempt_id, a.fleet, a.unit_id, u.external_ref, u.domain, a.attempt_no, a.agent_id, a.outcome,
       n.started_at, a.ended_at
  FROM (SELECT s.attempt_id, s.started_at FROM never_started s
        UNION ALL
        SELECT t.attempt_id, t.started_at FROM never_started_tail(NULL) t) n
  JOIN work_unit_attempts a ON a.id = n.attempt_id
  JOIN work_units u ON u.id = a.unit_id;

-- Events in [p_from, p_until) of any of p_types (none: every type): the
-- whole UTC days from event_days and its tail, the cut ends row by row.
CREATE OR REPLACE FUNCTION events_counted_in(p_fleet text, p_types text[], p_from timestamptz, p_until timestamptz)
RETURNS bigint LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    lo date;
    hi date;
    low_end timestamptz;
    high_start timestamptz;
    every boolean := cardinality(p_types) = 0;
BEGIN
    SELECT w.lo, w.hi, w.low_end, w.high_start INTO lo, hi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) w;
    RETURN (SELECT coalesce(sum(d.events), 0) FROM event_days d
             WHERE lo < hi AND d.fleet = p_fleet AND d.day >= lo AND d.day < hi
               AND (every OR d.event_type::text = ANY(p_types)))
         + (SELECT coalesce(sum(d.events), 0) FROM event_days_tail(p_fleet) d
             WHERE lo < hi AND d.day >= lo AND d.day < hi AND (every OR d.event_type::text = ANY(p_types)))
         + (SELECT count(*) FROM work_unit_events e
             WHERE e.fleet = p_fleet AND e.created_at >= coalesce(p_from, '-infinity') AND e.created_at < low_end
               AND (every OR e.event_type::text = ANY(p_types)))
         + (SELECT count(*) FROM work_unit_events e
             WHERE e.fleet = p_fleet AND e.created_at >= high_start AND e.created_at < coalesce(p_until, 'infinity')
               AND (every OR e.event_type::text = ANY(p_types)));
END
$$;

-- The units and cost recorded in [p_from, p_until), by the units' group now
-- (or, p_agents, by the agent billed): the whole UTC days from the cost days
-- and their tail (a unit counted on its first day in the range: prior_day
-- before lo), the cut ends from the cost records themselves.
CREATE OR REPLACE FUNCTION cost_recorded_in(p_fleet text, p_agents boolean, p_from timestamptz, p_until timestamptz,
                                            p_domain text)
RETURNS TABLE (fleet text, agent_id text, domain text, state work_state, disposition disposition, units bigint,
               cost_cents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    lo date;
    hi date;
    low_end timestamptz;
    high_start timestamptz;
    whole boolean;
BEGIN
    SELECT d.lo, d.hi, d.low_end, d.high_start INTO lo, hi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) d;
    whole := lo < hi;
    RETURN QUERY
    WITH cut AS (
             SELECT e.unit_id, e.attempt_id, e.cost_delta_cents FROM work_unit_events e
              WHERE e.event_type = 'cost_recorded' AND e.fleet = p_fleet
                AND e.created_at >= coalesce(p_from, '-infinity') AND e.created_at < low_end
             UNION ALL
             SELECT e.unit_id, e.attempt_id, e.cost_delta_cents FROM work_unit_events e
              WHERE e.event_type = 'cost_recorded' AND e.fleet = p_fleet
                AND e.created_at >= high_start AND e.created_at < coalesce(p_until, 'infinity')),
         cut_units AS (
             SELECT c.unit_id, t.agent_id, sum(c.cost_delta_cents) AS cost
               FROM cut c LEFT JOIN work_unit_attempts t ON p_agents AND t.id = c.attempt_id
              WHERE NOT p_agents OR t.agent_id IS NOT NULL
              GROUP BY 1, 2),
         days AS (
             SELECT c.fleet, NULL::text AS agent_id, c.domain, c.state, c.disposition, c.day, c.prior_day, c.units,
                    c.cost_cents
               FROM cost_days c
              WHERE NOT p_agents AND whole AND c.fleet = p_fleet AND c.day >= lo AND c.day < hi
             UNION ALL
             SELECT c.fleet, c.agent_id, c.domain, NULL, NULL, c.day, c.prior_day, c.units, c.cost_cents
               FROM agent_cost_days c
              WHERE p_agents AND whole AND c.fleet = p_fleet AND c.day >= lo AND c.day < hi
             UNION ALL
             SELECT c.fleet, c.agent_id, c.domain, c.state, c.disposition, c.day, c.prior_day, c.units, c.cost_cents
               FROM cost_days_tail(p_fleet) c
              WHERE whole AND (c.agent_id IS NOT NULL) = p_agents AND c.day >= lo AND c.day < hi)
    SELECT x.fleet, x.agent_id, x.domain, x.state, x.disposition, sum(x.units)::bigint, sum(x.cost)::bigint
      FROM (SELECT d.fleet, d.agent_id, d.domain, d.state, d.disposition,
                   CASE WHEN d.prior_day IS NULL OR d.prior_day < lo THEN d.units ELSE 0 END AS units,
                   d.cost_cents AS cost
              FROM days d WHERE p_domain IS NULL OR d.domain = p_domain
            UNION ALL
            SELECT w.fleet, r.agent_id, w.domain, CASE WHEN p_agents THEN NULL ELSE w.state END,
                   CASE WHEN p_agents THEN NULL ELSE w.disposition END,
                   CASE WHEN whole AND EXISTS (
                            SELECT 1 FROM work_unit_events m
                              LEFT JOIN work_unit_attempts ma ON p_agents AND ma.id = m.attempt_id
                             WHERE m.unit_id = r.unit_id AND m.event_type = 'cost_recorded'
                               AND m.created_at >= low_end AND m.created_at < high_start
                               AND (NOT p_agents OR ma.agent_id = r.agent_id))
                        THEN 0 ELSE 1 END,
                   r.cost
              FROM cut_units r JOIN work_units w ON w.id = r.unit_id AND w.fleet = p_fleet
             WHERE p_domain IS NULL OR w.domain = p_domain) x
     GROUP BY 1, 2, 3, 4, 5;
END
$$;

-- Units disposed per bucket (day or week, UTC) of [p_from, p_until) and
-- disposition, their cost and distinct agents, of one domain or all: the
-- whole buckets from the disposal days, weeks and agent counts, the whole
-- days of a cut bucket from the disposal days and agent sets, each with
-- its tail; the parts of a day the range cuts, from the units themselves.
CREATE OR REPLACE FUNCTION throughput(p_bucket text, p_from timestamptz, p_until timestamptz, p_domain text)
RETURNS TABLE (fleet text, start timestamptz, disposition disposition, units bigint, cost_cents bigint,
               distinct_agents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    f timestamp := coalesce(p_from, '-infinity') AT TIME ZONE 'UTC';
    u timestamp := coalesce(p_until, 'infinity') AT TIME ZONE 'UTC';
    -- The whole buckets: [lo, hi), in UTC wall time.
    lo timestamp := CASE WHEN date_trunc(p_bucket, f) = f THEN f
                         ELSE date_trunc(p_bucket, f) + ('1 ' || p_bucket)::interval END;
    hi timestamp := date_trunc(p_bucket, u);
    whole boolean := lo < hi;
    -- The whole days [dlo, dhi) (those outside [lo, hi) belong to a cut
    -- bucket) and the parts of a day the range cuts at each end.
    dlo date;
    dhi date;
    -- Those whole days less [lo, hi): at most two ranges, [c1, c2) and
    -- [c3, c4), each read as an index range whatever the plan (a condition
    -- on `whole` inside the statement would be a filter over every day of
    -- the fleet in a generic plan).
    c1 date;
    c2 date;
    c3 date;
    c4 date;
    dom text := coalesce(p_domain, '');
    low_end timestamptz;
    high_start timestamptz;
BEGIN
    SELECT d.lo, d.hi, d.low_end, d.high_start INTO dlo, dhi, low_end, high_start
      FROM ledger_whole_days(p_from, p_until) d;
    IF whole THEN
        c1 := dlo; c2 := least(dhi, lo::date); c3 := greatest(dlo, hi::date); c4 := dhi;
    ELSE
        c1 := dlo; c2 := dhi; c3 := dhi; c4 := dhi;
    END IF;
    RETURN QUERY
    WITH tail AS MATERIALIZED (
             SELECT t.* FROM disposal_days_tail(NULL) t WHERE p_domain IS NULL OR t.domain = p_domain),
         tail_agents AS MATERIALIZED (
             SELECT t.* FROM disposal_agents_tail(NULL) t WHERE t.domain = dom),
         cut AS (
             SELECT w.fleet, w.id, w.disposition, w.cost_cents,
                    date_trunc(p_bucket, w.disposed_at AT TIME ZONE 'UTC') AS start
               FROM work_units w
              WHERE w.disposition IS NOT NULL AND (p_domain IS NULL OR w.domain = p_domain)
                AND w.disposed_at >= coalesce(p_from, '-infinity') AND w.disposed_at < low_end
             UNION ALL
             SELECT w.fleet, w.id, w.disposition, w.cost_cents,
                    date_trunc(p_bucket, w.disposed_at AT TIME ZONE 'UTC')
               FROM work_units w
              WHERE w.disposition IS NOT NULL AND (p_domain IS NULL OR w.domain = p_domain)
                AND w.disposed_at >= high_start AND w.disposed_at < coalesce(p_until, 'infinity'))
    SELECT x.fleet, x.start AT TIME ZONE 'UTC', x.disposition, sum(x.units)::bigint, sum(x.cost_cents)::bigint,
           sum(x.agents)::bigint
      FROM (SELECT d.fleet, d.day::timestamp AS start, d.disposition, d.units, d.cost_cents, 0::bigint AS agents
              FROM disposal_days d
             WHERE p_bucket = 'day' AND p_domain IS NOT NULL AND d.domain = p_domain
               AND d.day >= lo::date AND d.day < hi::date
            UNION ALL
            SELECT d.fleet, d.day::timestamp, d.disposition, d.units, d.cost_cents, 0
              FROM disposal_fleet_days d
             WHERE p_bucket = 'day' AND p_domain IS NULL AND d.day >= lo::date AND d.day < hi::date
            UNION ALL
            SELECT d.fleet, d.week::timestamp, d.disposition, d.units, d.cost_cents, 0
              FROM disposal_weeks d
             WHERE p_bucket = 'week' AND d.week >= lo::date AND d.week < hi::date
               AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT t.fleet, date_trunc(p_bucket, t.day::timestamp), t.disposition, t.units, t.cost_cents, 0
              FROM tail t
             WHERE date_trunc(p_bucket, t.day::timestamp) >= lo AND date_trunc(p_bucket, t.day::timestamp) < hi
            UNION ALL
            SELECT g.fleet, g.start::timestamp, g.disposition, 0, 0, g.agents
              FROM disposal_agent_counts g
             WHERE g.week = (p_bucket = 'week') AND g.domain = dom AND g.start >= lo::date AND g.start < hi::date
            UNION ALL
            SELECT a.fleet, a.start::timestamp, a.disposition, 0, 0, count(*)
              FROM tail_agents a
             WHERE a.week = (p_bucket = 'week') AND a.start >= lo::date AND a.start < hi::date
             GROUP BY 1, 2, 3) x
     GROUP BY x.fleet, x.start, x.disposition
    HAVING sum(x.units) <> 0
    UNION ALL
    SELECT c.fleet, c.start AT TIME ZONE 'UTC', c.disposition, sum(c.units)::bigint, sum(c.cost_cents)::bigint,
           count(DISTINCT c.agent_id)
      FROM (SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp) AS start, d.disposition, d.units, d.cost_cents,
                   NULL::text AS agent_id
              FROM disposal_days d
             WHERE d.day >= c1 AND d.day < c2 AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT d.fleet, date_trunc(p_bucket, d.day::timestamp), d.disposition, d.units, d.cost_cents, NULL
              FROM disposal_days d
             WHERE d.day >= c3 AND d.day < c4 AND (p_domain IS NULL OR d.domain = p_domain)
            UNION ALL
            SELECT t.fleet, date_trunc(p_bucket, t.day::timestamp), t.disposition, t.units, t.cost_cents, NULL
              FROM tail t
             WHERE (t.day >= c1 AND t.day < c2) OR (t.day >= c3 AND t.day < c4)
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM disposal_agents a
             WHERE NOT a.week AND a.domain = dom AND a.start >= c1 AND a.start < c2
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM disposal_agents a
             WHERE NOT a.week AND a.domain = dom AND a.start >= c3 AND a.start < c4
            UNION ALL
            SELECT a.fleet, date_trunc(p_bucket, a.start::timestamp), a.disposition, 0, 0, a.agent_id
              FROM tail_agents a
             WHERE NOT a.week AND ((a.start >= c1 AND a.start < c2) OR (a.start >= c3 AND a.start < c4))
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 1, k.cost_cents, NULL FROM cut k
            UNION ALL
            SELECT k.fleet, k.start, k.disposition, 0, 0, t.agent_id
              FROM cut k JOIN work_unit_attempts t ON t.unit_id = k.id) c
     GROUP BY c.fleet, c.start, c.disposition
    HAVING sum(c.units) <> 0;
END
$$;

-- The roster (`agents`, v_agents): a page of p_limit names of p_fleet after
-- p_after (p_fleet NULL: every visible fleet), each with its held unit, its
-- latest attempt (agent_latest and its tail), its last heartbeat, its claims
-- and cost today and its tokens' last use. Planned once per session
-- (force_generic_plan: the same plan serves every page).
CREATE OR REPLACE FUNCTION roster(p_fleet text, p_after text, p_limit bigint)
RETURNS TABLE (fleet text, name text, status text, held_unit_id uuid, held_external_ref text, held_state work_state, lease_expires_at timestamp with time zone, last_claim_at timestamp with time zone, last_heartbeat_at timestamp with time zone, claims_today bigint, cost_cents_today bigint, token_last_used_at timestamp with time zone)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
-- The names with attempts, each with its latest attempt (agent_latest),
-- p_limit of them: of p_fleet after p_after, else of every visible fleet,
-- in (fleet, name) order along the table's key. The bounds are plain
-- comparisons of a column with a parameter, which the planner puts into
-- the index range under row-level security (0039).
-- With the latest attempts of the projection's tail (agent_latest_tail):
-- later attempts of these names, and names new since its mark.
attempted AS (
    SELECT DISTINCT ON (x.fleet, x.name) x.fleet, x.name, x.attempt_id, x.unit_id, x.started_at
      FROM ((SELECT g.fleet, g.agent_id AS name, g.attempt_id, g.unit_id, g.started_at FROM agent_latest g
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
            UNION ALL
            SELECT g.fleet, g.agent_id, g.attempt_id, g.unit_id, g.started_at FROM agent_latest_tail(p_fleet) g
             WHERE p_fleet IS NULL OR g.fleet = p_fleet AND g.agent_id > coalesce(p_after, '')) x
     ORDER BY x.fleet, x.name, x.started_at DESC, x.attempt_id DESC
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
       WHERE u.claimed_by = n.name AND u.fleet = n.fleet AND u.state = ANY (ledger_held_states())
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
