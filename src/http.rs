//! The HTTP surface: `POST /graphql`, GraphiQL on `/`, health and readiness.
//! `Application::build` binds (port 0 in tests) and returns before serving,
//! so callers learn the address first.

use std::future::Future;
use std::net::SocketAddr;

use async_graphql::BatchRequest;
use async_graphql_axum::GraphQLResponse;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sea_orm::ConnectionTrait;
use serde_json::json;
use tokio::net::TcpListener;

use crate::auth::{self, Principal};
use crate::db;
use crate::graphql::{LedgerSchema, build_schema};
use crate::ledger::{Ledger, LedgerError};

/// SPEC §9.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const MAX_BATCH: usize = 10;

#[derive(Clone)]
struct AppState {
    schema: LedgerSchema,
    ledger: Ledger,
}

pub struct Application {
    listener: TcpListener,
    router: Router,
}

impl Application {
    pub async fn build(ledger: Ledger, listen: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let state = AppState { schema: build_schema(ledger.clone()), ledger };
        let router = Router::new()
            .merge(crate::graphiql::routes())
            .route("/graphql", post(graphql))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(state);
        Ok(Self { listener, router })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then finishes in-flight requests.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        axum::serve(self.listener, self.router).with_graceful_shutdown(shutdown).await
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.ledger.db().execute_unprepared("SELECT 1").await {
        Ok(_) => (StatusCode::OK, "ready").into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response()
        }
    }
}

/// A GraphQL error body for refusals that happen before execution.
fn refuse(status: StatusCode, err: LedgerError) -> Response {
    let body = json!({ "errors": [{ "message": err.to_string(), "extensions": { "code": err.code() } }] });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, LedgerError> {
    let value = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    let secret = auth::parse_bearer(value)?;
    db::tokens::authenticate(state.ledger.db(), &auth::hash_token(secret)).await?.ok_or(auth::UNKNOWN_TOKEN)
}

async fn graphql(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let principal = match authenticate(&state, &headers).await {
        Ok(principal) => principal,
        Err(err @ LedgerError::Unauthenticated(_)) => return refuse(StatusCode::UNAUTHORIZED, err),
        Err(err) => return refuse(StatusCode::SERVICE_UNAVAILABLE, err),
    };
    let Ok(bytes) = to_bytes(body, MAX_BODY_BYTES).await else {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            LedgerError::invalid("body", format!("request bodies are limited to {MAX_BODY_BYTES} bytes")),
        );
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
    // Each operation gets its own DataLoader (and so its own cache).
    let with_context = |request: async_graphql::Request| {
        let loaders = crate::graphql::loaders::for_request(state.ledger.clone(), principal.clone());
        request.data(principal.clone()).data(loaders)
    };
    let batch = match batch {
        BatchRequest::Single(request) => BatchRequest::Single(with_context(request)),
        BatchRequest::Batch(requests) => BatchRequest::Batch(requests.into_iter().map(with_context).collect()),
    };
    GraphQLResponse::from(state.schema.execute_batch(batch).await).into_response()
}
