//! Bearer tokens, permissions and the request principal (SPEC §8), and the
//! one place a bearer token is turned into a principal ([`authenticate`]),
//! for HTTP requests, MCP and WebSocket `connection_init` alike: unknown,
//! revoked and expired tokens are refused there, and the token's last use is
//! recorded from there ([`LastUse`]).
//!
//! Tokens are 32 random bytes shown once as `wl_<base64url>`; the database
//! keeps only their SHA-256. A high-entropy secret needs no slow hash: the
//! hash only has to make a leaked table useless.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, SecondsFormat, Utc};
use rand::RngCore;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::db;
use crate::db::tokens::{LiveToken, Lookup};

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
type KnownToken = (Principal, Option<DateTime<Utc>>);

impl fmt::Debug for Known {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Known").field("tokens", &self.len()).finish()
    }
}

impl Known {
    /// Tokens kept before the memory starts over.
    pub const CAPACITY: usize = 65_536;

    fn get(&self, hash: &TokenHash) -> Option<KnownToken> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).get(hash).cloned()
    }

    fn remember(&self, principal: &Principal, expires_at: Option<DateTime<Utc>>) {
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

/// Records tokens' last use (`api_tokens.last_used_at`) off the requests'
/// path: a call that is due (the lookup found the last record older than a
/// minute) is queued and nobody waits for it, and the process sends at
/// most one a minute per token (a burst of requests of one token would
/// otherwise each send one before the first commits). One sender at a time
/// writes everything queued in one statement, so that a thousand tokens
/// connecting at once (a fleet's reconnect) cost a few commits, not a
/// thousand. The database keeps it to one write a minute across replicas
/// (`ledger_token_touch`). One per [`crate::ledger::Ledger`].
#[derive(Debug, Default)]
pub struct LastUse {
    /// When this process last sent a token's record.
    sent: Arc<Mutex<HashMap<Uuid, Instant>>>,
    /// Records due and not sent yet, and whether a sender is running.
    queue: Arc<Mutex<Queued>>,
}

#[derive(Debug, Default)]
struct Queued {
    due: Vec<Uuid>,
    sending: bool,
}

impl LastUse {
    /// A token's use is recorded at most this often.
    const EVERY: Duration = Duration::from_secs(60);
    /// Tokens remembered before the ones sent over a minute ago are forgotten.
    const REMEMBERED: usize = 4096;
    /// Records per statement.
    const BATCH: usize = 1000;

    /// Records a use of `token` in the background, unless this process did
    /// within the minute. A failure is logged: it costs only the record.
    pub fn record(&self, db: &DatabaseConnection, token: Uuid) {
        if !self.admit(token, Instant::now()) {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.due.push(token);
        if std::mem::replace(&mut queue.sending, true) {
            return;
        }
        drop(queue);
        let (db, sent, queue) = (db.clone(), self.sent.clone(), self.queue.clone());
        tokio::spawn(async move {
            loop {
                let due: Vec<Uuid> = {
                    let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                    if queue.due.is_empty() {
                        queue.sending = false;
                        return;
                    }
                    let n = queue.due.len().min(Self::BATCH);
                    queue.due.drain(..n).collect()
                };
                match db::tokens::touch_all(&db, due).await {
                    // A busy row: the next request of that token tries again.
                    Ok(touched) => {
                        let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
                        touched.iter().filter(|(_, t)| t.is_none()).for_each(|(id, _)| _ = sent.remove(id));
                    }
                    Err(err) => tracing::warn!(error = %err, "cannot record the tokens' last use"),
                }
            }
        });
    }

    fn admit(&self, token: Uuid, now: Instant) -> bool {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let recent = |at: &Instant| now.duration_since(*at) < Self::EVERY;
        if sent.get(&token).is_some_and(recent) {
            return false;
        }
        if sent.len() >= Self::REMEMBERED {
            sent.retain(|_, at| recent(at));
        }
        sent.insert(token, now);
        true
    }
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

pub fn hash_token(secret: &str) -> TokenHash {
    Sha256::digest(secret.as_bytes()).into()
}

/// Extracts the secret from an `Authorization` header value
/// (`Bearer <token>`, scheme case-insensitive).
fn parse_bearer(header: Option<&str>) -> Result<&str, AuthError> {
    let header = header.ok_or(AuthError::Unauthenticated(MISSING_TOKEN.into()))?;
    let malformed = || AuthError::Unauthenticated(MALFORMED_TOKEN.into());
    let (scheme, token) = header.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    let well_formed = scheme.eq_ignore_ascii_case("bearer")
        && token.starts_with(TOKEN_PREFIX)
        && token.len() == TOKEN_PREFIX.len() + 43
        && URL_SAFE_NO_PAD.decode(&token[TOKEN_PREFIX.len()..]).is_ok();
    if well_formed { Ok(token) } else { Err(malformed()) }
}

pub const MISSING_TOKEN: &str = "missing token: send `Authorization: Bearer <token>`; an operator mints tokens with \
    `work-ledger token create`. `GET /` (without a browser) serves a quick start";
const MALFORMED_TOKEN: &str = "malformed Authorization header: expected `Bearer <token>` with a token minted by \
    `work-ledger token create`. `GET /` (without a browser) serves a quick start";
pub(crate) const UNKNOWN_TOKEN: &str =
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
        tracing::warn!(%client, via, %reason, total, left_out, "authentication failed");
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

    #[test]
    fn a_token_s_last_use_is_sent_at_most_once_a_minute() {
        let last_use = LastUse::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let start = Instant::now();
        assert!(last_use.admit(a, start));
        assert!(!last_use.admit(a, start + Duration::from_secs(59)), "a burst sends one");
        assert!(last_use.admit(b, start + Duration::from_secs(1)), "each token its own");
        assert!(last_use.admit(a, start + LastUse::EVERY), "and again after the minute");
    }

    #[test]
    fn an_expiry_refusal_fits_a_websocket_close_reason() {
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00.123456Z").expect("time").to_utc();
        let message = format!("Forbidden: {}", expired(at));
        assert!(message.contains("expired at 2026-12-01T10:00:00Z"), "{message}");
        assert!(message.len() <= 123, "{} bytes: {message}", message.len());
    }
}
