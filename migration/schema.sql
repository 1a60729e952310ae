CREATE TYPE public.attempt_outcome AS ENUM (
    'verified',
    'blocked',
    'failed',
    'abandoned',
    'superseded'
);

CREATE TYPE public.disposition AS ENUM (
    'MIGRATED',
    'DROPPED',
    'DEFERRED',
    'DEAD'
);

CREATE TYPE public.event_type AS ENUM (
    'registered',
    'claimed',
    'heartbeat',
    'transitioned',
    'blocked',
    'unblocked',
    'cost_recorded',
    'disposed',
    'released',
    'stale_reclaimed',
    'stalled'
);

CREATE TYPE public.question_status AS ENUM (
    'open',
    'answered',
    'cancelled'
);

CREATE TYPE public.work_state AS ENUM (
    'ready',
    'claimed',
    'in_progress',
    'blocked',
    'verified',
    'done',
    'abandoned'
);

CREATE FUNCTION public.agent_latest_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, agent_id text, started_at timestamp with time zone, attempt_id uuid, unit_id uuid)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
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

CREATE FUNCTION public.agent_latest_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO agent_latest AS k (fleet, agent_id, started_at, attempt_id, unit_id)
    SELECT * FROM agent_latest_delta(NULL, p_from, p_to)
    ON CONFLICT (fleet, agent_id) DO UPDATE
       SET started_at = excluded.started_at, attempt_id = excluded.attempt_id, unit_id = excluded.unit_id
     WHERE (excluded.started_at, excluded.attempt_id) > (k.started_at, k.attempt_id);
END
$$;

