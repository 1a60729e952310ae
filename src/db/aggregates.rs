//! The operator's aggregates (SPEC §7): cost per group, throughput per
//! bucket and the North Star views. Like every read, each
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
///
/// Every form reads totals (the unit totals, the agent totals, the cost
/// days), and names its key only on the grouped rows.
pub async fn cost_summary(
    tx: &DatabaseTransaction,
    fleet: &str,
    group: CostGroup,
    range: &Range,
    domain: Option<&str>,
) -> Result<Vec<CostSummaryRow>, DbErr> {
    cost_summary_query(fleet, group, range, domain).rows(tx).await
}

/// The statement of [`cost_summary`] (the reads bench explains it).
pub fn cost_summary_query(fleet: &str, group: CostGroup, range: &Range, domain: Option<&str>) -> Query {
    let bounded = range.from.is_some() || range.until.is_some();
    let mut q = match (bounded, group) {
        (false, CostGroup::Agent) => agent_cost(fleet, domain),
        (false, _) => unit_cost(fleet, group, domain),
        (true, _) => cost_in(fleet, group, range, domain),
    };
    q.push(" ORDER BY 1");
    q
}

/// Units and cost of the whole fleet (key `TOTAL`) with the arguments of
/// `costSummary`: the sum of its groups by domain, in one statement around
/// that very query, so it equals the sum of the groups by DOMAIN, STATE or
/// DISPOSITION (each unit is in exactly one of those groups) to the cent.
pub async fn cost_total(
    tx: &DatabaseTransaction,
    fleet: &str,
    range: &Range,
    domain: Option<&str>,
) -> Result<CostSummaryRow, DbErr> {
    let rows: Vec<CostSummaryRow> = cost_total_query(fleet, range, domain).rows(tx).await?;
    // An aggregate without GROUP BY answers one row, zeros on an empty fleet.
    Ok(rows.into_iter().next().unwrap_or(CostSummaryRow { key: TOTAL.to_owned(), units: 0, cost_cents: 0 }))
}

/// The key of [`cost_total`]'s row.
pub const TOTAL: &str = "TOTAL";

/// The statement of [`cost_total`].
pub fn cost_total_query(fleet: &str, range: &Range, domain: Option<&str>) -> Query {
    cost_summary_query(fleet, CostGroup::Domain, range, domain).around(
        &format!(
            "SELECT '{TOTAL}' AS key, coalesce(sum(g.units), 0)::bigint AS units, \
                    coalesce(sum(g.cost_cents), 0)::bigint AS cost_cents FROM ("
        ),
        ") AS g",
    )
}

/// The group of a unit, on columns of `alias` (the grouped rows).
fn unit_key(group: CostGroup, alias: &str) -> String {
    match group {
        CostGroup::Disposition => format!("coalesce({alias}.disposition::text, 'OPEN')"),
        CostGroup::State => format!("upper({alias}.state::text)"),
        CostGroup::Domain | CostGroup::Agent => format!("{alias}.domain"),
    }
}

/// Unbounded, by domain, state or disposition: regroups the few rows of
/// `v_cost_groups` (one per domain, state and disposition).
fn unit_cost(fleet: &str, group: CostGroup, domain: Option<&str>) -> Query {
    let mut q = Query::new(&format!(
        "SELECT {} AS key, sum(g.units)::bigint AS units, sum(g.cost_cents)::bigint AS cost_cents \
           FROM v_cost_groups g WHERE g.fleet = ",
        unit_key(group, "g")
    ));
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("g.domain = {}", domain.to_owned());
    }
    q.push(" GROUP BY 1");
    q
}

/// Unbounded, by agent: the agent totals and their tail (projections.sql),
/// the units each agent made attempts on (each once, however many attempts)
/// and the cost of its attempts, per domain.
fn agent_cost(fleet: &str, domain: Option<&str>) -> Query {
    let mut q = Query::new(
        "SELECT t.agent_id AS key, sum(t.units)::bigint AS units, sum(t.cost_cents)::bigint AS cost_cents \
           FROM (SELECT a.fleet, a.agent_id, a.domain, a.units, a.cost_cents FROM agent_totals a WHERE a.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&format!(
        "{p} UNION ALL SELECT a.fleet, a.agent_id, a.domain, a.units, a.cost_cents FROM agent_totals_tail({p}) a) t \
          WHERE t.fleet = {p}"
    ));
    if let Some(domain) = domain {
        q.and("t.domain = {}", domain.to_owned());
    }
    q.push(" GROUP BY 1 HAVING sum(t.units) <> 0");
    q
}

