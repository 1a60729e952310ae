//! SQL of `work_units` reads (registration is a write: [`super::writes`]).

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait};
use uuid::Uuid;

use super::entities::work_unit;
use super::stmt;

/// The columns of a unit as the entity decodes them; enum columns are cast to
/// text because raw statements bypass SeaORM's own casts.
pub const UNIT_COLUMNS: &str = "u.id, u.fleet, u.external_ref, u.domain, u.state::text AS state, \
    u.disposition::text AS disposition, u.disposed_at, u.workflow_id, u.claimed_by, u.current_attempt_id, \
    u.lease_expires_at, u.last_heartbeat_at, u.attempt_count, u.cost_cents, u.evidence_urls, u.created_at, \
    u.updated_at";

pub async fn by_id(tx: &DatabaseTransaction, id: Uuid) -> Result<Option<work_unit::Model>, DbErr> {
    work_unit::Entity::find_by_id(id).one(tx).await
}

pub async fn by_ref(tx: &DatabaseTransaction, external_ref: &str) -> Result<Option<work_unit::Model>, DbErr> {
    use sea_orm::{ColumnTrait, QueryFilter};
    work_unit::Entity::find().filter(work_unit::Column::ExternalRef.eq(external_ref)).one(tx).await
}

/// The units the agent still has to dispose of (VERIFIED: the states its
/// holder disposes MIGRATED from, `ledger_moves()`), oldest first.
pub async fn awaiting_disposition(
    tx: &DatabaseTransaction,
    fleet: &str,
    agent: &str,
) -> Result<Vec<work_unit::Model>, DbErr> {
    let sql = format!(
        "SELECT {UNIT_COLUMNS} FROM work_units u
          WHERE u.fleet = $1 AND u.claimed_by = $2
            AND u.state = ANY (ledger_from('dispose', '{{holder}}', 'MIGRATED'))
          ORDER BY u.created_at, u.id"
    );
    work_unit::Entity::find().from_raw_sql(stmt(&sql, [fleet.into(), agent.into()])).all(tx).await
}

/// Which of `refs` are registered already (in the transaction's fleet).
pub async fn existing_refs(tx: &DatabaseTransaction, refs: &[String]) -> Result<Vec<String>, DbErr> {
    let rows = tx
        .query_all_raw(stmt(
            "SELECT external_ref FROM work_units WHERE external_ref = ANY($1::text[])",
            [refs.to_vec().into()],
        ))
        .await?;
    rows.iter().map(|r| r.try_get("", "external_ref")).collect()
}

/// The live unit the agent holds, if any (CLAIMED, IN_PROGRESS or BLOCKED).
pub async fn held_by(tx: &impl ConnectionTrait, fleet: &str, agent: &str) -> Result<Option<work_unit::Model>, DbErr> {
    let sql = format!(
        "SELECT {UNIT_COLUMNS} FROM work_units u
          WHERE u.fleet = $1 AND u.claimed_by = $2 AND u.state = ANY (ledger_held_states())"
    );
    work_unit::Entity::find().from_raw_sql(stmt(&sql, [fleet.into(), agent.into()])).one(tx).await
}