CREATE FUNCTION public.agent_latest_tail(p_fleet text) RETURNS TABLE(fleet text, agent_id text, started_at timestamp with time zone, attempt_id uuid, unit_id uuid)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT n.* FROM agent_latest_delta(p_fleet, ledger_mark('agent_latest'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM agent_latest k
                        WHERE k.fleet = n.fleet AND k.agent_id = n.agent_id
                          AND (k.started_at, k.attempt_id) >= (n.started_at, n.attempt_id))
$$;

CREATE FUNCTION public.agent_tokens() RETURNS TABLE(fleet text, name text, tokens bigint, live_tokens bigint, claim_tokens bigint, last_used_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.agent_tokens() IS 'callers: app, reader';

CREATE FUNCTION public.agent_totals_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, agent_id text, domain text, units bigint, cost_cents bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
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

CREATE FUNCTION public.agent_totals_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents) SELECT * FROM agent_totals_delta(NULL, p_from, p_to);
END
$$;

CREATE FUNCTION public.agent_totals_tail(p_fleet text) RETURNS TABLE(fleet text, agent_id text, domain text, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM agent_totals_delta(p_fleet, ledger_mark('agent_totals'), NULL)
$$;

CREATE FUNCTION public.api_tokens_notify_revoked() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('work_ledger_tokens', '');
    RETURN NULL;
END
$$;

CREATE FUNCTION public.authenticate_token(p_hash bytea) RETURNS TABLE(token_id uuid, fleet text, name text, permissions text[], expires_at timestamp with time zone, expires_in double precision, expired boolean, touch_due boolean)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT t.id, t.fleet, t.name, t.permissions, t.expires_at,
           extract(epoch FROM t.expires_at - now())::double precision,
           coalesce(t.expires_at <= now(), false),
           t.last_used_at IS NULL OR t.last_used_at < now() - interval '60 seconds'
      FROM api_tokens t
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
$$;

COMMENT ON FUNCTION public.authenticate_token(p_hash bytea) IS 'callers: app';

CREATE FUNCTION public.blocking_questions_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF (NEW.id, NEW.fleet, NEW.unit_id, NEW.attempt_id, NEW.question, NEW.asked_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.fleet, OLD.unit_id, OLD.attempt_id, OLD.question, OLD.asked_by, OLD.created_at) THEN
        RAISE EXCEPTION 'question identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'blocking_questions_identity_immutable';
    END IF;
    IF OLD.status <> 'open' AND (NEW.status, NEW.answer, NEW.answered_by, NEW.answered_at, NEW.cancelled_at,
       NEW.assignee_group) IS DISTINCT FROM (OLD.status, OLD.answer, OLD.answered_by, OLD.answered_at,
       OLD.cancelled_at, OLD.assignee_group) THEN
        RAISE EXCEPTION 'question % is % and cannot change', OLD.id, OLD.status USING ERRCODE = 'WL012',
            CONSTRAINT = 'blocking_questions_closed_immutable';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.claim_agents_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, day date, agent_id text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT DISTINCT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date, a.agent_id
      FROM work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id
     WHERE e.event_type = 'claimed' AND (p_fleet IS NULL OR e.fleet = p_fleet)
       AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to);
END
$$;

CREATE FUNCTION public.claim_days_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, day date, claims bigint, verified bigint, stale bigint, never_started bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT a.fleet, ((a.started_at) AT TIME ZONE 'UTC')::date, sum(f.sign * f.claimed::int)::bigint,
           sum(f.sign * f.verified::int)::bigint, sum(f.sign * f.stale::int)::bigint,
           sum(f.sign * (f.ended AND NOT f.started)::int)::bigint
      FROM ledger_attempt_folds(p_fleet, p_from, p_to) f JOIN work_unit_attempts a ON a.id = f.attempt_id
     GROUP BY 1, 2
    HAVING sum(f.sign * f.claimed::int) <> 0 OR sum(f.sign * f.verified::int) <> 0 OR sum(f.sign * f.stale::int) <> 0
        OR sum(f.sign * (f.ended AND NOT f.started)::int) <> 0
$$;

CREATE FUNCTION public.claim_days_now() RETURNS TABLE(fleet text, day date, claims bigint, agents bigint, verified bigint, stale bigint, never_started bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT c.fleet, c.day, c.claims, c.agents, c.verified, c.stale, c.never_started FROM claim_days c
    UNION ALL
    SELECT * FROM claim_days_tail(NULL)
$$;

CREATE FUNCTION public.claim_days_tail(p_fleet text) RETURNS TABLE(fleet text, day date, claims bigint, agents bigint, verified bigint, stale bigint, never_started bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
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

CREATE FUNCTION public.claims_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.cost_days_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, day date, agent_id text, domain text, state public.work_state, disposition public.disposition, prior_day date, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.cost_days_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.cost_days_tail(p_fleet text) RETURNS TABLE(fleet text, day date, agent_id text, domain text, state public.work_state, disposition public.disposition, prior_day date, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM cost_days_delta(p_fleet, ledger_mark('cost_days'), NULL)
$$;

CREATE FUNCTION public.cost_recorded_in(p_fleet text, p_agents boolean, p_from timestamp with time zone, p_until timestamp with time zone, p_domain text) RETURNS TABLE(fleet text, agent_id text, domain text, state public.work_state, disposition public.disposition, units bigint, cost_cents bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.cost_recorded_in(p_fleet text, p_agents boolean, p_from timestamp with time zone, p_until timestamp with time zone, p_domain text) IS 'callers: app';

CREATE FUNCTION public.current_fleet() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT nullif(current_setting('work_ledger.fleet', true), '')
$$;

CREATE FUNCTION public.cycle_time_by_rows(p_from timestamp with time zone, p_until timestamp with time zone) RETURNS TABLE(fleet text, week timestamp with time zone, units bigint, median_seconds double precision, p90_seconds double precision)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    lo timestamptz := coalesce(ledger_week_at_or_after(p_from), '-infinity');
    hi timestamptz := coalesce(ledger_week_at_or_after(p_until), 'infinity');
BEGIN
    RETURN QUERY
    SELECT u.fleet, date_trunc('week', u.disposed_at, 'UTC'), count(*),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at)),
           percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM u.disposed_at - u.first_claimed_at))
      FROM work_units u
     WHERE u.disposition IS NOT NULL AND u.disposed_at >= lo AND u.disposed_at < hi
       AND u.first_claimed_at IS NOT NULL
     GROUP BY 1, 2;
END
$$;

CREATE FUNCTION public.cycle_time_weekly(p_from timestamp with time zone, p_until timestamp with time zone) RETURNS TABLE(fleet text, week timestamp with time zone, units bigint, median_seconds double precision, p90_seconds double precision)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    -- The earliest mark this session sees (one fleet's under row-level security).
    mark timestamptz := (SELECT min(m.until) FROM cycle_weeks_until m)::timestamp AT TIME ZONE 'UTC';
BEGIN
    RETURN QUERY
    SELECT c.fleet, c.week::timestamp AT TIME ZONE 'UTC', c.units, c.median_seconds, c.p90_seconds
      FROM cycle_weeks c JOIN cycle_weeks_until m ON m.fleet = c.fleet AND c.week < m.until
     WHERE c.week::timestamp AT TIME ZONE 'UTC' >= coalesce(p_from, '-infinity')
       AND c.week::timestamp AT TIME ZONE 'UTC' < coalesce(p_until, 'infinity')
    UNION ALL
    SELECT r.* FROM cycle_time_by_rows(greatest(p_from, mark), p_until) r
     WHERE r.week >= coalesce((SELECT m.until FROM cycle_weeks_until m WHERE m.fleet = r.fleet)::timestamp
                              AT TIME ZONE 'UTC', '-infinity');
END
$$;

CREATE FUNCTION public.cycle_week_reopened(p_fleet text, p_week date) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    INSERT INTO cycle_weeks_until AS m (fleet, until) VALUES (p_fleet, '-infinity')
    ON CONFLICT (fleet) DO UPDATE SET until = least(m.until, p_week);
$$;

COMMENT ON FUNCTION public.cycle_week_reopened(p_fleet text, p_week date) IS 'callers: owner';

CREATE FUNCTION public.disposal_agents_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, week boolean, start date, domain text, disposition public.disposition, agent_id text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
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

CREATE FUNCTION public.disposal_agents_tail(p_fleet text) RETURNS TABLE(fleet text, week boolean, start date, domain text, disposition public.disposition, agent_id text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT n.* FROM disposal_agents_delta(p_fleet, ledger_mark('disposals'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM disposal_agents s
                        WHERE s.fleet = n.fleet AND s.week = n.week AND s.domain = n.domain AND s.start = n.start
                          AND s.disposition = n.disposition AND s.agent_id = n.agent_id)
$$;

CREATE FUNCTION public.disposal_days_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, day date, domain text, disposition public.disposition, units bigint, cost_cents bigint, reworked bigint, verified_units bigint, verified_cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.disposal_days_tail(p_fleet text) RETURNS TABLE(fleet text, day date, domain text, disposition public.disposition, units bigint, cost_cents bigint, reworked bigint, verified_units bigint, verified_cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM disposal_days_delta(p_fleet, ledger_mark('disposals'), NULL)
$$;

CREATE FUNCTION public.disposal_weeks_now() RETURNS TABLE(fleet text, week date, units bigint, cost_cents bigint, reworked bigint, verified_units bigint, verified_cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT w.fleet, w.week, w.units, w.cost_cents, w.reworked, w.verified_units, w.verified_cost_cents FROM disposal_weeks w
    UNION ALL
    SELECT d.fleet, date_trunc('week', (d.day)::timestamp)::date, d.units, d.cost_cents, d.reworked, d.verified_units,
           d.verified_cost_cents
      FROM disposal_days_tail(NULL) d
$$;

CREATE FUNCTION public.disposals_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.event_days_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, day date, event_type public.event_type, events bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.fleet, ((e.created_at) AT TIME ZONE 'UTC')::date, e.event_type, count(*) FROM work_unit_events e
     WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
     GROUP BY 1, 2, 3;
END
$$;

CREATE FUNCTION public.event_days_tail(p_fleet text) RETURNS TABLE(fleet text, day date, event_type public.event_type, events bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM event_days_delta(p_fleet, ledger_mark('events'), NULL)
$$;

CREATE FUNCTION public.event_totals_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, event_type public.event_type, agent_id text, events bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.fleet, e.event_type, e.agent_id, count(*) FROM work_unit_events e
     WHERE (p_fleet IS NULL OR e.fleet = p_fleet) AND e.batch >= p_from AND (p_to IS NULL OR e.batch < p_to)
     GROUP BY 1, 2, 3;
END
$$;

CREATE FUNCTION public.event_totals_tail(p_fleet text) RETURNS TABLE(fleet text, event_type public.event_type, agent_id text, events bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM event_totals_delta(p_fleet, ledger_mark('events'), NULL)
$$;

CREATE FUNCTION public.events_counted_in(p_fleet text, p_types text[], p_from timestamp with time zone, p_until timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.events_counted_in(p_fleet text, p_types text[], p_from timestamp with time zone, p_until timestamp with time zone) IS 'callers: app';

CREATE FUNCTION public.events_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO event_totals (fleet, event_type, agent_id, events) SELECT * FROM event_totals_delta(NULL, p_from, p_to);
    INSERT INTO event_days (fleet, day, event_type, events) SELECT * FROM event_days_delta(NULL, p_from, p_to);
END
$$;

CREATE FUNCTION public.ledger_actors(p_permissions text[], p_holds boolean) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN array_remove(ARRAY[
        CASE WHEN 'units:claim' = ANY (p_permissions) THEN 'claimant' END,
        CASE WHEN 'units:claim' = ANY (p_permissions) AND p_holds THEN 'holder' END,
        CASE WHEN 'questions:answer' = ANY (p_permissions) THEN 'answerer' END,
        CASE WHEN 'units:dispose-any' = ANY (p_permissions) THEN 'operator' END,
        CASE WHEN 'units:project' = ANY (p_permissions) AND p_holds THEN 'workflow' END], NULL);
END
$$;

CREATE FUNCTION public.ledger_admit_reader(p_role name) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), p_role);
    EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 4', p_role);
    BEGIN
        EXECUTE format('ALTER ROLE %I SET temp_file_limit = %L', p_role, '256MB');
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'cannot limit the temporary files of reader login % (only a superuser may)', p_role;
    END;
END
$$;

COMMENT ON FUNCTION public.ledger_admit_reader(p_role name) IS 'callers: owner';

CREATE FUNCTION public.ledger_are_links(p_urls text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT coalesce(bool_and(x IS NOT NULL AND public.ledger_is_link(x)), true) FROM unnest(p_urls) AS x
$$;

CREATE FUNCTION public.ledger_new_id() RETURNS uuid
    LANGUAGE plpgsql PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    -- Bytes 0-5: the milliseconds; the version nibble 4 of gen_random_uuid
    -- (0100) becomes 7 (0111) by setting bits 52 and 53.
    RETURN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send((EXTRACT(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6),
                                  52, 1), 53, 1),
                  'hex')::uuid;
END
$$;

COMMENT ON FUNCTION public.ledger_new_id() IS 'A UUID version 7: Unix milliseconds, then random bits (ids in creation order)';

CREATE TABLE public.work_units (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    external_ref text NOT NULL,
    domain text DEFAULT 'default'::text NOT NULL,
    state public.work_state DEFAULT 'ready'::public.work_state NOT NULL,
    disposition public.disposition,
    disposed_at timestamp with time zone,
    workflow_id text,
    claimed_by text,
    current_attempt_id uuid,
    lease_expires_at timestamp with time zone,
    last_heartbeat_at timestamp with time zone,
    attempt_count integer DEFAULT 0 NOT NULL,
    cost_cents bigint DEFAULT 0 NOT NULL,
    evidence_urls text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    first_claimed_at timestamp with time zone,
    CONSTRAINT work_units_attempt_count_check CHECK ((attempt_count >= 0)),
    CONSTRAINT work_units_cost_cents_check CHECK ((cost_cents >= 0)),
    CONSTRAINT work_units_disposed_at_with_disposition CHECK (((disposition IS NULL) = (disposed_at IS NULL))),
    CONSTRAINT work_units_disposition_matches_state CHECK ((((state = 'done'::public.work_state) AND (disposition = 'MIGRATED'::public.disposition)) OR ((state = 'abandoned'::public.work_state) AND (disposition = ANY (ARRAY['DROPPED'::public.disposition, 'DEFERRED'::public.disposition, 'DEAD'::public.disposition]))) OR ((state <> ALL (ARRAY['done'::public.work_state, 'abandoned'::public.work_state])) AND (disposition IS NULL)))),
    CONSTRAINT work_units_evidence_links CHECK (((cardinality(evidence_urls) = 0) OR public.ledger_are_links(evidence_urls))),
    CONSTRAINT work_units_external_ref_shape CHECK (((char_length(external_ref) >= 1) AND (char_length(external_ref) <= 256) AND (external_ref !~ '[[:cntrl:]]'::text))),
    CONSTRAINT work_units_first_claim_when_claimed CHECK (((first_claimed_at IS NULL) = (attempt_count = 0))),
    CONSTRAINT work_units_lease_only_while_working CHECK (((lease_expires_at IS NULL) OR (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state])))),
    CONSTRAINT work_units_live_claim_has_holder CHECK (((state <> ALL (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state])) OR ((claimed_by IS NOT NULL) AND (current_attempt_id IS NOT NULL) AND ((lease_expires_at IS NOT NULL) OR (workflow_id IS NOT NULL))))),
    CONSTRAINT work_units_ready_has_no_holder CHECK (((state <> 'ready'::public.work_state) OR ((claimed_by IS NULL) AND (lease_expires_at IS NULL)))),
    CONSTRAINT work_units_settled_has_evidence CHECK (((state <> ALL (ARRAY['verified'::public.work_state, 'done'::public.work_state, 'abandoned'::public.work_state])) OR (cardinality(evidence_urls) > 0)))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.01');

CREATE FUNCTION public.ledger_answer(p_result text, p_unit uuid, p_info jsonb DEFAULT '{}'::jsonb) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY SELECT p_result, (SELECT w FROM work_units w WHERE w.id = p_unit), coalesce(p_info, '{}'::jsonb);
END
$$;

CREATE FUNCTION public.ledger_attempt_folds(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(attempt_id uuid, sign integer, claimed boolean, verified boolean, stale boolean, ended boolean, started boolean)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
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

CREATE FUNCTION public.ledger_attempt_refusal(p_agent text, p_attempt uuid) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    a work_unit_attempts;
    w work_units;
BEGIN
    SELECT * INTO a FROM work_unit_attempts x WHERE x.id = p_attempt;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'attempt', 'id', p_attempt);
        RETURN;
    END IF;
    SELECT * INTO w FROM work_units u WHERE u.id = a.unit_id;
    IF a.agent_id <> p_agent THEN
        RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', coalesce(w.claimed_by, a.agent_id));
    ELSIF a.outcome = 'superseded' THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', p_attempt);
    ELSE
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
    END IF;
END
$$;

CREATE TABLE public.api_tokens (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    fleet text NOT NULL,
    name text NOT NULL,
    permissions text[] NOT NULL,
    token_hash bytea NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    revoked_at timestamp with time zone,
    expires_at timestamp with time zone,
    last_used_at timestamp with time zone,
    CONSTRAINT api_tokens_expires_after_creation CHECK ((expires_at > created_at)),
    CONSTRAINT api_tokens_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT api_tokens_known_permissions CHECK ((permissions <@ ARRAY['ledger:read'::text, 'units:register'::text, 'units:claim'::text, 'questions:answer'::text, 'units:dispose-any'::text, 'tokens:manage'::text, 'units:project'::text])),
    CONSTRAINT api_tokens_name_check CHECK (((char_length(name) >= 1) AND (char_length(name) <= 256) AND (name !~ '[[:cntrl:]]'::text))),
    CONSTRAINT api_tokens_token_hash_check CHECK ((octet_length(token_hash) = 32))
);

CREATE FUNCTION public.ledger_begin(p_token bytea, p_notify text, p_permissions text[], p_key text, p_hash text, p_unit uuid DEFAULT NULL::uuid, OUT who public.api_tokens, OUT refusal text, OUT info jsonb, OUT replayed uuid) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    first work_unit_events;
BEGIN
    SELECT t.* INTO who FROM api_tokens t WHERE t.token_hash = p_token;
    PERFORM set_config('work_ledger.fleet', coalesce(who.fleet, ''), true),
            set_config('work_ledger.notify', coalesce(p_notify, ''), true),
            set_config('work_ledger.live_batch', '', true),
            set_config('work_ledger.live_tag', '', true);
    IF who.id IS NULL OR who.revoked_at IS NOT NULL THEN
        refusal := 'UNAUTHENTICATED';
        info := jsonb_build_object('reason', 'unknown');
    ELSIF who.expires_at <= now() THEN
        refusal := 'UNAUTHENTICATED';
        info := jsonb_build_object('reason', 'expired', 'expired_at', who.expires_at);
    ELSIF NOT (who.permissions && p_permissions) THEN
        refusal := 'FORBIDDEN';
        info := jsonb_build_object('permission', p_permissions[1]);
    ELSIF p_unit IS NOT NULL AND 'units:project' = ANY (who.permissions)
          AND EXISTS (SELECT 1 FROM work_units u WHERE u.id = p_unit AND u.workflow_id IS NULL) THEN
        refusal := 'FORBIDDEN';
        info := jsonb_build_object('permission', p_permissions[1]);
    END IF;
    IF refusal IS NOT NULL THEN
        RETURN;
    ELSIF p_unit IS NOT NULL AND 'units:project' = ANY (who.permissions) THEN
        -- (A unit not in the token's fleet keeps the name: the write then finds no unit.)
        who.name := coalesce((SELECT 'workflow:' || u.workflow_id FROM work_units u WHERE u.id = p_unit), who.name);
    END IF;
    IF p_key IS NOT NULL AND (p_hash IS NULL OR NOT ledger_is_label(p_key)) THEN
        refusal := 'INVALID_INPUT';
        info := jsonb_build_object('argument', 'idempotencyKey',
                                   'rule', 'must be 1 to 256 printable characters with no invisible formatting characters');
    ELSIF p_key IS NOT NULL THEN
        SELECT e.* INTO first FROM work_unit_events e
         WHERE e.fleet = who.fleet AND e.agent_id = who.name AND e.source_event_id = p_key;
        IF first.id IS NULL THEN
            RETURN;
        ELSIF first.request_hash = p_hash THEN
            -- What the first call answered: a claim's outcome from its event.
            refusal := 'replayed';
            replayed := first.unit_id;
            info := jsonb_build_object('outcome', CASE
                WHEN first.event_type = 'claimed' AND first.from_state = ANY (ledger_from('claim')) THEN 'claimed'
                WHEN first.event_type = 'claimed' THEN 'reclaimed'
                WHEN first.event_type = 'heartbeat' THEN 'renewed'
                ELSE 'ok' END);
        ELSE
            refusal := 'IDEMPOTENCY_KEY_REUSED';
            info := jsonb_build_object('key', p_key);
        END IF;
    END IF;
END
$$;

CREATE FUNCTION public.ledger_block(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid, p_attempt uuid, p_question text, p_group text) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    w work_units;
    v_question uuid;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    IF p_question IS NULL OR NOT ledger_is_question(p_question) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'question', 'must be non-blank, at most 8000 characters, printable apart from line breaks and tabs, with no invisible formatting characters');
        RETURN;
    ELSIF p_group IS NULL OR NOT ledger_is_label(p_group) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'assigneeGroup', 'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    UPDATE work_units u SET state = ledger_to('block', u.state), lease_expires_at = NULL, updated_at = clock_timestamp()
     WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('block', '{holder}'))
       AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
    RETURNING u.* INTO w;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    INSERT INTO blocking_questions AS q (fleet, unit_id, attempt_id, question, assignee_group, asked_by)
    VALUES (w.fleet, w.id, w.current_attempt_id, p_question, p_group, v_agent) RETURNING q.id INTO v_question;
    PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'blocked', (ledger_from('block'))[1], w.state, v_agent,
                       jsonb_build_object('question_id', v_question, 'assignee_group', p_group), p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

CREATE FUNCTION public.ledger_claim(p_token bytea, p_notify text, p_key text, p_hash text, p_lease integer, p_domain text, p_unit uuid) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    held work_units;
    pick work_units;
    reclaimed boolean;
    v_attempt uuid;
    v_started timestamptz;
    w work_units;
    v_project boolean;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    v_project := 'units:project' = ANY ((b.who).permissions);
    IF v_project AND p_unit IS NULL THEN
        RETURN; -- the projection claims the units of its workflows only
    ELSIF p_lease IS NULL OR p_lease NOT BETWEEN 30 AND 86400 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'leaseSeconds', 'must be between 30 and 86400');
        RETURN;
    ELSIF p_domain IS NOT NULL AND NOT ledger_is_label(p_domain) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'domain', 'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    SELECT * INTO held FROM work_units u
     WHERE u.fleet = v_fleet AND u.claimed_by = v_agent AND u.state = ANY (ledger_held_states());
    IF held.id IS NULL THEN
        IF p_unit IS NOT NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = v_fleet AND u.id = p_unit AND (u.workflow_id IS NULL OR v_project)
               AND (u.state = ANY (ledger_from('claim'))
                    OR (u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()))
               FOR NO KEY UPDATE;
        ELSE
            pick := ledger_pick(v_fleet, v_agent, p_domain);
        END IF;
    END IF;

    IF pick.id IS NOT NULL THEN
        reclaimed := pick.state = ANY (ledger_from('reclaim'));
        IF reclaimed THEN
            UPDATE work_unit_attempts a SET outcome = 'superseded', ended_at = now() WHERE a.id = pick.current_attempt_id;
        END IF;
        INSERT INTO work_unit_attempts AS a (fleet, unit_id, attempt_no, agent_id)
        VALUES (v_fleet, pick.id, pick.attempt_count + 1, v_agent) RETURNING a.id, a.started_at INTO v_attempt, v_started;
        -- first_claimed_at (0035): attempt 1's start, kept for the cycle times.
        UPDATE work_units u
           SET state = ledger_to(CASE WHEN reclaimed THEN 'reclaim' ELSE 'claim' END, pick.state),
               claimed_by = v_agent, current_attempt_id = v_attempt,
               attempt_count = pick.attempt_count + 1,
               lease_expires_at = CASE WHEN pick.workflow_id IS NULL THEN now() + p_lease * interval '1 second' END,
               last_heartbeat_at = now(), updated_at = clock_timestamp(),
               first_claimed_at = coalesce(u.first_claimed_at, v_started)
         WHERE u.id = pick.id
        RETURNING u.* INTO w;
        IF reclaimed THEN
            PERFORM ledger_log(v_fleet, pick.id, pick.current_attempt_id, 'stale_reclaimed', pick.state, w.state,
                               v_agent, jsonb_build_object('previous_agent', pick.claimed_by,
                                                           'previous_attempt_id', pick.current_attempt_id));
        END IF;
        PERFORM ledger_log(v_fleet, w.id, v_attempt, 'claimed', pick.state, w.state, v_agent,
                           jsonb_build_object('attempt_no', w.attempt_count, 'lease_seconds', p_lease), p_key, p_hash);
        RETURN QUERY SELECT CASE WHEN reclaimed THEN 'reclaimed' ELSE 'claimed' END, w, '{}'::jsonb;
        RETURN;
    END IF;

    IF held.id IS NOT NULL AND (p_unit IS NULL OR p_unit = held.id) THEN
        IF NOT held.state = ANY (ledger_working_states()) THEN
            RETURN QUERY SELECT 'held'::text, held, '{}'::jsonb;
            RETURN;
        END IF;
        UPDATE work_units u
           SET lease_expires_at = CASE WHEN u.workflow_id IS NULL THEN now() + p_lease * interval '1 second' END,
               last_heartbeat_at = now(), updated_at = clock_timestamp()
         WHERE u.id = held.id AND u.claimed_by = v_agent AND u.state = ANY (ledger_working_states())
        RETURNING u.* INTO w;
        IF w.id IS NULL THEN
            -- A reclaim committed while this call waited for the row: the
            -- caller's attempt is gone (LEASE_LOST); anything else, run again.
            IF EXISTS (SELECT 1 FROM work_unit_attempts a WHERE a.id = held.current_attempt_id AND a.outcome = 'superseded') THEN
                RETURN QUERY SELECT * FROM ledger_answer('LEASE_LOST', held.id,
                                                         jsonb_build_object('attempt_id', held.current_attempt_id));
            ELSE
                RETURN QUERY SELECT 'RETRY'::text, NULL::work_units, '{}'::jsonb;
            END IF;
            RETURN;
        END IF;
        PERFORM ledger_log(v_fleet, w.id, w.current_attempt_id, 'heartbeat', w.state, w.state, v_agent,
                           jsonb_build_object('lease_seconds', p_lease,
                                              'via', CASE WHEN p_unit IS NULL THEN 'claimNext' ELSE 'claimUnit' END),
                           p_key, p_hash);
        RETURN QUERY SELECT 'renewed'::text, w, '{}'::jsonb;
        RETURN;
    END IF;

    IF p_unit IS NULL THEN
        RETURN; -- nothing claimable
    END IF;
    -- Why the named unit could not be claimed.
    SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
    ELSIF w.workflow_id IS NOT NULL AND NOT v_project AND NOT w.state = ANY (ledger_terminal_states()) THEN
        RETURN QUERY SELECT 'WORKFLOW_OWNED'::text, w, jsonb_build_object('workflow_id', w.workflow_id);
    ELSIF (w.state = ANY (ledger_held_states()) AND w.claimed_by IS NOT NULL
           AND NOT (w.state = ANY (ledger_working_states()) AND w.lease_expires_at < now())) THEN
        RETURN QUERY SELECT 'UNIT_ALREADY_CLAIMED'::text, w, jsonb_build_object('holder', w.claimed_by);
    ELSIF (w.state = ANY (ledger_from('claim')) OR w.state = ANY (ledger_from('reclaim'))) AND held.id IS NOT NULL THEN
        RETURN QUERY SELECT 'AGENT_BUSY'::text, w, jsonb_build_object('held_id', held.id, 'held_ref', held.external_ref);
    ELSIF w.state = ANY (ledger_from('claim')) OR w.state = ANY (ledger_from('reclaim')) THEN
        -- It became claimable after this call's pick: the service runs it again.
        RETURN QUERY SELECT 'RETRY'::text, w, '{}'::jsonb;
    ELSE
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
    END IF;
END
$$;

CREATE FUNCTION public.ledger_compact() RETURNS bigint
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT ledger_compact_totals() + ledger_compact_cost_days() + ledger_compact_event_days()
         + ledger_compact_disposal_weeks() + ledger_compact_disposal_fleet_days() + ledger_compact_cycle_weeks()
$$;

COMMENT ON FUNCTION public.ledger_compact() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_cost_days() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, domain, state, disposition, prior_day FROM cost_days WHERE NOT folded),
         gone AS (
             DELETE FROM cost_days t USING moved m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.domain = m.domain AND t.state = m.state
                AND coalesce(t.disposition::text, '') = coalesce(m.disposition::text, '')
                AND coalesce(t.prior_day, '-infinity') = coalesce(m.prior_day, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO cost_days (fleet, day, domain, state, disposition, prior_day, units, cost_cents, folded)
             SELECT fleet, day, domain, state, disposition, prior_day, sum(units), sum(cost_cents), true
               FROM gone GROUP BY 1, 2, 3, 4, 5, 6
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         moved_agents AS (SELECT DISTINCT fleet, day, agent_id, domain, prior_day FROM agent_cost_days WHERE NOT folded),
         gone_agents AS (
             DELETE FROM agent_cost_days t USING moved_agents m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.agent_id = m.agent_id AND t.domain = m.domain
                AND coalesce(t.prior_day, '-infinity') = coalesce(m.prior_day, '-infinity')
             RETURNING t.*),
         kept_agents AS (
             INSERT INTO agent_cost_days (fleet, day, agent_id, domain, prior_day, units, cost_cents, folded)
             SELECT fleet, day, agent_id, domain, prior_day, sum(units), sum(cost_cents), true
               FROM gone_agents GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_agents)
$$;

COMMENT ON FUNCTION public.ledger_compact_cost_days() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_cycle_weeks() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    ended date := date_trunc('week', (((now() - interval '1 hour') AT TIME ZONE 'UTC')::date)::timestamp)::date;
    kept bigint;
BEGIN
    -- Fleets without a mark, looked for only when a mark is due (a new
    -- fleet's weeks are read from the rows until then).
    IF NOT EXISTS (SELECT 1 FROM cycle_weeks_until) OR EXISTS (SELECT 1 FROM cycle_weeks_until WHERE until < ended) THEN
        INSERT INTO cycle_weeks_until (fleet, until)
        SELECT DISTINCT d.fleet, '-infinity'::date FROM disposal_days d
         WHERE NOT EXISTS (SELECT 1 FROM cycle_weeks_until m WHERE m.fleet = d.fleet)
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM 1 FROM cycle_weeks_until WHERE until < ended ORDER BY fleet FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH due AS (SELECT fleet, until FROM cycle_weeks_until WHERE until < ended),
         fresh AS (
             INSERT INTO cycle_weeks (fleet, week, units, median_seconds, p90_seconds)
             SELECT r.fleet, (r.week AT TIME ZONE 'UTC')::date, r.units, r.median_seconds, r.p90_seconds
               FROM cycle_time_by_rows((SELECT min(until) FROM due)::timestamp AT TIME ZONE 'UTC',
                                       ended::timestamp AT TIME ZONE 'UTC') r
               JOIN due d ON d.fleet = r.fleet AND (r.week AT TIME ZONE 'UTC')::date >= d.until
             ON CONFLICT (fleet, week) DO UPDATE SET units = excluded.units, median_seconds = excluded.median_seconds,
                                                     p90_seconds = excluded.p90_seconds
             RETURNING 1)
    SELECT count(*) INTO kept FROM fresh;
    UPDATE cycle_weeks_until SET until = ended WHERE until < ended;
    RETURN kept;
END
$$;

COMMENT ON FUNCTION public.ledger_compact_cycle_weeks() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_disposal_fleet_days() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, disposition FROM disposal_fleet_days WHERE NOT folded),
         gone AS (
             DELETE FROM disposal_fleet_days t USING moved m
              WHERE t.fleet = m.fleet AND t.disposition = m.disposition
                AND coalesce(t.day, '-infinity') = coalesce(m.day, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO disposal_fleet_days (fleet, day, disposition, units, cost_cents, reworked, verified_units,
                                              verified_cost_cents, folded)
             SELECT fleet, day, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents), true
               FROM gone GROUP BY 1, 2, 3
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;

COMMENT ON FUNCTION public.ledger_compact_disposal_fleet_days() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_disposal_weeks() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH moved AS (SELECT DISTINCT fleet, week, domain, disposition FROM disposal_weeks WHERE NOT folded),
         gone AS (
             DELETE FROM disposal_weeks t USING moved m
              WHERE t.fleet = m.fleet AND t.domain = m.domain AND t.disposition = m.disposition
                AND coalesce(t.week, '-infinity') = coalesce(m.week, '-infinity')
             RETURNING t.*),
         kept AS (
             INSERT INTO disposal_weeks (fleet, week, domain, disposition, units, cost_cents, reworked, verified_units,
                                         verified_cost_cents, folded)
             SELECT fleet, week, domain, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents), true
               FROM gone GROUP BY 1, 2, 3, 4
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;

COMMENT ON FUNCTION public.ledger_compact_disposal_weeks() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_event_days() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH moved AS (SELECT DISTINCT fleet, day, event_type FROM event_days WHERE NOT folded),
         gone AS (
             DELETE FROM event_days t USING moved m
              WHERE t.fleet = m.fleet AND t.day = m.day AND t.event_type = m.event_type
             RETURNING t.*),
         kept AS (
             INSERT INTO event_days (fleet, day, event_type, events, folded)
             SELECT fleet, day, event_type, sum(events), true FROM gone GROUP BY 1, 2, 3
             HAVING sum(events) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;

COMMENT ON FUNCTION public.ledger_compact_event_days() IS 'callers: app';

CREATE FUNCTION public.ledger_compact_totals() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH moved AS (SELECT DISTINCT fleet, domain, state, disposition, reworked FROM unit_totals WHERE NOT folded),
         gone AS (
             DELETE FROM unit_totals t USING moved m
              WHERE t.fleet = m.fleet AND t.domain = m.domain AND t.state = m.state AND t.reworked = m.reworked
                AND coalesce(t.disposition::text, '') = coalesce(m.disposition::text, '')
             RETURNING t.*),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents, folded)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents), true
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         moved_events AS (SELECT DISTINCT fleet, event_type, agent_id FROM event_totals WHERE NOT folded),
         gone_events AS (
             DELETE FROM event_totals t USING moved_events m
              WHERE t.fleet = m.fleet AND t.event_type = m.event_type AND coalesce(t.agent_id, '') = coalesce(m.agent_id, '')
             RETURNING t.*),
         kept_events AS (
             INSERT INTO event_totals (fleet, event_type, agent_id, events, folded)
             SELECT fleet, event_type, agent_id, sum(events), true FROM gone_events GROUP BY 1, 2, 3
             HAVING sum(events) <> 0
             RETURNING 1),
         moved_disposals AS (SELECT DISTINCT fleet, day, domain, disposition FROM disposal_days WHERE NOT folded),
         gone_disposals AS (
             DELETE FROM disposal_days t USING moved_disposals m
              WHERE t.fleet = m.fleet AND t.domain = m.domain AND t.disposition = m.disposition
                AND coalesce(t.day, '-infinity') = coalesce(m.day, '-infinity')
             RETURNING t.*),
         kept_disposals AS (
             INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                                        verified_cost_cents, folded)
             SELECT fleet, day, domain, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents), true
               FROM gone_disposals GROUP BY 1, 2, 3, 4
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1),
         moved_agents AS (
             SELECT DISTINCT fleet, week, start, domain, disposition FROM disposal_agent_counts WHERE NOT folded),
         gone_agents AS (
             DELETE FROM disposal_agent_counts t USING moved_agents m
              WHERE t.fleet = m.fleet AND t.week = m.week AND t.start = m.start AND t.domain = m.domain
                AND t.disposition = m.disposition
             RETURNING t.*),
         kept_agents AS (
             INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents, folded)
             SELECT fleet, week, start, domain, disposition, sum(agents), true FROM gone_agents GROUP BY 1, 2, 3, 4, 5
             HAVING sum(agents) <> 0
             RETURNING 1),
         moved_agent_totals AS (SELECT DISTINCT fleet, agent_id, domain FROM agent_totals WHERE NOT folded),
         gone_agent_totals AS (
             DELETE FROM agent_totals t USING moved_agent_totals m
              WHERE t.fleet = m.fleet AND t.agent_id = m.agent_id AND t.domain = m.domain
             RETURNING t.*),
         kept_agent_totals AS (
             INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents, folded)
             SELECT fleet, agent_id, domain, sum(units), sum(cost_cents), true FROM gone_agent_totals GROUP BY 1, 2, 3
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         moved_claims AS (SELECT DISTINCT fleet, day FROM claim_days WHERE NOT folded),
         gone_claims AS (
             DELETE FROM claim_days t USING moved_claims m WHERE t.fleet = m.fleet AND t.day = m.day
             RETURNING t.*),
         kept_claims AS (
             INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started, folded)
             SELECT fleet, day, sum(claims), sum(agents), sum(verified), sum(stale), sum(never_started), true
               FROM gone_claims GROUP BY 1, 2
             HAVING sum(claims) <> 0 OR sum(agents) <> 0 OR sum(verified) <> 0 OR sum(stale) <> 0
                 OR sum(never_started) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_events) + (SELECT count(*) FROM gone_disposals)
         + (SELECT count(*) FROM gone_agents) + (SELECT count(*) FROM gone_claims)
         + (SELECT count(*) FROM gone_agent_totals)