/// Over a range, by any group: the units and cost recorded in it
/// (`cost_recorded_in`: the whole UTC days from the cost
/// days, the cut ends from their records), per unit's group now or per
/// agent of the attempt the cost was recorded on. Cost recorded without an
/// attempt has no agent.
fn cost_in(fleet: &str, group: CostGroup, range: &Range, domain: Option<&str>) -> Query {
    let key = match group {
        CostGroup::Agent => "g.agent_id".to_owned(),
        _ => unit_key(group, "g"),
    };
    let mut q = Query::new(&format!(
        "SELECT {key} AS key, sum(g.units)::bigint AS units, sum(g.cost_cents)::bigint AS cost_cents \
           FROM cost_recorded_in("
    ));
    let args = [
        fleet.into(),
        (group == CostGroup::Agent).into(),
        range.from.into(),
        range.until.into(),
        domain.map(str::to_owned).into(),
    ]
    .map(|v: sea_orm::Value| q.bind(v))
    .join(", ");
    q.push(&format!("{args}) g GROUP BY 1 HAVING sum(g.units) <> 0"));
    q
}

/// Units disposed per bucket and disposition (the `throughput` SQL function
///, which the v_throughput_* views read too), with the
/// totals of the row's whole bucket (every disposition).
#[derive(Debug, Clone)]
pub struct ThroughputRow {
    pub start: DateTime<Utc>,
    pub disposition: String,
    pub units: i64,
    pub cost_cents: i64,
    pub distinct_agents: i64,
    pub bucket_units: i64,
    pub bucket_cost_cents: i64,
}

/// A row of [`throughput_query`].
#[derive(Debug, Clone, FromQueryResult)]
struct Disposed {
    start: DateTime<Utc>,
    disposition: String,
    units: i64,
    cost_cents: i64,
    distinct_agents: i64,
}

pub async fn throughput(
    tx: &DatabaseTransaction,
    fleet: &str,
    bucket: &str,
    range: &Range,
    domain: Option<&str>,
) -> Result<Vec<ThroughputRow>, DbErr> {
    let rows: Vec<Disposed> = throughput_query(fleet, bucket, range, domain).rows(tx).await?;
    Ok(with_bucket_totals(rows))
}

/// Each row with the sums of its bucket's rows, which the statement returns
/// together (ordered by bucket): the totals are the very rows returned,
/// added up, so they equal the sum of the bucket's rows exactly. (Summed here
/// rather than by a window in the statement, which sorted the rows once more
/// inside PostgreSQL: docs/BENCHMARKS.md, round 3, session 23.)
fn with_bucket_totals(rows: Vec<Disposed>) -> Vec<ThroughputRow> {
    let totals: Vec<(i64, i64)> = rows
        .chunk_by(|a, b| a.start == b.start)
        .flat_map(|bucket| {
            let sum = bucket.iter().fold((0, 0), |(u, c), r| (u + r.units, c + r.cost_cents));
            std::iter::repeat_n(sum, bucket.len())
        })
        .collect();
    rows.into_iter()
        .zip(totals)
        .map(|(r, (bucket_units, bucket_cost_cents))| ThroughputRow {
            start: r.start,
            disposition: r.disposition,
            units: r.units,
            cost_cents: r.cost_cents,
            distinct_agents: r.distinct_agents,
            bucket_units,
            bucket_cost_cents,
        })
        .collect()
}

