//! The operator's aggregates: cost per group, throughput per day or week,
//! and the North Star metrics of SPEC §7 (the SQL views).

use async_graphql::{Context, Enum, Object, SimpleObject};
use chrono::{DateTime, Utc};

use super::reads::disposition_of;
use super::rows::{Plain, Rows};
use super::{Result, ledger, principal};
use crate::db::aggregates::{CostSummaryRow, DayRow, ThroughputRow, WeekRow};
use crate::db::entities::Disposition;
use crate::ledger::aggregates::{Bucket, CostGroup};
use crate::ledger::reads::Range;

/// What `costSummary` groups units and cost by.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum CostGroupBy {
    Domain,
    /// MIGRATED, DROPPED, DEFERRED, DEAD, and OPEN for units not yet disposed.
    Disposition,
    /// The unit's state, e.g. IN_PROGRESS.
    State,
    /// The agent of the attempts (units it attempted, the cost of its own attempts).
    Agent,
}

impl From<CostGroupBy> for CostGroup {
    fn from(g: CostGroupBy) -> Self {
        match g {
            CostGroupBy::Domain => Self::Domain,
            CostGroupBy::Disposition => Self::Disposition,
            CostGroupBy::State => Self::State,
            CostGroupBy::Agent => Self::Agent,
        }
    }
}

/// Units and cost of one group of `costSummary`.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct CostGroupSummary {
    /// The group: a domain, a disposition (OPEN: not yet disposed), a state or an agent id.
    pub key: String,
    pub units: i64,
    pub cost_cents: i64,
    /// costCents / units.
    pub avg_cost_cents: f64,
}

impl From<CostSummaryRow> for CostGroupSummary {
    fn from(r: CostSummaryRow) -> Self {
        let avg_cost_cents = if r.units == 0 { 0.0 } else { r.cost_cents as f64 / r.units as f64 };
        Self { key: r.key, units: r.units, cost_cents: r.cost_cents, avg_cost_cents }
    }
}

/// The time buckets of `throughput` (UTC).
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum ThroughputBucket {
    Day,
    /// Weeks start on Monday.
    Week,
}

/// The whole of one `throughput` bucket, every disposition together.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct ThroughputTotal {
    /// Units disposed in the bucket: the sum of `count` over the bucket's rows.
    pub count: i64,
    /// Their whole cost: the sum of `costCents` over the bucket's rows.
    pub cost_cents: i64,
}

/// Units disposed in one bucket with one disposition.
#[derive(SimpleObject)]
#[graphql(serial)]
pub struct Throughput {
    /// The bucket's first instant (UTC midnight; a Monday for weeks).
    pub start: DateTime<Utc>,
    pub disposition: Disposition,
    /// Units disposed in the bucket with this disposition.
    pub count: i64,
    /// Their whole cost.
    pub cost_cents: i64,
    /// Distinct agents that made attempts on them.
    pub distinct_agents: i64,
    /// The row's whole bucket, every disposition (the same on each row of the
    /// bucket): units finished that day or week, without summing by hand.
    /// Distinct agents have no total here (an agent may work on units of
    /// several dispositions): see `claimingAgents`.
    pub total: ThroughputTotal,
}

// Every row of the aggregates holds its values: listed as `Rows`, each resolved in turn.
impl Plain for Throughput {}
impl Plain for CostGroupSummary {}
impl Plain for WeekRow {}
impl Plain for DayRow {}

impl From<ThroughputRow> for Throughput {
    fn from(r: ThroughputRow) -> Self {
        Self {
            start: r.start,
            disposition: disposition_of(&r.disposition),
            count: r.units,
            cost_cents: r.cost_cents,
            distinct_agents: r.distinct_agents,
            total: ThroughputTotal { count: r.bucket_units, cost_cents: r.bucket_cost_cents },
        }
    }
}

#[derive(Default)]
pub struct MetricsQuery;

#[Object]
impl MetricsQuery {
    /// Units and cost per group, open units included, ordered by key. Without
    /// `from`/`to` every unit counts with its whole cost; with them, the cost
    /// recorded in `[from, to)` and the units it was recorded for.
    async fn cost_summary(
        &self,
        ctx: &Context<'_>,
        group_by: CostGroupBy,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
        domain: Option<String>,
    ) -> Result<Rows<CostGroupSummary>> {
        let range = Range { from, until: to };
        let rows = ledger(ctx).cost_summary(principal(ctx)?, group_by.into(), range, domain).await?;
        Ok(rows.into_iter().collect())
    }

    /// Units, cost and average of the whole fleet as one group, key `TOTAL`,
    /// with the arguments of `costSummary` and its rules (without `from`/`to`
    /// every unit with its whole cost; with them, the cost recorded in
    /// `[from, to)` and the units it was recorded for). Computed around the
    /// very statement of `costSummary(groupBy: DOMAIN)`, so it equals the sum
    /// of `costSummary`'s groups by DOMAIN, STATE or DISPOSITION exactly (not
    /// of AGENT's: a unit attempted by two agents is in both their groups).
    async fn cost_total(
        &self,
        ctx: &Context<'_>,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
        domain: Option<String>,
    ) -> Result<CostGroupSummary> {
        let range = Range { from, until: to };
        Ok(ledger(ctx).cost_total(principal(ctx)?, range, domain).await?.into())
    }

    /// Units disposed per UTC day or week and disposition, disposed in
    /// `[from, until)`, oldest bucket first (the SQL of `v_throughput_daily`
    /// and `v_throughput_weekly`). Buckets without dispositions are left out.
    /// Each row's `total` is its whole bucket (every disposition).
    async fn throughput(
        &self,
        ctx: &Context<'_>,
        bucket: ThroughputBucket,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
        domain: Option<String>,
    ) -> Result<Rows<Throughput>> {
        let bucket = match bucket {
            ThroughputBucket::Day => Bucket::Day,
            ThroughputBucket::Week => Bucket::Week,
        };
        let rows = ledger(ctx).throughput(principal(ctx)?, bucket, Range { from, until }, domain).await?;
        Ok(rows.into_iter().collect())
    }

    /// The North Star metrics per week (`v_claims_weekly`, `v_rework_rate_weekly`,
    /// `v_verified_throughput_weekly`, `v_cycle_time_weekly`), for the weeks
    /// whose Monday is in `[from, until)`, oldest first.
    async fn weekly_metrics(
        &self,
        ctx: &Context<'_>,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Rows<WeekRow>> {
        let rows = ledger(ctx).weekly_metrics(principal(ctx)?, Range { from, until }).await?;
        Ok(rows.into_iter().collect())
    }

    /// Distinct claiming agents per UTC day in `[from, until)` (`v_claiming_agents_daily`), oldest first;
    /// the current day's row also says how many of them are `live`, `blocked` or `silent` now.
    async fn claiming_agents(
        &self,
        ctx: &Context<'_>,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Rows<DayRow>> {
        let rows = ledger(ctx).claiming_agents(principal(ctx)?, Range { from, until }).await?;
        Ok(rows.into_iter().collect())
    }
}
