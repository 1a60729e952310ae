//! `work-ledger audit`: the reconciliation job. Read-only, it checks every
//! invariant that spans rows or tables, fleet by fleet, and reports each
//! breach as a finding (fleet, unit, rule, expected, found). The database
//! refuses these breaches as they are written (triggers, constraints, RLS);
//! the audit proves months later that nothing got past them (a restore, a
//! superuser's hand, a disabled trigger).

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use uuid::Uuid;

use crate::db::stmt;
use crate::metrics::AuditSample;

/// One breach of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub fleet: String,
    pub unit_id: Option<Uuid>,
    pub rule: String,
    pub expected: String,
    pub found: String,
}

/// The rules, each a query yielding `fleet, unit_id, expected, found` for
/// every breach; `$1` is the fleet to audit, NULL for all.
const RULES: &[(&str, &str)] = &[
    (
        "cost_rollup",
        // A unit's cost is the sum of its attempts' costs.
        "SELECT u.fleet, u.id AS unit_id, coalesce(sum(a.cost_cents), 0)::text AS expected, u.cost_cents::text AS found
           FROM work_units u LEFT JOIN work_unit_attempts a ON a.unit_id = u.id
          WHERE $1::text IS NULL OR u.fleet = $1
          GROUP BY u.id HAVING u.cost_cents <> coalesce(sum(a.cost_cents), 0)",
    ),
    (
        "one_live_claim_per_agent",
        "SELECT fleet, unit_id, expected, n::text || ' live units' AS found FROM (
             SELECT u.fleet, u.id AS unit_id, 'one live unit for ' || u.claimed_by AS expected,
                    count(*) OVER (PARTITION BY u.fleet, u.claimed_by) AS n
               FROM work_units u
              WHERE ($1::text IS NULL OR u.fleet = $1) AND u.state IN ('claimed', 'in_progress', 'blocked')
                AND u.claimed_by IS NOT NULL
         ) r WHERE n > 1",
    ),
    (
        "one_open_attempt_per_unit",
        "SELECT a.fleet, a.unit_id, 'at most one attempt without outcome' AS expected,
                count(*)::text || ' open attempts' AS found
           FROM work_unit_attempts a
          WHERE ($1::text IS NULL OR a.fleet = $1) AND a.outcome IS NULL
          GROUP BY a.fleet, a.unit_id HAVING count(*) > 1",
    ),
    (
        "live_claim_matches_attempt",
        // A live claim's current attempt is open and belongs to the holder.
        "SELECT u.fleet, u.id AS unit_id, 'open attempt of ' || coalesce(u.claimed_by, '(nobody)') AS expected,
                coalesce(a.agent_id || ' attempt ' || a.attempt_no || ' outcome ' || coalesce(a.outcome::text, 'open'),
                         'no current attempt') AS found
           FROM work_units u LEFT JOIN work_unit_attempts a ON a.id = u.current_attempt_id
          WHERE ($1::text IS NULL OR u.fleet = $1) AND u.state IN ('claimed', 'in_progress')
            AND (a.id IS NULL OR a.outcome IS NOT NULL OR a.agent_id IS DISTINCT FROM u.claimed_by)",
    ),
    (
        "attempts_dense",
        // Attempt numbers run 1..attempt_count without a gap.
        "SELECT u.fleet, u.id AS unit_id, '1..' || u.attempt_count AS expected,
                coalesce(string_agg(a.attempt_no::text, ',' ORDER BY a.attempt_no), 'none') AS found
           FROM work_units u LEFT JOIN work_unit_attempts a ON a.unit_id = u.id
          WHERE $1::text IS NULL OR u.fleet = $1
          GROUP BY u.id
         HAVING count(a.id) <> u.attempt_count OR coalesce(min(a.attempt_no), 1) <> 1
             OR coalesce(max(a.attempt_no), 0) <> u.attempt_count",
    ),
    (
        "first_claims",
        // The first claim a unit carries (migration 0035, for the cycle
        // times) is the start of its attempt 1, and a unit never claimed has none.
        "SELECT u.fleet, u.id AS unit_id, coalesce('first claim at ' || a.started_at, 'no first claim') AS expected,
                coalesce('first claim at ' || u.first_claimed_at, 'no first claim') AS found
           FROM work_units u LEFT JOIN work_unit_attempts a ON a.unit_id = u.id AND a.attempt_no = 1
          WHERE ($1::text IS NULL OR u.fleet = $1) AND a.started_at IS DISTINCT FROM u.first_claimed_at",
    ),
    (
        "terminal_is_disposed",
        // DONE/ABANDONED units have their disposition, its time, evidence and a `disposed` event.
        "SELECT u.fleet, u.id AS unit_id, 'disposition, disposed_at, evidence and a disposed event' AS expected,
                concat_ws(', ',
                    CASE WHEN u.disposition IS NULL THEN 'no disposition' END,
                    CASE WHEN u.disposed_at IS NULL THEN 'no disposed_at' END,
                    CASE WHEN cardinality(u.evidence_urls) = 0 THEN 'no evidence' END,
                    CASE WHEN NOT EXISTS (SELECT 1 FROM work_unit_events e
                                           WHERE e.unit_id = u.id AND e.event_type = 'disposed')
                         THEN 'no disposed event' END) AS found
           FROM work_units u
          WHERE ($1::text IS NULL OR u.fleet = $1) AND u.state IN ('done', 'abandoned')
            AND (u.disposition IS NULL OR u.disposed_at IS NULL OR cardinality(u.evidence_urls) = 0
                 OR NOT EXISTS (SELECT 1 FROM work_unit_events e WHERE e.unit_id = u.id AND e.event_type = 'disposed'))",
    ),
    (
        "state_matches_event_log",
        // Replaying the log gives the unit's state: the newest event that
        // changes state names it. Heartbeats, costs and stall reports do not
        // change state (and a stall report is written without the unit's lock).
        "SELECT u.fleet, u.id AS unit_id, coalesce(last.to_state::text, 'a registered event') AS expected,
                u.state::text AS found
           FROM work_units u
           LEFT JOIN LATERAL (
                SELECT e.to_state FROM work_unit_events e
                 WHERE e.unit_id = u.id AND e.event_type IN ('registered', 'claimed', 'transitioned', 'blocked',
                       'unblocked', 'disposed', 'released', 'stale_reclaimed')
                 ORDER BY e.seq DESC LIMIT 1
           ) last ON true
          WHERE ($1::text IS NULL OR u.fleet = $1) AND last.to_state IS DISTINCT FROM u.state",
    ),
    (
        "unit_totals",
        // The totals the readers use (migration 0018) equal the units they count.
        "SELECT coalesce(u.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s units, %s cents in %s', coalesce(u.units, 0), coalesce(u.cost, 0),
                       concat_ws('/', coalesce(u.domain, t.domain), coalesce(u.state, t.state),
                                 coalesce(u.disposition, t.disposition, 'open'),
                                 CASE WHEN coalesce(u.reworked, t.reworked) THEN 'reworked' END)) AS expected,
                format('%s units, %s cents in unit_totals', coalesce(t.units, 0), coalesce(t.cost, 0)) AS found
           FROM (SELECT fleet, domain, state::text AS state, disposition::text AS disposition,
                        attempt_count > 1 AS reworked, count(*) AS units, sum(cost_cents) AS cost
                   FROM work_units WHERE $1::text IS NULL OR fleet = $1
                  GROUP BY 1, 2, 3, 4, 5) u
           FULL JOIN (SELECT fleet, domain, state::text AS state, disposition::text AS disposition, reworked,
                             sum(units) AS units, sum(cost_cents) AS cost
                        FROM unit_totals WHERE $1::text IS NULL OR fleet = $1
                       GROUP BY 1, 2, 3, 4, 5 HAVING sum(units) <> 0 OR sum(cost_cents) <> 0) t
             ON t.fleet = u.fleet AND t.domain = u.domain AND t.state = u.state
            AND t.disposition IS NOT DISTINCT FROM u.disposition AND t.reworked = u.reworked
          WHERE u.units IS DISTINCT FROM t.units OR u.cost IS DISTINCT FROM t.cost",
    ),
    (
        "event_totals",
        // The events counted per type and agent for totalCount (migrations
        // 0019, 0020), and per UTC day and type (0031), equal the events.
        "SELECT coalesce(e.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s %s events of %s', coalesce(e.n, 0), coalesce(e.event_type, t.event_type),
                       coalesce(e.agent_id, t.agent_id, 'no agent')) AS expected,
                format('%s in event_totals', coalesce(t.n, 0)) AS found
           FROM (SELECT fleet, event_type::text AS event_type, agent_id, count(*) AS n FROM work_unit_events
                  WHERE $1::text IS NULL OR fleet = $1 GROUP BY 1, 2, 3) e
           FULL JOIN (SELECT fleet, event_type::text AS event_type, agent_id, sum(events) AS n FROM event_totals
                       WHERE $1::text IS NULL OR fleet = $1 GROUP BY 1, 2, 3 HAVING sum(events) <> 0) t
             ON t.fleet = e.fleet AND t.event_type = e.event_type AND t.agent_id IS NOT DISTINCT FROM e.agent_id
          WHERE e.n IS DISTINCT FROM t.n
         UNION ALL
         -- And per UTC day and type (migration 0031).
         SELECT coalesce(e.fleet, t.fleet), NULL::uuid,
                format('%s %s events on %s', coalesce(e.n, 0), coalesce(e.event_type, t.event_type),
                       coalesce(e.day, t.day)),
                format('%s in event_days', coalesce(t.n, 0))
           FROM (SELECT fleet, ((created_at) AT TIME ZONE 'UTC')::date AS day, event_type::text AS event_type,
                        count(*) AS n
                   FROM work_unit_events WHERE $1::text IS NULL OR fleet = $1 GROUP BY 1, 2, 3) e
           FULL JOIN (SELECT fleet, day, event_type::text AS event_type, sum(events) AS n FROM event_days
                       WHERE $1::text IS NULL OR fleet = $1 GROUP BY 1, 2, 3 HAVING sum(events) <> 0) t
             ON t.fleet = e.fleet AND t.day = e.day AND t.event_type = e.event_type
          WHERE e.n IS DISTINCT FROM t.n",
    ),
    (
        "agent_totals",
        // The units and cost per agent and domain (migration 0020) equal the attempts.
        "SELECT coalesce(a.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s/%s: %s units, %s cents', coalesce(a.agent_id, t.agent_id), coalesce(a.domain, t.domain),
                       coalesce(a.units, 0), coalesce(a.cost, 0)) AS expected,
                format('%s units, %s cents in agent_totals', coalesce(t.units, 0), coalesce(t.cost, 0)) AS found
           FROM (SELECT x.fleet, x.agent_id, u.domain, count(DISTINCT x.unit_id) AS units, sum(x.cost_cents) AS cost
                   FROM work_unit_attempts x JOIN work_units u ON u.id = x.unit_id
                  WHERE $1::text IS NULL OR x.fleet = $1
                  GROUP BY 1, 2, 3) a
           FULL JOIN (SELECT fleet, agent_id, domain, sum(units) AS units, sum(cost_cents) AS cost FROM agent_totals
                       WHERE $1::text IS NULL OR fleet = $1
                       GROUP BY 1, 2, 3 HAVING sum(units) <> 0 OR sum(cost_cents) <> 0) t
             ON t.fleet = a.fleet AND t.agent_id = a.agent_id AND t.domain = a.domain
          WHERE a.units IS DISTINCT FROM t.units OR a.cost IS DISTINCT FROM t.cost",
    ),
    (
        "agent_latest",
        // Each name's latest attempt by (start, id), which the roster reads
        // (migration 0040), is the attempts' latest, and no name has one
        // without attempts.
        "SELECT coalesce(a.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s: %s', coalesce(a.agent_id, t.agent_id),
                       CASE WHEN a.id IS NULL THEN 'no attempt'
                            ELSE format('attempt %s of unit %s at %s', a.id, a.unit_id, a.started_at) END)
                  AS expected,
                CASE WHEN t.attempt_id IS NULL THEN 'nothing'
                     ELSE format('attempt %s of unit %s at %s', t.attempt_id, t.unit_id, t.started_at) END
                  || ' in agent_latest' AS found
           FROM (SELECT DISTINCT ON (fleet, agent_id) fleet, agent_id, id, unit_id, started_at
                   FROM work_unit_attempts
                  WHERE $1::text IS NULL OR fleet = $1
                  ORDER BY fleet, agent_id, started_at DESC, id DESC) a
           FULL JOIN (SELECT fleet, agent_id, attempt_id, unit_id, started_at FROM agent_latest
                       WHERE $1::text IS NULL OR fleet = $1) t
             ON t.fleet = a.fleet AND t.agent_id = a.agent_id
          WHERE (a.id, a.unit_id, a.started_at) IS DISTINCT FROM (t.attempt_id, t.unit_id, t.started_at)",
    ),
    (
        "cost_days",
        // The cost per UTC day (migration 0029), under each unit's group now
        // and per agent of the attempt it was recorded on, with the unit's
        // (or the agent's on it) previous day with cost, equals the records.
        "SELECT coalesce(c.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s: %s', coalesce(c.k, t.k), coalesce(c.v, 'nothing')) AS expected,
                coalesce(t.v, 'nothing') || ' in ' || coalesce(t.tab, 'the cost days') AS found
           FROM (SELECT d.fleet,
                        concat_ws('/', d.day, coalesce('agent ' || d.agent_id, u.state || '/'
                                                       || coalesce(u.disposition::text, 'OPEN')),
                                  u.domain, coalesce('after ' || d.prior_day, 'first')) AS k,
                        format('%s units, %s cents', count(*), sum(d.cost_cents)) AS v
                   FROM cost_unit_days(ARRAY(SELECT id FROM work_units WHERE $1::text IS NULL OR fleet = $1),
                                       9223372036854775807) d
                   JOIN work_units u ON u.id = d.unit_id
                  GROUP BY 1, 2) c
           FULL JOIN (SELECT fleet, tab, k, format('%s units, %s cents', sum(units), sum(cost_cents)) AS v
                        FROM (SELECT fleet, 'cost_days' AS tab, units, cost_cents,
                                     concat_ws('/', day, state || '/' || coalesce(disposition::text, 'OPEN'), domain,
                                               coalesce('after ' || prior_day, 'first')) AS k
                                FROM cost_days WHERE $1::text IS NULL OR fleet = $1
                              UNION ALL
                              SELECT fleet, 'agent_cost_days', units, cost_cents,
                                     concat_ws('/', day, 'agent ' || agent_id, domain,
                                               coalesce('after ' || prior_day, 'first'))
                                FROM agent_cost_days WHERE $1::text IS NULL OR fleet = $1) r
                       GROUP BY 1, 2, 3 HAVING sum(units) <> 0 OR sum(cost_cents) <> 0) t
             ON t.fleet = c.fleet AND t.k = c.k
          WHERE c.v IS DISTINCT FROM t.v",
    ),
    (
        "disposal_days",
        // The disposals per UTC day (migration 0020), per UTC week (its
        // sum by week, 0032) and per UTC day of every domain together (its
        // sum over the domains, '' in a finding; 0041) equal the disposed units.
        "SELECT coalesce(u.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s: %s', concat_ws('/', coalesce(u.start, t.start), nullif(coalesce(u.domain, t.domain), ''),
                                           coalesce(u.disposition, t.disposition)),
                       coalesce(u.counts, 'nothing')) AS expected,
                coalesce(t.counts, 'nothing') || ' in ' || coalesce(t.tab, u.tab) AS found
           FROM (SELECT k.tab, fleet,
                        CASE WHEN k.tab = 'disposal_weeks' THEN date_trunc('week', (d.day)::timestamp)::date
                             ELSE d.day END::text AS start,
                        CASE WHEN k.tab = 'disposal_fleet_days' THEN '' ELSE domain END AS domain,
                        disposition::text AS disposition,
                        format('%s units, %s cents, %s reworked, %s verified for %s cents', count(*), sum(cost_cents),
                               count(*) FILTER (WHERE attempt_count > 1),
                               count(*) FILTER (WHERE cost_cents > 0 AND cardinality(evidence_urls) > 0),
                               coalesce(sum(cost_cents) FILTER (WHERE cost_cents > 0
                                                                  AND cardinality(evidence_urls) > 0), 0)) AS counts
                   FROM work_units
                  CROSS JOIN LATERAL (SELECT ((disposed_at) AT TIME ZONE 'UTC')::date AS day) d
                  CROSS JOIN (VALUES ('disposal_days'), ('disposal_weeks'), ('disposal_fleet_days')) AS k(tab)
                  WHERE ($1::text IS NULL OR fleet = $1) AND disposition IS NOT NULL
                  GROUP BY 1, 2, 3, 4, 5) u
           FULL JOIN (SELECT tab, fleet, start, domain, disposition::text AS disposition,
                             format('%s units, %s cents, %s reworked, %s verified for %s cents', sum(units),
                                    sum(cost_cents), sum(reworked), sum(verified_units), sum(verified_cost_cents))
                               AS counts
                        FROM (SELECT 'disposal_days' AS tab, fleet, day::text AS start, domain, disposition, units,
                                     cost_cents, reworked, verified_units, verified_cost_cents
                                FROM disposal_days WHERE $1::text IS NULL OR fleet = $1
                              UNION ALL
                              SELECT 'disposal_weeks', fleet, week::text, domain, disposition, units, cost_cents,
                                     reworked, verified_units, verified_cost_cents
                                FROM disposal_weeks WHERE $1::text IS NULL OR fleet = $1
                              UNION ALL
                              SELECT 'disposal_fleet_days', fleet, day::text, '', disposition, units, cost_cents,
                                     reworked, verified_units, verified_cost_cents
                                FROM disposal_fleet_days WHERE $1::text IS NULL OR fleet = $1) r
                       GROUP BY 1, 2, 3, 4, 5
                      HAVING sum(units) <> 0 OR sum(cost_cents) <> 0 OR sum(reworked) <> 0 OR sum(verified_units) <> 0
                          OR sum(verified_cost_cents) <> 0) t
             ON t.tab = u.tab AND t.fleet = u.fleet AND t.start IS NOT DISTINCT FROM u.start AND t.domain = u.domain
            AND t.disposition = u.disposition
          WHERE u.counts IS DISTINCT FROM t.counts",
    ),
    (
        "disposal_agents",
        // The distinct agents of the units disposed per day and week, per
        // domain and for every domain (''), equal their attempts' agents.
        "SELECT coalesce(r.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s agents in %s', coalesce(r.agents, 0),
                       concat_ws('/', CASE WHEN coalesce(r.week, t.week) THEN 'week' ELSE 'day' END,
                                 coalesce(r.start, t.start), nullif(coalesce(r.domain, t.domain), ''),
                                 coalesce(r.disposition, t.disposition))) AS expected,
                format('%s in disposal_agent_counts', coalesce(t.agents, 0)) AS found
           FROM (SELECT fleet, week, start, domain, disposition, count(DISTINCT agent_id) AS agents
                   FROM (SELECT u.fleet, k.week,
                                CASE WHEN k.week THEN date_trunc('week', (((u.disposed_at) AT TIME ZONE 'UTC')::date)::timestamp)::date
                                     ELSE ((u.disposed_at) AT TIME ZONE 'UTC')::date END AS start,
                                CASE WHEN k.every THEN '' ELSE u.domain END AS domain, u.disposition::text AS disposition,
                                a.agent_id
                           FROM work_units u JOIN work_unit_attempts a ON a.unit_id = u.id
                          CROSS JOIN (VALUES (false, false), (false, true), (true, false), (true, true)) AS k(week, every)
                          WHERE ($1::text IS NULL OR u.fleet = $1) AND u.disposition IS NOT NULL) x
                  GROUP BY 1, 2, 3, 4, 5) r
           FULL JOIN (SELECT fleet, week, start, domain, disposition::text AS disposition, sum(agents) AS agents
                        FROM disposal_agent_counts WHERE $1::text IS NULL OR fleet = $1
                       GROUP BY 1, 2, 3, 4, 5 HAVING sum(agents) <> 0) t
             ON t.fleet = r.fleet AND t.week = r.week AND t.start = r.start AND t.domain = r.domain
            AND t.disposition = r.disposition
          WHERE r.agents IS DISTINCT FROM t.agents",
    ),
    (
        "claim_days",
        // The claims per UTC day of their start (migration 0020) equal the
        // attempts: how many, by how many agents, verified, stale, never
        // started; and the never-started attempts are exactly those ended
        // with no `transitioned` event.
        "SELECT coalesce(a.fleet, t.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s: %s', coalesce(a.day, t.day), coalesce(a.counts, 'nothing')) AS expected,
                coalesce(t.counts, 'nothing') || ' in claim_days' AS found
           FROM (SELECT fleet, ((started_at) AT TIME ZONE 'UTC')::date::text AS day,
                        format('%s claims by %s agents, %s verified, %s stale, %s never started', count(*),
                               count(DISTINCT agent_id), count(*) FILTER (WHERE outcome = 'verified'),
                               count(*) FILTER (WHERE outcome = 'superseded' OR EXISTS (
                                   SELECT 1 FROM work_unit_events e WHERE e.attempt_id = x.id AND e.event_type = 'stalled')),
                               count(*) FILTER (WHERE outcome IS NOT NULL AND NOT EXISTS (
                                   SELECT 1 FROM work_unit_events e WHERE e.unit_id = x.unit_id AND e.attempt_id = x.id
                                      AND e.event_type = 'transitioned'))) AS counts
                   FROM work_unit_attempts x WHERE $1::text IS NULL OR fleet = $1
                  GROUP BY 1, 2) a
           FULL JOIN (SELECT fleet, day::text AS day,
                             format('%s claims by %s agents, %s verified, %s stale, %s never started', sum(claims),
                                    sum(agents), sum(verified), sum(stale), sum(never_started)) AS counts
                        FROM claim_days WHERE $1::text IS NULL OR fleet = $1
                       GROUP BY 1, 2
                      HAVING sum(claims) <> 0 OR sum(agents) <> 0 OR sum(verified) <> 0 OR sum(stale) <> 0
                          OR sum(never_started) <> 0) t
             ON t.fleet = a.fleet AND t.day = a.day
          WHERE a.counts IS DISTINCT FROM t.counts
         UNION ALL
         SELECT coalesce(x.fleet, n.fleet), coalesce(x.unit_id, t2.unit_id),
                CASE WHEN x.id IS NULL THEN 'started or not ended' ELSE 'ended, never started' END,
                'attempt ' || coalesce(x.id, n.attempt_id)
                  || CASE WHEN n.attempt_id IS NULL THEN ' not in never_started' ELSE ' in never_started' END
           FROM (SELECT a.id, a.fleet, a.unit_id FROM work_unit_attempts a
                  WHERE ($1::text IS NULL OR a.fleet = $1) AND a.outcome IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM work_unit_events e WHERE e.unit_id = a.unit_id AND e.attempt_id = a.id
                                       AND e.event_type = 'transitioned')) x
           FULL JOIN (SELECT * FROM never_started WHERE $1::text IS NULL OR fleet = $1) n ON n.attempt_id = x.id
           LEFT JOIN work_unit_attempts t2 ON t2.id = n.attempt_id
          WHERE x.id IS NULL OR n.attempt_id IS NULL",
    ),
    (
        "cycle_weeks",
        // The cycle times kept for the weeks that ended (migration 0020)
        // equal the same weeks computed from the rows.
        "SELECT coalesce(r.fleet, c.fleet) AS fleet, NULL::uuid AS unit_id,
                format('%s: %s', coalesce(r.week, c.week), coalesce(r.v, 'no disposal')) AS expected,
                coalesce(c.v, 'nothing') || ' in cycle_weeks' AS found
           FROM (SELECT r.fleet, (r.week AT TIME ZONE 'UTC')::date::text AS week,
                        format('%s units, median %s s, p90 %s s', r.units, r.median_seconds, r.p90_seconds) AS v
                   FROM cycle_time_by_rows(NULL, NULL) r
                   JOIN cycle_weeks_until m ON m.fleet = r.fleet AND (r.week AT TIME ZONE 'UTC')::date < m.until
                  WHERE $1::text IS NULL OR r.fleet = $1) r
           FULL JOIN (SELECT c.fleet, c.week::text AS week,
                             format('%s units, median %s s, p90 %s s', c.units, c.median_seconds, c.p90_seconds) AS v
                        FROM cycle_weeks c JOIN cycle_weeks_until m ON m.fleet = c.fleet AND c.week < m.until
                       WHERE $1::text IS NULL OR c.fleet = $1) c
             ON c.fleet = r.fleet AND c.week = r.week
          WHERE r.v IS DISTINCT FROM c.v",
    ),
    (
        "no_orphans",
        // Foreign keys forbid these; a restore or disabled triggers may not.
        "SELECT a.fleet, a.unit_id, 'a unit' AS expected, 'attempt ' || a.id || ' without its unit' AS found
           FROM work_unit_attempts a
          WHERE ($1::text IS NULL OR a.fleet = $1) AND NOT EXISTS (SELECT 1 FROM work_units u WHERE u.id = a.unit_id)
         UNION ALL
         SELECT e.fleet, e.unit_id, 'a unit', 'event ' || e.id || ' without its unit'
           FROM work_unit_events e
          WHERE ($1::text IS NULL OR e.fleet = $1) AND NOT EXISTS (SELECT 1 FROM work_units u WHERE u.id = e.unit_id)
         UNION ALL
         SELECT e.fleet, e.unit_id, 'an attempt', 'event ' || e.id || ' names a missing attempt'
           FROM work_unit_events e
          WHERE ($1::text IS NULL OR e.fleet = $1) AND e.attempt_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM work_unit_attempts a WHERE a.id = e.attempt_id)
         UNION ALL
         SELECT q.fleet, q.unit_id, 'a unit', 'question ' || q.id || ' without its unit'
           FROM blocking_questions q
          WHERE ($1::text IS NULL OR q.fleet = $1) AND NOT EXISTS (SELECT 1 FROM work_units u WHERE u.id = q.unit_id)
         UNION ALL
         SELECT u.fleet, u.id, 'an attempt', 'current attempt ' || u.current_attempt_id || ' is missing'
           FROM work_units u
          WHERE ($1::text IS NULL OR u.fleet = $1) AND u.current_attempt_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM work_unit_attempts a WHERE a.id = u.current_attempt_id)",
    ),
    (
        "ledger_logins_confined",
        // What a login the ledger hands out could fill is the cluster's
        // (SPEC §8): reader logins reach no other database and have a
        // connection limit, and nobody but the ledger's own roles takes
        // advisory locks in its database.
        "SELECT f.fleet, NULL::uuid AS unit_id, 'no other database of the cluster' AS expected,
                'reader login ' || f.role_name || ' may connect to database ' || d.datname AS found
           FROM fleet_readers f JOIN pg_roles r ON r.rolname = f.role_name CROSS JOIN pg_database d
          WHERE ($1::text IS NULL OR f.fleet = $1) AND d.datallowconn AND d.datname <> current_database()
            AND has_database_privilege(f.role_name, d.datname, 'CONNECT')
         UNION ALL
         SELECT f.fleet, NULL, 'a connection limit of at most 4', 'reader login ' || f.role_name || ' has '
                || CASE WHEN r.rolconnlimit < 0 THEN 'none' ELSE r.rolconnlimit::text END
           FROM fleet_readers f JOIN pg_roles r ON r.rolname = f.role_name
          WHERE ($1::text IS NULL OR f.fleet = $1) AND (r.rolconnlimit < 0 OR r.rolconnlimit > 4)
         UNION ALL
         SELECT '*', NULL, 'advisory locks for the ledger''s own roles only', 'PUBLIC may call ' || p.oid::regprocedure
           FROM pg_proc p
          WHERE $1::text IS NULL AND p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ '^pg_(try_)?advisory_'
            AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
                                              WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))",
    ),
];

