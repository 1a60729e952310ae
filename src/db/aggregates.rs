//! The operator's aggregates (SPEC §7): cost per group, throughput per
//! bucket and the North Star views of migration 0007. Like every read, each
//! runs inside `in_fleet` with an explicit `fleet = $1` on top of RLS.

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseTransaction, DbErr, FromQueryResult};

use super::reads::{Query, Range};
use super::stmt;

/// What `costSummary` groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostGroup {
    Domain,
    Disposition,
    State,
    Agent,
}

/// Units and cost of one group of `costSummary`.
#[derive(Debug, Clone, FromQueryResult)]
pub struct CostSummaryRow {
    pub key: String,
    pub units: i64,
    pub cost_cents: i64,
}

/// Cost per group, open units included. Unbounded, every unit counts (with
/// its whole cost); with a range, the cost recorded in it (from the
/// `cost_recorded` events) and the units it was recorded for. AGENT groups
/// by the agent of the attempt the cost was recorded on.
pub async fn cost_summary(
    tx: &DatabaseTransaction,
    fleet: &str,
    group: CostGroup,
    range: &Range,
    domain: Option<&str>,
) -> Result<Vec<CostSummaryRow>, DbErr> {
    let key = match group {
        CostGroup::Domain => "u.domain",
        CostGroup::Disposition => "coalesce(u.disposition::text, 'OPEN')",
        CostGroup::State => "upper(u.state::text)",
        CostGroup::Agent => "a.agent_id",
    };
    let bounded = range.from.is_some() || range.until.is_some();
    // Per (key, unit) first, then per key: a unit counts once in its group
    // (an agent may have several attempts on it) without count(DISTINCT).
    let from = match (bounded, group) {
        (false, CostGroup::Agent) if domain.is_some() => {
            "work_unit_attempts a JOIN work_units u ON u.id = a.unit_id WHERE a.fleet = "
        }
        (false, CostGroup::Agent) => "work_unit_attempts a WHERE a.fleet = ",
        (false, _) => "work_units u WHERE u.fleet = ",
        (true, CostGroup::Agent) => {
            "work_unit_events e JOIN work_unit_attempts a ON a.id = e.attempt_id JOIN work_units u ON u.id = e.unit_id \
             WHERE e.event_type = 'cost_recorded' AND e.fleet = "
        }
        (true, _) => {
            "work_unit_events e JOIN work_units u ON u.id = e.unit_id WHERE e.event_type = 'cost_recorded' AND e.fleet = "
        }
    };
    // One row per unit already (no inner grouping) when reading work_units alone.
    let (unit, cost, per_unit) = match (bounded, group) {
        (false, CostGroup::Agent) => ("a.unit_id", "sum(a.cost_cents)", " GROUP BY 1, 2"),
        (false, _) => ("u.id", "u.cost_cents", ""),
        (true, _) => ("e.unit_id", "sum(e.cost_delta_cents)", " GROUP BY 1, 2"),
    };
    let mut q = Query::new(&format!(
        "SELECT key, count(*) AS units, coalesce(sum(cost), 0)::bigint AS cost_cents FROM (\
           SELECT {key} AS key, {unit} AS unit, {cost} AS cost FROM {from}"
    ));
    let p = q.bind(fleet);
    q.push(&p);
    if bounded {
        q.range("e.created_at", range);
    }
    if let Some(domain) = domain {
        q.and("u.domain = {}", domain.to_owned());
    }
    q.push(per_unit);
    q.push(") AS per_unit GROUP BY 1 ORDER BY 1");
    q.rows(tx).await
}

/// Units disposed per bucket and disposition (the `throughput` SQL function
/// of migration 0007, which the v_throughput_* views read too).
#[derive(Debug, Clone, FromQueryResult)]
pub struct ThroughputRow {
    pub start: DateTime<Utc>,
    pub disposition: String,
    pub units: i64,
    pub cost_cents: i64,
    pub distinct_agents: i64,
}

