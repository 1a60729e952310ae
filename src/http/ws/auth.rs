//! `connection_init`: the token check and the token's connection slot. A
//! refusal is kept as the close the connection ends with (4403, or 4429 for
//! one connection too many), since async-graphql would close with 1002.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_graphql::Data;
use serde_json::Value;
use uuid::Uuid;

use super::close::{self, Closing};
use crate::auth::{Credential, Principal};
use crate::ledger::{Ledger, LedgerError};
use crate::live::Live;

/// What `on_connection_init` decided, for the connection loop to act on.
pub(super) type Verdict = Result<(Uuid, Credential), Closing>;

/// Authenticates `connection_init`'s payload `{"Authorization": "Bearer <token>"}`
/// (key in any case) and returns the operations' context.
pub(super) async fn init(
    ledger: Ledger,
    live: Live,
    verdict: Arc<Mutex<Option<Verdict>>>,
    tracked: Arc<Mutex<Option<crate::live::TrackedToken>>>,
    max_per_token: usize,
    client: SocketAddr,
    payload: Value,
) -> async_graphql::Result<Data> {
    let header = payload.as_object().and_then(|fields| {
        fields.iter().find(|(key, _)| key.eq_ignore_ascii_case("authorization")).and_then(|(_, v)| v.as_str())
    });
    match crate::http::authenticate_token(&ledger, header, Some(client), "websocket").await {
        Ok((principal, credential)) => {
            let Some(slot) = live.try_track_token(principal.token_id, max_per_token) else {
                let reason = format!(
                    "Too many WebSockets for this token: at most {max_per_token} at once; close one, or run all \
                     your subscriptions over one connection"
                );
                *lock(&verdict) = Some(Err((close::TOO_MANY_CONNECTIONS, reason.clone())));
                return Err(async_graphql::Error::new(reason));
            };
            *lock(&tracked) = Some(slot);
            *lock(&verdict) = Some(Ok((principal.token_id, credential)));
            let mut data = Data::default();
            data.insert::<Principal>(principal);
            data.insert(live);
            Ok(data)
        }
        Err(err) => {
            let code =
                if matches!(err, LedgerError::Unauthenticated(_)) { close::FORBIDDEN } else { close::INTERNAL_ERROR };
            let reason = format!("Forbidden: {err}");
            *lock(&verdict) = Some(Err((code, reason.clone())));
            Err(async_graphql::Error::new(reason))
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
