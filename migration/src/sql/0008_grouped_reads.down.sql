DROP VIEW IF EXISTS v_cost_groups;
DROP INDEX IF EXISTS work_units_cost_groups_idx, work_unit_attempts_agent_idx;
DROP INDEX IF EXISTS work_unit_events_cost_idx, work_units_disposed_at_idx;
CREATE INDEX work_unit_events_cost_idx ON work_unit_events (fleet, created_at) WHERE event_type = 'cost_recorded';
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at) WHERE disposition IS NOT NULL;
-- throughput() as 0007 defined it.
CREATE OR REPLACE FUNCTION throughput(p_bucket text, p_from timestamptz, p_until timestamptz, p_domain text)
RETURNS TABLE (fleet text, start timestamptz, disposition disposition, units bigint, cost_cents bigint,
               distinct_agents bigint)
LANGUAGE sql STABLE AS $$
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