$$;

COMMENT ON FUNCTION public.ledger_compact_totals() IS 'callers: app';

CREATE FUNCTION public.ledger_dispose(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid, p_attempt uuid, p_disposition text, p_evidence text, p_reason text) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    v_disposition disposition;
    actors text[];
    prev work_units;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim,units:dispose-any}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    v_disposition := (SELECT d FROM unnest(enum_range(NULL::disposition)) AS d WHERE d::text = p_disposition);
    IF v_disposition IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'disposition', 'must be one of MIGRATED, DROPPED, DEFERRED, DEAD');
        RETURN;
    ELSIF p_evidence IS NOT NULL AND NOT ledger_is_evidence(p_evidence) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'evidenceUrl', 'must be an absolute http(s) URL of at most 2048 characters');
        RETURN;
    ELSIF p_reason IS NOT NULL AND NOT ledger_is_long_text(p_reason) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'reason', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    SELECT * INTO prev FROM work_units u WHERE u.id = p_unit FOR NO KEY UPDATE;
    actors := ledger_actors((b.who).permissions, prev.claimed_by = v_agent);
    IF prev.id IS NULL OR NOT prev.state = ANY (ledger_from('dispose', actors, v_disposition))
       OR (p_attempt IS NOT NULL AND prev.current_attempt_id IS DISTINCT FROM p_attempt) THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, true, 'operator' = ANY (actors));
        RETURN;
    ELSIF p_evidence IS NULL AND (v_disposition <> 'MIGRATED' OR cardinality(prev.evidence_urls) = 0) THEN
        RETURN QUERY SELECT * FROM ledger_answer('EVIDENCE_REQUIRED', p_unit, jsonb_build_object('action', 'dispose'));
        RETURN;
    END IF;
    UPDATE work_units u
       SET state = ledger_to('dispose', prev.state, v_disposition), disposition = v_disposition, disposed_at = now(),
           lease_expires_at = NULL, updated_at = clock_timestamp(),
           evidence_urls = CASE WHEN p_evidence IS NULL OR p_evidence = ANY(u.evidence_urls) THEN u.evidence_urls
                                ELSE array_append(u.evidence_urls, p_evidence) END
     WHERE u.id = prev.id
    RETURNING u.* INTO w;
    UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now()
     WHERE a.id = prev.current_attempt_id AND a.outcome IS NULL;
    UPDATE blocking_questions q SET status = 'cancelled', cancelled_at = now()
     WHERE q.unit_id = prev.id AND q.status = 'open';
    PERFORM ledger_log(w.fleet, prev.id, prev.current_attempt_id, 'disposed', prev.state, w.state, v_agent,
                       jsonb_build_object('disposition', v_disposition,
                                          'evidence_url', coalesce(p_evidence, w.evidence_urls[cardinality(w.evidence_urls)]),
                                          'reason', p_reason),
                       p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

CREATE FUNCTION public.ledger_from(p_action text, p_actors text[] DEFAULT NULL::text[], p_disposition public.disposition DEFAULT NULL::public.disposition) RETURNS public.work_state[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    actor text;
    found work_state[] := '{}';
BEGIN
    IF p_actors IS NULL THEN
        RETURN coalesce((ledger_move_sources() ->> (p_action || '>*>' || coalesce(p_disposition::text, '*')))::work_state[],
                        '{}');
    END IF;
    FOREACH actor IN ARRAY p_actors LOOP
        found := found || coalesce((ledger_move_sources()
                                    ->> (p_action || '>' || actor || '>' || coalesce(p_disposition::text, '*')))::work_state[],
                                   '{}');
    END LOOP;
    IF cardinality(p_actors) <= 1 THEN
        RETURN found;
    END IF;
    RETURN (SELECT coalesce(array_agg(DISTINCT s ORDER BY s), '{}') FROM unnest(found) AS s);
END
$$;

CREATE FUNCTION public.ledger_heartbeat(p_token bytea, p_notify text, p_attempt uuid, p_lease integer) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    IF p_lease IS NULL OR p_lease NOT BETWEEN 30 AND 86400 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, 'leaseSeconds', 'must be between 30 and 86400');
        RETURN;
    END IF;
    UPDATE work_units u SET lease_expires_at = now() + p_lease * interval '1 second', last_heartbeat_at = now(),
                            updated_at = clock_timestamp()
     WHERE u.fleet = (b.who).fleet AND u.claimed_by = (b.who).name AND u.state = ANY (ledger_working_states())
       AND u.current_attempt_id = p_attempt
    RETURNING u.* INTO w;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_attempt_refusal((b.who).name, p_attempt);
        RETURN;
    END IF;
    PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'heartbeat', w.state, w.state, w.claimed_by,
                       jsonb_build_object('lease_seconds', p_lease, 'via', 'heartbeat'));
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

