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
              WHERE ($1::text IS NULL OR u.fleet = $1) AND u.state = ANY (ledger_held_states())
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
          WHERE ($1::text IS NULL OR u.fleet = $1) AND u.state = ANY (ledger_working_states())
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
        // The first claim a unit carries (for the cycle
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
    // The read models (projections.sql): each projection's tables plus its
    // tail against the fold of the whole log.
    ("unit_totals", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('unit_totals', $1)"),
    ("events", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('events', $1)"),
    ("disposals", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('disposals', $1)"),
    ("claims", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('claims', $1)"),
    ("agent_totals", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('agent_totals', $1)"),
    ("agent_latest", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('agent_latest', $1)"),
    ("cost_days", "SELECT fleet, NULL::uuid AS unit_id, expected, found FROM ledger_projection_drift('cost_days', $1)"),
    (
        "cycle_weeks",
        // The cycle times kept for the weeks that ended
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
