//! Bearer tokens, permissions and the request principal (SPEC §8), and the
//! one place a bearer token is turned into a principal ([`authenticate`]),
//! for HTTP requests and WebSocket `connection_init` alike.
//!
//! Tokens are 32 random bytes shown once as `wl_<base64url>`; the database
//! keeps only their SHA-256. A high-entropy secret needs no slow hash: the
//! hash only has to make a leaked table useless.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sea_orm::{ConnectionTrait, DbErr};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::db;

/// An explicit permission. Code checks these, never role names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    LedgerRead,
    UnitsRegister,
    UnitsClaim,
    QuestionsAnswer,
    UnitsDisposeAny,
    TokensManage,
}

impl Permission {
    pub const ALL: [Permission; 6] = [
        Self::LedgerRead,
        Self::UnitsRegister,
        Self::UnitsClaim,
        Self::QuestionsAnswer,
        Self::UnitsDisposeAny,
        Self::TokensManage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::LedgerRead => "ledger:read",
            Self::UnitsRegister => "units:register",
            Self::UnitsClaim => "units:claim",
            Self::QuestionsAnswer => "questions:answer",
            Self::UnitsDisposeAny => "units:dispose-any",
            Self::TokensManage => "tokens:manage",
        }
    }
}

impl AsRef<str> for Permission {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Permission {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| format!("unknown permission `{s}`"))
    }
}

/// Roles are presets of permissions (SPEC §8), used only when minting tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Agent,
    Triage,
    Reader,
    Operator,
    Admin,
}

impl Role {
    pub fn permissions(self) -> Vec<Permission> {
        use Permission::*;
        match self {
            Self::Agent => vec![LedgerRead, UnitsClaim],
            Self::Triage => vec![LedgerRead, QuestionsAnswer],
            Self::Reader => vec![LedgerRead],
            Self::Operator => vec![LedgerRead, UnitsRegister, UnitsClaim, QuestionsAnswer, UnitsDisposeAny],
            Self::Admin => Permission::ALL.to_vec(),
        }
    }
}

/// Who is asking: the token's fleet, its name (the agent id) and permissions.
#[derive(Debug, Clone)]
pub struct Principal {
    pub token_id: Uuid,
    pub fleet: String,
    pub name: String,
    pub permissions: Vec<Permission>,
}

impl Principal {
    pub fn has(&self, permission: Permission) -> bool {
        self.permissions.contains(&permission)
    }

    pub fn require(&self, permission: Permission) -> Result<(), Forbidden> {
        if self.has(permission) { Ok(()) } else { Err(Forbidden(permission)) }
    }
}

/// The principal lacks a permission (FORBIDDEN).
#[derive(Debug, Clone, Copy)]
pub struct Forbidden(pub Permission);

/// Why a request could not be authenticated.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No token, a malformed header, or an unknown or revoked token
    /// (UNAUTHENTICATED); the text is the client's message.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The database could not be asked.
    #[error("cannot check the token: {0}")]
    Database(#[from] DbErr),
}

/// The SHA-256 of a token's secret, which is all the database keeps.
pub type TokenHash = [u8; 32];

/// Authenticates the value of an `Authorization` header (or of the
/// `connection_init` payload's `Authorization` field): the principal and
/// the hash its token is known by.
///
/// Every request asks the database (one indexed statement), on every
/// surface: a revocation is a committed row, so the first request that
/// starts after `token revoke` returned is refused on every replica. A
/// cache would need a proof that nothing was revoked since its lookup, and
/// the only proof is a read of the database, which costs what the lookup does.
pub async fn authenticate(
    db: &impl ConnectionTrait,
    authorization: Option<&str>,
) -> Result<(Principal, TokenHash), AuthError> {
    let hash = hash_token(parse_bearer(authorization)?);
    let principal = principal_of(db, &hash).await?.ok_or(AuthError::Unauthenticated(UNKNOWN_TOKEN))?;
    Ok((principal, hash))
}

/// The principal of a live token, `None` when it is unknown or revoked.
pub async fn principal_of(db: &impl ConnectionTrait, hash: &TokenHash) -> Result<Option<Principal>, DbErr> {
    Ok(db::tokens::authenticate(db, hash).await?.map(|token| Principal {
        token_id: token.id,
        fleet: token.fleet,
        name: token.name,
        // Unknown names (from a newer release) grant nothing.
        permissions: token.permissions.iter().filter_map(|p| p.parse().ok()).collect(),
    }))
}

