//! SQL of `api_tokens`. Minting, listing and revoking are operator commands
//! run by the CLI as the migrating role; authentication goes through the
//! `authenticate_token` function, the one narrow door through row-level
//! security before the fleet is known.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryOrder};
use uuid::Uuid;

use super::entities::api_token;
use super::stmt;

/// A live token as `authenticate_token` returns it.
pub struct LiveToken {
    pub id: Uuid,
    pub fleet: String,
    pub name: String,
    pub permissions: Vec<String>,
}

/// Looks a token up by the hash of its secret; `None` when unknown or revoked.
/// One statement, no transaction: it only reads through the function.
pub async fn authenticate(db: &impl ConnectionTrait, hash: &[u8; 32]) -> Result<Option<LiveToken>, DbErr> {
    let row = db
        .query_one_raw(stmt(
            "SELECT token_id, fleet, name, permissions FROM authenticate_token($1)",
            [hash.to_vec().into()],
        ))
        .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(LiveToken {
        id: row.try_get("", "token_id")?,
        fleet: row.try_get("", "fleet")?,
        name: row.try_get("", "name")?,
        permissions: row.try_get("", "permissions")?,
    }))
}

pub async fn insert(
    db: &DatabaseConnection,
    fleet: &str,
    name: &str,
    permissions: &[impl AsRef<str>],
    hash: &[u8; 32],
) -> Result<Uuid, DbErr> {
    let permissions: Vec<String> = permissions.iter().map(|p| p.as_ref().to_owned()).collect();
    let row = db
        .query_one_raw(stmt(
            "SELECT ledger_token_create($1, $2, $3, $4) AS id",
            [fleet.into(), name.into(), permissions.into(), hash.to_vec().into()],
        ))
        .await?
        .ok_or_else(|| DbErr::RecordNotInserted)?;
    row.try_get("", "id")
}

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

/// True when the fleet has at least one live token (so `serve` mints the
/// first operator token only once).
pub async fn any_live(db: &DatabaseConnection) -> Result<bool, DbErr> {
    let row =
        db.query_one_raw(stmt("SELECT EXISTS (SELECT 1 FROM api_tokens WHERE revoked_at IS NULL) AS any", [])).await?;
    match row {
        Some(row) => row.try_get("", "any"),
        None => Ok(false),
    }
}

/// The tokens among `ids` that were revoked or deleted.
pub async fn revoked_among(db: &impl ConnectionTrait, ids: Vec<Uuid>) -> Result<Vec<Uuid>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT i.id FROM unnest($1::uuid[]) AS i(id)
              WHERE NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = i.id AND t.revoked_at IS NULL)",
            [ids.into()],
        ))
        .await?;
    rows.iter().map(|r| r.try_get("", "id")).collect()
}
