//! SQL of `api_tokens`. Minting, listing and revoking are operator commands
//! run by the CLI as the migrating role; authentication goes through the
//! `authenticate_token` function, the one narrow door through row-level
//! security before the fleet is known, and a token's last use through
//! `ledger_token_touch` (the service's role writes no table).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryOrder};
use uuid::Uuid;

use super::entities::api_token;
use super::stmt;

/// What `authenticate_token` says of a token that is not revoked.
pub enum Lookup {
    Live(LiveToken),
    /// Its expiry passed (by the database's clock).
    Expired {
        at: DateTime<Utc>,
    },
}

/// A live token as `authenticate_token` returns it.
pub struct LiveToken {
    pub id: Uuid,
    pub fleet: String,
    pub name: String,
    pub permissions: Vec<String>,
    /// When it expires, and how long that was from the lookup by the
    /// database's clock; `None` for a token that never expires.
    pub expiry: Option<(DateTime<Utc>, Duration)>,
    /// Its last use was recorded more than a minute ago, or never.
    pub touch_due: bool,
}

/// Looks a token up by the hash of its secret; `None` when unknown or revoked.
/// One statement, no transaction: it only reads through the function.
pub async fn authenticate(db: &impl ConnectionTrait, hash: &[u8; 32]) -> Result<Option<Lookup>, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT token_id, fleet, name, permissions, expires_at, expires_in, expired, touch_due
               FROM authenticate_token($1)",
            [hash.to_vec().into()],
        ))
        .await?;
    let Some(row) = row else { return Ok(None) };
    let expires_at: Option<DateTime<Utc>> = row.try_get("", "expires_at")?;
    if let Some(at) = expires_at
        && row.try_get::<bool>("", "expired")?
    {
        return Ok(Some(Lookup::Expired { at }));
    }
    let expires_in: Option<f64> = row.try_get("", "expires_in")?;
    let left = |seconds: f64| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO);
    Ok(Some(Lookup::Live(LiveToken {
        id: row.try_get("", "token_id")?,
        fleet: row.try_get("", "fleet")?,
        name: row.try_get("", "name")?,
        permissions: row.try_get("", "permissions")?,
        expiry: expires_at.map(|at| (at, expires_in.map_or(Duration::ZERO, left))),
        touch_due: row.try_get("", "touch_due")?,
    })))
}

/// Why `ledger_session` (sql/repeatable/reads.sql) refused a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Unknown or revoked.
    Unknown,
    /// Its expiry passed (by the database's clock).
    Expired(DateTime<Utc>),
    /// It lacks `ledger:read`.
    Forbidden,
}

/// The statement that opens a read request's transaction: it authenticates
/// the token `$1` (`ledger_session`) and takes the app role and the token's
/// fleet for the rest of the transaction. On its own, in autocommit, it only
/// says whether the token is live.
pub const SESSION: &str =
    "SELECT set_config('role', 'work_ledger_app', true) AS role, s.refusal, s.expired_at FROM ledger_session($1) s";

/// What [`SESSION`] said of the token: `None` when it is live and may read.
pub async fn session(db: &impl ConnectionTrait, hash: &[u8; 32]) -> Result<Option<Refusal>, DbErr> {
    let row = db
        .query_one_raw(stmt(SESSION, [hash.to_vec().into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("ledger_session".into()))?;
    let refusal: Option<String> = row.try_get("", "refusal")?;
    Ok(match refusal.as_deref() {
        None => None,
        Some("expired") => match row.try_get::<Option<DateTime<Utc>>>("", "expired_at")? {
            Some(at) => Some(Refusal::Expired(at)),
            None => Some(Refusal::Unknown),
        },
        Some("forbidden") => Some(Refusal::Forbidden),
        Some(_) => Some(Refusal::Unknown),
    })
}

/// Records a use of each token now, unless one was recorded within the
/// minute, in one statement: per token `Some(true)` when it wrote,
/// `Some(false)` when nothing was due, `None` when another write held the
/// token's row (nothing waited).
pub async fn touch_all(db: &impl ConnectionTrait, ids: Vec<Uuid>) -> Result<Vec<(Uuid, Option<bool>)>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT ledger_token_touch(i.id) AS touched, i.id FROM unnest($1::uuid[]) AS i(id)",
            [ids.into()],
        ))
        .await?;
    rows.iter().map(|r| Ok((r.try_get("", "id")?, r.try_get("", "touched")?))).collect()
}