CREATE FUNCTION public.ledger_held_states() RETURNS public.work_state[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN ARRAY['claimed', 'in_progress', 'blocked']::work_state[];
END
$$;

CREATE FUNCTION public.ledger_in_ended_week(p_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN ((date_trunc('week'::text, (((p_at AT TIME ZONE 'UTC'::text))::date)::timestamp without time zone))::date < (date_trunc('week'::text, (((clock_timestamp() AT TIME ZONE 'UTC'::text))::date)::timestamp without time zone))::date);

CREATE FUNCTION public.ledger_invalid(p_unit uuid, p_argument text, p_rule text) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY SELECT * FROM ledger_answer('INVALID_INPUT', p_unit,
                                             jsonb_build_object('argument', p_argument, 'rule', p_rule));
END
$$;

CREATE FUNCTION public.ledger_is_evidence(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN ledger_is_link(p) AND ledger_is_visible(p);
END
$$;

CREATE FUNCTION public.ledger_is_label(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN char_length(p) BETWEEN 1 AND 256 AND ledger_is_visible(p);
END
$$;

CREATE FUNCTION public.ledger_is_link(p_url text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT char_length(p_url) <= 2048 AND p_url ~* '^https?://[^[:space:][:cntrl:]/?#]+([/?#][^[:space:][:cntrl:]]*)?$'
$_$;

CREATE FUNCTION public.ledger_is_long_text(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
BEGIN
    RETURN char_length(p) <= 8000 AND p !~ '^[[:space:]]*$'
           AND p !~ '[\u0001-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]';
END
$_$;

CREATE FUNCTION public.ledger_is_question(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
BEGIN
    RETURN ledger_is_long_text(p)
           AND ledger_is_unformatted(translate(p, U&'\200C\200D', 'xx'))
           AND p !~ '(^|[[:space:]\u200C\u200D])[\u200C\u200D]' AND p !~ '[\u200C\u200D]($|[[:space:]])';
END
$_$;

CREATE FUNCTION public.ledger_is_unformatted(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN p !~ '[\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]';
END
$$;

CREATE FUNCTION public.ledger_is_visible(p text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN p !~ '[\u0001-\u001F\u007F-\u009F]' AND ledger_is_unformatted(p);
END
$$;

CREATE FUNCTION public.ledger_log(p_fleet text, p_unit uuid, p_attempt uuid, p_type public.event_type, p_from public.work_state, p_to public.work_state, p_agent text, p_detail jsonb, p_key text DEFAULT NULL::text, p_hash text DEFAULT NULL::text, p_cost bigint DEFAULT 0) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail,
                                  source_event_id, request_hash, cost_delta_cents)
    VALUES (p_fleet, p_unit, p_attempt, p_type, p_from, p_to, p_agent, coalesce(p_detail, '{}'::jsonb), p_key, p_hash,
            coalesce(p_cost, 0));
END
$$;

CREATE FUNCTION public.ledger_mark(p_name text) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT coalesce((SELECT m.mark FROM projection_marks m WHERE m.name = p_name), 0)
$$;

CREATE FUNCTION public.ledger_move_keys() RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT array_agg(DISTINCT m.from_state::text || '>' || m.to_state::text || '>'
                             || coalesce(m.disposition::text, ''))
              FROM ledger_moves() m);
END
$$;

CREATE FUNCTION public.ledger_move_sources() RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT jsonb_object_agg(g.k, g.states) FROM (
        SELECT m.action || '>' || CASE WHEN grouping(m.actor) = 1 THEN '*' ELSE m.actor END
               || '>' || CASE WHEN grouping(m.disposition) = 1 THEN '*' ELSE coalesce(m.disposition::text, '') END AS k,
               array_agg(DISTINCT m.from_state ORDER BY m.from_state)::text AS states
          FROM ledger_moves() m
         GROUP BY GROUPING SETS ((m.action), (m.action, m.actor), (m.action, m.disposition),
                                 (m.action, m.actor, m.disposition))) AS g);
END
$$;

CREATE FUNCTION public.ledger_move_targets() RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT jsonb_object_agg(g.k, g.states) FROM (
        SELECT m.action || '>' || m.from_state::text || '>' || coalesce(m.disposition::text, '') AS k,
               array_agg(DISTINCT m.to_state ORDER BY m.to_state)::text AS states
          FROM ledger_moves() m
         GROUP BY 1) AS g);
END
$$;

CREATE FUNCTION public.ledger_moves() RETURNS TABLE(action text, actor text, from_state public.work_state, to_state public.work_state, disposition public.disposition)
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN QUERY
    SELECT m.action, m.actor, m.from_state::work_state, m.to_state::work_state, m.disposition::disposition
      FROM (VALUES
            ('claim',   'claimant', 'ready',       'claimed',     NULL),
            ('claim',   'workflow', 'ready',       'claimed',     NULL),
            ('reclaim', 'claimant', 'claimed',     'claimed',     NULL),
            ('reclaim', 'claimant', 'in_progress', 'claimed',     NULL),
            ('start',   'holder',   'claimed',     'in_progress', NULL),
            ('verify',  'holder',   'in_progress', 'verified',    NULL),
            ('block',   'holder',   'in_progress', 'blocked',     NULL),
            ('unblock', 'answerer', 'blocked',     'in_progress', NULL),  -- its holder still holds it
            ('unblock', 'answerer', 'blocked',     'ready',       NULL),  -- its holder released it
            ('release', 'holder',   'claimed',     'ready',       NULL),
            ('release', 'holder',   'in_progress', 'ready',       NULL),
            ('release', 'holder',   'blocked',     'blocked',     NULL),
            ('dispose', 'holder',   'verified',    'done',        'MIGRATED'),
            ('dispose', 'operator', 'verified',    'done',        'MIGRATED'),
            ('dispose', 'workflow', 'verified',    'done',        'MIGRATED')) AS m(action, actor, from_state, to_state, disposition)
    UNION ALL
    -- DROPPED, DEFERRED and DEAD: by the holder while it works on the unit,
    -- by an operator from any state that is not terminal.
    SELECT 'dispose', h.actor, h.from_state::work_state, 'abandoned'::work_state, d.disposition
      FROM unnest(ARRAY['DROPPED', 'DEFERRED', 'DEAD']::disposition[]) AS d(disposition)
     CROSS JOIN (VALUES ('holder', 'in_progress'), ('holder', 'blocked'),
                        ('workflow', 'in_progress'), ('workflow', 'verified'),
                        ('operator', 'ready'), ('operator', 'claimed'), ('operator', 'in_progress'),
                        ('operator', 'blocked'), ('operator', 'verified')) AS h(actor, from_state);
END
$$;

CREATE FUNCTION public.ledger_pick(p_fleet text, p_agent text, p_domain text) RETURNS public.work_units
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    pick work_units;
BEGIN
    IF p_domain IS NULL THEN
        SELECT * INTO pick FROM work_units u
         WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()
         ORDER BY u.lease_expires_at, u.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.workflow_id IS NULL
               AND NOT (u.attempt_count > 0 AND EXISTS (
                       SELECT 1 FROM work_unit_attempts a
                        WHERE a.id = u.current_attempt_id AND a.agent_id = p_agent AND a.outcome = 'failed'))
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.workflow_id IS NULL
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
    ELSE
        SELECT * INTO pick FROM work_units u
         WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()
           AND u.domain = p_domain
         ORDER BY u.lease_expires_at, u.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.domain = p_domain
               AND u.workflow_id IS NULL
               AND NOT (u.attempt_count > 0 AND EXISTS (
                       SELECT 1 FROM work_unit_attempts a
                        WHERE a.id = u.current_attempt_id AND a.agent_id = p_agent AND a.outcome = 'failed'))
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.domain = p_domain
               AND u.workflow_id IS NULL
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
    END IF;
    RETURN pick;
END
$$;

CREATE FUNCTION public.ledger_project(p_name text, p_max_events integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION public.ledger_project(p_name text, p_max_events integer) IS 'callers: app';

CREATE FUNCTION public.ledger_project_outdated() RETURNS TABLE(name text, folded bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.ledger_project_outdated() IS 'callers: owner';

CREATE FUNCTION public.ledger_project_rebuild(p_name text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
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
$_$;

COMMENT ON FUNCTION public.ledger_project_rebuild(p_name text) IS 'callers: owner';

CREATE FUNCTION public.ledger_project_reset(p_name text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.ledger_project_reset(p_name text) IS 'callers: owner';

CREATE FUNCTION public.ledger_projection_drift(p_name text, p_fleet text) RETURNS TABLE(projection text, fleet text, expected text, found text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.ledger_projection_version(p_name text) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT md5(string_agg(pg_get_functiondef(f::regproc), '' ORDER BY f))
      FROM ledger_projections() p CROSS JOIN unnest(p.functions) AS f WHERE p.name = p_name
$$;

CREATE FUNCTION public.ledger_projections() RETURNS TABLE(name text, tables text[], functions text[])
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.ledger_projections_status() RETURNS TABLE(name text, mark bigint, behind bigint, lag_seconds double precision, folded_events bigint, folded_at timestamp with time zone, current boolean)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT r.name, coalesce(m.mark, 0),
           (SELECT count(*) FROM work_unit_events e WHERE e.batch >= coalesce(m.mark, 0)),
           coalesce(extract(epoch FROM clock_timestamp() - (SELECT min(e.created_at) FROM work_unit_events e
                                                              WHERE e.batch >= coalesce(m.mark, 0)))::float8, 0),
           coalesce(m.folded_events, 0), m.folded_at,
           m.version IS NOT DISTINCT FROM ledger_projection_version(r.name)
      FROM ledger_projections() r LEFT JOIN projection_marks m ON m.name = r.name
     ORDER BY r.name
$$;

COMMENT ON FUNCTION public.ledger_projections_status() IS 'callers: app';

CREATE FUNCTION public.ledger_question_norm(q text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN regexp_replace(btrim(regexp_replace(lower(q), '\s+'::text, ' '::text, 'g'::text)), '[[:space:][:punct:]]+$'::text, ''::text);

CREATE FUNCTION public.ledger_record_cost(p_token bytea, p_notify text, p_key text, p_hash text, p_attempt uuid, p_unit uuid, p_cents bigint) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    v_operator boolean;
    target uuid := p_attempt;
    w work_units;
    billed work_unit_attempts;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim,units:dispose-any}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    v_operator := 'operator' = ANY (ledger_actors((b.who).permissions, false));
    IF p_key IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'idempotencyKey', 'is required: a replayed cost must count once');
        RETURN;
    ELSIF p_cents IS NULL OR p_cents NOT BETWEEN 0 AND 1000000000 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'cents', 'must be between 0 and 1000000000');
        RETURN;
    ELSIF (p_attempt IS NULL) = (p_unit IS NULL) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'attemptId', 'give exactly one of attemptId and unitId');
        RETURN;
    END IF;
    IF target IS NULL THEN
        target := coalesce(
            (SELECT a.id FROM work_unit_attempts a WHERE a.unit_id = p_unit AND a.agent_id = v_agent
              ORDER BY a.attempt_no DESC LIMIT 1),
            (SELECT u.current_attempt_id FROM work_units u WHERE u.id = p_unit AND v_operator));
        IF target IS NULL THEN
            SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
            IF w.id IS NULL THEN
                RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
            ELSE
                RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', w.claimed_by);
            END IF;
            RETURN;
        END IF;
    END IF;
    SELECT * INTO w FROM work_units u
     WHERE u.id = (SELECT a.unit_id FROM work_unit_attempts a WHERE a.id = target)
       FOR NO KEY UPDATE;
    UPDATE work_unit_attempts a SET cost_cents = a.cost_cents + p_cents
     WHERE a.id = target AND (a.agent_id = v_agent OR v_operator) AND w.id IS NOT NULL
    RETURNING a.* INTO billed;
    IF billed.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_attempt_refusal(v_agent, target);
        RETURN;
    END IF;
    PERFORM ledger_log(v_fleet, billed.unit_id, billed.id, 'cost_recorded', NULL, NULL, v_agent, '{}'::jsonb,
                       p_key, p_hash, p_cents);
    RETURN QUERY SELECT * FROM ledger_answer('ok', billed.unit_id);
END
$$;

CREATE FUNCTION public.ledger_refusal(p_agent text, p_unit uuid, p_attempt uuid, p_dispose boolean, p_any boolean) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    w work_units;
    mine work_unit_attempts;
BEGIN
    SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
        RETURN;
    END IF;
    IF w.state = ANY (ledger_terminal_states()) THEN
        RETURN QUERY SELECT CASE WHEN p_dispose THEN 'DISPOSITION_IMMUTABLE' ELSE 'ILLEGAL_TRANSITION' END, w, '{}'::jsonb;
        RETURN;
    END IF;
    IF p_attempt IS NOT NULL AND w.current_attempt_id IS DISTINCT FROM p_attempt THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', p_attempt);
        RETURN;
    END IF;
    IF w.claimed_by = p_agent OR p_any THEN
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
        RETURN;
    END IF;
    SELECT * INTO mine FROM work_unit_attempts a WHERE a.unit_id = p_unit AND a.agent_id = p_agent
     ORDER BY a.attempt_no DESC LIMIT 1;
    IF FOUND AND mine.outcome = 'superseded' THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', mine.id);
        RETURN;
    END IF;
    RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', w.claimed_by);
END
$$;

CREATE FUNCTION public.ledger_register(p_token bytea, p_notify text, p_refs text[], p_domains text[], p_workflows text[]) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    bad record;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:register}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    IF coalesce(cardinality(p_refs), 0) NOT BETWEEN 1 AND 1000
       OR cardinality(p_domains) > cardinality(p_refs) OR cardinality(p_workflows) > cardinality(p_refs) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, 'units', 'must hold 1 to 1000 units per call');
        RETURN;
    END IF;
    SELECT i.ord, CASE WHEN i.external_ref IS NULL OR NOT ledger_is_label(i.external_ref) THEN 'externalRef'
                       WHEN nullif(i.domain, '') IS NOT NULL AND NOT ledger_is_label(i.domain) THEN 'domain'
                       ELSE 'workflowId' END AS argument
      INTO bad
      FROM unnest(p_refs, p_domains, p_workflows) WITH ORDINALITY AS i(external_ref, domain, workflow_id, ord)
     WHERE i.ord <= cardinality(p_refs)
       AND (i.external_ref IS NULL OR NOT ledger_is_label(i.external_ref)
            OR (nullif(i.domain, '') IS NOT NULL AND NOT ledger_is_label(i.domain))
            OR (nullif(i.workflow_id, '') IS NOT NULL AND NOT ledger_is_label(i.workflow_id)))
     ORDER BY i.ord LIMIT 1;
    IF bad.ord IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, format('units[%s].%s', bad.ord - 1, bad.argument),
                                                  'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    WITH input AS (
         SELECT DISTINCT ON (i.external_ref) i.external_ref, coalesce(nullif(i.domain, ''), 'default') AS domain,
                nullif(i.workflow_id, '') AS workflow_id
           FROM unnest(p_refs, p_domains, p_workflows) WITH ORDINALITY AS i(external_ref, domain, workflow_id, ord)
          WHERE i.ord <= cardinality(p_refs)
          ORDER BY i.external_ref, i.ord
     ), ins AS (
         INSERT INTO work_units AS u (fleet, external_ref, domain, workflow_id)
         SELECT v_fleet, input.external_ref, input.domain, input.workflow_id FROM input ORDER BY input.external_ref
         ON CONFLICT (fleet, external_ref) DO NOTHING
         RETURNING u.id, u.external_ref, u.state
     )
    -- Set-based (one INSERT for the batch): the same columns as ledger_log.
    INSERT INTO work_unit_events (fleet, unit_id, event_type, to_state, agent_id, detail)
    SELECT v_fleet, ins.id, 'registered', ins.state, (b.who).name,
           jsonb_build_object('external_ref', ins.external_ref)
      FROM ins;
    -- A new statement: it sees units committed by concurrent registrations too.
    RETURN QUERY SELECT 'ok'::text, u, '{}'::jsonb
                   FROM unnest(p_refs) WITH ORDINALITY AS i(external_ref, ord)
                   JOIN work_units u ON u.fleet = v_fleet AND u.external_ref = i.external_ref
                  ORDER BY i.ord;
END
$$;

CREATE FUNCTION public.ledger_release(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid, p_attempt uuid, p_outcome text, p_reason text) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    prev work_units;
    w work_units;
    ended attempt_outcome;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    -- A workflow's run continued as new: its attempt is superseded by the next run's.
    IF coalesce(p_outcome, 'abandoned') NOT IN ('abandoned', 'failed')
       AND NOT (p_outcome = 'superseded' AND 'units:project' = ANY ((b.who).permissions)) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'outcome', 'a release ends the attempt as ABANDONED or FAILED');
        RETURN;
    ELSIF p_reason IS NOT NULL AND NOT ledger_is_long_text(p_reason) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'reason', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    SELECT * INTO prev FROM work_units u
     WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('release', '{holder}'))
       AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
       FOR NO KEY UPDATE;
    IF prev.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    UPDATE work_units u
       SET state = ledger_to('release', prev.state), claimed_by = NULL, lease_expires_at = NULL,
           updated_at = clock_timestamp()
     WHERE u.id = prev.id
    RETURNING u.* INTO w;
    UPDATE work_unit_attempts a
       SET outcome = CASE WHEN w.state = prev.state THEN 'blocked' ELSE coalesce(p_outcome, 'abandoned') END::attempt_outcome,
           ended_at = now()
     WHERE a.id = prev.current_attempt_id
    RETURNING a.outcome INTO ended;
    PERFORM ledger_log(w.fleet, prev.id, prev.current_attempt_id, 'released', prev.state, w.state, v_agent,
                       jsonb_build_object('outcome', ended, 'reason', p_reason), p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

CREATE FUNCTION public.ledger_report_stalls(p_units uuid[]) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT set_config('work_ledger.notify', '', true), set_config('work_ledger.live_batch', '', true),
           set_config('work_ledger.live_tag', '', true);
    WITH expired AS (
         SELECT u.id, u.fleet, u.domain, u.state, u.claimed_by, u.current_attempt_id, u.lease_expires_at,
                u.last_heartbeat_at
           FROM work_units u
          WHERE u.id = ANY (p_units)
            AND u.state = ANY (ledger_working_states()) AND u.lease_expires_at < now()
            -- Not one another replica reported since the pass read it (no
            -- lock taken, no insert tried).
            AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                             WHERE e.attempt_id = u.current_attempt_id AND e.event_type = 'stalled')
          ORDER BY u.lease_expires_at, u.id
          FOR SHARE OF u SKIP LOCKED
     ), reported AS (
         INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
         SELECT fleet, id, current_attempt_id, 'stalled', state, state, claimed_by,
                jsonb_build_object('domain', domain, 'lease_expired_at', lease_expires_at,
                                   'last_heartbeat_at', last_heartbeat_at)
           FROM expired
         ON CONFLICT (attempt_id) WHERE event_type = 'stalled' DO NOTHING
         RETURNING 1
     )
    SELECT count(*) FROM reported;
$$;

COMMENT ON FUNCTION public.ledger_report_stalls(p_units uuid[]) IS 'callers: app';

CREATE FUNCTION public.ledger_session(p_token bytea, OUT refusal text, OUT expired_at timestamp with time zone) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION public.ledger_session(p_token bytea, OUT refusal text, OUT expired_at timestamp with time zone) IS 'callers: app';

CREATE FUNCTION public.ledger_stalls_due(p_limit integer) RETURNS TABLE(unit_id uuid)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT u.id
      FROM work_units u
     WHERE u.state = ANY (ledger_working_states()) AND u.lease_expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                        WHERE e.attempt_id = u.current_attempt_id AND e.event_type = 'stalled')
     ORDER BY u.lease_expires_at, u.id
     LIMIT p_limit;
$$;

COMMENT ON FUNCTION public.ledger_stalls_due(p_limit integer) IS 'callers: app';

CREATE FUNCTION public.ledger_temporal_mark(p_token bytea, p_namespace text, p_workflow text, p_run text, p_unit uuid, p_event bigint, p_closed boolean) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    b record;
    mark bigint;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, NULL, '{units:project}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO temporal_runs AS r (fleet, namespace, workflow_id, run_id, unit_id, last_event_id, closed)
    VALUES ((b.who).fleet, p_namespace, p_workflow, p_run, p_unit, greatest(p_event, 0), p_closed)
    ON CONFLICT (fleet, namespace, workflow_id, run_id) DO UPDATE
       SET last_event_id = greatest(r.last_event_id, excluded.last_event_id), closed = r.closed OR excluded.closed,
           updated_at = clock_timestamp()
    RETURNING r.last_event_id INTO mark;
    RETURN mark;
END
$$;

CREATE FUNCTION public.ledger_terminal_states() RETURNS public.work_state[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT array_agg(s ORDER BY s) FROM unnest(enum_range(NULL::work_state)) AS s
             WHERE NOT EXISTS (SELECT 1 FROM ledger_moves() m WHERE m.from_state = s));
END
$$;

CREATE FUNCTION public.ledger_to(p_action text, p_from public.work_state, p_disposition public.disposition DEFAULT NULL::public.disposition, p_held boolean DEFAULT NULL::boolean) RETURNS public.work_state
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    target work_state;
BEGIN
    FOREACH target IN ARRAY coalesce((ledger_move_targets()
                                      ->> (p_action || '>' || p_from::text || '>' || coalesce(p_disposition::text, '')))::work_state[],
                                     '{}') LOOP
        IF p_held IS NULL OR (target = ANY (ledger_held_states())) = p_held THEN
            RETURN target;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.ledger_token_create(p_fleet text, p_name text, p_permissions text[], p_hash bytea, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in interval DEFAULT NULL::interval) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    created timestamptz := clock_timestamp();
    minted uuid;
BEGIN
    IF p_expires_at IS NOT NULL AND p_expires_in IS NOT NULL THEN
        RAISE EXCEPTION 'a token expires at a time or after a lifetime, not both' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO api_tokens (fleet, name, permissions, token_hash, created_at, expires_at)
    VALUES (p_fleet, p_name, p_permissions, p_hash, created, coalesce(p_expires_at, created + p_expires_in))
    RETURNING id INTO minted;
    RETURN minted;
END
$$;

COMMENT ON FUNCTION public.ledger_token_create(p_fleet text, p_name text, p_permissions text[], p_hash bytea, p_expires_at timestamp with time zone, p_expires_in interval) IS 'callers: owner';

CREATE FUNCTION public.ledger_token_revoke(p_id uuid) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH r AS (UPDATE api_tokens SET revoked_at = clock_timestamp() WHERE id = p_id AND revoked_at IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM r);
$$;

COMMENT ON FUNCTION public.ledger_token_revoke(p_id uuid) IS 'callers: owner';

CREATE FUNCTION public.ledger_token_revoke_unused(p_unused_for interval) RETURNS SETOF public.api_tokens
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    UPDATE api_tokens t SET revoked_at = clock_timestamp()
     WHERE t.revoked_at IS NULL AND p_unused_for > interval '0'
       AND coalesce(t.last_used_at, t.created_at) < clock_timestamp() - p_unused_for
    RETURNING t.*;
$$;

COMMENT ON FUNCTION public.ledger_token_revoke_unused(p_unused_for interval) IS 'callers: owner';

CREATE FUNCTION public.ledger_token_touch(p_id uuid) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH free AS (SELECT t.id, t.revoked_at IS NULL
                               AND (t.last_used_at IS NULL OR t.last_used_at < clock_timestamp() - interval '60 seconds') AS due
                    FROM api_tokens t WHERE t.id = p_id
                     FOR NO KEY UPDATE SKIP LOCKED),
         touched AS (UPDATE api_tokens t SET last_used_at = clock_timestamp()
                      WHERE t.id IN (SELECT f.id FROM free f WHERE f.due) RETURNING 1)
    SELECT CASE WHEN EXISTS (SELECT 1 FROM free) THEN EXISTS (SELECT 1 FROM touched)
                WHEN EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = p_id) THEN NULL
                ELSE false END;
