-- The operator's grouped reads at 100,000 units (issue 14): covering
-- indexes, so that each grouping is one index-only scan that streams in
-- the index's order, and `throughput` aggregated per unit first.
--
-- Nothing is stored twice: every number is still computed from the rows at
-- read time, in the reader's snapshot and under its row-level security.
-- The price is on the write path: cost_cents is now in an index of
-- work_units and of work_unit_attempts, so a cost record updates both rows
-- with index entries instead of in place (see docs/BENCHMARKS.md).

-- costSummary by DOMAIN, STATE or DISPOSITION (v_cost_groups), and the
-- units of a domain for costSummary(AGENT, domain:). Its order is the
-- grouping's, so the aggregate needs neither a sort nor a hash table.
CREATE INDEX work_units_cost_groups_idx ON work_units (fleet, domain, state, disposition) INCLUDE (cost_cents, id);

-- costSummary by AGENT: the attempts of each agent, unit by unit, with their
-- cost (and, for a range, the attempt's id to meet its cost records).
CREATE INDEX work_unit_attempts_agent_idx ON work_unit_attempts (fleet, agent_id, unit_id) INCLUDE (cost_cents, id);

-- costSummary over a range: the cost records of the range, read from the
-- index alone.
DROP INDEX work_unit_events_cost_idx;
CREATE INDEX work_unit_events_cost_idx ON work_unit_events (fleet, created_at)
    INCLUDE (unit_id, attempt_id, cost_delta_cents) WHERE event_type = 'cost_recorded';

-- throughput and the dispositions range: disposals by time, read from the
-- index alone.
DROP INDEX work_units_disposed_at_idx;
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at)
    INCLUDE (disposition, domain, cost_cents, id) WHERE disposition IS NOT NULL;

-- Cost and units per (domain, state, disposition): at most a few dozen rows
-- per fleet, the one definition behind costSummary(DOMAIN | STATE |
-- DISPOSITION) and its Grafana panels.
CREATE VIEW v_cost_groups WITH (security_invoker = true) AS
SELECT fleet, domain, state, disposition, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 GROUP BY fleet, domain, state, disposition;

-- Same signature and answer as in 0007; aggregated per unit first. The
-- disposed units of the range come from work_units_disposed_at_idx alone;
-- units and cost are summed from them, and the distinct agents from the
-- (bucket, disposition, agent) triples of their attempts, so no unit is
-- repeated once per attempt and no cost needs de-duplicating.
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

GRANT SELECT ON v_cost_groups TO work_ledger_app, work_ledger_reader;
