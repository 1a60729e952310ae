use sea_orm::entity::prelude::*;

/// A bearer token: its SHA-256 hash, never the secret.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "api_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub fleet: String,
    pub name: String,
    pub permissions: Vec<String>,
    pub token_hash: Vec<u8>,
    pub created_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    /// `None`: never expires.
    pub expires_at: Option<DateTimeUtc>,
    /// Recorded at most once a minute; `None` until the first request.
    pub last_used_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
