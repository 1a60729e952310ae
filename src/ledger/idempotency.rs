//! Idempotency keys (SPEC §3). The key lives on the event the write appended
//! (`source_event_id`, unique per fleet and agent) with a fingerprint of the operation
//! and its arguments. A replay with the same fingerprint returns the current
//! unit and writes nothing; another fingerprint is IDEMPOTENCY_KEY_REUSED.

use sea_orm::DatabaseTransaction;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::LedgerError;
use crate::db::events::Actor;
use crate::db::idempotency::find_key;

/// SHA-256 over the operation name and its canonical JSON arguments.
pub fn fingerprint(operation: &str, args: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(operation.as_bytes());
    hasher.update([0]);
    hasher.update(args.to_string().as_bytes());
    hex::encode(hasher.finalize())
}

/// The unit of the actor's earlier write with this key, or None when the key
/// is new to this agent (another agent's use of the same key does not count).
pub async fn replayed(tx: &DatabaseTransaction, actor: &Actor<'_>) -> Result<Option<Uuid>, LedgerError> {
    let Some(key) = actor.key else { return Ok(None) };
    match find_key(tx, actor.fleet, actor.agent, key.id).await? {
        None => Ok(None),
        Some((unit, recorded)) if recorded == key.hash => Ok(Some(unit)),
        Some(_) => Err(LedgerError::IdempotencyKeyReused { key: key.id.to_owned() }),
    }
}
