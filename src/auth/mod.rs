//! Bearer tokens, permissions and the request principal (SPEC §8), and the
//! one place a bearer token is turned into a principal ([`authenticate`]),
//! for HTTP requests, MCP and WebSocket `connection_init` alike: unknown,
//! revoked and expired tokens are refused there, and the token's last use is
//! recorded from there ([`LastUse`]).
//!
//! Tokens are 32 random bytes shown once as `wl_<base64url>`; the database
//! keeps only their SHA-256. A high-entropy secret needs no slow hash: the
//! hash only has to make a leaked table useless ([`bearer`]). What the
//! process remembers of tokens is in [`known`], their last use in
//! [`last_use`], refusals counted and logged in [`failures`].

mod bearer;
mod failures;
mod known;
mod last_use;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use uuid::Uuid;

use crate::db;
use crate::db::tokens::{LiveToken, Lookup};

use bearer::parse_bearer;
pub use bearer::{MISSING_TOKEN, hash_token, new_token};
pub use failures::{failed_authentications, log_failure};
pub use known::Known;
pub use last_use::LastUse;

/// An explicit permission. Code checks these, never role names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    LedgerRead,
    UnitsRegister,
    UnitsClaim,
    QuestionsAnswer,
    UnitsDisposeAny,
    TokensManage,
    /// The Temporal projection's: act as the workflow of a workflow-modelled
    /// unit (SPEC §12). No role grants it; the projection mints its own.
    UnitsProject,
}

impl Permission {
    pub const ALL: [Permission; 7] = [
        Self::LedgerRead,
        Self::UnitsRegister,
        Self::UnitsClaim,
        Self::QuestionsAnswer,
        Self::UnitsDisposeAny,
        Self::TokensManage,
        Self::UnitsProject,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::LedgerRead => "ledger:read",
            Self::UnitsRegister => "units:register",
            Self::UnitsClaim => "units:claim",
            Self::QuestionsAnswer => "questions:answer",
            Self::UnitsDisposeAny => "units:dispose-any",
            Self::TokensManage => "tokens:manage",
            Self::UnitsProject => "units:project",
        }
    }

    /// What the permission lets a token do, said to its holder beside the
    /// name (a name alone undersells `units:claim`, which works the claimed
    /// unit through to its disposition).
    pub fn allows(self) -> &'static str {
        match self {
            Self::LedgerRead => "read the fleet's units, attempts, questions, events, queue depth and reports",
            Self::UnitsRegister => "register units (registerUnits, import)",
            Self::UnitsClaim => {
                "claim units and work the one you hold to its end: start, heartbeat, verify, block, wait for the \
                 answer, release, record its cost and dispose of it"
            }
            Self::QuestionsAnswer => "answer the questions of blocked units (unblock), also several alike at once",
            Self::UnitsDisposeAny => "dispose of any unit of the fleet and record cost on any attempt (an operator)",
            Self::TokensManage => "mint, list and revoke the fleet's tokens",
            Self::UnitsProject => {
                "record the runs of the fleet's Temporal workflows on their units (the projection's own)"
            }
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
            // Every permission but the Temporal projection's own.
            Self::Admin => Permission::ALL.into_iter().filter(|&p| p != Permission::UnitsProject).collect(),
        }
    }
}

/// Who is asking: the token's fleet, its name (the agent id) and permissions,
/// and the hash it is known by, which every write hands to its SQL function:
/// the database authenticates the write itself (SPEC §8, who acts is the token).
#[derive(Clone)]
pub struct Principal {
    pub token_id: Uuid,
    pub token_hash: TokenHash,
    pub fleet: String,
    pub name: String,
    pub permissions: Vec<Permission>,
}

/// Without the hash: a log line is no place for what authenticates a write.
impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("token_id", &self.token_id)
            .field("fleet", &self.fleet)
            .field("name", &self.name)
            .field("permissions", &self.permissions)
            .finish_non_exhaustive()
    }
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
    /// No token, a malformed header, or an unknown, revoked or expired
    /// token (UNAUTHENTICATED); the text is the client's message.
    #[error("{0}")]
    Unauthenticated(Cow<'static, str>),
    /// The database could not be asked.
    #[error("cannot check the token: {0}")]
    Database(#[from] DbErr),
}

/// The SHA-256 of a token's secret, which is all the database keeps.
pub type TokenHash = [u8; 32];

/// What an authenticated token is known by, and when it stops working.
#[derive(Debug, Clone, Copy)]
pub struct Credential {
    pub hash: TokenHash,
    /// `None` for a token that never expires.
    pub expiry: Option<Expiry>,
}

/// When an authenticated token expires.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    /// As the database keeps it (what a refusal quotes).
    pub at: DateTime<Utc>,
    /// The same moment on this process's monotonic clock: the lookup's start
    /// plus the time the database said was left, so that a skewed wall clock
    /// never lets a WebSocket outlive its token.
    pub deadline: tokio::time::Instant,
}

