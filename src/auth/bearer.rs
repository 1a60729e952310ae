//! A bearer token's form: minted as `wl_<base64url>` of 32 random bytes,
//! known by its SHA-256, read from an `Authorization` header.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::{AuthError, TokenHash};

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
pub(super) fn parse_bearer(header: Option<&str>) -> Result<&str, AuthError> {
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
