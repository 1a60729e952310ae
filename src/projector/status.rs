//! Where each projection stands (`ledger_projections_status`): what
//! `work-ledger projections status` prints and `/metrics` exports, and the
//! rebuilds (`ledger_project_rebuild`) `work-ledger projections rebuild` runs.

use sea_orm::{ConnectionTrait, DbErr};

use crate::db::stmt;

/// One projection's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub name: String,
    /// Every event whose batch is below it is folded.
    pub mark: i64,
    /// Events past the mark (the tail each read adds).
    pub behind: i64,
    /// Age of the oldest of them, in seconds (0 when none).
    pub lag_seconds: f64,
    pub folded_events: i64,
    /// Built with the definition `migrate` last applied.
    pub current: bool,
}

/// The projections, by name.
pub async fn names(db: &impl ConnectionTrait) -> Result<Vec<String>, DbErr> {
    let rows = db.query_all_raw(stmt("SELECT name FROM ledger_projections() ORDER BY name", [])).await?;
    rows.iter().map(|row| row.try_get("", "name")).collect()
}

pub async fn all(db: &impl ConnectionTrait) -> Result<Vec<Status>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT name, mark, behind, lag_seconds, folded_events, current FROM ledger_projections_status()",
            [],
        ))
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Status {
                name: row.try_get("", "name")?,
                mark: row.try_get("", "mark")?,
                behind: row.try_get("", "behind")?,
                lag_seconds: row.try_get("", "lag_seconds")?,
                folded_events: row.try_get("", "folded_events")?,
                current: row.try_get("", "current")?,
            })
        })
        .collect()
}

/// Rebuilds projection `name` from the whole log (as the owner); the events
/// it folded.
pub async fn rebuild(db: &impl ConnectionTrait, name: &str) -> Result<i64, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT ledger_project_rebuild($1) AS folded", [name.into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("ledger_project_rebuild".into()))?;
    row.try_get("", "folded")
}
