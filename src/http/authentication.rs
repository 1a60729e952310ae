//! The one authentication of every surface, and what a failed one costs.

use std::net::SocketAddr;

use axum::http::StatusCode;

use crate::auth::{self, Principal};
use crate::ledger::{Ledger, LedgerError};

/// The one authentication of every surface (`http`, `websocket`, `mcp`):
/// the token looked up on every request (so a revocation or an expiry counts
/// at once), a failure logged and counted for `surface` ([`auth_failed`]).
pub(crate) async fn authenticate_token(
    ledger: &Ledger,
    authorization: Option<&str>,
    client: Option<SocketAddr>,
    surface: &'static str,
) -> Result<(Principal, auth::Credential), LedgerError> {
    let authenticated = ledger.authenticate(authorization).await;
    if let Err(err) = &authenticated {
        auth_failed(ledger, client, surface, err);
    }
    Ok(authenticated?)
}

/// The HTTP status of a failed authentication: 401 for the token, 503 when
/// the database could not be asked.
pub(crate) fn auth_status(err: &LedgerError) -> StatusCode {
    if matches!(err, LedgerError::Unauthenticated(_)) {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// A failed authentication on any surface (`http`, `websocket`, `mcp`):
/// logged with the client's address at a bounded rate, and counted in
/// `work_ledger_auth_failures_total{surface}`. A database that could not be
/// asked is not a failed authentication.
fn auth_failed(ledger: &Ledger, client: Option<SocketAddr>, surface: &'static str, err: &auth::AuthError) {
    if matches!(err, auth::AuthError::Unauthenticated(_)) {
        auth::log_failure(client, surface, err);
        ledger.metrics().auth_failed(surface);
    }
}
