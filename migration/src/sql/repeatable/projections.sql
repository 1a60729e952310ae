-- The read models (SPEC §7): every total, day and week bucket, set and
-- roster row is a projection of the event log, folded after commit. No
-- trigger on a ledger table writes a read table: a write pays only for the
-- ledger.
--
-- Each projection is one mark (projection_marks: every event whose batch is
-- below it is folded into the projection's tables) and one definition: a
-- delta function `<name>_delta(fleet, from, to)` whose rows, in the
-- tables' own shape, are what the events of batches [from, to) change
-- (to NULL: every event the statement sees). Everything else is that
-- function:
--   - the projector (src/projector/, ledger_project below) folds [mark, W)
--     into the tables and moves the mark to W, in one transaction, where W
--     is the live-delivery watermark: below it no transaction still in
--     flight can write (a sequence number or a time would skip an event
--     that commits late); one replica at a time per projection (the mark's
--     row lock), each event once;
--   - a read is the tables' rows plus the delta of [mark, everything
--     visible): `<table>_tail(fleet)`, in the read's own statement, so it
--     is exact the moment a write commits, projector running or not;
--   - a rebuild is the delta of [0, W) (ledger_project_rebuild), run by
--     `migrate` when a definition changed (its checksum, projection_marks.
--     version) and by `work-ledger projections rebuild`;
--   - the audit compares tables plus tail with the delta of everything.
--
-- A delta is the fold of each entity the range touches (a unit, an
-- attempt) as of its events below `to`, less its fold as of its events
-- below `from`: the events of one unit come in the order of its writes
-- (each write locks its unit before its first event), so "below a batch"
-- is a prefix of each unit's history, and a state is the last one an event
-- led to. Facts the event log does not repeat are read from rows that never
-- change once written: a unit's domain and disposal time, an attempt's
-- agent and start.
--
-- The tables keep their delta rows (an unfolded row per change, summed by
-- every read) and are compacted by ledger_compact as before.
--
-- A tail (`<table>_tail`) reads the events past a projection's mark with
-- plans made for any mark (a SQL function plans its statements without the
-- arguments' values), which PostgreSQL would run with parallel workers:
-- starting them cost more than the tail itself (21 ms against 1.8 ms for
-- an empty tail at 1,000,000 events, ten times that at 10,000,000), so a
-- tail runs without them.
--
-- The functions that scan a range of batches are PL/pgSQL planned for each
-- call's values (force_custom_plan): a SQL function's plan, made without
-- the mark, started from every unit of the fleet (disposal_agents_tail:
-- 8 s against 1.6 ms at 10,000,000 events, and the weekly disposition
-- panel timed out).
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- ---------------------------------------------------------------------------
-- The folds of units and attempts.
-- ---------------------------------------------------------------------------

-- Each unit some event of batches [p_from, p_to) belongs to (of p_fleet, or
-- of every fleet the caller sees): as of its events below p_to (sign 1) and
-- below p_from (sign -1; no row for a unit registered at or after p_from).
CREATE OR REPLACE FUNCTION ledger_unit_folds(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (unit_id uuid, sign integer, state work_state, disposition disposition, claims bigint,
               cost_cents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH touched AS MATERIALIZED (
        SELECT DISTINCT e.unit_id FROM work_unit_events e
         WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to))
    SELECT t.unit_id, s.sign, f.state, f.disposition, f.claims, f.cost_cents
      FROM touched t
     CROSS JOIN (VALUES (1), (-1)) AS s(sign)
      JOIN work_units u ON u.id = t.unit_id
     CROSS JOIN LATERAL (
           SELECT -- The state the last change led to (stalls and heartbeats
                  -- keep the state they found); a unit written without its
                  -- events (by hand, or imported history) is where its first
                  -- event found it, else READY, where every unit starts.
                  coalesce((array_agg(e.to_state ORDER BY e.seq DESC)
                                FILTER (WHERE e.to_state IS NOT NULL AND e.event_type NOT IN ('stalled', 'heartbeat')))[1],
                           (array_agg(e.from_state ORDER BY e.seq) FILTER (WHERE e.from_state IS NOT NULL))[1],
                           'ready') AS state,
                  -- The disposition its `disposed` event set (the unit's
                  -- own, which never changes once set, for an event written
                  -- without it).
                  CASE WHEN bool_or(e.event_type = 'disposed')
                       THEN coalesce(max(e.detail->>'disposition') FILTER (WHERE e.event_type = 'disposed'),
                                     u.disposition::text) END::disposition AS disposition,
                  count(*) FILTER (WHERE e.event_type = 'claimed') AS claims,
                  coalesce(sum(e.cost_delta_cents), 0)::bigint AS cost_cents
             FROM work_unit_events e
            WHERE e.unit_id = t.unit_id
              AND CASE WHEN s.sign = 1 THEN p_to IS NULL OR e.batch < p_to ELSE e.batch < p_from END
           HAVING count(*) > 0) f;
END
$$;

-- Each attempt some event of batches [p_from, p_to) names, folded the same
-- way: claimed, ended verified, stale (superseded by a reclaim or reported
-- stalled), ended (released, superseded, disposed, verified) and started
-- (moved to IN_PROGRESS).
CREATE OR REPLACE FUNCTION ledger_attempt_folds(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (attempt_id uuid, sign integer, claimed boolean, verified boolean, stale boolean, ended boolean,
               started boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH touched AS MATERIALIZED (
        SELECT DISTINCT e.unit_id, e.attempt_id FROM work_unit_events e
         WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
           AND e.attempt_id IS NOT NULL)
    SELECT t.attempt_id, s.sign, f.claimed, f.verified, f.stale, f.ended, f.started
      FROM touched t
     CROSS JOIN (VALUES (1), (-1)) AS s(sign)
     CROSS JOIN LATERAL (
           SELECT bool_or(e.event_type = 'claimed') AS claimed,
                  bool_or(e.event_type = 'transitioned' AND e.to_state = 'verified') AS verified,
                  bool_or(e.event_type IN ('stale_reclaimed', 'stalled')) AS stale,
                  bool_or(e.event_type IN ('released', 'stale_reclaimed', 'disposed')
                          OR (e.event_type = 'transitioned' AND e.to_state = 'verified')) AS ended,
                  bool_or(e.event_type = 'transitioned') AS started
             FROM work_unit_events e
            WHERE e.unit_id = t.unit_id AND e.attempt_id = t.attempt_id
              AND CASE WHEN s.sign = 1 THEN p_to IS NULL OR e.batch < p_to ELSE e.batch < p_from END
           HAVING count(*) > 0) f;
END
$$;

-- Where a projection's fold stands: every event whose batch is below it is folded.
CREATE OR REPLACE FUNCTION ledger_mark(p_name text) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT coalesce((SELECT m.mark FROM projection_marks m WHERE m.name = p_name), 0)
$$;

-- ---------------------------------------------------------------------------
-- unit_totals: units and their cost per (domain, state, disposition, reworked).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION unit_totals_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, domain text, state work_state, disposition disposition, reworked boolean, units bigint,
               cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT u.fleet, u.domain, f.state, f.disposition, f.claims > 1, sum(f.sign)::bigint,
           sum(f.sign * f.cost_cents)::bigint
      FROM ledger_unit_folds(p_fleet, p_from, p_to) f JOIN work_units u ON u.id = f.unit_id
     GROUP BY 1, 2, 3, 4, 5
    HAVING sum(f.sign) <> 0 OR sum(f.sign * f.cost_cents) <> 0
$$;

CREATE OR REPLACE FUNCTION unit_totals_tail(p_fleet text)
RETURNS TABLE (fleet text, domain text, state work_state, disposition disposition, reworked boolean, units bigint,
               cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM unit_totals_delta(p_fleet, ledger_mark('unit_totals'), NULL)
$$;

-- The unit totals as of now: the folded rows and the tail, of one fleet or
-- (p_fleet NULL) of every fleet the caller sees.
CREATE OR REPLACE FUNCTION unit_totals_now(p_fleet text)
RETURNS TABLE (fleet text, domain text, state work_state, disposition disposition, reworked boolean, units bigint,
               cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT t.fleet, t.domain, t.state, t.disposition, t.reworked, t.units, t.cost_cents
      FROM unit_totals t WHERE p_fleet IS NULL OR t.fleet = p_fleet
    UNION ALL
    SELECT * FROM unit_totals_tail(p_fleet)
$$;

-- ---------------------------------------------------------------------------
-- events: events per (type, agent), and per UTC day and type.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION event_totals_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, event_type event_type, agent_id text, events bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.fleet, e.event_type, e.agent_id, count(*) FROM work_unit_events e
     WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
     GROUP BY 1, 2, 3;
END
$$;

CREATE OR REPLACE FUNCTION event_days_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, day date, event_type event_type, events bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.fleet, ((e.created_at) AT TIME ZONE 'UTC')::date, e.event_type, count(*) FROM work_unit_events e
     WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
     GROUP BY 1, 2, 3;
END
$$;

CREATE OR REPLACE FUNCTION event_totals_tail(p_fleet text)
RETURNS TABLE (fleet text, event_type event_type, agent_id text, events bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM event_totals_delta(p_fleet, ledger_mark('events'), NULL)
$$;

CREATE OR REPLACE FUNCTION event_days_tail(p_fleet text)
RETURNS TABLE (fleet text, day date, event_type event_type, events bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM event_days_delta(p_fleet, ledger_mark('events'), NULL)
$$;

-- ---------------------------------------------------------------------------
-- disposals: units disposed per UTC day of their disposal (by domain and
-- disposition, by week, by fleet), their cost now, how many were reworked
-- and how many carry cost (verified: a disposed unit always has evidence);
-- and the set of agents with an attempt on each day's or week's disposals.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION disposal_days_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, day date, domain text, disposition disposition, units bigint, cost_cents bigint,
               reworked bigint, verified_units bigint, verified_cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT u.fleet, ((u.disposed_at) AT TIME ZONE 'UTC')::date, u.domain, f.disposition, sum(f.sign)::bigint,
           sum(f.sign * f.cost_cents)::bigint, sum(f.sign * (f.claims > 1)::int)::bigint,
           sum(f.sign * (f.cost_cents > 0)::int)::bigint,
           sum(f.sign * CASE WHEN f.cost_cents > 0 THEN f.cost_cents ELSE 0 END)::bigint
      FROM ledger_unit_folds(p_fleet, p_from, p_to) f JOIN work_units u ON u.id = f.unit_id
     WHERE f.disposition IS NOT NULL
     GROUP BY 1, 2, 3, 4
    HAVING sum(f.sign) <> 0 OR sum(f.sign * f.cost_cents) <> 0 OR sum(f.sign * (f.claims > 1)::int) <> 0
        OR sum(f.sign * (f.cost_cents > 0)::int) <> 0
$$;

CREATE OR REPLACE FUNCTION disposal_days_tail(p_fleet text)
RETURNS TABLE (fleet text, day date, domain text, disposition disposition, units bigint, cost_cents bigint,
               reworked bigint, verified_units bigint, verified_cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM disposal_days_delta(p_fleet, ledger_mark('disposals'), NULL)
$$;

-- The agent sets of the units disposed by the events of [p_from, p_to): for
-- each, every agent with an attempt on it (all come before its disposal),
-- under its day and its week, of its domain and of every domain ('').
CREATE OR REPLACE FUNCTION disposal_agents_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, week boolean, start date, domain text, disposition disposition, agent_id text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT DISTINCT u.fleet, k.week, CASE WHEN k.week THEN date_trunc('week', (d.day)::timestamp)::date ELSE d.day END,
           CASE WHEN k.every THEN '' ELSE u.domain END, u.disposition, a.agent_id
      FROM work_unit_events e
      JOIN work_units u ON u.id = e.unit_id
      JOIN work_unit_attempts a ON a.unit_id = u.id
     CROSS JOIN LATERAL (SELECT ((u.disposed_at) AT TIME ZONE 'UTC')::date AS day) d
     CROSS JOIN (VALUES (false, false), (false, true), (true, false), (true, true)) AS k(week, every)
     WHERE e.event_type = 'disposed' AND (p_fleet IS NULL OR e.fleet = p_fleet)
       AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to);
END
$$;

-- The tail's agents not in the set yet.
CREATE OR REPLACE FUNCTION disposal_agents_tail(p_fleet text)
RETURNS TABLE (fleet text, week boolean, start date, domain text, disposition disposition, agent_id text)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT n.* FROM disposal_agents_delta(p_fleet, ledger_mark('disposals'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM disposal_agents s
                        WHERE s.fleet = n.fleet AND s.week = n.week AND s.domain = n.domain AND s.start = n.start
                          AND s.disposition = n.disposition AND s.agent_id = n.agent_id)
$$;

-- ---------------------------------------------------------------------------
-- claims: attempts per UTC day of their start (claims, distinct agents,
-- ended verified, stale, ended without ever being started), the set of
-- claiming agents per day, and the attempts that ended unstarted.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION claim_days_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, day date, claims bigint, verified bigint, stale bigint, never_started bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date, sum(f.sign * f.claimed::int)::bigint,
           sum(f.sign * f.verified::int)::bigint, sum(f.sign * f.stale::int)::bigint,
           sum(f.sign * (f.ended AND NOT f.started)::int)::bigint
      FROM ledger_attempt_folds(p_fleet, p_from, p_to) f JOIN work_unit_attempts a ON a.id = f.attempt_id
     GROUP BY 1, 2
    HAVING sum(f.sign * f.claimed::int) <> 0 OR sum(f.sign * f.verified::int) <> 0 OR sum(f.sign * f.stale::int) <> 0
        OR sum(f.sign * (f.ended AND NOT f.started)::int) <> 0
$$;

-- The claiming agents of the claims among the events of [p_from, p_to).
CREATE OR REPLACE FUNCTION claim_agents_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, day date, agent_id text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT DISTINCT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date, a.agent_id
      FROM work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id
     WHERE e.event_type = 'claimed' AND (p_fleet IS NULL OR e.fleet = p_fleet)
       AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to);
END
$$;

-- The attempts that ended unstarted by the events of [p_from, p_to) (once
-- ended, an attempt never starts: the set only grows).
CREATE OR REPLACE FUNCTION never_started_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (attempt_id uuid, fleet text, started_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT a.id, a.fleet, a.started_at
      FROM ledger_attempt_folds(p_fleet, p_from, p_to) f JOIN work_unit_attempts a ON a.id = f.attempt_id
     GROUP BY a.id, a.fleet, a.started_at
    HAVING sum(f.sign * (f.ended AND NOT f.started)::int) > 0
$$;

-- claim_days' tail, with the claiming agents the set does not hold yet.
CREATE OR REPLACE FUNCTION claim_days_tail(p_fleet text)
RETURNS TABLE (fleet text, day date, claims bigint, agents bigint, verified bigint, stale bigint, never_started bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT x.fleet, x.day, sum(x.claims)::bigint, sum(x.agents)::bigint, sum(x.verified)::bigint,
           sum(x.stale)::bigint, sum(x.never_started)::bigint
      FROM (SELECT d.fleet, d.day, d.claims, 0 AS agents, d.verified, d.stale, d.never_started
              FROM claim_days_delta(p_fleet, ledger_mark('claims'), NULL) d
            UNION ALL
            SELECT n.fleet, n.day, 0, 1, 0, 0, 0
              FROM claim_agents_delta(p_fleet, ledger_mark('claims'), NULL) n
             WHERE NOT EXISTS (SELECT 1 FROM claim_agents s
                                WHERE s.fleet = n.fleet AND s.day = n.day AND s.agent_id = n.agent_id)) x
     GROUP BY 1, 2
$$;

CREATE OR REPLACE FUNCTION never_started_tail(p_fleet text)
RETURNS TABLE (attempt_id uuid, fleet text, started_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT n.* FROM never_started_delta(p_fleet, ledger_mark('claims'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM never_started s WHERE s.attempt_id = n.attempt_id)
$$;

-- ---------------------------------------------------------------------------
-- agent_totals: per agent and domain, the units it attempted and the cost
-- of its attempts (whoever recorded it).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION agent_totals_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, agent_id text, domain text, units bigint, cost_cents bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH touched AS MATERIALIZED (
        SELECT DISTINCT e.unit_id FROM work_unit_events e
         WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
           AND e.event_type IN ('claimed', 'cost_recorded')),
         per_agent AS (
        SELECT t.unit_id, s.sign, x.agent_id, x.claimed, x.cost_cents
          FROM touched t
         CROSS JOIN (VALUES (1), (-1)) AS s(sign)
         CROSS JOIN LATERAL (
               SELECT a.agent_id, bool_or(e.event_type = 'claimed') AS claimed,
                      coalesce(sum(e.cost_delta_cents), 0)::bigint AS cost_cents
                 FROM work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id
                WHERE e.unit_id = t.unit_id AND e.event_type IN ('claimed', 'cost_recorded')
                  AND CASE WHEN s.sign = 1 THEN p_to IS NULL OR e.batch < p_to ELSE e.batch < p_from END
                GROUP BY a.agent_id) x)
    SELECT u.fleet, p.agent_id, u.domain, sum(p.sign * p.claimed::int)::bigint, sum(p.sign * p.cost_cents)::bigint
      FROM per_agent p JOIN work_units u ON u.id = p.unit_id
     GROUP BY 1, 2, 3
    HAVING sum(p.sign * p.claimed::int) <> 0 OR sum(p.sign * p.cost_cents) <> 0;
END
$$;

CREATE OR REPLACE FUNCTION agent_totals_tail(p_fleet text)
RETURNS TABLE (fleet text, agent_id text, domain text, units bigint, cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM agent_totals_delta(p_fleet, ledger_mark('agent_totals'), NULL)
$$;

-- ---------------------------------------------------------------------------
-- agent_latest: each agent name's latest attempt (by start, then id).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION agent_latest_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, agent_id text, started_at timestamptz, attempt_id uuid, unit_id uuid)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public, pg_temp SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT DISTINCT ON (a.fleet, a.agent_id) a.fleet, a.agent_id, a.started_at, a.id, a.unit_id
      FROM work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id
     WHERE e.event_type = 'claimed' AND (p_fleet IS NULL OR e.fleet = p_fleet)
       AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
     ORDER BY a.fleet, a.agent_id, a.started_at DESC, a.id DESC;
END
$$;

-- The tail's latest attempts that are later than the kept ones.
CREATE OR REPLACE FUNCTION agent_latest_tail(p_fleet text)
RETURNS TABLE (fleet text, agent_id text, started_at timestamptz, attempt_id uuid, unit_id uuid)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT n.* FROM agent_latest_delta(p_fleet, ledger_mark('agent_latest'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM agent_latest k
                        WHERE k.fleet = n.fleet AND k.agent_id = n.agent_id
                          AND (k.started_at, k.attempt_id) >= (n.started_at, n.attempt_id))
$$;

-- ---------------------------------------------------------------------------
-- cost_days: per UTC day a cost was recorded on a unit, grouped by the
-- unit's group now (domain, state, disposition), the units and the cost of
-- that day, each with the unit's previous day with cost (prior_day: a unit
-- counts once in a range [lo, hi) on its first day in it, prior_day < lo);
-- the same per agent of the attempts billed (agent_cost_days).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION cost_days_delta(p_fleet text, p_from bigint, p_to bigint)
RETURNS TABLE (fleet text, day date, agent_id text, domain text, state work_state, disposition disposition,
               prior_day date, units bigint, cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    -- Each touched unit's cost per day, as of each side, for the unit (agent
    -- NULL, under its group as of that side) and for each agent billed.
    WITH per_day AS (
        SELECT f.unit_id, f.sign, f.state, f.disposition, k.agent_id, x.day, sum(x.cost_cents)::bigint AS cost_cents
          FROM ledger_unit_folds(p_fleet, p_from, p_to) f
          JOIN LATERAL (
               SELECT ((e.created_at) AT TIME ZONE 'UTC')::date AS day, a.agent_id AS billed, e.cost_delta_cents AS cost_cents
                 FROM work_unit_events e LEFT JOIN work_unit_attempts a ON a.id = e.attempt_id
                WHERE e.unit_id = f.unit_id AND e.event_type = 'cost_recorded'
                  AND CASE WHEN f.sign = 1 THEN p_to IS NULL OR e.batch < p_to ELSE e.batch < p_from END) x ON true
         CROSS JOIN LATERAL (SELECT NULL::text UNION ALL SELECT x.billed WHERE x.billed IS NOT NULL) AS k(agent_id)
         GROUP BY 1, 2, 3, 4, 5, 6),
         with_prior AS (
        SELECT d.*, lag(d.day) OVER (PARTITION BY d.unit_id, d.sign, d.agent_id ORDER BY d.day) AS prior_day
          FROM per_day d)
    SELECT u.fleet, w.day, w.agent_id, u.domain, CASE WHEN w.agent_id IS NULL THEN w.state END,
           CASE WHEN w.agent_id IS NULL THEN w.disposition END, w.prior_day, sum(w.sign)::bigint,
           sum(w.sign * w.cost_cents)::bigint
      FROM with_prior w JOIN work_units u ON u.id = w.unit_id
     GROUP BY 1, 2, 3, 4, 5, 6, 7
    HAVING sum(w.sign) <> 0 OR sum(w.sign * w.cost_cents) <> 0
$$;

CREATE OR REPLACE FUNCTION cost_days_tail(p_fleet text)
RETURNS TABLE (fleet text, day date, agent_id text, domain text, state work_state, disposition disposition,
               prior_day date, units bigint, cost_cents bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
    SELECT * FROM cost_days_delta(p_fleet, ledger_mark('cost_days'), NULL)
$$;

-- ---------------------------------------------------------------------------
-- Folding: each projection's step writes the delta of [p_from, p_to) into
-- its tables (run by ledger_project and ledger_project_rebuild, as the
-- tables' owner).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION unit_totals_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT * FROM unit_totals_delta(NULL, p_from, p_to);
END
$$;

CREATE OR REPLACE FUNCTION events_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, agent_id, events) SELECT * FROM event_totals_delta(NULL, p_from, p_to);
    INSERT INTO event_days (fleet, day, event_type, events) SELECT * FROM event_days_delta(NULL, p_from, p_to);
END
$$;

-- The disposal days, summed by week and over the domains too; the agent
-- sets and their counts; and the kept cycle time of an ended week a
-- disposal lands in, opened again.
CREATE OR REPLACE FUNCTION disposals_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    delta disposal_days[];
BEGIN
    SELECT array_agg(ROW(d.fleet, d.day, d.domain, d.disposition, d.units, d.cost_cents, d.reworked, d.verified_units,
                         d.verified_cost_cents, false)::disposal_days)
      INTO delta FROM disposal_days_delta(NULL, p_from, p_to) d;
    INSERT INTO disposal_days SELECT * FROM unnest(delta);
    INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                verified_cost_cents)
    SELECT d.fleet, date_trunc('week', (d.day)::timestamp)::date, d.domain, d.disposition, sum(d.units),
           sum(d.cost_cents), sum(d.reworked), sum(d.verified_units), sum(d.verified_cost_cents)
      FROM unnest(delta) d GROUP BY 1, 2, 3, 4;
    INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                     verified_cost_cents)
    SELECT d.fleet, d.day, d.disposition, sum(d.units), sum(d.cost_cents), sum(d.reworked), sum(d.verified_units),
           sum(d.verified_cost_cents)
      FROM unnest(delta) d GROUP BY 1, 2, 3;
    PERFORM cycle_week_reopened(d.fleet, min(date_trunc('week', (d.day)::timestamp)::date))
       FROM unnest(delta) d WHERE ledger_in_ended_week((d.day)::timestamp AT TIME ZONE 'UTC') GROUP BY d.fleet;
    WITH fresh AS (
        INSERT INTO disposal_agents (fleet, week, start, domain, disposition, agent_id)
        SELECT * FROM disposal_agents_delta(NULL, p_from, p_to)
        ON CONFLICT DO NOTHING
        RETURNING fleet, week, start, domain, disposition)
    INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
    SELECT fleet, week, start, domain, disposition, count(*) FROM fresh GROUP BY 1, 2, 3, 4, 5;
END
$$;

CREATE OR REPLACE FUNCTION claims_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
    SELECT d.fleet, d.day, d.claims, 0, d.verified, d.stale, d.never_started FROM claim_days_delta(NULL, p_from, p_to) d;
    WITH fresh AS (
        INSERT INTO claim_agents (fleet, day, agent_id) SELECT * FROM claim_agents_delta(NULL, p_from, p_to)
        ON CONFLICT DO NOTHING
        RETURNING fleet, day)
    INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
    SELECT fleet, day, 0, count(*), 0, 0, 0 FROM fresh GROUP BY 1, 2;
    INSERT INTO never_started (attempt_id, fleet, started_at) SELECT * FROM never_started_delta(NULL, p_from, p_to)
    ON CONFLICT DO NOTHING;
END
$$;

CREATE OR REPLACE FUNCTION agent_totals_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents) SELECT * FROM agent_totals_delta(NULL, p_from, p_to);
END
$$;

CREATE OR REPLACE FUNCTION agent_latest_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO agent_latest AS k (fleet, agent_id, started_at, attempt_id, unit_id)
    SELECT * FROM agent_latest_delta(NULL, p_from, p_to)
    ON CONFLICT (fleet, agent_id) DO UPDATE
       SET started_at = excluded.started_at, attempt_id = excluded.attempt_id, unit_id = excluded.unit_id
     WHERE (excluded.started_at, excluded.attempt_id) > (k.started_at, k.attempt_id);
END
$$;

CREATE OR REPLACE FUNCTION cost_days_fold(p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    WITH d AS MATERIALIZED (SELECT * FROM cost_days_delta(NULL, p_from, p_to)),
         units AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents)
             SELECT d.fleet, d.day, d.domain, d.state, d.disposition, d.prior_day, d.units, d.cost_cents
               FROM d WHERE d.agent_id IS NULL)
    INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents)
    SELECT d.fleet, d.day, d.agent_id, d.domain, d.prior_day, d.units, d.cost_cents FROM d WHERE d.agent_id IS NOT NULL;
END
$$;

-- ---------------------------------------------------------------------------
-- The projections, each with its tables and the functions that define it:
-- its version is the checksum of their definitions, so a changed definition
-- is rebuilt from the log by the next `migrate`.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION ledger_projections()
RETURNS TABLE (name text, tables text[], functions text[])
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, public, pg_temp AS $$
    VALUES ('unit_totals', ARRAY['unit_totals'], ARRAY['ledger_unit_folds', 'unit_totals_delta', 'unit_totals_fold']),
           ('events', ARRAY['event_totals', 'event_days'], ARRAY['event_totals_delta', 'event_days_delta', 'events_fold']),
           ('disposals',
            ARRAY['disposal_days', 'disposal_weeks', 'disposal_fleet_days', 'disposal_agents', 'disposal_agent_counts',
                  'cycle_weeks', 'cycle_weeks_until'],
            ARRAY['ledger_unit_folds', 'disposal_days_delta', 'disposal_agents_delta', 'disposals_fold']),
           ('claims', ARRAY['claim_days', 'claim_agents', 'never_started'],
            ARRAY['ledger_attempt_folds', 'claim_days_delta', 'claim_agents_delta', 'never_started_delta', 'claims_fold']),
           ('agent_totals', ARRAY['agent_totals'], ARRAY['agent_totals_delta', 'agent_totals_fold']),
           ('agent_latest', ARRAY['agent_latest'], ARRAY['agent_latest_delta', 'agent_latest_fold']),
           ('cost_days', ARRAY['cost_days', 'agent_cost_days'], ARRAY['ledger_unit_folds', 'cost_days_delta', 'cost_days_fold'])
$$;

CREATE OR REPLACE FUNCTION ledger_projection_version(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT md5(string_agg(pg_get_functiondef(f::regproc), '' ORDER BY f))
      FROM ledger_projections() p CROSS JOIN unnest(p.functions) AS f WHERE p.name = p_name
$$;

-- One step of the projector for projection p_name: folds the events of
-- batches [mark, W) into its tables, at most about p_max_events of them
-- (whole batches), and moves the mark, in the caller's transaction. W is
-- the live-delivery watermark: every batch below it has
-- committed and no transaction still in flight can write below it. NULL
-- when another replica holds the projection (its mark's row) right now.
-- The events it folded.
CREATE OR REPLACE FUNCTION ledger_project(p_name text, p_max_events integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    m bigint;
    w bigint;
    upto bigint;
    folded bigint;
BEGIN
    SELECT p.mark INTO m FROM projection_marks p WHERE p.name = p_name FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    w := live_delivery_watermark();
    -- Whole batches: up to the batch of the event after the first
    -- p_max_events, and at least the first batch however large it is.
    SELECT e.batch INTO upto FROM work_unit_events e
     WHERE e.batch >= m AND e.batch < w ORDER BY e.batch OFFSET greatest(p_max_events, 1) LIMIT 1;
    upto := least(w, greatest(coalesce(upto, w),
                              (SELECT min(e.batch) + 1 FROM work_unit_events e WHERE e.batch >= m AND e.batch < w)));
    IF upto IS NULL OR upto <= m THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT %I($1, $2)', p_name || '_fold') USING m, upto;
    SELECT count(*) INTO folded FROM work_unit_events e WHERE e.batch >= m AND e.batch < upto;
    UPDATE projection_marks p
       SET mark = upto, folded_events = p.folded_events + folded, folded_at = clock_timestamp()
     WHERE p.name = p_name;
    RETURN folded;
END
$$;
COMMENT ON FUNCTION ledger_project(text,integer) IS 'callers: app';

-- Projection p_name rebuilt from the whole log: its tables emptied and
-- every event below the watermark folded, its version recorded; waits for
-- a replica's step that holds it. The events it folded.
CREATE OR REPLACE FUNCTION ledger_project_rebuild(p_name text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    w bigint;
    t text;
    folded bigint;
BEGIN
    INSERT INTO projection_marks (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    PERFORM 1 FROM projection_marks p WHERE p.name = p_name FOR UPDATE;
    w := live_delivery_watermark();
    FOR t IN SELECT unnest(p.tables) FROM ledger_projections() p WHERE p.name = p_name LOOP
        EXECUTE format('DELETE FROM %I', t);
    END LOOP;
    EXECUTE format('SELECT %I($1, $2)', p_name || '_fold') USING 0::bigint, w;
    SELECT count(*) INTO folded FROM work_unit_events e WHERE e.batch < w;
    UPDATE projection_marks p
       SET mark = w, folded_events = folded, folded_at = clock_timestamp(), version = ledger_projection_version(p_name)
     WHERE p.name = p_name;
    RETURN folded;
END
$$;
COMMENT ON FUNCTION ledger_project_rebuild(text) IS 'callers: owner';

-- Projection p_name emptied and its mark moved back to the start, its
-- version recorded: `work-ledger projections rebuild` then folds the log
-- again in steps (ledger_project), reads adding what is not folded yet.
CREATE OR REPLACE FUNCTION ledger_project_reset(p_name text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    t text;
BEGIN
    INSERT INTO projection_marks (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    PERFORM 1 FROM projection_marks p WHERE p.name = p_name FOR UPDATE;
    FOR t IN SELECT unnest(p.tables) FROM ledger_projections() p WHERE p.name = p_name LOOP
        EXECUTE format('DELETE FROM %I', t);
    END LOOP;
    UPDATE projection_marks p SET mark = 0, folded_events = 0, folded_at = clock_timestamp(),
                                  version = ledger_projection_version(p_name)
     WHERE p.name = p_name;
END
$$;
COMMENT ON FUNCTION ledger_project_reset(text) IS 'callers: owner';

-- Every projection whose definition changed since it was built (or that
-- was never built), rebuilt: what `migrate` runs after the repeatable files.
CREATE OR REPLACE FUNCTION ledger_project_outdated() RETURNS TABLE (name text, folded bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p text;
BEGIN
    FOR p IN SELECT r.name FROM ledger_projections() r LEFT JOIN projection_marks m ON m.name = r.name
              WHERE m.version IS DISTINCT FROM ledger_projection_version(r.name) ORDER BY r.name LOOP
        RETURN QUERY SELECT p, ledger_project_rebuild(p);
    END LOOP;
END
$$;
COMMENT ON FUNCTION ledger_project_outdated() IS 'callers: owner';

-- Where each projection stands: its mark, the events past it (the tail a
-- read adds), how old the oldest of them is, and whether its definition is
-- the one it was built with.
CREATE OR REPLACE FUNCTION ledger_projections_status()
RETURNS TABLE (name text, mark bigint, behind bigint, lag_seconds double precision, folded_events bigint,
               folded_at timestamptz, current boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT r.name, coalesce(m.mark, 0),
           (SELECT count(*) FROM work_unit_events e WHERE e.batch >= coalesce(m.mark, 0)),
           coalesce(extract(epoch FROM clock_timestamp() - (SELECT min(e.created_at) FROM work_unit_events e
                                                              WHERE e.batch >= coalesce(m.mark, 0)))::float8, 0),
           coalesce(m.folded_events, 0), m.folded_at,
           m.version IS NOT DISTINCT FROM ledger_projection_version(r.name)
      FROM ledger_projections() r LEFT JOIN projection_marks m ON m.name = r.name
     ORDER BY r.name
$$;
COMMENT ON FUNCTION ledger_projections_status() IS 'callers: app';

-- The audit's check of projection p_name (src/operator/audit.rs): its
-- tables plus its tail, against the delta of the whole log, for p_fleet
-- (NULL: every fleet), in the caller's snapshot. One row per group that
-- differs.
CREATE OR REPLACE FUNCTION ledger_projection_drift(p_name text, p_fleet text)
RETURNS TABLE (projection text, fleet text, expected text, found text)
LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT * FROM (

    SELECT 'unit_totals', x.fleet, format('%s units, %s cents', -sum(x.u) FILTER (WHERE x.whole), -sum(x.c) FILTER (WHERE x.whole)),
           format('%s units, %s cents in (%s, %s, %s, %s)', sum(x.u) FILTER (WHERE NOT x.whole),
                  sum(x.c) FILTER (WHERE NOT x.whole), x.domain, x.state, x.disposition, x.reworked)
      FROM (SELECT t.fleet, t.domain, t.state, t.disposition, t.reworked, t.units AS u, t.cost_cents AS c, false AS whole
              FROM unit_totals_now(p_fleet) t
            UNION ALL SELECT d.fleet, d.domain, d.state, d.disposition, d.reworked, -d.units, -d.cost_cents, true
              FROM unit_totals_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.domain, x.state, x.disposition, x.reworked HAVING sum(x.u) <> 0 OR sum(x.c) <> 0
    ) AS unit_totals_drift WHERE p_name = 'unit_totals'
    UNION ALL
    SELECT * FROM (
    SELECT 'events', x.fleet, format('%s events', -sum(x.n) FILTER (WHERE x.whole)),
           format('%s %s events of %s', sum(x.n) FILTER (WHERE NOT x.whole), x.event_type, coalesce(x.agent_id, x.day::text))
      FROM (SELECT t.fleet, t.event_type, t.agent_id, NULL::date AS day, t.events AS n, false AS whole FROM event_totals t
             WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.event_type, t.agent_id, NULL, t.events, false FROM event_totals_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.event_type, d.agent_id, NULL, -d.events, true FROM event_totals_delta(p_fleet, 0, NULL) d
            UNION ALL SELECT t.fleet, t.event_type, NULL, t.day, t.events, false FROM event_days t
             WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.event_type, NULL, t.day, t.events, false FROM event_days_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.event_type, NULL, d.day, -d.events, true FROM event_days_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.event_type, x.agent_id, x.day HAVING sum(x.n) <> 0
    ) AS events_drift WHERE p_name = 'events'
    UNION ALL
    SELECT * FROM (
    SELECT 'disposals', x.fleet, format('%s', -sum(x.u) FILTER (WHERE x.whole)),
           format('%s units (cost %s, reworked %s, verified %s) on %s of %s %s', sum(x.u) FILTER (WHERE NOT x.whole),
                  sum(x.c), sum(x.r), sum(x.v), x.day, x.domain, x.disposition)
      FROM (SELECT t.fleet, t.day, t.domain, t.disposition, t.units AS u, t.cost_cents AS c, t.reworked AS r,
                   t.verified_units AS v, false AS whole
              FROM disposal_days t WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.day, t.domain, t.disposition, t.units, t.cost_cents, t.reworked, t.verified_units, false
              FROM disposal_days_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.day, d.domain, d.disposition, -d.units, -d.cost_cents, -d.reworked, -d.verified_units, true
              FROM disposal_days_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.day, x.domain, x.disposition
    HAVING sum(x.u) <> 0 OR sum(x.c) <> 0 OR sum(x.r) <> 0 OR sum(x.v) <> 0
    ) AS disposals_drift WHERE p_name = 'disposals'
    UNION ALL
    -- The weeks and the days of every domain together, summed from the same days.
    SELECT 'disposals', x.fleet, format('%s units, %s cents', -sum(x.u) FILTER (WHERE x.whole), -sum(x.c) FILTER (WHERE x.whole)),
           format('%s units, %s cents, %s reworked, %s verified in %s of %s %s', sum(x.u) FILTER (WHERE NOT x.whole),
                  sum(x.c) FILTER (WHERE NOT x.whole), sum(x.r) FILTER (WHERE NOT x.whole),
                  sum(x.v) FILTER (WHERE NOT x.whole), x.kind, x.start, x.disposition)
      FROM (SELECT 'disposal_weeks' AS kind, t.fleet, t.week AS start, t.domain, t.disposition, t.units AS u,
                   t.cost_cents AS c, t.reworked AS r, t.verified_units AS v, false AS whole
              FROM disposal_weeks t WHERE p_name = 'disposals' AND (p_fleet IS NULL OR t.fleet = p_fleet)
            UNION ALL
            SELECT 'disposal_fleet_days', t.fleet, t.day, NULL, t.disposition, t.units, t.cost_cents, t.reworked,
                   t.verified_units, false
              FROM disposal_fleet_days t WHERE p_name = 'disposals' AND (p_fleet IS NULL OR t.fleet = p_fleet)
            UNION ALL
            SELECT k.kind, d.fleet, CASE WHEN k.kind = 'disposal_weeks' THEN date_trunc('week', d.day::timestamp)::date ELSE d.day END,
                   CASE WHEN k.kind = 'disposal_weeks' THEN d.domain END, d.disposition,
                   CASE WHEN d.whole THEN -d.units ELSE d.units END, CASE WHEN d.whole THEN -d.cost_cents ELSE d.cost_cents END,
                   CASE WHEN d.whole THEN -d.reworked ELSE d.reworked END,
                   CASE WHEN d.whole THEN -d.verified_units ELSE d.verified_units END, d.whole
              FROM (SELECT t.*, false AS whole FROM disposal_days_tail(p_fleet) t WHERE p_name = 'disposals'
                    UNION ALL SELECT t.*, true FROM disposal_days_delta(p_fleet, 0, NULL) t WHERE p_name = 'disposals') d
             CROSS JOIN (VALUES ('disposal_weeks'), ('disposal_fleet_days')) AS k(kind)) x
     GROUP BY x.kind, x.fleet, x.start, x.domain, x.disposition
    HAVING sum(x.u) <> 0 OR sum(x.c) <> 0 OR sum(x.r) <> 0 OR sum(x.v) <> 0
    UNION ALL
    -- The distinct agents of each day's and week's disposals.
    SELECT 'disposals', x.fleet, format('%s agents', -sum(x.n) FILTER (WHERE x.whole)),
           format('%s agents in disposal_agent_counts for %s %s of %s %s', sum(x.n) FILTER (WHERE NOT x.whole),
                  CASE WHEN x.week THEN 'week' ELSE 'day' END, x.start, nullif(x.domain, ''), x.disposition)
      FROM (SELECT t.fleet, t.week, t.start, t.domain, t.disposition, t.agents AS n, false AS whole
              FROM disposal_agent_counts t WHERE p_name = 'disposals' AND (p_fleet IS NULL OR t.fleet = p_fleet)
            UNION ALL
            SELECT t.fleet, t.week, t.start, t.domain, t.disposition, 1, false FROM disposal_agents_tail(p_fleet) t
             WHERE p_name = 'disposals'
            UNION ALL
            SELECT t.fleet, t.week, t.start, t.domain, t.disposition, -1, true FROM disposal_agents_delta(p_fleet, 0, NULL) t
             WHERE p_name = 'disposals') x
     GROUP BY x.fleet, x.week, x.start, x.domain, x.disposition HAVING sum(x.n) <> 0
    UNION ALL
    SELECT * FROM (
    SELECT 'claims', x.fleet, format('%s claims, %s verified, %s stale, %s never started', -sum(x.c) FILTER (WHERE x.whole),
                                     -sum(x.v) FILTER (WHERE x.whole), -sum(x.s) FILTER (WHERE x.whole),
                                     -sum(x.n) FILTER (WHERE x.whole)),
           format('%s, %s, %s, %s on %s', sum(x.c) FILTER (WHERE NOT x.whole), sum(x.v) FILTER (WHERE NOT x.whole),
                  sum(x.s) FILTER (WHERE NOT x.whole), sum(x.n) FILTER (WHERE NOT x.whole), x.day)
      FROM (SELECT t.fleet, t.day, t.claims AS c, t.verified AS v, t.stale AS s, t.never_started AS n, false AS whole
              FROM claim_days t WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.day, t.claims, t.verified, t.stale, t.never_started, false FROM claim_days_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.day, -d.claims, -d.verified, -d.stale, -d.never_started, true
              FROM claim_days_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.day HAVING sum(x.c) <> 0 OR sum(x.v) <> 0 OR sum(x.s) <> 0 OR sum(x.n) <> 0
    ) AS claims_drift WHERE p_name = 'claims'
    UNION ALL
    -- The distinct claiming agents per day.
    SELECT 'claims', x.fleet, format('%s agents', -sum(x.n) FILTER (WHERE x.whole)),
           format('%s agents on %s', sum(x.n) FILTER (WHERE NOT x.whole), x.day)
      FROM (SELECT t.fleet, t.day, t.agents AS n, false AS whole FROM claim_days t
             WHERE p_name = 'claims' AND (p_fleet IS NULL OR t.fleet = p_fleet)
            UNION ALL SELECT t.fleet, t.day, t.agents, false FROM claim_days_tail(p_fleet) t WHERE p_name = 'claims'
            UNION ALL SELECT d.fleet, d.day, -1, true FROM claim_agents_delta(p_fleet, 0, NULL) d WHERE p_name = 'claims') x
     GROUP BY x.fleet, x.day HAVING sum(x.n) <> 0
    UNION ALL
    -- The attempts that ended unstarted, one by one.
    SELECT 'claims', coalesce(k.fleet, d.fleet), CASE WHEN d.attempt_id IS NULL THEN 'not in never_started' ELSE 'in never_started' END,
           'attempt ' || coalesce(k.attempt_id, d.attempt_id)
               || CASE WHEN k.attempt_id IS NULL THEN ' not in never_started' ELSE ' in never_started' END
      FROM (SELECT t.attempt_id, t.fleet FROM never_started t WHERE p_name = 'claims' AND (p_fleet IS NULL OR t.fleet = p_fleet)
            UNION ALL SELECT t.attempt_id, t.fleet FROM never_started_tail(p_fleet) t WHERE p_name = 'claims') k
      FULL JOIN (SELECT * FROM never_started_delta(p_fleet, 0, NULL) WHERE p_name = 'claims') d ON d.attempt_id = k.attempt_id
     WHERE k.attempt_id IS NULL OR d.attempt_id IS NULL
    UNION ALL
    SELECT * FROM (
    SELECT 'agent_totals', x.fleet, format('%s units, %s cents', -sum(x.u) FILTER (WHERE x.whole), -sum(x.c) FILTER (WHERE x.whole)),
           format('%s units, %s cents for %s in %s', sum(x.u) FILTER (WHERE NOT x.whole), sum(x.c) FILTER (WHERE NOT x.whole),
                  x.agent_id, x.domain)
      FROM (SELECT t.fleet, t.agent_id, t.domain, t.units AS u, t.cost_cents AS c, false AS whole FROM agent_totals t
             WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.agent_id, t.domain, t.units, t.cost_cents, false FROM agent_totals_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.agent_id, d.domain, -d.units, -d.cost_cents, true FROM agent_totals_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.agent_id, x.domain HAVING sum(x.u) <> 0 OR sum(x.c) <> 0
    ) AS agent_totals_drift WHERE p_name = 'agent_totals'
    UNION ALL
    SELECT * FROM (
    SELECT 'agent_latest', coalesce(k.fleet, d.fleet), coalesce(d.agent_id || ' attempt ' || d.attempt_id, 'no attempt'),
           coalesce(k.agent_id || ' attempt ' || k.attempt_id, 'no attempt')
      FROM (SELECT DISTINCT ON (x.fleet, x.agent_id) x.*
              FROM (SELECT t.* FROM agent_latest t WHERE p_fleet IS NULL OR t.fleet = p_fleet
                    UNION ALL SELECT * FROM agent_latest_tail(p_fleet)) x
             ORDER BY x.fleet, x.agent_id, x.started_at DESC, x.attempt_id DESC) k
      FULL JOIN agent_latest_delta(p_fleet, 0, NULL) d ON d.fleet = k.fleet AND d.agent_id = k.agent_id
     WHERE k.attempt_id IS DISTINCT FROM d.attempt_id
    ) AS agent_latest_drift WHERE p_name = 'agent_latest'
    UNION ALL
    SELECT * FROM (
    SELECT 'cost_days', x.fleet, format('%s units, %s cents', -sum(x.u) FILTER (WHERE x.whole), -sum(x.c) FILTER (WHERE x.whole)),
           format('%s units, %s cents on %s (prior %s) for %s', sum(x.u) FILTER (WHERE NOT x.whole),
                  sum(x.c) FILTER (WHERE NOT x.whole), x.day, x.prior_day, coalesce(x.agent_id, x.domain || ' ' || x.state))
      FROM (SELECT t.fleet, t.day, NULL::text AS agent_id, t.domain, t.state, t.disposition, t.prior_day, t.units AS u,
                   t.cost_cents AS c, false AS whole
              FROM cost_days t WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.day, t.agent_id, t.domain, NULL, NULL, t.prior_day, t.units, t.cost_cents, false
              FROM agent_cost_days t WHERE p_fleet IS NULL OR t.fleet = p_fleet
            UNION ALL SELECT t.fleet, t.day, t.agent_id, t.domain, t.state, t.disposition, t.prior_day, t.units, t.cost_cents, false
              FROM cost_days_tail(p_fleet) t
            UNION ALL SELECT d.fleet, d.day, d.agent_id, d.domain, d.state, d.disposition, d.prior_day, -d.units, -d.cost_cents, true
              FROM cost_days_delta(p_fleet, 0, NULL) d) x
     GROUP BY x.fleet, x.day, x.agent_id, x.domain, x.state, x.disposition, x.prior_day HAVING sum(x.u) <> 0 OR sum(x.c) <> 0
    ) AS cost_days_drift WHERE p_name = 'cost_days'
$$;
