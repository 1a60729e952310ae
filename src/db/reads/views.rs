//! The SQL views (`v_queue_depth`, `v_disposition_summary`,
//! `v_cost_per_unit`) as the read API shows them.

use sea_orm::{DatabaseTransaction, DbErr, FromQueryResult};
use uuid::Uuid;

use super::query::Query;

// The view's row is the API's type as it is (`QueueDepth`), so that a
// column is added here once.
/// The work of one domain (`v_queue_depth`): its open units by state, then
/// its finished ones.
#[derive(Debug, Clone, FromQueryResult, async_graphql::SimpleObject)]
#[graphql(name = "QueueDepth")]
pub struct QueueDepthRow {
    pub domain: String,
    pub ready: i64,
    pub claimed: i64,
    pub in_progress: i64,
    pub blocked: i64,
    pub verified: i64,
    /// CLAIMED or IN_PROGRESS with an expired lease.
    pub stalled: i64,
    /// DONE units (disposed MIGRATED).
    pub done: i64,
    /// Units with a permanent disposition: the DONE ones and the ABANDONED
    /// ones (DROPPED, DEFERRED, DEAD). A domain with nothing open and units
    /// disposed is finished.
    pub disposed: i64,
}

pub async fn queue_depth(
    tx: &DatabaseTransaction,
    fleet: &str,
    domain: Option<&str>,
) -> Result<Vec<QueueDepthRow>, DbErr> {
    let mut q = Query::new(
        "SELECT domain, ready, claimed, in_progress, blocked, verified, stalled, done, disposed FROM v_queue_depth \
         WHERE fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("domain = {}", domain.to_owned());
    }
    q.push(" ORDER BY domain");
    q.rows(tx).await
}

#[derive(Debug, Clone, FromQueryResult)]
pub struct DispositionRow {
    pub disposition: String,
    pub units: i64,
    pub cost_cents: i64,
}

/// Count and cost per disposition; every disposition present, zeros included.
pub async fn disposition_summary(
    tx: &DatabaseTransaction,
    fleet: &str,
    domain: Option<&str>,
) -> Result<Vec<DispositionRow>, DbErr> {
    let mut q = Query::new(
        "SELECT d.disposition::text AS disposition, coalesce(sum(s.units), 0)::bigint AS units, \
                coalesce(sum(s.cost_cents), 0)::bigint AS cost_cents \
           FROM unnest(enum_range(NULL::disposition)) AS d(disposition) \
           LEFT JOIN v_disposition_summary s ON s.disposition = d.disposition AND s.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("s.domain = {}", domain.to_owned());
    }
    q.push(" GROUP BY d.disposition ORDER BY d.disposition");
    q.rows(tx).await
}

#[derive(Debug, Clone, FromQueryResult)]
pub struct CostRow {
    pub unit_id: Uuid,
    pub cost_cents: i64,
    pub attempt_count: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

pub fn cost_per_unit(fleet: &str, domain: Option<&str>) -> Query {
    let mut q = Query::new(
        "SELECT v.unit_id, v.cost_cents, v.attempt_count, v.created_at FROM v_cost_per_unit v WHERE v.fleet = ",
    );
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(domain) = domain {
        q.and("v.domain = {}", domain.to_owned());
    }
    q
}
