//! The CLI's memory of its last claim: the unit and the attempt it got, so
//! that every later write of this agent session is fenced to that attempt.
//! A process that was superseded (its unit released and claimed again, by
//! this agent from another shell or by anyone after its lease ran out) then
//! gets `LEASE_LOST` instead of writing over the newer attempt.
//!
//! The file is `--state` (`WORK_LEDGER_STATE`), by default
//! `$XDG_STATE_HOME/work-ledger/agent-<hash of URL and token>.json` (or under
//! `~/.local/state`): one per server and token. Give each concurrent session
//! of the same token its own file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LastClaim {
    pub unit_id: Uuid,
    pub attempt_id: Uuid,
}

/// The state file for `url` and `token`, unless `--state` names one.
pub fn path(explicit: Option<&Path>, url: &str, token: &str) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_owned());
    }
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").filter(|dir| !dir.is_empty())?).join(".local/state"),
    };
    Some(under(&base, url, token))
}

/// The state file for `url` and `token` under the state directory `base`.
fn under(base: &Path, url: &str, token: &str) -> PathBuf {
    let digest = Sha256::digest(format!("{url}\n{token}").as_bytes());
    base.join("work-ledger").join(format!("agent-{}.json", hex::encode(&digest[..8])))
}

/// The last claim recorded in `path`; none when the file is missing or unreadable.
pub fn load(path: &Path) -> Option<LastClaim> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Records `claim` in `path` (written whole, then renamed into place).
pub fn save(path: &Path, claim: &LastClaim) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_vec(claim).map_err(std::io::Error::other)?;
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_claim_loads_back_and_each_token_has_its_own_file() {
        let dir = std::env::temp_dir().join(format!("wl-state-{}", Uuid::new_v4()));
        let file = dir.join("a.json");
        let claim = LastClaim { unit_id: Uuid::new_v4(), attempt_id: Uuid::new_v4() };
        save(&file, &claim).expect("save");
        assert_eq!(load(&file), Some(claim));
        let _ = std::fs::remove_dir_all(&dir);
        let base = Path::new("/state");
        assert_ne!(under(base, "http://x", "t1"), under(base, "http://x", "t2"), "one file per token");
        assert_ne!(under(base, "http://x", "t1"), under(base, "http://y", "t1"), "one file per server");
        assert_eq!(under(base, "http://x", "t1"), under(base, "http://x", "t1"));
        assert!(under(base, "http://x", "t1").starts_with("/state/work-ledger"));
        assert_eq!(path(Some(Path::new("/tmp/s.json")), "u", "t"), Some(PathBuf::from("/tmp/s.json")));
    }
}
