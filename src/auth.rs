//! Bearer tokens, permissions and the request principal (SPEC §8).
//!
//! Tokens are 32 random bytes shown once as `wl_<base64url>`; the database
//! keeps only their SHA-256. A high-entropy secret needs no slow hash: the
//! hash only has to make a leaked table useless.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::ledger::LedgerError;

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

    pub fn require(&self, permission: Permission) -> Result<(), LedgerError> {
        if self.has(permission) { Ok(()) } else { Err(LedgerError::Forbidden(permission)) }
    }
}

const TOKEN_PREFIX: &str = "wl_";

/// A fresh secret and its hash. The secret is shown once and never stored.
pub fn new_token() -> (String, [u8; 32]) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = hash_token(&secret);
    (secret, hash)
}

pub fn hash_token(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Extracts the secret from an `Authorization` header value
/// (`Bearer <token>`, scheme case-insensitive).
pub fn parse_bearer(header: Option<&str>) -> Result<&str, LedgerError> {
    let header = header.ok_or(LedgerError::Unauthenticated(
        "missing token: send `Authorization: Bearer <token>`; an operator mints tokens with `work-ledger token create`",
    ))?;
    let malformed = LedgerError::Unauthenticated(
        "malformed Authorization header: expected `Bearer <token>` with a token minted by `work-ledger token create`",
    );
    let (scheme, token) = header.trim().split_once(' ').ok_or(malformed)?;
    let token = token.trim();
    let well_formed = scheme.eq_ignore_ascii_case("bearer")
        && token.starts_with(TOKEN_PREFIX)
        && token.len() == TOKEN_PREFIX.len() + 43
        && URL_SAFE_NO_PAD.decode(&token[TOKEN_PREFIX.len()..]).is_ok();
    if well_formed {
        Ok(token)
    } else {
        Err(LedgerError::Unauthenticated(
            "malformed Authorization header: expected `Bearer <token>` with a token minted by `work-ledger token create`",
        ))
    }
}

pub const UNKNOWN_TOKEN: LedgerError =
    LedgerError::Unauthenticated("unknown or revoked token: ask an operator for a valid one");
