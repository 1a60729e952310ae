//! SQL of `work_units` reads and registration.

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait, Value};
use uuid::Uuid;

use super::entities::work_unit;
use super::stmt;

/// The columns of a unit as the entity decodes them; enum columns are cast to
/// text because raw statements bypass SeaORM's own casts.
pub const UNIT_COLUMNS: &str = "u.id, u.fleet, u.external_ref, u.domain, u.state::text AS state, \
    u.disposition::text AS disposition, u.disposed_at, u.workflow_id, u.claimed_by, u.current_attempt_id, \
    u.lease_expires_at, u.last_heartbeat_at, u.attempt_count, u.cost_cents, u.evidence_urls, u.created_at, \
    u.updated_at";

/// The one unit a write statement returned, if any.
pub async fn one_unit(
    tx: &impl ConnectionTrait,
    sql: &str,
    values: Vec<Value>,
) -> Result<Option<work_unit::Model>, DbErr> {
    work_unit::Entity::find().from_raw_sql(stmt(sql, values)).one(tx).await
}

pub struct NewUnit {
    pub external_ref: String,
    pub domain: String,
    pub workflow_id: Option<String>,
}

/// Inserts the units that do not exist yet (one `registered` event each) and
/// returns every requested unit, in input order. Existing units are returned
/// untouched: registration is idempotent by `(fleet, external_ref)`.
pub async fn register(
    tx: &DatabaseTransaction,
    fleet: &str,
    agent: &str,
    units: &[NewUnit],
) -> Result<Vec<work_unit::Model>, DbErr> {
    let refs: Vec<String> = units.iter().map(|u| u.external_ref.clone()).collect();
    let domains: Vec<String> = units.iter().map(|u| u.domain.clone()).collect();
    let workflows: Vec<String> = units.iter().map(|u| u.workflow_id.clone().unwrap_or_default()).collect();
    // ON CONFLICT DO NOTHING waits for a concurrent registration of the same
    // ref and then skips it, so two importers never create a unit twice.
    tx.execute_raw(stmt(
        "WITH input AS (
             SELECT DISTINCT ON (external_ref) external_ref, domain, nullif(workflow_id, '') AS workflow_id
               FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS i(external_ref, domain, workflow_id, ord)
              ORDER BY external_ref, ord
         ), ins AS (
             INSERT INTO work_units (fleet, external_ref, domain, workflow_id)
             SELECT $1, external_ref, domain, workflow_id FROM input ORDER BY external_ref
             ON CONFLICT (fleet, external_ref) DO NOTHING
             RETURNING id, fleet, external_ref
         )
         INSERT INTO work_unit_events (fleet, unit_id, event_type, to_state, agent_id, detail)
         SELECT fleet, id, 'registered', 'ready', $5, jsonb_build_object('external_ref', external_ref) FROM ins",
        [fleet.into(), refs.clone().into(), domains.into(), workflows.into(), agent.into()],
    ))
    .await?;
    // A new statement: it sees units committed by concurrent registrations too.
    work_unit::Entity::find()
        .from_raw_sql(stmt(
            &format!(
                "SELECT {UNIT_COLUMNS} FROM unnest($1::text[]) WITH ORDINALITY AS i(external_ref, ord)
                   JOIN work_units u ON u.external_ref = i.external_ref
                  ORDER BY i.ord"
            ),
            [refs.into()],
        ))
        .all(tx)
        .await
}

/// The database's clock for this transaction (`now()`): staleness is decided
/// by it, as the write statements decide it, never by the server's clock.
pub async fn db_now(tx: &DatabaseTransaction) -> Result<chrono::DateTime<chrono::Utc>, DbErr> {
    let row = tx.query_one_raw(stmt("SELECT now() AS now", [])).await?;
    match row {
        Some(row) => row.try_get("", "now"),
        None => Err(DbErr::RecordNotFound("now()".to_owned())),
    }
}

pub async fn by_id(tx: &DatabaseTransaction, id: Uuid) -> Result<Option<work_unit::Model>, DbErr> {
    work_unit::Entity::find_by_id(id).one(tx).await
}

/// The unit, its row locked until the transaction ends (FOR NO KEY UPDATE,
/// the lock every write on a unit takes first).
pub async fn lock_by_id(tx: &DatabaseTransaction, id: Uuid) -> Result<Option<work_unit::Model>, DbErr> {
    work_unit::Entity::find()
        .from_raw_sql(stmt(
            &format!("SELECT {UNIT_COLUMNS} FROM work_units u WHERE u.id = $1 FOR NO KEY UPDATE"),
            [id.into()],
        ))
        .one(tx)
        .await
}

pub async fn by_ref(tx: &DatabaseTransaction, external_ref: &str) -> Result<Option<work_unit::Model>, DbErr> {
    use sea_orm::{ColumnTrait, QueryFilter};
    work_unit::Entity::find().filter(work_unit::Column::ExternalRef.eq(external_ref)).one(tx).await
}

pub async fn attempt_by_id(
    tx: &DatabaseTransaction,
    id: Uuid,
) -> Result<Option<super::entities::attempt::Model>, DbErr> {
    super::entities::attempt::Entity::find_by_id(id).one(tx).await
}

/// The caller's most recent attempt on a unit.
pub async fn latest_attempt_of(
    tx: &DatabaseTransaction,
    unit_id: Uuid,
    agent: &str,
) -> Result<Option<super::entities::attempt::Model>, DbErr> {
    use super::entities::attempt;
    use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
    attempt::Entity::find()
        .filter(attempt::Column::UnitId.eq(unit_id))
        .filter(attempt::Column::AgentId.eq(agent))
        .order_by_desc(attempt::Column::AttemptNo)
        .one(tx)
        .await
}

/// The attempt `recordCost(unitId:)` bills: the caller's latest attempt on
/// the unit or, for an operator (`operator`) without one, the unit's current
/// attempt.
pub async fn attempt_to_bill(
    tx: &DatabaseTransaction,
    unit_id: Uuid,
    agent: &str,
    operator: bool,
) -> Result<Option<Uuid>, DbErr> {
    let row = tx
        .query_one_raw(stmt(
            "SELECT coalesce(
                    (SELECT a.id FROM work_unit_attempts a WHERE a.unit_id = $1 AND a.agent_id = $2
                      ORDER BY a.attempt_no DESC LIMIT 1),
                    (SELECT u.current_attempt_id FROM work_units u WHERE u.id = $1 AND $3)) AS id",
            [unit_id.into(), agent.into(), operator.into()],
        ))
        .await?;
    Ok(row.map(|r| r.try_get::<Option<Uuid>>("", "id")).transpose()?.flatten())
}

/// VERIFIED units the agent still has to dispose of, oldest first.
pub async fn awaiting_disposition(
    tx: &DatabaseTransaction,
    fleet: &str,
    agent: &str,
) -> Result<Vec<work_unit::Model>, DbErr> {
    let sql = format!(
        "SELECT {UNIT_COLUMNS} FROM work_units u
          WHERE u.fleet = $1 AND u.claimed_by = $2 AND u.state = 'verified'
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
