//! The HTTP surface: `POST /graphql` ([`graphql`]), `GET /graphql/ws`
//! (subscriptions, [`ws`]), `/mcp` behind the same checks ([`mcp`]),
//! GraphiQL on `/` ([`graphiql`]), health and readiness, and `GET /metrics`
//! on a listener of its own ([`metrics`]); the one authentication of every
//! surface ([`authentication`]); what `serve` configures ([`config`]).
//! `Application::build` binds (port 0 in tests) and returns before serving,
//! so callers learn the address first; `run_until` serves HTTP and runs the
//! live subsystem's background tasks (listener, sweeper) beside it, all
//! stopped by the same signal.

mod authentication;
mod body;
mod config;
pub mod graphiql;
mod graphql;
pub mod listener;
mod mcp;
mod metrics;
pub mod quickstart;
pub mod surface;
pub mod ws;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sea_orm::ConnectionTrait;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use crate::db::SessionLimits;
pub(crate) use authentication::{auth_status, authenticate_token};
pub(crate) use body::read_body;
pub use config::{HttpConfig, METRICS_MAX_CONNECTIONS, ServerConfig};
pub use graphql::MediaType;
pub(crate) use graphql::is_json;
pub use surface::SurfaceConfig;
pub use ws::WsConfig;

use crate::auth::Principal;
use crate::db;
use crate::graphql::{LedgerSchema, build_schema, error_body};
use crate::ledger::{Ledger, LedgerError};
use crate::live::Live;

/// SPEC §9.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// A request's line and headers together (431 past it), and the most a
/// connection buffers of a request it has not parsed yet. About hyper's own
/// limit on a URI (64 KiB), which a `GET /graphql` carries its document in.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
pub const MAX_BATCH: usize = 10;

#[derive(Clone)]
struct AppState {
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
    ws: WsConfig,
    http: HttpConfig,
    /// The open WebSocket connections, awaited when stopping.
    connections: TaskTracker,
    /// The schema's own words for the quick start.
    descriptions: Arc<quickstart::Descriptions>,
    local_addr: SocketAddr,
    /// `--public-url`, without a trailing slash.
    public_url: Option<String>,
    policy: Arc<surface::Policy>,
}

pub struct Application {
    listener: TcpListener,
    router: Router,
    live: Live,
    http: HttpConfig,
    connections: TaskTracker,
    /// The metrics listener and its router, when configured.
    metrics: Option<(TcpListener, Router)>,
    /// Where the listeners count their connections.
    registry: Arc<crate::metrics::Metrics>,
    /// The projection from Temporal, when configured.
    temporal: Option<crate::temporal::TemporalProjection>,
}

/// How long stopping waits for WebSocket connections to close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

impl Application {
    /// With the defaults (`serve`'s defaults too).
    pub async fn build(ledger: Ledger, listen: &str) -> std::io::Result<Self> {
        Self::build_with(ledger, listen, ServerConfig::default()).await
    }