/// Authenticates the value of an `Authorization` header (or of the
/// `connection_init` payload's `Authorization` field): the principal, the
/// hash its token is known by and its expiry.
///
/// What never changes about a token (its id, fleet, name, permissions and
/// expiry) is looked up once per process ([`Known`]); what does (a
/// revocation) is the database's to say, in the statement every request
/// that reads or writes starts with: a read's transaction opens with
/// `ledger_session`, a write's function authenticates the hash it is given.
/// So a revocation refuses the very next read or write on every surface and
/// replica without a statement of its own. A request that touches no table
/// (`__typename`, introspection) is answered from what the process knows,
/// which a revocation's notice (`work_ledger_tokens`) and any refusal by the
/// database clear. An expired token is refused by either clock.
/// The token's last use is recorded by `last_use`, off the request's path.
pub async fn authenticate(
    db: &DatabaseConnection,
    last_use: &LastUse,
    known: &Known,
    authorization: Option<&str>,
) -> Result<(Principal, Credential), AuthError> {
    let hash = hash_token(parse_bearer(authorization)?);
    if let Some((principal, expires_at)) = known.get(&hash) {
        let now = Utc::now();
        let left = match expires_at {
            Some(at) if at <= now => {
                known.forget(&hash);
                return Err(AuthError::Unauthenticated(expired(at).into()));
            }
            Some(at) => Some((at, (at - now).to_std().unwrap_or(Duration::ZERO))),
            None => None,
        };
        last_use.record(db, principal.token_id);
        let asked = tokio::time::Instant::now();
        let expiry = left.map(|(at, left)| Expiry { at, deadline: asked + left });
        return Ok((principal, Credential { hash, expiry }));
    }
    let asked = tokio::time::Instant::now();
    let token = match db::tokens::authenticate(db, &hash).await? {
        Some(Lookup::Live(token)) => token,
        Some(Lookup::Expired { at }) => return Err(AuthError::Unauthenticated(expired(at).into())),
        None => return Err(AuthError::Unauthenticated(UNKNOWN_TOKEN.into())),
    };
    if token.touch_due {
        last_use.record(db, token.id);
    }
    let expiry = token.expiry.map(|(at, left)| Expiry { at, deadline: asked + left });
    let principal = principal(token, hash);
    known.remember(&principal, expiry.map(|e| e.at));
    Ok((principal, Credential { hash, expiry }))
}
/// The principal of a live token, `None` when it is unknown, revoked or expired.
pub async fn principal_of(db: &impl ConnectionTrait, hash: &TokenHash) -> Result<Option<Principal>, DbErr> {
    Ok(match db::tokens::authenticate(db, hash).await? {
        Some(Lookup::Live(token)) => Some(principal(token, *hash)),
        Some(Lookup::Expired { .. }) | None => None,
    })
}

fn principal(token: LiveToken, token_hash: TokenHash) -> Principal {
    Principal {
        token_id: token.id,
        token_hash,
        fleet: token.fleet,
        name: token.name,
        // Unknown names (from a newer release) grant nothing.
        permissions: token.permissions.iter().filter_map(|p| p.parse().ok()).collect(),
    }
}

/// The refusal of a token that expired at `at` (short enough for a
/// WebSocket close reason, 123 bytes, after "Forbidden: ").
pub fn expired(at: DateTime<Utc>) -> String {
    format!(
        "this token expired at {}; ask an operator for a new one (`work-ledger token create`)",
        at.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}
/// A principal of the process's own, for writes it makes as the operator
/// (`work-ledger import`): every write acts as a token (SPEC §8), so this
/// mints one (the secret is thrown away) that expires after `lifetime`;
/// revoke it when done ([`db::tokens::revoke`]). Run as the migrating role.
pub async fn mint(
    db: &DatabaseConnection,
    fleet: &str,
    name: &str,
    permissions: Vec<Permission>,
    lifetime: Duration,
) -> Result<Principal, DbErr> {
    let (_, token_hash) = new_token();
    let expiry = Some(db::tokens::Expiry::In(lifetime));
    let token_id = db::tokens::insert_expiring(db, fleet, name, &permissions, &token_hash, expiry).await?;
    Ok(Principal { token_id, token_hash, fleet: fleet.to_owned(), name: name.to_owned(), permissions })
}

pub(crate) const UNKNOWN_TOKEN: &str =
    "unknown or revoked token: ask an operator for a valid one. `GET /` (without a browser) serves a quick start";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_refusal_fits_a_websocket_close_reason() {
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00.123456Z").expect("time").to_utc();
        let message = format!("Forbidden: {}", expired(at));
        assert!(message.contains("expired at 2026-12-01T10:00:00Z"), "{message}");
        assert!(message.len() <= 123, "{} bytes: {message}", message.len());
    }
}
