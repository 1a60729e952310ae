//! Idempotency keys (SPEC §3) live on the event their write appended
//! (`source_event_id`) with a fingerprint of the request. A key belongs to
//! the agent that used it: unique per (fleet, agent).

use sea_orm::{ConnectionTrait, DbErr};
use uuid::Uuid;

use super::stmt;

/// The unit an agent's idempotency key was used on, and the request
/// fingerprint recorded with it.
pub async fn find_key(
    tx: &impl ConnectionTrait,
    fleet: &str,
    agent: &str,
    key: &str,
) -> Result<Option<(Uuid, String)>, DbErr> {
    let row = tx
        .query_one_raw(stmt(
            "SELECT unit_id, request_hash FROM work_unit_events WHERE fleet = $1 AND agent_id = $2 AND source_event_id = $3",
            [fleet.into(), agent.into(), key.into()],
        ))
        .await?;
    row.map(|r| Ok((r.try_get("", "unit_id")?, r.try_get("", "request_hash")?))).transpose()
}
