//! What this process remembers of the tokens it authenticated.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::{Principal, TokenHash};

/// What never changes about the tokens this process authenticated, by hash:
/// the principal and the expiry (at most [`Known::CAPACITY`] tokens; when
/// full it starts over). Whether a token is still live is never read from
/// here for a request that reads or writes: the database says it in that
/// request's first statement ([`authenticate`]).
#[derive(Default)]
pub struct Known {
    tokens: Mutex<HashMap<TokenHash, KnownToken>>,
}

/// A token's principal and expiry.
pub(super) type KnownToken = (Principal, Option<DateTime<Utc>>);

impl fmt::Debug for Known {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Known").field("tokens", &self.len()).finish()
    }
}

impl Known {
    /// Tokens kept before the memory starts over.
    pub const CAPACITY: usize = 65_536;

    pub(super) fn get(&self, hash: &TokenHash) -> Option<KnownToken> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).get(hash).cloned()
    }

    pub(super) fn remember(&self, principal: &Principal, expires_at: Option<DateTime<Utc>>) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.len() >= Self::CAPACITY {
            tokens.clear();
        }
        tokens.insert(principal.token_hash, (principal.clone(), expires_at));
    }

    /// Forgets the token known by `hash` (the database refused it).
    pub fn forget(&self, hash: &TokenHash) {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).remove(hash);
    }

    /// Forgets every token (a token was revoked, or notices were missed).
    pub fn forget_all(&self) {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Tokens known.
    pub fn len(&self) -> usize {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