/// Runs every rule in one read-only snapshot, for `fleet` or all fleets.
pub async fn run(db: &DatabaseConnection, fleet: Option<&str>) -> Result<Vec<Finding>, DbErr> {
    let tx = crate::db::begin(db).await?;
    // One snapshot for every rule, and a guarantee that the audit writes nothing.
    tx.execute_unprepared("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?;
    let mut findings = Vec::new();
    for (rule, sql) in RULES {
        let rows = tx.query_all_raw(stmt(sql, [fleet.map(str::to_owned).into()])).await?;
        for row in rows {
            findings.push(Finding {
                fleet: row.try_get("", "fleet")?,
                unit_id: row.try_get("", "unit_id")?,
                rule: (*rule).to_owned(),
                expected: row.try_get("", "expected")?,
                found: row.try_get("", "found")?,
            });
        }
    }
    tx.commit().await?;
    Ok(findings)
}

/// Records a run's result (findings per rule, every rule named) for the
/// metrics; `fleet` `None` is the scope `*`.
pub async fn record(db: &DatabaseConnection, fleet: Option<&str>, findings: &[Finding]) -> Result<(), DbErr> {
    let per_rule: serde_json::Map<String, serde_json::Value> =
        rules().map(|rule| (rule.to_owned(), findings.iter().filter(|f| f.rule == rule).count().into())).collect();
    db.execute_raw(stmt(
        "INSERT INTO audit_runs (scope, findings) VALUES ($1, $2)",
        [fleet.unwrap_or(ALL_FLEETS).into(), serde_json::Value::Object(per_rule).into()],
    ))
    .await?;
    Ok(())
}

/// The scope of an audit of every fleet.
pub const ALL_FLEETS: &str = "*";

/// The last recorded run of each scope (what the metrics export).
pub async fn last_runs(db: &DatabaseConnection) -> Result<Vec<AuditSample>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT DISTINCT ON (scope) scope, extract(epoch FROM finished_at)::float8 AS finished_at, findings
               FROM audit_runs ORDER BY scope, finished_at DESC",
            [],
        ))
        .await?;
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        let findings: serde_json::Value = row.try_get("", "findings")?;
        let findings = findings
            .as_object()
            .map(|rules| rules.iter().map(|(rule, n)| (rule.clone(), n.as_i64().unwrap_or(0))).collect())
            .unwrap_or_default();
        runs.push(AuditSample {
            scope: row.try_get("", "scope")?,
            finished_at: row.try_get("", "finished_at")?,
            findings,
        });
    }
    Ok(runs)
}

/// The names of the rules, in the order they run.
pub fn rules() -> impl Iterator<Item = &'static str> {
    RULES.iter().map(|(rule, _)| *rule)
}
