//! The Temporal projection's tables (SPEC §12): the fleets' links
//! (`temporal link`, the owner's), the per-run marks (moved by
//! `ledger_temporal_mark`, temporal.sql), the workflow-modelled units the
//! projection follows, and what `audit --temporal` compares. Reads run as
//! the service's own login, across fleets, like the sweeper's.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DbErr, FromQueryResult};
use uuid::Uuid;

use super::stmt;

/// Where a run's projection stands once a write commits.
#[derive(Debug, Clone)]
pub struct RunMark {
    pub namespace: String,
    pub workflow_id: String,
    pub run_id: String,
    pub unit_id: Uuid,
    /// The last history event projected with this write.
    pub event_id: i64,
    /// The run's history is closed and wholly projected.
    pub closed: bool,
}

/// A fleet's link: new workflows of `namespace` matching `query` become
/// units of `fleet`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, FromQueryResult)]
pub struct Link {
    pub fleet: String,
    pub namespace: String,
    pub query: String,
}

pub async fn links(db: &impl ConnectionTrait) -> Result<Vec<Link>, DbErr> {
    let rows =
        db.query_all_raw(stmt("SELECT fleet, namespace, query FROM temporal_links ORDER BY created_at", [])).await?;
    rows.iter().map(|r| Link::from_query_result(r, "")).collect()
}

/// Adds a link; false when it was there already.
pub async fn link(db: &impl ConnectionTrait, link: &Link) -> Result<bool, DbErr> {
    let done = db
        .execute_raw(stmt(
            "INSERT INTO temporal_links (fleet, namespace, query) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            [link.fleet.clone().into(), link.namespace.clone().into(), link.query.clone().into()],
        ))
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Removes a link; false when there was none. Units it registered stay.
pub async fn unlink(db: &impl ConnectionTrait, link: &Link) -> Result<bool, DbErr> {
    let done = db
        .execute_raw(stmt(
            "DELETE FROM temporal_links WHERE fleet = $1 AND namespace = $2 AND query = $3",
            [link.fleet.clone().into(), link.namespace.clone().into(), link.query.clone().into()],
        ))
        .await?;
    Ok(done.rows_affected() > 0)
}

/// A run's mark: the last event projected, and whether the run is closed.
pub type Marks = HashMap<(String, String, String, String), (i64, bool)>;

/// The marks of every run of the workflows `keys` (fleet, namespace,
/// workflow id), by (fleet, namespace, workflow id, run id).
pub async fn marks_of<'a>(
    db: &impl ConnectionTrait,
    keys: impl Iterator<Item = &'a (String, String, String)>,
) -> Result<Marks, DbErr> {
    let (mut fleets, mut namespaces, mut workflows) = (Vec::new(), Vec::new(), Vec::new());
    for (fleet, namespace, workflow) in keys {
        fleets.push(fleet.clone());
        namespaces.push(namespace.clone());
        workflows.push(workflow.clone());
    }
    if fleets.is_empty() {
        return Ok(Marks::new());
    }
    let rows = db
        .query_all_raw(stmt(
            "SELECT r.fleet, r.namespace, r.workflow_id, r.run_id, r.last_event_id, r.closed
               FROM unnest($1::text[], $2::text[], $3::text[]) AS k (fleet, namespace, workflow_id)
               JOIN temporal_runs r USING (fleet, namespace, workflow_id)",
            [fleets.into(), namespaces.into(), workflows.into()],
        ))
        .await?;
    rows.iter()
        .map(|r| {
            let key = (
                r.try_get("", "fleet")?,
                r.try_get("", "namespace")?,
                r.try_get("", "workflow_id")?,
                r.try_get("", "run_id")?,
            );
            Ok((key, (r.try_get("", "last_event_id")?, r.try_get("", "closed")?)))
        })
        .collect()
}