/// The statement of [`throughput`] (the reads bench explains it): the rows
/// ordered by bucket, then disposition (in the enum's order).
pub fn throughput_query(fleet: &str, bucket: &str, range: &Range, domain: Option<&str>) -> Query {
    let mut q = Query::new(
        "SELECT t.start, t.disposition::text AS disposition, t.units, t.cost_cents, t.distinct_agents \
           FROM throughput(",
    );
    let args = [bucket.into(), range.from.into(), range.until.into(), domain.map(str::to_owned).into()]
        .map(|v: sea_orm::Value| q.bind(v))
        .join(", ");
    q.push(&format!("{args}) t WHERE t.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    q.push(" ORDER BY t.start, t.disposition");
    q
}

/// The `totalCount` of `dispositions` over a range of `disposed_at`: the
/// units of [`throughput_query`] by day over that range (the days inside it
/// from the day totals, the days it cuts from the rows).
pub fn disposals_counted(fleet: &str, disposed: &Range, disposition: Option<&str>, domain: Option<&str>) -> Query {
    let mut q = throughput_query(fleet, "day", disposed, domain)
        .around("SELECT coalesce(sum(d.units), 0)::bigint AS n FROM (", ") AS d WHERE true");
    if let Some(disposition) = disposition {
        q.and("d.disposition = {}", disposition.to_owned());
    }
    q
}

// One week of the North Star metrics (`v_claims_weekly`,
// `v_rework_rate_weekly`, `v_verified_throughput_weekly`, read from the day
// totals, and `cycle_time_weekly`, which reads only the disposals of the
// weeks asked for), the API's `WeekMetrics` as it is.
/// The North Star metrics of one week (UTC, from Monday): claims made that
/// week and what became of them, units disposed that week, and their cycle time.
#[derive(Debug, Clone, FromQueryResult, async_graphql::SimpleObject)]
#[graphql(name = "WeekMetrics", serial)]
pub struct WeekRow {
    /// The week's Monday, 00:00 UTC.
    pub week: DateTime<Utc>,
    /// Claims (attempts) started in the week.
    pub claims: i64,
    /// Of those, the ones that ended verified.
    pub verified_claims: i64,
    /// verifiedClaims / claims (null without claims).
    pub conversion: Option<f64>,
    /// Of the week's claims, those that went stale (reported stalled, or superseded by a reclaim).
    pub stale_claims: i64,
    pub stale_claim_rate: Option<f64>,
    /// Of the week's claims, those that ended without the unit ever being started (the anti-metric).
    pub never_started: i64,
    /// Units disposed in the week.
    pub disposed: i64,
    /// Of those, the ones that needed more than one attempt.
    pub reworked: i64,
    pub rework_rate: Option<f64>,
    /// Units disposed in the week with evidence and a recorded cost (verified throughput).
    pub verified_units: i64,
    pub verified_cost_cents: i64,
    /// Median seconds from first claim to disposition of the units disposed in the week.
    pub median_cycle_seconds: Option<f64>,
    pub p90_cycle_seconds: Option<f64>,
}

/// Every week with a claim or a disposition in `[from, until)` (weeks by their Monday).
pub async fn weekly(tx: &DatabaseTransaction, fleet: &str, range: &Range) -> Result<Vec<WeekRow>, DbErr> {
    let sql = "WITH c AS (SELECT * FROM v_claims_weekly WHERE fleet = $1),
                    r AS (SELECT * FROM v_rework_rate_weekly WHERE fleet = $1),
                    v AS (SELECT * FROM v_verified_throughput_weekly WHERE fleet = $1),
                    t AS (SELECT * FROM cycle_time_weekly($2, $3) WHERE fleet = $1),
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

// Distinct agents that claimed, per UTC day (`v_claiming_agents_daily`);
// on the current day, how many of them now hold a unit with a live lease,
// a BLOCKED unit, or a unit whose lease expired (NULL on earlier days): the
// API's `ClaimingAgents` as it is.
/// Agents that claimed on one UTC day and, on the current day, which of
/// them are still alive.
#[derive(Debug, Clone, FromQueryResult, async_graphql::SimpleObject)]
#[graphql(name = "ClaimingAgents", serial)]
pub struct DayRow {
    pub day: DateTime<Utc>,
    /// Distinct agents that claimed.
    pub agents: i64,
    pub claims: i64,
    /// Of `agents`, those that now hold a CLAIMED or IN_PROGRESS unit under a
    /// live lease (`agents` status ACTIVE). Set on the current UTC day's row
    /// only: null on earlier days, a lease being a fact of now.
    pub live: Option<i64>,
    /// Of `agents`, those that now hold a BLOCKED unit (status BLOCKED).
    /// Current day only, as `live`.
    pub blocked: Option<i64>,
    /// Of `agents`, those that now hold a CLAIMED or IN_PROGRESS unit whose
    /// lease expired without a heartbeat (status SILENT: the ghosts). Current
    /// day only, as `live`. The rest of `agents` hold nothing now.
    pub silent: Option<i64>,
}

pub async fn claiming_agents(tx: &DatabaseTransaction, fleet: &str, range: &Range) -> Result<Vec<DayRow>, DbErr> {
    let sql = "SELECT day, agents, claims, live, blocked, silent FROM v_claiming_agents_daily
                WHERE fleet = $1 AND day >= coalesce($2, '-infinity') AND day < coalesce($3, 'infinity')
                ORDER BY day";
    DayRow::find_by_statement(stmt(sql, [fleet.into(), range.from.into(), range.until.into()])).all(tx).await
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn disposed(day: u32, disposition: &str, units: i64, cost_cents: i64) -> Disposed {
        let start = Utc.with_ymd_and_hms(2026, 11, day, 0, 0, 0).single().expect("a valid day");
        Disposed { start, disposition: disposition.into(), units, cost_cents, distinct_agents: 1 }
    }

    #[test]
    fn each_row_carries_the_sums_of_its_own_bucket() {
        let rows = [
            disposed(2, "MIGRATED", 3, 300),
            disposed(2, "DEAD", 1, 5),
            disposed(3, "MIGRATED", 7, 70),
            disposed(4, "DROPPED", 2, 0),
            disposed(4, "DEAD", 4, 44),
        ];
        let out = with_bucket_totals(rows.into());
        let totals: Vec<(i64, i64)> = out.iter().map(|r| (r.bucket_units, r.bucket_cost_cents)).collect();
        assert_eq!(totals, [(4, 305), (4, 305), (7, 70), (6, 44), (6, 44)]);
        let own: Vec<(&str, i64)> = out.iter().map(|r| (r.disposition.as_str(), r.units)).collect();
        assert_eq!(
            own,
            [("MIGRATED", 3), ("DEAD", 1), ("MIGRATED", 7), ("DROPPED", 2), ("DEAD", 4)],
            "each row its own"
        );
        assert!(with_bucket_totals(Vec::new()).is_empty());
    }
}