/// When a new token stops working.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expiry {
    /// At this instant.
    At(DateTime<Utc>),
    /// This long after it is minted, by the database's clock.
    In(Duration),
}

/// Mints a token that never expires.
pub async fn insert(
    db: &DatabaseConnection,
    fleet: &str,
    name: &str,
    permissions: &[impl AsRef<str>],
    hash: &[u8; 32],
) -> Result<Uuid, DbErr> {
    insert_expiring(db, fleet, name, permissions, hash, None).await
}

/// Mints a token that stops working as `expiry` says (never with `None`).
/// An expiry that is not in the future breaks [`EXPIRY_CONSTRAINT`].
pub async fn insert_expiring(
    db: &DatabaseConnection,
    fleet: &str,
    name: &str,
    permissions: &[impl AsRef<str>],
    hash: &[u8; 32],
    expiry: Option<Expiry>,
) -> Result<Uuid, DbErr> {
    let permissions: Vec<String> = permissions.iter().map(|p| p.as_ref().to_owned()).collect();
    let (at, seconds) = match expiry {
        Some(Expiry::At(at)) => (Some(at), None),
        Some(Expiry::In(lifetime)) => (None, Some(lifetime.as_secs_f64())),
        None => (None, None),
    };
    let row = db
        .query_one_raw(stmt(
            "SELECT ledger_token_create($1, $2, $3, $4, $5, make_interval(secs => $6)) AS id",
            [fleet.into(), name.into(), permissions.into(), hash.to_vec().into(), at.into(), seconds.into()],
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotInserted)?;
    row.try_get("", "id")
}

/// The constraint a token expiring no later than its creation breaks.
pub const EXPIRY_CONSTRAINT: &str = "api_tokens_expires_after_creation";

pub async fn list(db: &DatabaseConnection) -> Result<Vec<api_token::Model>, DbErr> {
    api_token::Entity::find()
        .order_by_asc(api_token::Column::Fleet)
        .order_by_asc(api_token::Column::CreatedAt)
        .all(db)
        .await
}

/// Marks a token revoked; true when a live token was revoked.
pub async fn revoke(db: &DatabaseConnection, id: Uuid) -> Result<bool, DbErr> {
    let row = db
        .query_one_raw(stmt("SELECT ledger_token_revoke($1) AS revoked", [id.into()]))
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("ledger_token_revoke".into()))?;
    row.try_get("", "revoked")
}

/// Revokes every token not yet revoked whose last use (or, never used, its
/// creation) is older than `unused_for`; the tokens it revoked, by fleet
/// and creation like [`list`].
pub async fn revoke_unused(db: &DatabaseConnection, unused_for: Duration) -> Result<Vec<api_token::Model>, DbErr> {
    let mut revoked = api_token::Entity::find()
        .from_raw_sql(stmt(
            "SELECT * FROM ledger_token_revoke_unused(make_interval(secs => $1))",
            [unused_for.as_secs_f64().into()],
        ))
        .all(db)
        .await?;
    revoked.sort_by(|a, b| (&a.fleet, a.created_at).cmp(&(&b.fleet, b.created_at)));
    Ok(revoked)
}

/// True when the database has at least one live token, neither revoked nor
/// expired (so `serve` mints the first operator token only once).
pub async fn any_live(db: &DatabaseConnection) -> Result<bool, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT EXISTS (SELECT 1 FROM api_tokens
                             WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())) AS any",
            [],
        ))
        .await?;
    match row {
        Some(row) => row.try_get("", "any"),
        None => Ok(false),
    }
}

/// Why a token no longer works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dead {
    /// Revoked, or deleted.
    Revoked,
    /// Expired at this time (and not revoked).
    Expired(DateTime<Utc>),
}

/// The tokens among `ids` that were revoked, deleted or expired, and which.
pub async fn dead_among(db: &impl ConnectionTrait, ids: Vec<Uuid>) -> Result<Vec<(Uuid, Dead)>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT i.id, t.expires_at FROM unnest($1::uuid[]) AS i(id)
               LEFT JOIN api_tokens t ON t.id = i.id AND t.revoked_at IS NULL
              WHERE t.id IS NULL OR t.expires_at <= now()",
            [ids.into()],
        ))
        .await?;
    rows.iter()
        .map(|r| {
            let expired: Option<DateTime<Utc>> = r.try_get("", "expires_at")?;
            Ok((r.try_get("", "id")?, expired.map_or(Dead::Revoked, Dead::Expired)))
        })
        .collect()
}
