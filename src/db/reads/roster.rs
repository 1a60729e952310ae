//! The fleet roster (`v_agents` and `roster()`): one row
//! per agent name, paged by name.

use async_graphql::Enum;
use chrono::{DateTime, Utc};
use sea_orm::FromQueryResult;
use uuid::Uuid;

use super::query::Query;

/// Where an agent stands now (the `status` column of `v_agents`; the first
/// that applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
pub enum AgentStatus {
    /// Holds a CLAIMED or IN_PROGRESS unit under a live lease.
    Active,
    /// Holds a BLOCKED unit (its lease is suspended until the question is answered).
    Blocked,
    /// Holds a CLAIMED or IN_PROGRESS unit whose lease expired: gone quiet,
    /// the unit is reclaimable by anyone (it is listed by `stalls`).
    Silent,
    /// Holds nothing (a VERIFIED unit awaiting `dispose` is not held).
    Idle,
    /// Holds nothing, and every token of that name is revoked or expired.
    Revoked,
}

impl AgentStatus {
    pub fn as_sql(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Blocked => "BLOCKED",
            Self::Silent => "SILENT",
            Self::Idle => "IDLE",
            Self::Revoked => "REVOKED",
        }
    }

    pub fn from_sql(text: &str) -> Option<Self> {
        [Self::Active, Self::Blocked, Self::Silent, Self::Idle, Self::Revoked].into_iter().find(|s| s.as_sql() == text)
    }
}

/// One agent of the roster.
#[derive(Debug, Clone, FromQueryResult)]
pub struct AgentRow {
    pub name: String,
    pub status: String,
    pub held_unit_id: Option<Uuid>,
    pub last_claim_at: Option<DateTime<Utc>>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub claims_today: i64,
    pub cost_cents_today: i64,
    pub token_last_used_at: Option<DateTime<Utc>>,
}

/// The roster of `fleet` after the name `after`, optionally of one status
/// (not yet ordered nor cut: see [`Query::page_by_text`] on `v.name`, with
/// no cursor of its own, since `roster()` takes it).
/// Without a status, `roster()` computes `limit` names at
/// most, the page's; with one, every name after the cursor is looked at, for
/// the status is what is kept. `None` and `None`: the whole roster, as its
/// `totalCount` counts it.
pub fn agents(fleet: &str, status: Option<AgentStatus>, after: Option<String>, limit: Option<i32>) -> Query {
    let names = if status.is_some() { None } else { limit.map(i64::from) };
    let mut q = Query::new(
        "SELECT v.name, v.status, v.held_unit_id, v.last_claim_at, v.last_heartbeat_at, v.claims_today, \
                v.cost_cents_today, v.token_last_used_at \
           FROM roster(",
    );
    let args = [q.bind(fleet), q.bind(after), q.bind(names)].join(", ");
    q.push(&format!("{args}) v WHERE v.fleet = "));
    let p = q.bind(fleet);
    q.push(&p);
    if let Some(status) = status {
        q.and("v.status = {}", status.as_sql());
    }
    q
}
