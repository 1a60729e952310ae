//! The HTTP surface: `POST /graphql` ([`graphql`]), `GET /graphql/ws`
//! (subscriptions, [`ws`]), GraphiQL on `/` ([`graphiql`]), health and
//! readiness. `Application::build` binds (port 0 in tests) and returns before
//! serving, so callers learn the address first; `run_until` serves HTTP and
//! runs the live subsystem's background tasks (listener, sweeper) beside it,
//! all stopped by the same signal.

pub mod graphiql;
mod graphql;
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
pub use graphql::MediaType;
pub use surface::SurfaceConfig;
pub use ws::WsConfig;

use crate::auth::{self, Principal};
use crate::db;
use crate::graphql::{LedgerSchema, build_schema, error_body};
use crate::ledger::{Ledger, LedgerError};
use crate::live::{Live, LiveConfig};

/// SPEC §9.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const MAX_BATCH: usize = 10;

/// Everything `serve` configures beyond the database and the address.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    pub live: LiveConfig,
    pub ws: WsConfig,
    /// Where `GET /metrics` (Prometheus) listens; `None`: nowhere.
    pub metrics_listen: Option<String>,
    pub surface: SurfaceConfig,
    pub http: HttpConfig,
    /// The request pool's statement and lock timeouts (applied where the
    /// pool is opened: [`db::connect_limited`]).
    pub db: db::SessionLimits,
}

/// Slow clients (SPEC §9): how long a client may take to send a request's
/// headers (then the connection is closed) and its body (then 408).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self { header_read_timeout: Duration::from_secs(10), body_read_timeout: Duration::from_secs(30) }
    }
}

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
}

/// How long stopping waits for WebSocket connections to close.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

impl Application {
    /// With the defaults (`serve`'s defaults too).
    pub async fn build(ledger: Ledger, listen: &str) -> std::io::Result<Self> {
        Self::build_with(ledger, listen, ServerConfig::default()).await
    }

    pub async fn build_with(ledger: Ledger, listen: &str, config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let metrics_listener = match &config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let live = Live::new(&ledger, config.live);
        let connections = TaskTracker::new();
        let schema = build_schema(ledger.clone(), metrics_listener.is_some());
        let descriptions = Arc::new(quickstart::Descriptions::of_schema(&schema).await);
        let policy = surface::Policy::new(&config.surface, listen);
        let state = AppState {
            schema,
            ledger: ledger.clone(),
            live: live.clone(),
            ws: config.ws,
            http: config.http,
            connections: connections.clone(),
            descriptions,
            local_addr: listener.local_addr()?,
            policy: policy.clone(),
        };
        let mcp = crate::mcp::routes(ledger.clone(), live.stop_token());
        let router = Router::new()
            .merge(graphiql::routes())
            .route("/", get(root))
            .route("/graphql", post(graphql::post).get(graphql::get))
            .route("/graphql/ws", get(graphql_ws))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(state.clone())
            .merge(mcp)
            .layer(middleware::from_fn_with_state(policy, surface::check_host))
            .layer(middleware::from_fn(surface::security_headers))
            .layer(middleware::from_fn(request_span));
        let metrics = metrics_listener.map(|l| (l, Router::new().route("/metrics", get(metrics)).with_state(state)));
        Ok(Self { listener, router, live, http: config.http, connections, metrics })
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
        let server = serve_http(self.listener, self.router, self.http.header_read_timeout, live.stopping_owned());
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
        if let Some((listener, router)) = self.metrics {
            let server = axum::serve(listener, router).with_graceful_shutdown(live.stopping_owned());
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
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let base = format!("http://{}", host.unwrap_or_else(|| state.local_addr.to_string()));
    let text = quickstart::render(&base, &state.descriptions);
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], text).into_response()
}

/// Serves `router` over HTTP/1.1 until `shutdown`, then lets in-flight
/// requests finish (upgraded WebSockets are stopped by the live subsystem).
/// Unlike `axum::serve`, a client gets `header_read_timeout` to send a
/// request's headers, then its connection is closed: a slowloris client
/// cannot hold connections open by trickling headers.
async fn serve_http(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper::server::conn::http1;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    let stop = tokio_util::sync::CancellationToken::new();
    let connections = TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        // Handlers learn the client's address (`ConnectInfo`) as with axum::serve.
        let service = router.clone().layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)).with_upgrades();
        let stopping = stop.clone();
        connections.spawn(async move {
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                _ = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(err) = result {
                tracing::debug!(error = %err, "HTTP connection ended");
            }
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// `GET /metrics` on the metrics listener: Prometheus text, the states
/// sampled now (the last audit results read from the database).
async fn metrics(State(state): State<AppState>) -> Response {
    // The pools first: the audit query below takes a connection.
    let pool = state.ledger.db().get_postgres_connection_pool();
    let requests_pool = crate::metrics::PoolSample { size: pool.size(), idle: pool.num_idle() };
    let requests_waiting = crate::db::waiters(state.ledger.db(), &state.ledger.metrics().pool_users);
    let (live_pool, live_waiting) = state.live.pool_sample();
    // On the live pool, bounded: a saturated request pool must not stall the
    // scrape that shows it.
    let read = crate::operator::audit::last_runs(state.live.pool());
    let audits = match tokio::time::timeout(Duration::from_secs(2), read).await {
        Ok(Ok(audits)) => Some(audits),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "cannot read the last audit results for the metrics");
            None
        }
        Err(_) => {
            tracing::warn!("the last audit results took over 2 s to read; the metrics keep the previous ones");
            None
        }
    };
    let sample = crate::metrics::Sample {
        requests_pool,
        requests_waiting,
        live_pool,
        live_waiting,
        listener_connects: *state.live.listener_connects().borrow(),
        listener_up: state.live.is_listening(),
        queue_usage: *state.live.notification_queue_usage().borrow(),
        oldest_writer_age: state
            .live
            .oldest_event_writer_sampled()
            .borrow()
            .as_ref()
            .map(|w| w.age.map(|a| a.as_secs_f64()).unwrap_or(0.0)),
        websockets: state.connections.len(),
        audits,
    };
    let text = state.ledger.metrics().render(sample);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
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

/// The request's principal from its `Authorization` header; failures are
/// logged (at a bounded rate) with the client's address.
async fn authenticate(state: &AppState, headers: &HeaderMap, client: SocketAddr) -> Result<Principal, LedgerError> {
    let value = headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    match state.ledger.authenticate(value).await {
        Ok((principal, _)) => Ok(principal),
        Err(err) => {
            auth::log_failure(Some(client), "http", &err);
            Err(err.into())
        }
    }
}
