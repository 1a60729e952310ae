//! The operator's aggregates: cost per group, throughput, the North Star
//! metrics. Every read needs `ledger:read` and runs in the caller's fleet.

use super::{Ledger, LedgerError, validate};
use crate::auth::Principal;
pub use crate::db::aggregates::CostGroup;
use crate::db::aggregates::{self as aggregates, CostSummaryRow, DayRow, ThroughputRow, WeekRow};
use crate::db::reads::Range;

/// The buckets of `throughput`: UTC days, or UTC weeks from Monday.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Day,
    Week,
}

impl Ledger {
    /// Units and cost per group, open units included (see `db::aggregates::cost_summary`).
    pub async fn cost_summary(
        &self,
        who: &Principal,
        group: CostGroup,
        range: Range,
        domain: Option<String>,
    ) -> Result<Vec<CostSummaryRow>, LedgerError> {
        validate::range("from", "to", &range)?;
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| {
            Box::pin(async move { Ok(aggregates::cost_summary(tx, &fleet, group, &range, domain.as_deref()).await?) })
        })
        .await
    }

    /// Units and cost of the whole fleet, key `TOTAL`: the sum of
    /// `cost_summary`'s groups by domain, state or disposition.
    pub async fn cost_total(
        &self,
        who: &Principal,
        range: Range,
        domain: Option<String>,
    ) -> Result<CostSummaryRow, LedgerError> {
        validate::range("from", "to", &range)?;
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| {
            Box::pin(async move { Ok(aggregates::cost_total(tx, &fleet, &range, domain.as_deref()).await?) })
        })
        .await
    }

    /// Units disposed per bucket (UTC days, or weeks from Monday) and disposition.
    pub async fn throughput(
        &self,
        who: &Principal,
        bucket: Bucket,
        range: Range,
        domain: Option<String>,
    ) -> Result<Vec<ThroughputRow>, LedgerError> {
        validate::range("from", "until", &range)?;
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        let bucket = match bucket {
            Bucket::Day => "day",
            Bucket::Week => "week",
        };
        self.scan(who, move |tx| {
            Box::pin(async move { Ok(aggregates::throughput(tx, &fleet, bucket, &range, domain.as_deref()).await?) })
        })
        .await
    }

    /// The North Star metrics per week (weeks by their Monday in `[from, until)`).
    pub async fn weekly_metrics(&self, who: &Principal, range: Range) -> Result<Vec<WeekRow>, LedgerError> {
        validate::range("from", "until", &range)?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| Box::pin(async move { Ok(aggregates::weekly(tx, &fleet, &range).await?) })).await
    }

    /// Distinct claiming agents per UTC day (days in `[from, until)`).
    pub async fn claiming_agents(&self, who: &Principal, range: Range) -> Result<Vec<DayRow>, LedgerError> {
        validate::range("from", "until", &range)?;
        let fleet = who.fleet.clone();
        self.scan(who, move |tx| Box::pin(async move { Ok(aggregates::claiming_agents(tx, &fleet, &range).await?) }))
            .await
    }
}
