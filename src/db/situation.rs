//! SQL of `claimSituation`: what is left to claim in a fleet or one of its
//! domains, counted over the claim path's own partial indexes (never a scan
//! of the fleet's finished units; those are counted from the unit totals,
//! and only when nothing is left to claim).
//!
//! Each scope (fleet, or fleet and domain) has a statement text of its own
//! rather than `($2 IS NULL OR domain = $2)`, which a generic plan could
//! only serve with the wider index.

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseTransaction, DbErr, FromQueryResult};

use super::stmt;

/// The open work of a fleet or a domain, counted where `claimNext` looks.
#[derive(Debug, Clone, FromQueryResult)]
pub struct SituationRow {
    /// READY units agents may claim (not a workflow's), read where the
    /// pick reads them (`work_units_pick_idx`, or its domain twin).
    pub ready: i64,
    /// CLAIMED or IN_PROGRESS with an expired lease: `claimNext` takes these
    /// first (the stall condition of `v_stall_list`).
    pub stale: i64,
    /// CLAIMED or IN_PROGRESS under a live lease.
    pub leased: i64,
    /// When the first of those leases ends.
    pub earliest_lease_end: Option<DateTime<Utc>>,
    /// BLOCKED units (held or released), waiting for an answer.
    pub blocked: i64,
    /// DONE units (disposed MIGRATED), from the unit totals; only when
    /// nothing is left to claim (null otherwise: the totals' unfolded tail
    /// is never read on a busy claimer's path).
    pub done: Option<i64>,
    /// Units with a disposition (DONE and ABANDONED), likewise.
    pub disposed: Option<i64>,
}

/// READY units are counted on the claimable index of the scope (an
/// index-only scan, proportional to the READY units alone). Everything else
/// comes from the fleet's live set (CLAIMED, IN_PROGRESS, BLOCKED: bounded
/// by its agents and open questions), read whole through the live-claim
/// index's predicate and only then narrowed to the domain: MATERIALIZED
/// keeps the planner from reaching a domain's live units through the domain
/// index instead, which would read every finished unit of the domain (the
/// state conditions cannot be index conditions under row-level security:
/// enum equality is not leakproof). The finished units are counted from
/// the unit totals (a projection: a few rows per domain), never read.
fn statement(domain: bool) -> String {
    let (ready_domain, live_domain) = if domain { (" AND domain = $2", " WHERE domain = $2") } else { ("", "") };
    let tail_domain = if domain { " WHERE t.domain = $2" } else { "" };
    format!(
        "WITH live AS MATERIALIZED (
             SELECT domain, state, lease_expires_at FROM work_units
              WHERE fleet = $1 AND state = ANY (ledger_held_states())),
         ready AS MATERIALIZED (
             SELECT count(*) AS n FROM work_units WHERE fleet = $1 AND state = 'ready' AND workflow_id IS NULL{ready_domain}),
         finished AS MATERIALIZED (
             SELECT coalesce(sum(t.units) FILTER (WHERE t.state = 'done'), 0)::bigint AS done,
                    coalesce(sum(t.units) FILTER (WHERE t.disposition IS NOT NULL), 0)::bigint AS disposed
               FROM unit_totals_now($1) t{tail_domain})
         SELECT (SELECT n FROM ready) AS ready,
                count(*) FILTER (WHERE state <> 'blocked' AND lease_expires_at < now()) AS stale,
                count(*) FILTER (WHERE state <> 'blocked' AND lease_expires_at >= now()) AS leased,
                min(lease_expires_at) FILTER (WHERE state <> 'blocked' AND lease_expires_at >= now())
                    AS earliest_lease_end,
                count(*) FILTER (WHERE state = 'blocked') AS blocked,
                CASE WHEN count(*) = 0 AND (SELECT n FROM ready) = 0 THEN (SELECT done FROM finished) END AS done,
                CASE WHEN count(*) = 0 AND (SELECT n FROM ready) = 0 THEN (SELECT disposed FROM finished) END
                    AS disposed
           FROM live{live_domain}"
    )
}

/// The open work of `fleet`, or of its `domain` alone.
pub async fn situation(tx: &DatabaseTransaction, fleet: &str, domain: Option<&str>) -> Result<SituationRow, DbErr> {
    let statement = match domain {
        Some(domain) => stmt(&statement(true), [fleet.into(), domain.into()]),
        None => stmt(&statement(false), [fleet.into()]),
    };
    // An aggregate without GROUP BY always answers one row.
    SituationRow::find_by_statement(statement)
        .one(tx)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("claim situation answered no row".to_owned()))
}