const TOKEN_PREFIX: &str = "wl_";

/// A fresh secret and its hash. The secret is shown once and never stored.
pub fn new_token() -> (String, TokenHash) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = hash_token(&secret);
    (secret, hash)
}

pub fn hash_token(secret: &str) -> TokenHash {
    Sha256::digest(secret.as_bytes()).into()
}

/// Extracts the secret from an `Authorization` header value
/// (`Bearer <token>`, scheme case-insensitive).
fn parse_bearer(header: Option<&str>) -> Result<&str, AuthError> {
    let header = header.ok_or(AuthError::Unauthenticated(MISSING_TOKEN))?;
    let malformed = AuthError::Unauthenticated(MALFORMED_TOKEN);
    let (scheme, token) = header.trim().split_once(' ').ok_or(malformed)?;
    let token = token.trim();
    let well_formed = scheme.eq_ignore_ascii_case("bearer")
        && token.starts_with(TOKEN_PREFIX)
        && token.len() == TOKEN_PREFIX.len() + 43
        && URL_SAFE_NO_PAD.decode(&token[TOKEN_PREFIX.len()..]).is_ok();
    if well_formed { Ok(token) } else { Err(AuthError::Unauthenticated(MALFORMED_TOKEN)) }
}

pub const MISSING_TOKEN: &str = "missing token: send `Authorization: Bearer <token>`; an operator mints tokens with \
    `work-ledger token create`. `GET /` (without a browser) serves a quick start";
const MALFORMED_TOKEN: &str = "malformed Authorization header: expected `Bearer <token>` with a token minted by \
    `work-ledger token create`. `GET /` (without a browser) serves a quick start";
const UNKNOWN_TOKEN: &str =
    "unknown or revoked token: ask an operator for a valid one. `GET /` (without a browser) serves a quick start";

/// Failed authentications since the process started.
static FAILURES: AtomicU64 = AtomicU64::new(0);
static FAILURE_LOG: LazyLock<Mutex<RateLimit>> = LazyLock::new(|| Mutex::new(RateLimit::new(Instant::now())));

/// Counts a refused token and logs it with the client's address (`via`: the
/// transport), at most [`RateLimit::BURST`] lines a minute: a client trying
/// tokens cannot flood the log. The lines left out are counted in the next.
pub fn log_failure(client: Option<SocketAddr>, via: &'static str, err: &AuthError) {
    let AuthError::Unauthenticated(reason) = err else { return };
    let total = FAILURES.fetch_add(1, Ordering::Relaxed) + 1;
    let admitted = FAILURE_LOG.lock().unwrap_or_else(|e| e.into_inner()).admit(Instant::now());
    if let Some(left_out) = admitted {
        let client = client.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        tracing::warn!(%client, via, reason, total, left_out, "authentication failed");
    }
}

/// Failed authentications counted by [`log_failure`] so far.
pub fn failed_authentications() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// At most `BURST` admissions per `WINDOW`.
#[derive(Debug)]
struct RateLimit {
    window_start: Instant,
    admitted: u32,
    left_out: u64,
}

impl RateLimit {
    const BURST: u32 = 10;
    const WINDOW: Duration = Duration::from_secs(60);

    fn new(now: Instant) -> Self {
        Self { window_start: now, admitted: 0, left_out: 0 }
    }

    /// `Some(events left out before this one)` when this one may be logged.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if now.duration_since(self.window_start) >= Self::WINDOW {
            self.window_start = now;
            self.admitted = 0;
        }
        if self.admitted < Self::BURST {
            self.admitted += 1;
            Some(std::mem::take(&mut self.left_out))
        } else {
            self.left_out += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_logging_is_bounded_and_counts_what_it_leaves_out() {
        let start = Instant::now();
        let mut limit = RateLimit::new(start);
        let logged = (0..1000).filter(|_| limit.admit(start + Duration::from_secs(1)).is_some()).count();
        assert_eq!(logged, RateLimit::BURST as usize);
        // The next window's first line says how many were left out.
        assert_eq!(limit.admit(start + RateLimit::WINDOW + Duration::from_secs(1)), Some(990));
        assert_eq!(limit.admit(start + RateLimit::WINDOW + Duration::from_secs(2)), Some(0));
    }
}
