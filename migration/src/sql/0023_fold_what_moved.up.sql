-- The sweeper folds only the totals that moved (issue 27).
--
-- ledger_compact_totals (0018-0020) folded by deleting every row of every
-- totals table and inserting the sums again, on every sweeper pass (5 s):
-- at 1,000,000 units that is 298,762 rows (the day totals grow with days and
-- groups), 4.5 to 9.5 s per pass on this 2-core machine, a core kept busy
-- rewriting numbers that did not change, and tens of thousands of dead rows
-- in tables every read scans.
--
-- A folded row now says so. The write path's delta rows are inserted as
-- before (`folded` defaults to false, no new index, nothing more per write);
-- a pass finds the groups with a delta (one scan of each table, no write)
-- and rewrites only those: all the group's rows deleted, their sum inserted
-- as one folded row, in one statement as before, so a reader's snapshot
-- sees either the rows or their sum. Two passes at once still fold disjoint
-- rows (a row deleted by one is skipped by the other; the sum it inserted is
-- not in the other's snapshot): a group may keep two folded rows, which sum
-- to the same.
ALTER TABLE unit_totals ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE event_totals ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE disposal_days ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE disposal_agent_counts ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE agent_totals ADD COLUMN folded boolean NOT NULL DEFAULT false;
ALTER TABLE claim_days ADD COLUMN folded boolean NOT NULL DEFAULT false;

-- Joined on `=` of every key, the keys that may be NULL through coalesce()
-- with a value they never hold (an agent name is never empty, a disposal
-- day never -infinity), so that the whole key hashes: IS NOT DISTINCT FROM
-- would leave those keys to a join filter, and a first fold after
-- ledger_rebuild_totals (every row unfolded) compared each day total with
-- every day of its group (342 s at 229,000 units instead of seconds).
CREATE OR REPLACE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
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

-- A recount (after a bulk load, or to repair what the audit found) leaves
-- every total folded: its rows arrive unfolded, one per group, and a fold
-- in the same transaction marks them, so that the sweeper's next pass does
-- not rewrite them all (8-15 s at 1,000,000 units). The recount itself is
-- 0020's, under a name of its own.
ALTER FUNCTION ledger_rebuild_totals() RENAME TO ledger_recount_totals;
CREATE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM ledger_recount_totals();
    PERFORM ledger_compact_totals();
END
$$;
REVOKE ALL ON FUNCTION ledger_rebuild_totals() FROM PUBLIC;