pub async fn throughput(
    tx: &DatabaseTransaction,
    fleet: &str,
    bucket: &str,
    range: &Range,
    domain: Option<&str>,
) -> Result<Vec<ThroughputRow>, DbErr> {
    let sql = "SELECT t.start, t.disposition::text AS disposition, t.units, t.cost_cents, t.distinct_agents \
                 FROM throughput($2, $3, $4, $5) t WHERE t.fleet = $1 ORDER BY t.start, t.disposition";
    let values = [fleet.into(), bucket.into(), range.from.into(), range.until.into(), domain.map(str::to_owned).into()];
    ThroughputRow::find_by_statement(stmt(sql, values)).all(tx).await
}

/// One week of the North Star metrics (`v_claims_weekly`,
/// `v_rework_rate_weekly`, `v_verified_throughput_weekly`, `v_cycle_time_weekly`).
#[derive(Debug, Clone, FromQueryResult)]
pub struct WeekRow {
    pub week: DateTime<Utc>,
    pub claims: i64,
    pub verified_claims: i64,
    pub conversion: Option<f64>,
    pub stale_claims: i64,
    pub stale_claim_rate: Option<f64>,
    pub never_started: i64,
    pub disposed: i64,
    pub reworked: i64,
    pub rework_rate: Option<f64>,
    pub verified_units: i64,
    pub verified_cost_cents: i64,
    pub median_cycle_seconds: Option<f64>,
    pub p90_cycle_seconds: Option<f64>,
}

/// Every week with a claim or a disposition in `[from, until)` (weeks by their Monday).
pub async fn weekly(tx: &DatabaseTransaction, fleet: &str, range: &Range) -> Result<Vec<WeekRow>, DbErr> {
    let sql = "WITH c AS (SELECT * FROM v_claims_weekly WHERE fleet = $1),
                    r AS (SELECT * FROM v_rework_rate_weekly WHERE fleet = $1),
                    v AS (SELECT * FROM v_verified_throughput_weekly WHERE fleet = $1),
                    t AS (SELECT * FROM v_cycle_time_weekly WHERE fleet = $1),
                    w AS (SELECT week FROM c UNION SELECT week FROM r)
               SELECT w.week, coalesce(c.claims, 0) AS claims, coalesce(c.verified, 0) AS verified_claims,
                      c.conversion::float8 AS conversion, coalesce(c.stale, 0) AS stale_claims,
                      c.stale_rate::float8 AS stale_claim_rate, coalesce(c.never_transitioned, 0) AS never_started,
                      coalesce(r.disposed, 0) AS disposed, coalesce(r.reworked, 0) AS reworked,
                      r.rework_rate::float8 AS rework_rate, coalesce(v.units, 0) AS verified_units,
                      coalesce(v.cost_cents, 0)::bigint AS verified_cost_cents,
                      t.median_seconds AS median_cycle_seconds, t.p90_seconds AS p90_cycle_seconds
                 FROM w LEFT JOIN c USING (week) LEFT JOIN r USING (week) LEFT JOIN v USING (week)
                 LEFT JOIN t USING (week)
                WHERE w.week >= coalesce($2, '-infinity') AND w.week < coalesce($3, 'infinity')
                ORDER BY w.week";
    WeekRow::find_by_statement(stmt(sql, [fleet.into(), range.from.into(), range.until.into()])).all(tx).await
}

/// Distinct agents that claimed, per UTC day (`v_claiming_agents_daily`).
#[derive(Debug, Clone, FromQueryResult)]
pub struct DayRow {
    pub day: DateTime<Utc>,
    pub agents: i64,
    pub claims: i64,
}

pub async fn claiming_agents(tx: &DatabaseTransaction, fleet: &str, range: &Range) -> Result<Vec<DayRow>, DbErr> {
    let sql = "SELECT day, agents, claims FROM v_claiming_agents_daily
                WHERE fleet = $1 AND day >= coalesce($2, '-infinity') AND day < coalesce($3, 'infinity')
                ORDER BY day";
    DayRow::find_by_statement(stmt(sql, [fleet.into(), range.from.into(), range.until.into()])).all(tx).await
}
