DROP FUNCTION ledger_rebuild_totals();
ALTER FUNCTION ledger_recount_totals() RENAME TO ledger_rebuild_totals;
-- The fold of 0020: every row of every totals table, every pass.
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
             INSERT INTO event_totals (fleet, event_type, agent_id, events)
             SELECT fleet, event_type, agent_id, sum(events) FROM gone_events GROUP BY 1, 2, 3
             HAVING sum(events) <> 0
             RETURNING 1),
         gone_disposals AS (DELETE FROM disposal_days RETURNING *),
         kept_disposals AS (
             INSERT INTO disposal_days (fleet, day, domain, disposition, units, cost_cents, reworked, verified_units,
                                        verified_cost_cents)
             SELECT fleet, day, domain, disposition, sum(units), sum(cost_cents), sum(reworked), sum(verified_units),
                    sum(verified_cost_cents)
               FROM gone_disposals GROUP BY 1, 2, 3, 4
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                 OR sum(verified_cost_cents) <> 0
             RETURNING 1),
         gone_agents AS (DELETE FROM disposal_agent_counts RETURNING *),
         kept_agents AS (
             INSERT INTO disposal_agent_counts (fleet, week, start, domain, disposition, agents)
             SELECT fleet, week, start, domain, disposition, sum(agents) FROM gone_agents GROUP BY 1, 2, 3, 4, 5
             HAVING sum(agents) <> 0
             RETURNING 1),
         gone_agent_totals AS (DELETE FROM agent_totals RETURNING *),
         kept_agent_totals AS (
             INSERT INTO agent_totals (fleet, agent_id, domain, units, cost_cents)
             SELECT fleet, agent_id, domain, sum(units), sum(cost_cents) FROM gone_agent_totals GROUP BY 1, 2, 3
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1),
         gone_claims AS (DELETE FROM claim_days RETURNING *),
         kept_claims AS (
             INSERT INTO claim_days (fleet, day, claims, agents, verified, stale, never_started)
             SELECT fleet, day, sum(claims), sum(agents), sum(verified), sum(stale), sum(never_started)
               FROM gone_claims GROUP BY 1, 2
             HAVING sum(claims) <> 0 OR sum(agents) <> 0 OR sum(verified) <> 0 OR sum(stale) <> 0
                 OR sum(never_started) <> 0
             RETURNING 1)
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_events) + (SELECT count(*) FROM gone_disposals)
         + (SELECT count(*) FROM gone_agents) + (SELECT count(*) FROM gone_claims)
         + (SELECT count(*) FROM gone_agent_totals)
$$;
ALTER TABLE unit_totals DROP COLUMN folded;
ALTER TABLE event_totals DROP COLUMN folded;
ALTER TABLE disposal_days DROP COLUMN folded;
ALTER TABLE disposal_agent_counts DROP COLUMN folded;
ALTER TABLE agent_totals DROP COLUMN folded;
ALTER TABLE claim_days DROP COLUMN folded;
