//! The HTTP surface: `POST /graphql`, `GET /graphql/ws` (subscriptions),
//! GraphiQL on `/`, health and readiness. `Application::build` binds (port 0
//! in tests) and returns before serving, so callers learn the address first;
//! `run_until` serves HTTP and runs the live subsystem's background tasks
//! (listener, sweeper) beside it, all stopped by the same signal.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use async_graphql::BatchRequest;
use async_graphql_axum::GraphQLResponse;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{State, WebSocketUpgrade};
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
use crate::live::{self, Live, LiveConfig};

/// SPEC §9.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const MAX_BATCH: usize = 10;

#[derive(Clone)]
struct AppState {
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
}

pub struct Application {
    listener: TcpListener,
    router: Router,
    live: Live,
}

/// How long stopping waits for WebSocket connections to close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

impl Application {
    /// With the live subsystem's defaults (`serve`'s defaults too).
    pub async fn build(ledger: Ledger, listen: &str) -> std::io::Result<Self> {
        Self::build_with(ledger, listen, LiveConfig::default()).await
    }

    pub async fn build_with(ledger: Ledger, listen: &str, live: LiveConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let live = Live::new(ledger.db(), live);
        let state = AppState { schema: build_schema(ledger.clone()), ledger, live: live.clone() };
        let router = Router::new()
            .merge(crate::graphiql::routes())
            .route("/graphql", post(graphql))
            .route("/graphql/ws", get(graphql_ws))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(state);
        Ok(Self { listener, router, live })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The live subsystem (tests wait for the listener or a sweep through it).
    pub fn live(&self) -> &Live {
        &self.live
    }

    /// Serves HTTP and runs the listener and the sweeper until `shutdown`
    /// resolves or one of them stops (which one is logged); then stops the
    /// others, closes WebSockets and finishes in-flight requests.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
        let live = self.live;
        let server = axum::serve(self.listener, self.router).with_graceful_shutdown(live.stopping_owned());
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(async move { ("HTTP server", server.await) });
        let listener = live.clone();
        tasks.spawn(async move {
            listener.run_listener().await;
            ("LISTEN connection", Ok(()))
        });
        let sweeper = live.clone();
        tasks.spawn(async move {
            sweeper.run_sweeper().await;
            ("sweeper", Ok(()))
        });

        let mut result = Ok(());
        tokio::select! {
            _ = shutdown => {}
            Some(first) = tasks.join_next() => match first {
                Ok((task, Ok(()))) => tracing::warn!(task, "stopped on its own; stopping the others"),
                Ok((task, Err(err))) => {
                    tracing::error!(task, error = %err, "failed; stopping the others");
                    result = Err(err);
                }
                Err(err) => tracing::error!(error = %err, "a task panicked; stopping the others"),
            },
        }
        live.stop();
        live.connections_closed(CLOSE_GRACE).await;
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((_, Err(err))) if result.is_ok() => result = Err(err),
                Ok((task, _)) => tracing::debug!(task, "stopped"),
                Err(err) => tracing::error!(error = %err, "a task panicked"),
            }
        }
        result
    }
}

/// Ready when the database answers and this process LISTENs for events
/// (without it subscribers would only be served by polling).
async fn readyz(State(state): State<AppState>) -> Response {
    if let Err(err) = state.ledger.db().execute_unprepared("SELECT 1").await {
        tracing::warn!(error = %err, "readiness check failed");
        return (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response();
    }
    if !state.live.is_listening() {
        return (StatusCode::SERVICE_UNAVAILABLE, "notification listener not connected").into_response();
    }
    (StatusCode::OK, "ready").into_response()
}

/// Subscriptions over graphql-transport-ws; the token comes in `connection_init`.
async fn graphql_ws(State(state): State<AppState>, ws: WebSocketUpgrade) -> Response {
    live::ws::upgrade(ws, state.schema, state.ledger, state.live)
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
