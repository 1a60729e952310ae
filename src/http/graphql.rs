//! `POST /graphql`: authentication, the body and batch limits of SPEC §9,
//! then execution. Each operation of a batch gets its own DataLoaders (the
//! schema's `LoadersPerOperation` extension makes them).

use async_graphql::BatchRequest;
use async_graphql_axum::GraphQLResponse;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{AppState, MAX_BATCH, MAX_BODY_BYTES, authenticate, refuse};
use crate::ledger::LedgerError;

pub(super) async fn post(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let principal = match authenticate(&state, &headers).await {
        Ok(principal) => principal,
        Err(err @ LedgerError::Unauthenticated(_)) => return refuse(StatusCode::UNAUTHORIZED, err),
        Err(err) => return refuse(StatusCode::SERVICE_UNAVAILABLE, err),
    };
    let limit = state.http.body_read_timeout;
    let bytes = match tokio::time::timeout(limit, to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                LedgerError::invalid("body", format!("request bodies are limited to {MAX_BODY_BYTES} bytes")),
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                LedgerError::invalid(
                    "body",
                    format!("the request body did not arrive within {} s; send it at once", limit.as_secs_f64()),
                ),
            );
        }
    };
    let batch: BatchRequest = match serde_json::from_slice(&bytes) {
        Ok(batch) => batch,
        Err(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                LedgerError::invalid(
                    "body",
                    "expected a JSON GraphQL request {\"query\": ..., \"variables\": ...} or a list of them",
                ),
            );
        }
    };
    if let BatchRequest::Batch(requests) = &batch
        && (requests.is_empty() || requests.len() > MAX_BATCH)
    {
        return refuse(
            StatusCode::BAD_REQUEST,
            LedgerError::invalid("body", format!("a batch holds 1 to {MAX_BATCH} operations (got {})", requests.len())),
        );
    }
    let batch = match batch {
        BatchRequest::Single(request) => BatchRequest::Single(request.data(principal)),
        BatchRequest::Batch(requests) => {
            BatchRequest::Batch(requests.into_iter().map(|request| request.data(principal.clone())).collect())
        }
    };
    GraphQLResponse::from(state.schema.execute_batch(batch).await).into_response()
}