    pub async fn build_with(ledger: Ledger, listen: &str, config: ServerConfig) -> std::io::Result<Self> {
        let listener = bind(listen, "the API", "--listen (WORK_LEDGER_LISTEN)").await?;
        let metrics_listener = match &config.metrics_listen {
            Some(addr) => Some(
                bind(
                    addr,
                    "Prometheus metrics",
                    "--metrics-listen (WORK_LEDGER_METRICS_LISTEN; empty turns metrics off)",
                )
                .await?,
            ),
            None => None,
        };
        let live = Live::new(&ledger, config.live);
        let connections = TaskTracker::new();
        let schema = build_schema(ledger.clone(), live.clone(), metrics_listener.is_some());
        let descriptions = Arc::new(quickstart::Descriptions::of_schema(&schema).await);
        let policy = surface::Policy::new(&config.surface, listen);
        let metrics_policy = config.metrics_listen.as_deref().map(|addr| surface::Policy::new(&config.surface, addr));
        let state = AppState {
            schema,
            ledger: ledger.clone(),
            live: live.clone(),
            ws: config.ws,
            http: config.http,
            connections: connections.clone(),
            descriptions,
            local_addr: listener.local_addr()?,
            public_url: config.surface.public_url.as_deref().map(|url| url.trim_end_matches('/').to_owned()),
            policy: policy.clone(),
        };
        // Origin first (a foreign page learns nothing), then the token, then the body.
        let mcp = mcp::routes(state.schema.clone(), ledger.clone(), live.stop_token(), config.http)
            .route_layer(middleware::from_fn_with_state(policy.clone(), surface::check_mcp_origin));
        let router = Router::new()
            .merge(graphiql::routes())
            .route("/", get(root))
            .route("/graphql", post(graphql::post).get(graphql::get))
            .route("/graphql/ws", get(graphql_ws))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(state.clone())
            .merge(mcp)
            .fallback(surface::not_found);
        let router = surface::guard(router, policy).layer(middleware::from_fn(request_span));
        let metrics = metrics_listener.zip(metrics_policy).map(|(l, policy)| {
            let router = Router::new()
                .route("/metrics", get(metrics::scrape))
                .with_state(state)
                .fallback(surface::not_found_on_metrics);
            (l, surface::guard(router, policy))
        });
        let registry = ledger.metrics().clone();
        let temporal =
            config.temporal.map(|temporal| crate::temporal::TemporalProjection::new(ledger.clone(), temporal));
        Ok(Self { listener, router, live, http: config.http, connections, metrics, registry, temporal })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Where `GET /metrics` listens, when it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|(listener, _)| listener.local_addr().ok())
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
        let door = listener::Door {
            name: "api",
            header_read_timeout: self.http.header_read_timeout,
            max_connections: self.http.max_connections,
            upgraded: Some(self.connections.clone()),
            counts: self.registry.door("api"),
        };
        let server = listener::serve(self.listener, self.router, door, live.stopping_owned());
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
        let warden = live.clone();
        tasks.spawn(async move {
            warden.run_warden().await;
            ("reader warden", Ok(()))
        });
        let projector = live.clone();
        tasks.spawn(async move {
            projector.run_projector().await;
            ("projector", Ok(()))
        });
        // Its own task: Temporal away never stops the service (it warns and backs off).
        if let Some(temporal) = self.temporal {
            let stop = live.stop_token();
            tasks.spawn(async move {
                temporal.run(stop).await;
                ("Temporal projection", Ok(()))
            });
        }
        if let Some((metrics, router)) = self.metrics {
            let door = listener::Door {
                name: "metrics",
                header_read_timeout: self.http.header_read_timeout,
                max_connections: self.http.metrics_max_connections,
                upgraded: None,
                counts: self.registry.door("metrics"),
            };
            let server = listener::serve(metrics, router, door, live.stopping_owned());
            tasks.spawn(async move { ("metrics listener", server.await) });
        }

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
        // Stopping the live subsystem also closes every WebSocket (1001).
        live.stop();
        self.connections.close();
        let _ = tokio::time::timeout(CLOSE_GRACE, self.connections.wait()).await;
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

/// `GET /`: GraphiQL for a browser (an `Accept` that names HTML), the
/// plain-text quick start for anyone else.
async fn root(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("text/html") || accept.contains("application/xhtml+xml") {
        return graphiql::page();
    }
    let base = match &state.public_url {
        Some(url) => url.clone(),
        // The Host was checked against the allow-list; a proxy in front that
        // terminates TLS should set --public-url.
        None => {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned);
            format!("http://{}", host.unwrap_or_else(|| state.local_addr.to_string()))
        }
    };
    let text = quickstart::render(&base, &state.descriptions);
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], text).into_response()
}

/// Binds `addr` for `what`; an error names the address and the setting that moves it.
async fn bind(addr: &str, what: &str, setting: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!("cannot listen on {addr} for {what}: {err}; set another address with {setting}"),
        )
    })
}

/// One span per HTTP request (the parent of its ledger operations' spans):
/// method, path (never the query string, which may carry a GraphQL document
/// or variables) and status. The token is a header and is never recorded.
async fn request_span(request: axum::extract::Request, next: middleware::Next) -> Response {
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format_args!("{} {}", request.method(), request.uri().path()),
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// Ready when the database answers and this process LISTENs for events
/// (without it subscribers would only be served by polling).
async fn readyz(State(state): State<AppState>) -> Response {
    if let Err(err) = state.ledger.db().execute_unprepared("SELECT 1").await {
        tracing::warn!(error = %err, "readiness check failed");
        if db::is_unavailable(&err) {
            db::primary::suspect();
        }
        return (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response();
    }
    if !state.live.is_listening() {
        return (StatusCode::SERVICE_UNAVAILABLE, "notification listener not connected").into_response();
    }
    (StatusCode::OK, "ready").into_response()
}

/// Subscriptions over graphql-transport-ws; the token comes in `connection_init`.
/// Pages of other origins are refused before the upgrade.
async fn graphql_ws(
    State(state): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if !state.policy.origin_allowed(&headers) {
        return surface::refuse_origin();
    }
    ws::upgrade(upgrade, state.schema, state.ledger, state.live, state.ws, state.connections, client)
}

/// A GraphQL error body, in `media`, for refusals that happen before
/// execution; a 401 names the scheme it wants (RFC 6750).
fn error_response(status: StatusCode, media: MediaType, err: LedgerError) -> Response {
    let mut response =
        (status, [(header::CONTENT_TYPE, media.content_type())], error_body(err).to_string()).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}

/// The request's principal from its `Authorization` header ([`authenticate_token`]).
async fn authenticate(state: &AppState, headers: &HeaderMap, client: SocketAddr) -> Result<Principal, LedgerError> {
    let value = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    Ok(authenticate_token(&state.ledger, value, Some(client), "http").await?.0)
}