$$;

COMMENT ON FUNCTION public.ledger_token_touch(p_id uuid) IS 'callers: app';

CREATE FUNCTION public.ledger_transition(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid, p_attempt uuid, p_to text, p_evidence text) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    IF p_to = 'verified' AND p_evidence IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer('EVIDENCE_REQUIRED', p_unit, jsonb_build_object('action', 'verify'));
        RETURN;
    ELSIF p_evidence IS NOT NULL AND NOT ledger_is_evidence(p_evidence) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'evidenceUrl', 'must be an absolute http(s) URL of at most 2048 characters');
        RETURN;
    END IF;
    IF p_to = 'in_progress' THEN
        UPDATE work_units u SET state = ledger_to('start', u.state), updated_at = clock_timestamp()
         WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('start', '{holder}'))
           AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
        RETURNING u.* INTO w;
        IF w.id IS NOT NULL THEN
            PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'transitioned', (ledger_from('start'))[1], w.state,
                               v_agent, '{}'::jsonb, p_key, p_hash);
        END IF;
    ELSIF p_to = 'verified' THEN
        UPDATE work_units u
           SET state = ledger_to('verify', u.state), lease_expires_at = NULL,
               evidence_urls = array_append(u.evidence_urls, p_evidence), updated_at = clock_timestamp()
         WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('verify', '{holder}'))
           AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
        RETURNING u.* INTO w;
        IF w.id IS NOT NULL THEN
            UPDATE work_unit_attempts a SET outcome = 'verified', evidence_url = p_evidence, ended_at = now()
             WHERE a.id = w.current_attempt_id;
            PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'transitioned', (ledger_from('verify'))[1], w.state,
                               v_agent, jsonb_build_object('evidence_url', p_evidence), p_key, p_hash);
        END IF;
    END IF;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

CREATE FUNCTION public.ledger_unblock(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid, p_question uuid, p_answer text, p_similar boolean) RETURNS TABLE(result text, unit public.work_units, info jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    locked uuid;
    open_question uuid;
    w work_units;
    o work_units;
    text_norm text;
    v_group text;
    others uuid[];
    also uuid[] := '{}';
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{questions:answer}', p_key, p_hash);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    IF p_answer IS NULL OR NOT ledger_is_long_text(p_answer) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'answer', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    IF p_similar THEN
        -- Every blocked unit waiting on the same text in the same group, the
        -- named one among them, locked in id order: two such answers never
        -- deadlock.
        SELECT q.norm, q.assignee_group INTO text_norm, v_group
          FROM blocking_questions q WHERE q.unit_id = p_unit AND q.status = 'open';
        SELECT array_agg(l.id ORDER BY l.id) INTO others FROM (
            SELECT u.id FROM work_units u JOIN blocking_questions q ON q.unit_id = u.id AND q.status = 'open'
             WHERE u.fleet = v_fleet AND q.fleet = v_fleet AND q.norm = text_norm AND q.assignee_group = v_group
               AND u.state = ANY (ledger_from('unblock'))
             ORDER BY u.id FOR NO KEY UPDATE OF u) l;
    END IF;
    SELECT u.id INTO locked FROM work_units u WHERE u.id = p_unit AND u.state = ANY (ledger_from('unblock', '{answerer}'))
       FOR NO KEY UPDATE;
    -- A new statement after the lock: it sees the question as the last
    -- write on the unit left it.
    SELECT q.id INTO open_question FROM blocking_questions q WHERE q.unit_id = p_unit AND q.status = 'open';
    IF p_question IS NOT NULL AND open_question IS DISTINCT FROM p_question
       AND EXISTS (SELECT 1 FROM work_units u WHERE u.id = p_unit) THEN
        RETURN QUERY SELECT * FROM ledger_answer('QUESTION_NOT_OPEN', p_unit,
                                                 jsonb_build_object('question_id', p_question, 'open_question_id', open_question));
        RETURN;
    END IF;
    IF locked IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, NULL, false, true);
        RETURN;
    END IF;
    -- The named unit, and with p_similar every other blocked unit waiting
    -- on the same text: each back to its holder (or READY when released),
    -- its open question answered, with its own event.
    FOR o IN
        UPDATE work_units u
           SET state = ledger_to('unblock', u.state, NULL, u.claimed_by IS NOT NULL),
               lease_expires_at = CASE WHEN u.claimed_by IS NULL THEN NULL ELSE now() + interval '900 seconds' END,
               updated_at = clock_timestamp()
         WHERE u.state = ANY (ledger_from('unblock'))
           AND (u.id = locked
                OR (u.id = ANY (coalesce(others, '{}'))
                    AND EXISTS (SELECT 1 FROM blocking_questions q
                                 WHERE q.unit_id = u.id AND q.status = 'open' AND q.norm = text_norm
                                   AND q.assignee_group = v_group)))
        RETURNING u.*
    LOOP
        UPDATE blocking_questions q SET status = 'answered', answer = p_answer, answered_by = v_agent, answered_at = now()
         WHERE q.unit_id = o.id AND q.status = 'open'
        RETURNING q.id INTO open_question;
        IF o.id = locked THEN
            w := o;
            PERFORM ledger_log(v_fleet, o.id, o.current_attempt_id, 'unblocked', (ledger_from('unblock'))[1], o.state,
                               v_agent, jsonb_build_object('question_id', open_question), p_key, p_hash);
        ELSE
            PERFORM ledger_log(v_fleet, o.id, o.current_attempt_id, 'unblocked', (ledger_from('unblock'))[1], o.state,
                               v_agent, jsonb_build_object('question_id', open_question, 'answered_with', p_unit),
                               NULL, NULL);
            also := also || o.id;
        END IF;
    END LOOP;
    RETURN QUERY SELECT 'ok'::text, w, jsonb_build_object('also_answered', to_jsonb(also));
END
$$;

