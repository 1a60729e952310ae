//! Reading a request's body whole, for every route that reads one
//! (`/graphql`, `/mcp`): within the body-read timeout (then 408) and
//! [`MAX_BODY_BYTES`] (SPEC §9; then 413).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;

use super::MAX_BODY_BYTES;
use crate::ledger::LedgerError;

/// Why a request body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    TimedOut(Duration),
    TooLarge,
    /// Malformed framing (a bad chunk), or the client went away.
    Unreadable,
}

impl BodyError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable => StatusCode::BAD_REQUEST,
        }
    }

    pub(crate) fn into_ledger_error(self) -> LedgerError {
        let rule = match self {
            Self::TimedOut(limit) => {
                format!("the request body did not arrive within {} s; send it at once", limit.as_secs_f64())
            }
            Self::TooLarge => format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
            Self::Unreadable => "the request body could not be read (malformed or cut short); send it again".into(),
        };
        LedgerError::invalid("body", rule)
    }
}

/// A request's body, whole, within `limit` and [`MAX_BODY_BYTES`] (SPEC §9),
/// for every route that reads one (`/graphql`, `/mcp`).
pub(crate) async fn read_body(body: Body, limit: Duration) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(limit, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Err(_) => Err(BodyError::TimedOut(limit)),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) if std::error::Error::source(&err).is_some_and(|e| e.is::<http_body_util::LengthLimitError>()) => {
            Err(BodyError::TooLarge)
        }
        Ok(Err(_)) => Err(BodyError::Unreadable),
    }
}
