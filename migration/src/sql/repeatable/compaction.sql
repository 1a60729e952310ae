-- Compaction of the read models: the delta rows a projection appends are
-- summed into one row per key (ledger_compact, which the projector
-- calls between its folds), and the cycle times of the weeks that ended
-- are kept.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- Joined on `=` of every key, the keys that may be NULL through coalesce()
-- with a value they never hold (an agent name is never empty, a disposal
-- day never -infinity), so that the whole key hashes: IS NOT DISTINCT FROM
-- would leave those keys to a join filter, and a first compaction after
-- a rebuild (every row unfolded) compared each day total with
-- every day of its group (342 s at 229,000 units instead of seconds).
CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_totals() IS 'callers: app';

-- Folds the groups with a delta into one row each, as ledger_compact_totals
-- does for the other totals (0023); returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_cost_days() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_cost_days() IS 'callers: app';

-- Folds the days with a delta into one row per (fleet, day, type); returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_event_days() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_event_days() IS 'callers: app';

-- Folds the weeks with a delta into one row per (fleet, week, domain,
-- disposition); returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_disposal_weeks() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_disposal_weeks() IS 'callers: app';

-- Folds the fleet days with a delta into one row per (fleet, day,
-- disposition); returns the rows folded.
CREATE OR REPLACE FUNCTION ledger_compact_disposal_fleet_days() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_disposal_fleet_days() IS 'callers: app';

-- The fold of the cycle weeks: every fleet's weeks from its mark to the
-- week that ended over an hour ago, computed and kept, and the mark moved
-- there. A disposal is dated by its transaction's start and the service's
-- transactions cannot idle for 30 s (0004), so after an hour no transaction
-- of the service is still writing into an ended week; a write into an
-- ended week (an import, an owner's repair, a disposal whose statement
-- runs after the week it is dated in ended) moves the mark back with
-- cycle_week_reopened(). The marks are locked first, so such a write
-- either waits for this fold to commit (and then moves the mark back) or
-- is seen by it.
CREATE OR REPLACE FUNCTION ledger_compact_cycle_weeks() RETURNS bigint
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
COMMENT ON FUNCTION ledger_compact_cycle_weeks() IS 'callers: app';

CREATE OR REPLACE FUNCTION ledger_compact() RETURNS bigint
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT ledger_compact_totals() + ledger_compact_cost_days() + ledger_compact_event_days()
         + ledger_compact_disposal_weeks() + ledger_compact_disposal_fleet_days() + ledger_compact_cycle_weeks()
$$;
COMMENT ON FUNCTION ledger_compact() IS 'callers: app';