CREATE FUNCTION public.ledger_unit_folds(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(unit_id uuid, sign integer, state public.work_state, disposition public.disposition, claims bigint, cost_cents bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
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

CREATE FUNCTION public.ledger_warden_pass(p_max_transaction interval, p_max_locks integer, p_max_idle integer) RETURNS TABLE(pid integer, role_name name, why text, detail text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    WITH readers AS MATERIALIZED (
        SELECT a.pid, a.usename, a.state, a.xact_start, a.state_change, a.datname
          FROM pg_catalog.pg_stat_activity a
          JOIN public.fleet_readers r ON r.role_name = a.usename
         WHERE a.backend_type = 'client backend' AND pg_catalog.pg_has_role(a.usesysid, 'USAGE')
    ), locks AS MATERIALIZED (
        SELECT l.pid, count(*) AS held FROM pg_catalog.pg_locks l
         WHERE l.pid IN (SELECT r.pid FROM readers r)
         GROUP BY l.pid
    ), idle AS MATERIALIZED (
        SELECT r.pid, r.usename, row_number() OVER (PARTITION BY r.usename ORDER BY r.state_change DESC) AS newest
          FROM readers r WHERE r.state = 'idle'
    ), doomed AS MATERIALIZED (
        SELECT DISTINCT ON (d.pid) d.pid, d.usename, d.why, d.detail
          FROM (SELECT r.pid, r.usename, 'transaction' AS why,
                       format('transaction open for %s in database %s', clock_timestamp() - r.xact_start, r.datname) AS detail
                  FROM readers r WHERE r.xact_start < clock_timestamp() - p_max_transaction
                UNION ALL
                SELECT r.pid, r.usename, 'locks', format('%s locks in database %s', l.held, r.datname)
                  FROM readers r JOIN locks l ON l.pid = r.pid WHERE l.held > p_max_locks
                UNION ALL
                SELECT i.pid, i.usename, 'idle', format('idle beyond the %s most recent sessions of its login', p_max_idle)
                  FROM idle i WHERE i.newest > p_max_idle) d
         ORDER BY d.pid, d.why DESC
    )
    SELECT d.pid, d.usename, d.why, d.detail FROM doomed d WHERE pg_catalog.pg_terminate_backend(d.pid)
$$;

COMMENT ON FUNCTION public.ledger_warden_pass(p_max_transaction interval, p_max_locks integer, p_max_idle integer) IS 'callers: app';

CREATE FUNCTION public.ledger_week_at_or_after(timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN CASE WHEN (($1 IS NULL) OR (NOT isfinite($1))) THEN $1 WHEN (date_trunc('week'::text, ($1 AT TIME ZONE 'UTC'::text)) = ($1 AT TIME ZONE 'UTC'::text)) THEN $1 ELSE ((date_trunc('week'::text, ($1 AT TIME ZONE 'UTC'::text)) + '7 days'::interval) AT TIME ZONE 'UTC'::text) END;

CREATE FUNCTION public.ledger_whole_days(p_from timestamp with time zone, p_until timestamp with time zone, OUT lo date, OUT hi date, OUT low_end timestamp with time zone, OUT high_start timestamp with time zone) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    f timestamp := coalesce(p_from, '-infinity') AT TIME ZONE 'UTC';
    u timestamp := coalesce(p_until, 'infinity') AT TIME ZONE 'UTC';
BEGIN
    lo := CASE WHEN date_trunc('day', f) = f THEN f::date ELSE (date_trunc('day', f) + interval '1 day')::date END;
    hi := date_trunc('day', u)::date;
    low_end := CASE WHEN lo < hi THEN lo::timestamp AT TIME ZONE 'UTC' ELSE coalesce(p_until, 'infinity') END;
    high_start := CASE WHEN lo < hi THEN hi::timestamp AT TIME ZONE 'UTC' ELSE 'infinity' END;
END
$$;

CREATE FUNCTION public.ledger_working_states() RETURNS public.work_state[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN ledger_from('reclaim');
END
$$;

CREATE FUNCTION public.live_delivery_watermark() RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    last_drawn bigint;
    oldest_writer bigint;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the caller's later statement
    -- would reuse a snapshot older than this function's reads.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'live_delivery_watermark() needs READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'WL010';
    END IF;
    last_drawn := coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0);
    SELECT min(w.batch_floor) INTO oldest_writer FROM live_event_writers w;
    RETURN least(last_drawn, oldest_writer) + 1;
END
$$;

CREATE TABLE public.work_unit_events (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    seq bigint NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_id uuid,
    event_type public.event_type NOT NULL,
    from_state public.work_state,
    to_state public.work_state,
    agent_id text,
    cost_delta_cents bigint DEFAULT 0 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    source_event_id text,
    request_hash text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    tx_id bigint DEFAULT 0 NOT NULL,
    batch bigint DEFAULT 0 NOT NULL,
    CONSTRAINT work_unit_events_cost_delta_bounded CHECK ((cost_delta_cents <= 1000000000)),
    CONSTRAINT work_unit_events_cost_delta_cents_check CHECK ((cost_delta_cents >= 0)),
    CONSTRAINT work_unit_events_key_has_agent CHECK (((source_event_id IS NULL) OR (agent_id IS NOT NULL))),
    CONSTRAINT work_unit_events_key_has_hash CHECK (((source_event_id IS NULL) OR (request_hash IS NOT NULL)))
);

CREATE FUNCTION public.live_events_below(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_watermark bigint, p_limit integer) RETURNS TABLE(watermark bigint, held boolean, event public.work_unit_events)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    w bigint;
    waiting boolean;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE the rows would be read in a
    -- snapshot that may predate the watermark.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'live_events_below() needs READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'WL010';
    END IF;
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true);
    IF p_watermark IS NULL THEN
        w := live_delivery_watermark();
    ELSE
        w := least(p_watermark, coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0) + 1);
    END IF;
    SELECT EXISTS (SELECT 1 FROM work_unit_events h WHERE h.fleet = p_fleet AND h.batch >= w) INTO waiting;
    RETURN QUERY
        SELECT w, waiting, x
          FROM (SELECT NULL::integer) AS one (n)
          LEFT JOIN LATERAL (
               SELECT x FROM work_unit_events x
                WHERE x.fleet = p_fleet AND (x.batch, x.tx_id, x.seq) > (p_batch, p_tx, p_seq) AND x.batch < w
                ORDER BY x.batch, x.tx_id, x.seq
                LIMIT p_limit
          ) AS rows ON true
         ORDER BY (rows.x).batch, (rows.x).tx_id, (rows.x).seq;
END
$$;

COMMENT ON FUNCTION public.live_events_below(p_fleet text, p_batch bigint, p_tx bigint, p_seq bigint, p_watermark bigint, p_limit integer) IS 'callers: app';

CREATE FUNCTION public.live_events_resumed(p_fleet text, p_event uuid, p_floor bigint, p_watermark bigint, p_limit integer) RETURNS TABLE(from_batch bigint, from_tx bigint, from_seq bigint, watermark bigint, held boolean, event public.work_unit_events)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    b bigint;
    t bigint;
    s bigint;
BEGIN
    PERFORM set_config('role', 'work_ledger_app', true), set_config('work_ledger.fleet', p_fleet, true);
    SELECT e.batch, e.tx_id, e.seq INTO b, t, s FROM work_unit_events e WHERE e.id = p_event AND e.fleet = p_fleet;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_floor IS NOT NULL AND (p_floor, -1::bigint, -1::bigint) < (b, t, s) THEN
        b := p_floor;
        t := -1;
        s := -1;
    END IF;
    RETURN QUERY
        SELECT b, t, s, r.watermark, r.held, r.event FROM live_events_below(p_fleet, b, t, s, p_watermark, p_limit) AS r;
END
$$;

COMMENT ON FUNCTION public.live_events_resumed(p_fleet text, p_event uuid, p_floor bigint, p_watermark bigint, p_limit integer) IS 'callers: app';

CREATE FUNCTION public.live_fleet_signal(p_fleet text) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT n.nonce || encode(substring(sha256(convert_to(public.live_fleet_tag(p_fleet) || n.nonce, 'UTF8')) FROM 1 FOR 16), 'hex')
      FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS nonce) n
$$;

COMMENT ON FUNCTION public.live_fleet_signal(p_fleet text) IS 'callers: app, writer';

CREATE FUNCTION public.live_fleet_tag(p_fleet text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT encode(substring(sha256(s.outer_key || sha256(s.inner_key || convert_to(p_fleet, 'UTF8'))) FROM 1 FOR 16), 'hex')
      FROM live_notify_secret s
$$;

COMMENT ON FUNCTION public.live_fleet_tag(p_fleet text) IS 'callers: app, writer';

CREATE FUNCTION public.never_started_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(attempt_id uuid, fleet text, started_at timestamp with time zone)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT a.id, a.fleet, a.started_at
      FROM ledger_attempt_folds(p_fleet, p_from, p_to) f JOIN work_unit_attempts a ON a.id = f.attempt_id
     GROUP BY a.id, a.fleet, a.started_at
    HAVING sum(f.sign * (f.ended AND NOT f.started)::int) > 0
$$;

CREATE FUNCTION public.never_started_tail(p_fleet text) RETURNS TABLE(attempt_id uuid, fleet text, started_at timestamp with time zone)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT n.* FROM never_started_delta(p_fleet, ledger_mark('claims'), NULL) n
     WHERE NOT EXISTS (SELECT 1 FROM never_started s WHERE s.attempt_id = n.attempt_id)
$$;

CREATE FUNCTION public.reader_fleet() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    SELECT fleet FROM fleet_readers WHERE role_name = session_user
$$;

COMMENT ON FUNCTION public.reader_fleet() IS 'callers: reader';

CREATE FUNCTION public.refuse_history_rewrite() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION '% on % is not allowed: the ledger is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'WL009', CONSTRAINT = TG_TABLE_NAME || '_append_only';
END
$$;

CREATE FUNCTION public.roster(p_fleet text, p_after text, p_limit bigint) RETURNS TABLE(fleet text, name text, status text, held_unit_id uuid, held_external_ref text, held_state public.work_state, lease_expires_at timestamp with time zone, last_claim_at timestamp with time zone, last_heartbeat_at timestamp with time zone, claims_today bigint, cost_cents_today bigint, token_last_used_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH
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

COMMENT ON FUNCTION public.roster(p_fleet text, p_after text, p_limit bigint) IS 'callers: app, reader';

CREATE FUNCTION public.throughput(p_bucket text, p_from timestamp with time zone, p_until timestamp with time zone, p_domain text) RETURNS TABLE(fleet text, start timestamp with time zone, disposition public.disposition, units bigint, cost_cents bigint, distinct_agents bigint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

CREATE FUNCTION public.unit_totals_delta(p_fleet text, p_from bigint, p_to bigint) RETURNS TABLE(fleet text, domain text, state public.work_state, disposition public.disposition, reworked boolean, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT u.fleet, u.domain, f.state, f.disposition, f.claims > 1, sum(f.sign)::bigint,
           sum(f.sign * f.cost_cents)::bigint
      FROM ledger_unit_folds(p_fleet, p_from, p_to) f JOIN work_units u ON u.id = f.unit_id
     GROUP BY 1, 2, 3, 4, 5
    HAVING sum(f.sign) <> 0 OR sum(f.sign * f.cost_cents) <> 0
$$;

CREATE FUNCTION public.unit_totals_fold(p_from bigint, p_to bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT * FROM unit_totals_delta(NULL, p_from, p_to);
END
$$;

CREATE FUNCTION public.unit_totals_now(p_fleet text) RETURNS TABLE(fleet text, domain text, state public.work_state, disposition public.disposition, reworked boolean, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT t.fleet, t.domain, t.state, t.disposition, t.reworked, t.units, t.cost_cents
      FROM unit_totals t WHERE p_fleet IS NULL OR t.fleet = p_fleet
    UNION ALL
    SELECT * FROM unit_totals_tail(p_fleet)
$$;

CREATE FUNCTION public.unit_totals_tail(p_fleet text) RETURNS TABLE(fleet text, domain text, state public.work_state, disposition public.disposition, reworked boolean, units bigint, cost_cents bigint)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET max_parallel_workers_per_gather TO '0'
    AS $$
    SELECT * FROM unit_totals_delta(p_fleet, ledger_mark('unit_totals'), NULL)
$$;

CREATE FUNCTION public.work_unit_attempts_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.cost_cents <> 0 THEN
            RAISE EXCEPTION 'a new attempt starts with no cost' USING ERRCODE = 'WL007',
                CONSTRAINT = 'work_unit_attempts_cost_additive';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.fleet <> OLD.fleet OR NEW.unit_id <> OLD.unit_id
       OR NEW.attempt_no <> OLD.attempt_no OR NEW.agent_id <> OLD.agent_id THEN
        RAISE EXCEPTION 'attempt identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_unit_attempts_identity_immutable';
    END IF;
    IF NEW.cost_cents < OLD.cost_cents THEN
        RAISE EXCEPTION 'attempt cost only grows' USING ERRCODE = 'WL007',
            CONSTRAINT = 'work_unit_attempts_cost_additive';
    END IF;
    IF OLD.outcome IS NOT NULL AND (NEW.outcome IS DISTINCT FROM OLD.outcome
       OR NEW.ended_at IS DISTINCT FROM OLD.ended_at) THEN
        RAISE EXCEPTION 'attempt % has ended (%)', OLD.id, OLD.outcome USING ERRCODE = 'WL008',
            CONSTRAINT = 'work_unit_attempts_outcome_immutable';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_unit_attempts_history_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
        RAISE EXCEPTION 'attempt identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_unit_attempts_identity_immutable';
    END IF;
    IF OLD.outcome IS NOT NULL AND NEW.evidence_url IS DISTINCT FROM OLD.evidence_url THEN
        RAISE EXCEPTION 'attempt % has ended (%): only late cost may still be added', OLD.id, OLD.outcome
            USING ERRCODE = 'WL008', CONSTRAINT = 'work_unit_attempts_ended_frozen';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_unit_attempts_rollup() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    UPDATE work_units SET cost_cents = cost_cents + (NEW.cost_cents - OLD.cost_cents)
     WHERE id = NEW.unit_id;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.work_unit_events_notify() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    cached text := current_setting('work_ledger.live_tag', true);
    signal text;
BEGIN
    IF cached IS NOT NULL AND substr(cached, 66) = NEW.fleet THEN
        signal := left(cached, 64);
    ELSE
        signal := live_fleet_signal(NEW.fleet);
        PERFORM set_config('work_ledger.live_tag', signal || ':' || NEW.fleet, true);
    END IF;
    PERFORM pg_notify('work_ledger_events', signal);
    RETURN NULL;
END
$$;

CREATE FUNCTION public.work_unit_events_position() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    xid text := pg_current_xact_id()::text;
    mark text := current_setting('work_ledger.live_batch', true);
    drawn bigint;
    floor_ bigint;
BEGIN
    IF mark IS NOT NULL AND split_part(mark, ':', 1) = xid THEN
        drawn := split_part(mark, ':', 2)::bigint;
    ELSE
        floor_ := coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0);
        WHILE floor_ > 0 AND NOT pg_try_advisory_xact_lock_shared((x'776c'::bigint << 48) | floor_) LOOP
            floor_ := floor_ - 1;
        END LOOP;
        IF floor_ = 0 AND NOT pg_try_advisory_xact_lock_shared(x'776c'::bigint << 48) THEN
            -- Every key down to 0 is held by someone else: mark floor 0
            -- under a key of this backend's own (the two-key form).
            PERFORM pg_advisory_xact_lock_shared(2003566592, pg_backend_pid());
        END IF;
        drawn := nextval('work_unit_events_batch_seq');
        PERFORM set_config('work_ledger.live_batch', xid || ':' || drawn, true);
    END IF;
    NEW.tx_id := xid::bigint;
    NEW.batch := drawn;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_units_change_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM work_unit_events e
         WHERE e.unit_id = NEW.id AND e.tx_id = pg_current_xact_id()::text::bigint
           AND e.from_state = OLD.state AND e.to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'unit % went % -> % without its event in the same transaction', NEW.id, OLD.state, NEW.state
            USING ERRCODE = 'WL011', CONSTRAINT = 'work_units_change_has_event';
    END IF;
    IF NEW.state = 'verified' AND NOT EXISTS (
        SELECT 1 FROM work_units u JOIN work_unit_attempts a ON a.id = u.current_attempt_id
         WHERE u.id = NEW.id AND (u.state <> 'verified' OR a.outcome = 'verified')
    ) THEN
        RAISE EXCEPTION 'unit % is VERIFIED but its current attempt did not end verified', NEW.id
            USING ERRCODE = 'WL011', CONSTRAINT = 'work_units_verified_attempt_ended';
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.work_units_claim_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
DECLARE
    now_holder text;
    now_attempt uuid;
BEGIN
    SELECT u.claimed_by, u.current_attempt_id INTO now_holder, now_attempt FROM work_units u WHERE u.id = NEW.id;
    IF now_holder IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM work_unit_events e
         WHERE e.unit_id = NEW.id AND e.attempt_id = now_attempt AND e.event_type = 'claimed'
           AND e.tx_id = pg_current_xact_id()::text::bigint
    ) THEN
        RAISE EXCEPTION 'unit % changed holder without a claim (no claimed event for its attempt)', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_changes_by_claim';
    END IF;
    IF OLD.current_attempt_id IS NOT NULL AND OLD.current_attempt_id IS DISTINCT FROM now_attempt AND EXISTS (
        SELECT 1 FROM work_unit_attempts a WHERE a.id = OLD.current_attempt_id AND a.outcome IS NULL
    ) THEN
        RAISE EXCEPTION 'unit % was claimed again while attempt % still runs', NEW.id, OLD.current_attempt_id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_changes_by_claim';
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.work_units_evidence_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF cardinality(NEW.evidence_urls) < cardinality(OLD.evidence_urls)
       OR NEW.evidence_urls[1:cardinality(OLD.evidence_urls)] IS DISTINCT FROM OLD.evidence_urls THEN
        RAISE EXCEPTION 'evidence of unit % is only ever appended', NEW.id
            USING ERRCODE = 'WL013', CONSTRAINT = 'work_units_evidence_append_only';
    END IF;
    IF NEW.state = OLD.state OR NEW.state NOT IN ('verified', 'done', 'abandoned') THEN
        RAISE EXCEPTION 'evidence of unit % is added only when it is verified or disposed', NEW.id
            USING ERRCODE = 'WL013', CONSTRAINT = 'work_units_evidence_frozen';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_units_first_claim_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'the first claim of unit % is history', NEW.id
        USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_immutable';
END
$$;

CREATE FUNCTION public.work_units_first_claim_recorded() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT u.first_claimed_at FROM work_units u WHERE u.id = NEW.id) IS DISTINCT FROM
       (SELECT a.started_at FROM work_unit_attempts a WHERE a.unit_id = NEW.id AND a.attempt_no = 1) THEN
        RAISE EXCEPTION 'the first claim of unit % is the start of its attempt 1', NEW.id
            USING ERRCODE = 'WL001', CONSTRAINT = 'work_units_first_claim_is_attempt_1';
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION public.work_units_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    -- The domain too: the read models group a unit's whole history by it
    -- (projections.sql), and no write moves a unit to another.
    IF NEW.id <> OLD.id OR NEW.fleet <> OLD.fleet OR NEW.external_ref <> OLD.external_ref
       OR NEW.created_at <> OLD.created_at OR NEW.domain <> OLD.domain THEN
        RAISE EXCEPTION 'work unit identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_units_identity_immutable';
    END IF;
    IF OLD.state = ANY (ledger_terminal_states()) AND (NEW.state, NEW.claimed_by, NEW.current_attempt_id,
       NEW.lease_expires_at, NEW.attempt_count, NEW.evidence_urls, NEW.domain, NEW.workflow_id)
       IS DISTINCT FROM (OLD.state, OLD.claimed_by, OLD.current_attempt_id, OLD.lease_expires_at,
       OLD.attempt_count, OLD.evidence_urls, OLD.domain, OLD.workflow_id) THEN
        RAISE EXCEPTION 'unit % is terminal (%)', OLD.id, OLD.state USING ERRCODE = 'WL003',
            CONSTRAINT = 'work_units_terminal_frozen';
    END IF;
    -- work_units.cost_cents is a roll-up of its attempts, maintained by the
    -- attempts trigger; any other change to it is refused.
    IF NEW.cost_cents <> OLD.cost_cents AND NEW.cost_cents <> (
        SELECT coalesce(sum(a.cost_cents), 0) FROM work_unit_attempts a WHERE a.unit_id = NEW.id
    ) THEN
        RAISE EXCEPTION 'cost_cents of unit % must equal the sum of its attempts', NEW.id
            USING ERRCODE = 'WL005', CONSTRAINT = 'work_units_cost_rollup';
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_units_holder_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF NEW.claimed_by IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM work_unit_attempts a
         WHERE a.id = NEW.current_attempt_id AND a.unit_id = NEW.id AND a.agent_id = NEW.claimed_by
           AND a.outcome IS NULL AND a.attempt_no = NEW.attempt_count
    ) THEN
        RAISE EXCEPTION 'unit % may only be held by the agent of its current, running attempt', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_is_attempt_agent';
    END IF;
    IF NEW.claimed_by IS NULL AND NEW.current_attempt_id IS DISTINCT FROM OLD.current_attempt_id THEN
        RAISE EXCEPTION 'the current attempt of unit % changes only with a claim', NEW.id
            USING ERRCODE = 'WL010', CONSTRAINT = 'work_units_holder_is_attempt_agent';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_units_insert_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF NEW.state <> 'ready' OR NEW.cost_cents <> 0 OR NEW.attempt_count <> 0
       OR NEW.current_attempt_id IS NOT NULL THEN
        RAISE EXCEPTION 'a new unit starts READY with no attempts and no cost' USING ERRCODE = 'WL006',
            CONSTRAINT = 'work_units_insert_ready';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.work_units_state_machine() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    IF OLD.disposition IS NOT NULL AND (NEW.disposition, NEW.disposed_at) IS DISTINCT FROM (OLD.disposition, OLD.disposed_at) THEN
        RAISE EXCEPTION 'disposition of unit % is permanent', OLD.id USING ERRCODE = 'WL002',
            CONSTRAINT = 'work_units_disposition_immutable';
    END IF;
    -- A move into a terminal state names its disposition ('?' when the
    -- unit has none, which no move names); any other names none.
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT (
        OLD.state::text || '>' || NEW.state::text || '>'
        || CASE WHEN NEW.state = ANY (ledger_terminal_states()) THEN coalesce(NEW.disposition::text, '?') ELSE '' END
        = ANY (ledger_move_keys())
    ) THEN
        RAISE EXCEPTION 'illegal state transition % -> % for unit %', OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'WL004', CONSTRAINT = 'work_units_legal_transition';
    END IF;
    RETURN NEW;
END
$$;

CREATE TABLE public.agent_cost_days (
    fleet text NOT NULL,
    day date NOT NULL,
    agent_id text NOT NULL,
    domain text NOT NULL,
    prior_day date,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.agent_latest (
    fleet text NOT NULL,
    agent_id text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    attempt_id uuid NOT NULL,
    unit_id uuid NOT NULL
);

CREATE TABLE public.agent_totals (
    fleet text NOT NULL,
    agent_id text NOT NULL,
    domain text NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.audit_runs (
    id bigint NOT NULL,
    scope text NOT NULL,
    finished_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    findings jsonb NOT NULL,
    CONSTRAINT audit_runs_findings_check CHECK ((jsonb_typeof(findings) = 'object'::text)),
    CONSTRAINT audit_runs_scope_check CHECK (((length(scope) >= 1) AND (length(scope) <= 256)))
);

ALTER TABLE public.audit_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.blocking_questions (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_id uuid NOT NULL,
    question text NOT NULL,
    status public.question_status DEFAULT 'open'::public.question_status NOT NULL,
    answer text,
    assignee_group text DEFAULT 'agent-questions'::text NOT NULL,
    asked_by text NOT NULL,
    answered_by text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    answered_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    norm text GENERATED ALWAYS AS (public.ledger_question_norm(question)) STORED,
    CONSTRAINT blocking_questions_answer_check CHECK (((char_length(answer) >= 1) AND (char_length(answer) <= 8000))),
    CONSTRAINT blocking_questions_answered_has_answer CHECK (((status = 'answered'::public.question_status) = ((answer IS NOT NULL) AND (answered_by IS NOT NULL) AND (answered_at IS NOT NULL)))),
    CONSTRAINT blocking_questions_cancelled_has_time CHECK (((status = 'cancelled'::public.question_status) = (cancelled_at IS NOT NULL))),
    CONSTRAINT blocking_questions_question_check CHECK (((char_length(question) >= 1) AND (char_length(question) <= 8000)))
);

CREATE TABLE public.claim_agents (
    fleet text NOT NULL,
    day date NOT NULL,
    agent_id text NOT NULL
);

CREATE TABLE public.claim_days (
    fleet text NOT NULL,
    day date NOT NULL,
    claims bigint NOT NULL,
    agents bigint NOT NULL,
    verified bigint NOT NULL,
    stale bigint NOT NULL,
    never_started bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.cost_days (
    fleet text NOT NULL,
    day date NOT NULL,
    domain text NOT NULL,
    state public.work_state NOT NULL,
    disposition public.disposition,
    prior_day date,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.cycle_weeks (
    fleet text NOT NULL,
    week date NOT NULL,
    units bigint NOT NULL,
    median_seconds double precision NOT NULL,
    p90_seconds double precision NOT NULL
);

CREATE TABLE public.cycle_weeks_until (
    fleet text NOT NULL,
    until date NOT NULL
);

CREATE TABLE public.disposal_agent_counts (
    fleet text NOT NULL,
    week boolean NOT NULL,
    start date NOT NULL,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    agents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_agents (
    fleet text NOT NULL,
    week boolean NOT NULL,
    start date NOT NULL,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    agent_id text NOT NULL
);

CREATE TABLE public.disposal_days (
    fleet text NOT NULL,
    day date,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_fleet_days (
    fleet text NOT NULL,
    day date,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_weeks (
    fleet text NOT NULL,
    week date,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.event_days (
    fleet text NOT NULL,
    day date NOT NULL,
    event_type public.event_type NOT NULL,
    events bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.event_totals (
    fleet text NOT NULL,
    event_type public.event_type NOT NULL,
    events bigint NOT NULL,
    agent_id text,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.fleet_readers (
    role_name name NOT NULL,
    fleet text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT fleet_readers_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text))
);

CREATE VIEW public.live_event_writers AS
 SELECT l.pid,
        CASE
            WHEN (l.objsubid = 1) THEN ((((l.classid)::bigint & (65535)::bigint) << 32) | (l.objid)::bigint)
            ELSE (0)::bigint
        END AS batch_floor
   FROM (pg_locks l
     JOIN pg_stat_activity a ON ((a.pid = l.pid)))
  WHERE ((l.locktype = 'advisory'::text) AND l.granted AND (((l.objsubid = 1) AND (((l.classid)::bigint >> 16) = ('0111011101101100'::"bit")::bigint)) OR ((l.objsubid = 2) AND (l.classid = (2003566592)::oid) AND ((l.objid)::bigint = l.pid))) AND (l.database = ( SELECT d.oid
           FROM pg_database d
          WHERE (d.datname = current_database()))) AND pg_has_role(a.usesysid, 'work_ledger_app'::name, 'MEMBER'::text));

CREATE TABLE public.live_notify_secret (
    singleton boolean DEFAULT true NOT NULL,
    inner_key bytea NOT NULL,
    outer_key bytea NOT NULL,
    CONSTRAINT live_notify_secret_inner_key_check CHECK ((octet_length(inner_key) = 64)),
    CONSTRAINT live_notify_secret_outer_key_check CHECK ((octet_length(outer_key) = 64)),
    CONSTRAINT live_notify_secret_singleton_check CHECK (singleton)
);

CREATE TABLE public.never_started (
    attempt_id uuid NOT NULL,
    fleet text NOT NULL,
    started_at timestamp with time zone NOT NULL
);

CREATE TABLE public.projection_marks (
    name text NOT NULL,
    mark bigint DEFAULT 0 NOT NULL,
    version text,
    folded_events bigint DEFAULT 0 NOT NULL,
    folded_at timestamp with time zone
);

CREATE TABLE public.schema_breaking_changes (
    migration text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_repeatable (
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_repeatable_history (
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.seaql_migrations (
    version character varying NOT NULL,
    applied_at bigint NOT NULL
);

CREATE TABLE public.temporal_links (
    fleet text NOT NULL,
    namespace text NOT NULL,
    query text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_links_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT temporal_links_namespace_check CHECK (((char_length(namespace) >= 1) AND (char_length(namespace) <= 256))),
    CONSTRAINT temporal_links_query_check CHECK (((char_length(query) >= 1) AND (char_length(query) <= 8000)))
);

CREATE TABLE public.temporal_runs (
    fleet text NOT NULL,
    namespace text NOT NULL,
    workflow_id text NOT NULL,
    run_id text NOT NULL,
    unit_id uuid NOT NULL,
    last_event_id bigint DEFAULT 0 NOT NULL,
    closed boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_runs_last_event_id_check CHECK ((last_event_id >= 0))
);

CREATE TABLE public.unit_totals (
    fleet text NOT NULL,
    domain text NOT NULL,
    state public.work_state NOT NULL,
    disposition public.disposition,
    reworked boolean NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE VIEW public.v_agents WITH (security_invoker='true') AS
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
   FROM public.roster(NULL::text, NULL::text, NULL::bigint) r(fleet, name, status, held_unit_id, held_external_ref, held_state, lease_expires_at, last_claim_at, last_heartbeat_at, claims_today, cost_cents_today, token_last_used_at);

CREATE TABLE public.work_unit_attempts (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_no integer NOT NULL,
    agent_id text NOT NULL,
    outcome public.attempt_outcome,
    cost_cents bigint DEFAULT 0 NOT NULL,
    evidence_url text,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    ended_at timestamp with time zone,
    CONSTRAINT work_unit_attempts_attempt_no_check CHECK ((attempt_no >= 1)),
    CONSTRAINT work_unit_attempts_cost_cents_check CHECK ((cost_cents >= 0)),
    CONSTRAINT work_unit_attempts_evidence_link CHECK (((evidence_url IS NULL) OR public.ledger_is_link(evidence_url))),
    CONSTRAINT work_unit_attempts_outcome_ends CHECK (((outcome IS NULL) = (ended_at IS NULL))),
    CONSTRAINT work_unit_attempts_verified_has_evidence CHECK (((outcome IS DISTINCT FROM 'verified'::public.attempt_outcome) OR (evidence_url IS NOT NULL)))
);

CREATE VIEW public.v_attempt_end WITH (security_invoker='true') AS
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
   FROM (public.work_unit_attempts a
     LEFT JOIN LATERAL ( SELECT e.agent_id,
            e.detail,
            e.event_type
           FROM public.work_unit_events e
          WHERE ((e.unit_id = a.unit_id) AND (e.attempt_id = a.id) AND ((e.event_type = ANY (ARRAY['released'::public.event_type, 'disposed'::public.event_type, 'stale_reclaimed'::public.event_type])) OR ((e.event_type = 'transitioned'::public.event_type) AND (e.to_state = 'verified'::public.work_state))))
          ORDER BY e.created_at, e.id
         LIMIT 1) x ON (true))
  WHERE (a.outcome IS NOT NULL);

CREATE VIEW public.v_claimed_never_transitioned WITH (security_invoker='true') AS
 SELECT a.id AS attempt_id,
    a.fleet,
    a.unit_id,
    u.external_ref,
    u.domain,
    a.attempt_no,
    a.agent_id,
    a.outcome,
    n.started_at,
    a.ended_at
   FROM ((( SELECT s.attempt_id,
            s.started_at
           FROM public.never_started s
        UNION ALL
         SELECT t.attempt_id,
            t.started_at
           FROM public.never_started_tail(NULL::text) t(attempt_id, fleet, started_at)) n
     JOIN public.work_unit_attempts a ON ((a.id = n.attempt_id)))
     JOIN public.work_units u ON ((u.id = a.unit_id)));

CREATE VIEW public.v_claiming_agents_daily WITH (security_invoker='true') AS
 SELECT c.fleet,
    c.day,
    c.agents,
    c.claims,
    s.live,
    s.blocked,
    s.silent
   FROM (( SELECT d.fleet,
            ((d.day)::timestamp without time zone AT TIME ZONE 'UTC'::text) AS day,
            (sum(d.agents))::bigint AS agents,
            (sum(d.claims))::bigint AS claims
           FROM public.claim_days_now() d(fleet, day, claims, agents, verified, stale, never_started)
          GROUP BY d.fleet, d.day
         HAVING (sum(d.claims) <> (0)::numeric)) c
     LEFT JOIN LATERAL ( SELECT count(*) FILTER (WHERE (v.status = 'ACTIVE'::text)) AS live,
            count(*) FILTER (WHERE (v.status = 'BLOCKED'::text)) AS blocked,
            count(*) FILTER (WHERE (v.status = 'SILENT'::text)) AS silent
           FROM public.v_agents v
          WHERE ((c.day = date_trunc('day'::text, now(), 'UTC'::text)) AND (v.fleet = c.fleet) AND (v.claims_today > 0))
         HAVING (c.day = date_trunc('day'::text, now(), 'UTC'::text))) s ON (true));

CREATE VIEW public.v_claims_weekly WITH (security_invoker='true') AS
 SELECT w.fleet,
    w.week,
    w.claims,
    w.verified,
    round(((w.verified)::numeric / (w.claims)::numeric), 4) AS conversion,
    w.stale,
    round(((w.stale)::numeric / (w.claims)::numeric), 4) AS stale_rate,
    w.never_transitioned
   FROM ( SELECT c.fleet,
            (((date_trunc('week'::text, (c.day)::timestamp without time zone))::date)::timestamp without time zone AT TIME ZONE 'UTC'::text) AS week,
            (sum(c.claims))::bigint AS claims,
            (sum(c.verified))::bigint AS verified,
            (sum(c.stale))::bigint AS stale,
            (sum(c.never_started))::bigint AS never_transitioned
           FROM public.claim_days_now() c(fleet, day, claims, agents, verified, stale, never_started)
          GROUP BY c.fleet, ((((date_trunc('week'::text, (c.day)::timestamp without time zone))::date)::timestamp without time zone AT TIME ZONE 'UTC'::text))) w
  WHERE (w.claims <> 0);

CREATE VIEW public.v_unit_totals WITH (security_invoker='true') AS
 SELECT t.fleet,
    t.domain,
    t.state,
    t.disposition,
    t.reworked,
    (sum(t.units))::bigint AS units,
    (sum(t.cost_cents))::bigint AS cost_cents
   FROM public.unit_totals_now(NULL::text) t(fleet, domain, state, disposition, reworked, units, cost_cents)
  GROUP BY t.fleet, t.domain, t.state, t.disposition, t.reworked
 HAVING (sum(t.units) <> (0)::numeric);

CREATE VIEW public.v_cost_groups WITH (security_invoker='true') AS
 SELECT v_unit_totals.fleet,
    v_unit_totals.domain,
    v_unit_totals.state,
    v_unit_totals.disposition,
    (sum(v_unit_totals.units))::bigint AS units,
    (sum(v_unit_totals.cost_cents))::bigint AS cost_cents
   FROM public.v_unit_totals
  GROUP BY v_unit_totals.fleet, v_unit_totals.domain, v_unit_totals.state, v_unit_totals.disposition;

CREATE VIEW public.v_cost_per_unit WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.state,
    work_units.disposition,
    work_units.cost_cents,
    work_units.attempt_count,
    work_units.created_at
   FROM public.work_units;

CREATE VIEW public.v_cycle_time_weekly WITH (security_invoker='true') AS
 SELECT cycle_time_weekly.fleet,
    cycle_time_weekly.week,
    cycle_time_weekly.units,
    cycle_time_weekly.median_seconds,
    cycle_time_weekly.p90_seconds
   FROM public.cycle_time_weekly(NULL::timestamp with time zone, NULL::timestamp with time zone) cycle_time_weekly(fleet, week, units, median_seconds, p90_seconds);

CREATE VIEW public.v_disposals WITH (security_invoker='true') AS
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
   FROM (public.work_units u
     LEFT JOIN LATERAL ( SELECT e.agent_id,
            e.detail
           FROM public.work_unit_events e
          WHERE ((e.unit_id = u.id) AND (e.event_type = 'disposed'::public.event_type))
          ORDER BY e.created_at, e.id
         LIMIT 1) d ON (true))
  WHERE (u.disposition IS NOT NULL);

CREATE VIEW public.v_disposition_detail WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.disposition,
    work_units.evidence_urls[cardinality(work_units.evidence_urls)] AS evidence_url,
    work_units.cost_cents,
    work_units.disposed_at,
    work_units.created_at
   FROM public.work_units
  WHERE (work_units.disposition IS NOT NULL);

CREATE VIEW public.v_disposition_summary WITH (security_invoker='true') AS
 SELECT v_unit_totals.fleet,
    v_unit_totals.domain,
    v_unit_totals.disposition,
    (sum(v_unit_totals.units))::bigint AS units,
    (sum(v_unit_totals.cost_cents))::bigint AS cost_cents
   FROM public.v_unit_totals
  WHERE (v_unit_totals.disposition IS NOT NULL)
  GROUP BY v_unit_totals.fleet, v_unit_totals.domain, v_unit_totals.disposition;

CREATE VIEW public.v_queue_depth WITH (security_invoker='true') AS
 SELECT t.fleet,
    t.domain,
    t.ready,
    t.claimed,
    t.in_progress,
    t.blocked,
    t.verified,
    COALESCE(s.stalled, (0)::bigint) AS stalled,
    t.done,
    t.disposed
   FROM (( SELECT v_unit_totals.fleet,
            v_unit_totals.domain,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'ready'::public.work_state)), (0)::numeric))::bigint AS ready,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'claimed'::public.work_state)), (0)::numeric))::bigint AS claimed,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'in_progress'::public.work_state)), (0)::numeric))::bigint AS in_progress,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'blocked'::public.work_state)), (0)::numeric))::bigint AS blocked,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'verified'::public.work_state)), (0)::numeric))::bigint AS verified,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.state = 'done'::public.work_state)), (0)::numeric))::bigint AS done,
            (COALESCE(sum(v_unit_totals.units) FILTER (WHERE (v_unit_totals.disposition IS NOT NULL)), (0)::numeric))::bigint AS disposed
           FROM public.v_unit_totals
          GROUP BY v_unit_totals.fleet, v_unit_totals.domain) t
     LEFT JOIN ( SELECT work_units.fleet,
            work_units.domain,
            count(*) AS stalled
           FROM public.work_units
          WHERE ((work_units.state = ANY (public.ledger_working_states())) AND (work_units.lease_expires_at < now()))
          GROUP BY work_units.fleet, work_units.domain) s ON (((s.fleet = t.fleet) AND (s.domain = t.domain))));

