//! Idempotency keys (SPEC §3). The key lives on the event the write appended
//! (`source_event_id`, unique per fleet and agent) with a fingerprint of the
//! operation and its arguments, computed here. The write function checks it
//! (`ledger_replay`): a replay with the same fingerprint returns the current
//! unit and writes nothing; another fingerprint is IDEMPOTENCY_KEY_REUSED.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 over the operation name and its canonical JSON arguments.
pub fn fingerprint(operation: &str, args: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(operation.as_bytes());
    hasher.update([0]);
    hasher.update(args.to_string().as_bytes());
    hex::encode(hasher.finalize())
}