/// The open workflow-modelled units to look up by workflow id: (fleet,
/// namespace of their last run if any, workflow id); only those no run was
/// projected onto yet unless `all`.
pub async fn followable_units(
    db: &impl ConnectionTrait,
    all: bool,
) -> Result<Vec<(String, Option<String>, String)>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT u.fleet, u.workflow_id,
                    (SELECT r.namespace FROM temporal_runs r WHERE r.unit_id = u.id ORDER BY r.updated_at DESC LIMIT 1) AS namespace
               FROM work_units u
              WHERE u.workflow_id IS NOT NULL AND u.disposition IS NULL
                AND ($1 OR NOT EXISTS (SELECT 1 FROM temporal_runs r WHERE r.unit_id = u.id))",
            [all.into()],
        ))
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("", "fleet")?, r.try_get("", "namespace")?, r.try_get("", "workflow_id")?)))
        .collect()
}

/// Moves a run's mark (never back), as the projection's token, in the
/// transaction of `db`.
pub async fn mark(db: &impl ConnectionTrait, token_hash: &[u8], mark: &RunMark) -> Result<(), DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT ledger_temporal_mark($1, $2, $3, $4, $5, $6, $7) AS mark",
            [
                token_hash.to_vec().into(),
                mark.namespace.clone().into(),
                mark.workflow_id.clone().into(),
                mark.run_id.clone().into(),
                mark.unit_id.into(),
                mark.event_id.into(),
                mark.closed.into(),
            ],
        ))
        .await?;
    let moved: Option<i64> = row.map(|r| r.try_get("", "mark")).transpose()?.flatten();
    moved.map(|_| ()).ok_or_else(|| DbErr::Custom("the projection's token may not move a run's mark".into()))
}

/// A workflow-modelled unit as the projection and the audit see it.
#[derive(Debug, Clone, FromQueryResult)]
pub struct WorkflowUnit {
    pub fleet: String,
    pub id: Uuid,
    pub workflow_id: String,
    pub state: String,
    /// The namespace its runs were projected from (none yet: the default).
    pub namespace: Option<String>,
    /// How its last attempt ended (none while it runs).
    pub last_outcome: Option<String>,
    /// The `source_event_id` of the last event projected onto it.
    pub last_projected: Option<String>,
}

/// The workflow-modelled units of `fleet` (every fleet: `None`).
pub async fn workflow_units(db: &impl ConnectionTrait, fleet: Option<&str>) -> Result<Vec<WorkflowUnit>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT u.fleet, u.id, u.workflow_id, u.state::text AS state,
                    (SELECT r.namespace FROM temporal_runs r WHERE r.unit_id = u.id ORDER BY r.updated_at DESC LIMIT 1) AS namespace,
                    (SELECT a.outcome::text FROM work_unit_attempts a WHERE a.id = u.current_attempt_id) AS last_outcome,
                    (SELECT e.source_event_id FROM work_unit_events e
                      WHERE e.unit_id = u.id AND e.source_event_id LIKE 'temporal:%' ORDER BY e.seq DESC LIMIT 1) AS last_projected
               FROM work_units u
              WHERE u.workflow_id IS NOT NULL AND ($1::text IS NULL OR u.fleet = $1)
              ORDER BY u.fleet, u.created_at, u.id",
            [fleet.map(str::to_owned).into()],
        ))
        .await?;
    rows.iter().map(|r| WorkflowUnit::from_query_result(r, "")).collect()
}

/// Which of `workflow_ids` are the workflows of units of `fleet`.
pub async fn registered(
    db: &impl ConnectionTrait,
    fleet: &str,
    workflow_ids: &[String],
) -> Result<std::collections::HashSet<String>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT workflow_id FROM work_units WHERE fleet = $1 AND workflow_id = ANY ($2)",
            [fleet.to_owned().into(), workflow_ids.to_vec().into()],
        ))
        .await?;
    rows.iter().map(|r| r.try_get("", "workflow_id")).collect()
}

/// The unit of `fleet` that workflow `workflow_id` runs.
pub async fn unit_of(db: &impl ConnectionTrait, fleet: &str, workflow_id: &str) -> Result<Option<Uuid>, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT id FROM work_units WHERE fleet = $1 AND workflow_id = $2 ORDER BY created_at, id LIMIT 1",
            [fleet.to_owned().into(), workflow_id.to_owned().into()],
        ))
        .await?;
    row.map(|r| r.try_get("", "id")).transpose()
}