CREATE VIEW public.v_rework WITH (security_invoker='true') AS
 SELECT work_units.id AS unit_id,
    work_units.fleet,
    work_units.external_ref,
    work_units.domain,
    work_units.state,
    work_units.disposition,
    work_units.attempt_count,
    work_units.cost_cents,
    work_units.created_at
   FROM public.work_units
  WHERE (work_units.attempt_count > 1);

CREATE VIEW public.v_rework_rate_weekly WITH (security_invoker='true') AS
 SELECT w.fleet,
    w.week,
    w.disposed,
    w.reworked,
    round(((w.reworked)::numeric / (w.disposed)::numeric), 4) AS rework_rate
   FROM ( SELECT d.fleet,
            ((d.week)::timestamp without time zone AT TIME ZONE 'UTC'::text) AS week,
            (sum(d.units))::bigint AS disposed,
            (sum(d.reworked))::bigint AS reworked
           FROM public.disposal_weeks_now() d(fleet, week, units, cost_cents, reworked, verified_units, verified_cost_cents)
          GROUP BY d.fleet, (((d.week)::timestamp without time zone AT TIME ZONE 'UTC'::text))) w
  WHERE (w.disposed <> 0);

CREATE VIEW public.v_stall_list WITH (security_invoker='true') AS
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
   FROM public.work_units
  WHERE ((work_units.state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state])) AND (work_units.lease_expires_at < now()));

CREATE VIEW public.v_throughput_daily WITH (security_invoker='true') AS
 SELECT throughput.fleet,
    throughput.start,
    throughput.disposition,
    throughput.units,
    throughput.cost_cents,
    throughput.distinct_agents
   FROM public.throughput('day'::text, NULL::timestamp with time zone, NULL::timestamp with time zone, NULL::text) throughput(fleet, start, disposition, units, cost_cents, distinct_agents);

CREATE VIEW public.v_throughput_weekly WITH (security_invoker='true') AS
 SELECT throughput.fleet,
    throughput.start,
    throughput.disposition,
    throughput.units,
    throughput.cost_cents,
    throughput.distinct_agents
   FROM public.throughput('week'::text, NULL::timestamp with time zone, NULL::timestamp with time zone, NULL::text) throughput(fleet, start, disposition, units, cost_cents, distinct_agents);

CREATE VIEW public.v_verified_throughput_weekly WITH (security_invoker='true') AS
 SELECT w.fleet,
    ((w.week)::timestamp without time zone AT TIME ZONE 'UTC'::text) AS week,
    (sum(w.verified_units))::bigint AS units,
    (sum(w.verified_cost_cents))::bigint AS cost_cents
   FROM public.disposal_weeks_now() w(fleet, week, units, cost_cents, reworked, verified_units, verified_cost_cents)
  GROUP BY w.fleet, (((w.week)::timestamp without time zone AT TIME ZONE 'UTC'::text))
 HAVING (sum(w.verified_units) <> (0)::numeric);

CREATE SEQUENCE public.work_unit_events_batch_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    MAXVALUE 281474976710655
    CACHE 1;

ALTER TABLE public.work_unit_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.work_unit_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.agent_latest
    ADD CONSTRAINT agent_latest_pkey PRIMARY KEY (fleet, agent_id);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash);

ALTER TABLE ONLY public.audit_runs
    ADD CONSTRAINT audit_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.claim_agents
    ADD CONSTRAINT claim_agents_pkey PRIMARY KEY (fleet, day, agent_id);

ALTER TABLE ONLY public.cycle_weeks
    ADD CONSTRAINT cycle_weeks_pkey PRIMARY KEY (fleet, week);

ALTER TABLE ONLY public.cycle_weeks_until
    ADD CONSTRAINT cycle_weeks_until_pkey PRIMARY KEY (fleet);

ALTER TABLE ONLY public.disposal_agents
    ADD CONSTRAINT disposal_agents_pkey PRIMARY KEY (fleet, week, domain, start, disposition, agent_id);

ALTER TABLE ONLY public.fleet_readers
    ADD CONSTRAINT fleet_readers_pkey PRIMARY KEY (role_name);

ALTER TABLE ONLY public.live_notify_secret
    ADD CONSTRAINT live_notify_secret_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY public.never_started
    ADD CONSTRAINT never_started_pkey PRIMARY KEY (attempt_id);

ALTER TABLE ONLY public.projection_marks
    ADD CONSTRAINT projection_marks_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.schema_breaking_changes
    ADD CONSTRAINT schema_breaking_changes_pkey PRIMARY KEY (migration);

ALTER TABLE ONLY public.schema_repeatable_history
    ADD CONSTRAINT schema_repeatable_history_pkey PRIMARY KEY (name, checksum);

ALTER TABLE ONLY public.schema_repeatable
    ADD CONSTRAINT schema_repeatable_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.seaql_migrations
    ADD CONSTRAINT seaql_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.temporal_links
    ADD CONSTRAINT temporal_links_pkey PRIMARY KEY (fleet, namespace, query);

ALTER TABLE ONLY public.temporal_runs
    ADD CONSTRAINT temporal_runs_pkey PRIMARY KEY (fleet, namespace, workflow_id, run_id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_fleet_id_key UNIQUE (fleet, id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_unit_attempt_no_key UNIQUE (unit_id, attempt_no);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_fleet_external_ref_key UNIQUE (fleet, external_ref);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_fleet_id_key UNIQUE (fleet, id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_pkey PRIMARY KEY (id);

CREATE INDEX agent_cost_days_day_idx ON public.agent_cost_days USING btree (fleet, day) INCLUDE (agent_id, domain, prior_day, units, cost_cents);

CREATE INDEX audit_runs_last_idx ON public.audit_runs USING btree (scope, finished_at DESC);

CREATE INDEX blocking_questions_keyset_idx ON public.blocking_questions USING btree (fleet, created_at, id);

CREATE INDEX blocking_questions_norm_idx ON public.blocking_questions USING btree (fleet, norm, status, answered_at DESC);

CREATE UNIQUE INDEX blocking_questions_one_open_per_unit ON public.blocking_questions USING btree (unit_id) WHERE (status = 'open'::public.question_status);

CREATE INDEX blocking_questions_unit_idx ON public.blocking_questions USING btree (unit_id, created_at);

CREATE INDEX cost_days_day_idx ON public.cost_days USING btree (fleet, day) INCLUDE (domain, state, disposition, prior_day, units, cost_cents);

CREATE INDEX disposal_agent_counts_idx ON public.disposal_agent_counts USING btree (fleet, week, domain, start) INCLUDE (disposition, agents);

CREATE INDEX disposal_days_day_idx ON public.disposal_days USING btree (fleet, day) INCLUDE (domain, disposition, units, cost_cents);

CREATE INDEX disposal_fleet_days_day_idx ON public.disposal_fleet_days USING btree (fleet, day) INCLUDE (disposition, units, cost_cents);

CREATE INDEX disposal_weeks_week_idx ON public.disposal_weeks USING btree (fleet, week) INCLUDE (domain, disposition, units, cost_cents, reworked, verified_units, verified_cost_cents);

CREATE INDEX event_days_day_idx ON public.event_days USING btree (fleet, day) INCLUDE (event_type, events);

CREATE INDEX never_started_started_idx ON public.never_started USING btree (fleet, started_at);

CREATE INDEX temporal_runs_unit_idx ON public.temporal_runs USING btree (unit_id);

CREATE INDEX work_unit_attempts_agent_started_idx ON public.work_unit_attempts USING btree (fleet, agent_id, started_at) INCLUDE (cost_cents, unit_id, id);

CREATE INDEX work_unit_events_agent_idx ON public.work_unit_events USING btree (fleet, agent_id, created_at DESC, id DESC);

CREATE UNIQUE INDEX work_unit_events_agent_source_event_id_key ON public.work_unit_events USING btree (fleet, agent_id, source_event_id) WHERE (source_event_id IS NOT NULL);

CREATE INDEX work_unit_events_batch_idx ON public.work_unit_events USING btree (batch);

CREATE INDEX work_unit_events_cost_idx ON public.work_unit_events USING btree (fleet, created_at) INCLUDE (unit_id, attempt_id, cost_delta_cents) WHERE (event_type = 'cost_recorded'::public.event_type);

CREATE INDEX work_unit_events_keyset_idx ON public.work_unit_events USING btree (fleet, created_at DESC, id DESC);

CREATE UNIQUE INDEX work_unit_events_one_stall_per_attempt ON public.work_unit_events USING btree (attempt_id) WHERE (event_type = 'stalled'::public.event_type);

CREATE INDEX work_unit_events_position_idx ON public.work_unit_events USING btree (fleet, batch, tx_id, seq);

CREATE INDEX work_unit_events_unit_cost_idx ON public.work_unit_events USING btree (unit_id, seq) INCLUDE (created_at, attempt_id, cost_delta_cents) WHERE (event_type = 'cost_recorded'::public.event_type);

CREATE INDEX work_unit_events_unit_idx ON public.work_unit_events USING btree (unit_id, created_at DESC, id DESC);

CREATE INDEX work_units_claimable_domain_idx ON public.work_units USING btree (fleet, domain, created_at, id) WHERE (state = 'ready'::public.work_state);

CREATE INDEX work_units_claimable_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (state = 'ready'::public.work_state);

CREATE INDEX work_units_cost_idx ON public.work_units USING btree (fleet, cost_cents DESC, id);

CREATE INDEX work_units_disposed_at_idx ON public.work_units USING btree (fleet, disposed_at) INCLUDE (disposition, domain, cost_cents, id, created_at, first_claimed_at) WHERE (disposition IS NOT NULL);

CREATE INDEX work_units_disposed_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (disposition IS NOT NULL);

CREATE INDEX work_units_keyset_idx ON public.work_units USING btree (fleet, created_at, id);

CREATE INDEX work_units_live_lease_idx ON public.work_units USING btree (fleet, lease_expires_at) WHERE (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state]));

CREATE UNIQUE INDEX work_units_one_live_claim_per_agent ON public.work_units USING btree (claimed_by, fleet) WHERE (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state, 'blocked'::public.work_state]));

CREATE INDEX work_units_pick_domain_idx ON public.work_units USING btree (fleet, domain, created_at, external_ref) WHERE ((state = 'ready'::public.work_state) AND (workflow_id IS NULL));

CREATE INDEX work_units_pick_idx ON public.work_units USING btree (fleet, created_at, external_ref) WHERE ((state = 'ready'::public.work_state) AND (workflow_id IS NULL));

CREATE INDEX work_units_rework_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (attempt_count > 1);

CREATE INDEX work_units_workflow_idx ON public.work_units USING btree (fleet, workflow_id) WHERE (workflow_id IS NOT NULL);

CREATE TRIGGER api_tokens_notify_deleted AFTER DELETE ON public.api_tokens FOR EACH ROW EXECUTE FUNCTION public.api_tokens_notify_revoked();

CREATE TRIGGER api_tokens_notify_revoked AFTER UPDATE OF revoked_at ON public.api_tokens FOR EACH ROW WHEN (((old.revoked_at IS NULL) AND (new.revoked_at IS NOT NULL))) EXECUTE FUNCTION public.api_tokens_notify_revoked();

CREATE TRIGGER blocking_questions_guard BEFORE UPDATE ON public.blocking_questions FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION public.blocking_questions_guard();

CREATE TRIGGER blocking_questions_no_delete BEFORE DELETE ON public.blocking_questions FOR EACH ROW EXECUTE FUNCTION public.refuse_history_rewrite();

CREATE TRIGGER work_unit_attempts_guard BEFORE INSERT OR UPDATE ON public.work_unit_attempts FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION public.work_unit_attempts_guard();

CREATE TRIGGER work_unit_attempts_history_guard BEFORE UPDATE ON public.work_unit_attempts FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION public.work_unit_attempts_history_guard();

CREATE TRIGGER work_unit_attempts_no_delete BEFORE DELETE ON public.work_unit_attempts FOR EACH ROW EXECUTE FUNCTION public.refuse_history_rewrite();

CREATE TRIGGER work_unit_attempts_rollup AFTER UPDATE OF cost_cents ON public.work_unit_attempts FOR EACH ROW WHEN ((new.cost_cents <> old.cost_cents)) EXECUTE FUNCTION public.work_unit_attempts_rollup();

CREATE TRIGGER work_unit_events_append_only BEFORE DELETE OR UPDATE ON public.work_unit_events FOR EACH ROW EXECUTE FUNCTION public.refuse_history_rewrite();

CREATE TRIGGER work_unit_events_no_truncate BEFORE TRUNCATE ON public.work_unit_events FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_history_rewrite();

CREATE TRIGGER work_unit_events_notify AFTER INSERT ON public.work_unit_events FOR EACH ROW WHEN ((current_setting('work_ledger.notify'::text, true) IS DISTINCT FROM 'after-commit'::text)) EXECUTE FUNCTION public.work_unit_events_notify();

CREATE TRIGGER work_unit_events_position BEFORE INSERT ON public.work_unit_events FOR EACH ROW EXECUTE FUNCTION public.work_unit_events_position();

CREATE CONSTRAINT TRIGGER work_units_change_recorded AFTER UPDATE OF state ON public.work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.state IS DISTINCT FROM old.state))) EXECUTE FUNCTION public.work_units_change_recorded();

CREATE CONSTRAINT TRIGGER work_units_claim_recorded AFTER UPDATE OF claimed_by, current_attempt_id ON public.work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.claimed_by IS NOT NULL) AND ((new.claimed_by IS DISTINCT FROM old.claimed_by) OR (new.current_attempt_id IS DISTINCT FROM old.current_attempt_id)))) EXECUTE FUNCTION public.work_units_claim_recorded();

CREATE TRIGGER work_units_evidence_guard BEFORE UPDATE OF evidence_urls ON public.work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.evidence_urls IS DISTINCT FROM old.evidence_urls))) EXECUTE FUNCTION public.work_units_evidence_guard();

CREATE TRIGGER work_units_first_claim_guard BEFORE UPDATE OF first_claimed_at ON public.work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (old.first_claimed_at IS NOT NULL) AND (new.first_claimed_at IS DISTINCT FROM old.first_claimed_at))) EXECUTE FUNCTION public.work_units_first_claim_guard();

CREATE CONSTRAINT TRIGGER work_units_first_claim_recorded AFTER UPDATE OF first_claimed_at ON public.work_units DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND (new.first_claimed_at IS DISTINCT FROM old.first_claimed_at))) EXECUTE FUNCTION public.work_units_first_claim_recorded();

CREATE TRIGGER work_units_guard BEFORE UPDATE ON public.work_units FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION public.work_units_guard();

CREATE TRIGGER work_units_holder_guard BEFORE UPDATE OF claimed_by, current_attempt_id ON public.work_units FOR EACH ROW WHEN (((CURRENT_USER <> 'work_ledger_writer'::name) AND ((new.claimed_by IS DISTINCT FROM old.claimed_by) OR (new.current_attempt_id IS DISTINCT FROM old.current_attempt_id)))) EXECUTE FUNCTION public.work_units_holder_guard();

CREATE TRIGGER work_units_insert_guard BEFORE INSERT ON public.work_units FOR EACH ROW WHEN ((CURRENT_USER <> 'work_ledger_writer'::name)) EXECUTE FUNCTION public.work_units_insert_guard();

CREATE TRIGGER work_units_no_delete BEFORE DELETE ON public.work_units FOR EACH ROW EXECUTE FUNCTION public.refuse_history_rewrite();

CREATE TRIGGER work_units_state_machine BEFORE UPDATE OF state, disposition, disposed_at ON public.work_units FOR EACH ROW WHEN (((new.state IS DISTINCT FROM old.state) OR (new.disposition IS DISTINCT FROM old.disposition) OR (new.disposed_at IS DISTINCT FROM old.disposed_at))) EXECUTE FUNCTION public.work_units_state_machine();

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES public.work_unit_attempts(fleet, id);

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.temporal_runs
    ADD CONSTRAINT temporal_runs_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES public.work_unit_attempts(fleet, id);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_current_attempt_fk FOREIGN KEY (fleet, current_attempt_id) REFERENCES public.work_unit_attempts(fleet, id) DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE public.agent_cost_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.agent_latest ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.agent_totals ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.api_tokens ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.blocking_questions ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.claim_agents ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.claim_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cost_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cycle_weeks ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cycle_weeks_until ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_agent_counts ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_agents ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_fleet_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_weeks ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.event_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.event_totals ENABLE ROW LEVEL SECURITY;

CREATE POLICY fleet_isolation ON public.agent_cost_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.agent_latest FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.agent_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.api_tokens TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet))) WITH CHECK ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.blocking_questions TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

CREATE POLICY fleet_isolation ON public.claim_agents FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.claim_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.cost_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.cycle_weeks FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.cycle_weeks_until FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.disposal_agent_counts FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.disposal_agents FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.disposal_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.disposal_fleet_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.disposal_weeks FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.event_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.event_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.never_started FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.temporal_runs TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

CREATE POLICY fleet_isolation ON public.unit_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT public.current_fleet() AS current_fleet)));

CREATE POLICY fleet_isolation ON public.work_unit_attempts TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

CREATE POLICY fleet_isolation ON public.work_unit_events TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

CREATE POLICY fleet_isolation ON public.work_units TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

CREATE POLICY fleet_reader ON public.agent_cost_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.agent_latest FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.agent_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.blocking_questions FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.claim_agents FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.claim_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.cost_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.cycle_weeks FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.cycle_weeks_until FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.disposal_agent_counts FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.disposal_agents FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.disposal_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.disposal_fleet_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.disposal_weeks FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.event_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.event_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.never_started FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.temporal_runs FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.unit_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.work_unit_attempts FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.work_unit_events FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

CREATE POLICY fleet_reader ON public.work_units FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT public.reader_fleet() AS reader_fleet)));

ALTER TABLE public.never_started ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.temporal_runs ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.unit_totals ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_unit_attempts ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_unit_events ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_units ENABLE ROW LEVEL SECURITY;

CREATE POLICY writer_authenticates ON public.api_tokens FOR SELECT TO work_ledger_writer USING (true);
