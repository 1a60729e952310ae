//! Prometheus metrics (SPEC §10): a registry per server process
//! (`prometheus-client`; every [`Ledger`](crate::ledger::Ledger) carries one),
//! counted where things happen and sampled where they are states, served as
//! text on a listener of its own (`--metrics-listen`) so that the API's
//! listener never exposes them.
//!
//! Labels are bounded: operation names come from the schema's root fields,
//! result codes from SPEC §5, dispositions from their enum, pools and
//! listeners are the two of the process, audit scopes are the fleets an
//! operator audits. No agent or unit label.

mod labels;
mod sample;

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use labels::{
    AuditLabel, DispositionLabel, ListenerLabel, Operation, OperationName, PoolLabel, ProjectionLabel, ScopeLabel,
    SurfaceLabel,
};
pub use sample::{AuditSample, PoolSample, Sample};

/// One listener's connections, counted by its door ([`crate::http::listener`]).
#[derive(Clone, Debug)]
pub struct DoorCounts {
    /// HTTP connections open (an upgraded WebSocket leaves this count for
    /// `work_ledger_websocket_connections`).
    pub open: Gauge,
    /// Connections closed between requests to make room for a newcomer at the cap.
    pub evicted: Counter,
    /// Newcomers refused with 503: every place held a request in flight or a WebSocket.
    pub refused: Counter,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The metrics of one server process.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// GraphQL operations by root field and result code (`OK` or SPEC §5's).
    pub requests: Family<Operation, Counter>,
    pub latency: Family<OperationName, Histogram, fn() -> Histogram>,
    /// Units claimed (`claimNext`, `claimUnit`, MCP alike; a renewal of a held unit is not a claim).
    pub claims: Counter,
    /// Claims that took a unit whose lease had expired (a `stale_reclaimed` event).
    pub stale_reclaims: Counter,
    /// Expired leases this process's sweeper reported (`stalled` events).
    pub stalls: Counter,
    /// Permanent dispositions set, by disposition.
    pub dispositions: Family<DispositionLabel, Counter>,
    /// From an event's commit (its `created_at`, the clock at insert, the
    /// last statement of its transaction) to its hand-over to a live subscriber.
    pub delivery_latency: Histogram,
    /// Live subscriptions open (one per subscriber tail).
    pub subscriptions: Gauge,
    /// Subscriptions' reads tried again after a transient failure
    /// ([`crate::live::Live::patiently`]).
    pub live_read_retries: Counter,
    /// Delivery watermarks the feeds took ([`crate::live::watermark::Fresh`]).
    pub live_watermarks: Counter,
    /// Queries that joined the execution of identical queries sent with them
    /// (`graphql::shared_reads`), counted as they join it (one that then runs
    /// on its own, the answer it waited for having an error, is counted too).
    pub shared_reads: Counter,
    /// Requests refused for want of a valid token, by surface.
    auth_failures: Family<SurfaceLabel, Counter>,
    /// Tasks waiting for a request-pool connection to begin a transaction.
    /// Request tasks using or waiting for a request-pool connection ([`crate::db::InFlight`]).
    pub pool_users: Arc<AtomicI64>,
    // Sampled when scraped (see `Sample`).
    pool_connections: Family<PoolLabel, Gauge>,
    pool_idle: Family<PoolLabel, Gauge>,
    pool_in_use: Family<PoolLabel, Gauge>,
    pool_waiters: Family<PoolLabel, Gauge>,
    listener_reconnects: Counter,
    listener_up: Gauge,
    queue_usage: FloatGauge,
    oldest_writer_age: FloatGauge,
    websockets: Gauge,
    connections_open: Family<ListenerLabel, Gauge>,
    connections_evicted: Family<ListenerLabel, Counter>,
    connections_refused: Family<ListenerLabel, Counter>,
    audit_findings: Family<AuditLabel, Gauge>,
    audit_last_run: Family<ScopeLabel, FloatGauge>,
    /// Events this process's projector folded into the read models.
    pub projected: Counter,
    projection_lag: Family<ProjectionLabel, FloatGauge>,
    projection_behind: Family<ProjectionLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("work_ledger");
        let requests = Family::<Operation, Counter>::default();
        r.register("graphql_operations", "GraphQL operations by root field and result code", requests.clone());
        let latency = Family::<OperationName, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        r.register("graphql_operation_seconds", "GraphQL operation latency by root field", latency.clone());
        let claims = Counter::default();
        r.register("claims", "Units claimed", claims.clone());
        let stale_reclaims = Counter::default();
        r.register("stale_reclaims", "Claims that took a unit whose lease had expired", stale_reclaims.clone());
        let stalls = Counter::default();
        r.register("stalls", "Expired leases reported by this process's sweeper", stalls.clone());
        let dispositions = Family::<DispositionLabel, Counter>::default();
        r.register("dispositions", "Permanent dispositions set", dispositions.clone());
        let delivery_latency = latency_histogram();
        r.register(
            "live_delivery_seconds",
            "From an event's commit to its hand-over to a live subscriber",
            delivery_latency.clone(),
        );
        let subscriptions = Gauge::default();
        r.register("live_subscriptions", "Live subscriptions open", subscriptions.clone());
        let live_read_retries = Counter::default();
        r.register(
            "live_read_retries",
            "Subscriptions' reads (of the log, their token, their snapshot, a payload) tried again after a transient failure",
            live_read_retries.clone(),
        );
        let live_watermarks = Counter::default();
        r.register(
            "live_watermarks",
            "Delivery watermarks the feeds took (a scan of pg_locks each; feeds woken together share one)",
            live_watermarks.clone(),
        );
        let shared_reads = Counter::default();
        r.register(
            "graphql_shared_reads",
            "Queries that joined the execution of identical queries sent with them instead of running their own",
            shared_reads.clone(),
        );
        let auth_failures = Family::<SurfaceLabel, Counter>::default();
        r.register("auth_failures", "Requests refused for want of a valid token, by surface", auth_failures.clone());
        let pool_connections = Family::<PoolLabel, Gauge>::default();
        r.register("db_pool_connections", "Open connections of a database pool", pool_connections.clone());
        let pool_idle = Family::<PoolLabel, Gauge>::default();
        r.register("db_pool_idle_connections", "Idle connections of a database pool", pool_idle.clone());
        let pool_in_use = Family::<PoolLabel, Gauge>::default();
        r.register("db_pool_in_use_connections", "Connections of a database pool in use", pool_in_use.clone());
        let pool_waiters = Family::<PoolLabel, Gauge>::default();
        r.register("db_pool_waiting", "Tasks waiting for a connection of a database pool", pool_waiters.clone());
        let listener_reconnects = Counter::default();
        r.register("listener_reconnects", "LISTEN connections reopened after the first", listener_reconnects.clone());
        let listener_up = Gauge::default();
        r.register("listener_up", "1 while the LISTEN connection is up", listener_up.clone());
        let queue_usage = FloatGauge::default();
        r.register(
            "notification_queue_usage_ratio",
            "pg_notification_queue_usage() at the last health tick (0 to 1)",
            queue_usage.clone(),
        );
        let oldest_writer_age = FloatGauge::default();
        r.register(
            "live_oldest_writer_age_seconds",
            "Age of the oldest in-flight transaction that appended events (it holds live delivery back)",
            oldest_writer_age.clone(),
        );
        let websockets = Gauge::default();
        r.register("websocket_connections", "Open WebSocket connections", websockets.clone());
        let connections_open = Family::<ListenerLabel, Gauge>::default();
        r.register("http_connections_open", "HTTP connections open, per listener", connections_open.clone());
        let connections_evicted = Family::<ListenerLabel, Counter>::default();
        r.register(
            "http_connections_evicted",
            "Connections closed between requests to make room for a newcomer at the listener's cap",
            connections_evicted.clone(),
        );
        let connections_refused = Family::<ListenerLabel, Counter>::default();
        r.register(
            "http_connections_refused",
            "Connections refused with 503 at the listener's cap: every place held a request in flight or a WebSocket",
            connections_refused.clone(),
        );
        let audit_findings = Family::<AuditLabel, Gauge>::default();
        r.register(
            "audit_findings",
            "Findings of the last recorded `work-ledger audit` per scope and rule",
            audit_findings.clone(),
        );
        let audit_last_run = Family::<ScopeLabel, FloatGauge>::default();
        r.register(
            "audit_last_run_timestamp_seconds",
            "When the last recorded `work-ledger audit` of a scope finished",
            audit_last_run.clone(),
        );
        let projected = Counter::default();
        r.register(
            "projector_folded_events",
            "Events this process's projector folded into the read models",
            projected.clone(),
        );
        let projection_lag = Family::<ProjectionLabel, FloatGauge>::default();
        r.register(
            "projection_lag_seconds",
            "Age of the oldest event a projection has not folded yet (0: caught up); reads add those events themselves",
            projection_lag.clone(),
        );
        let projection_behind = Family::<ProjectionLabel, Gauge>::default();
        r.register("projection_behind_events", "Events a projection has not folded yet", projection_behind.clone());
        Self {
            registry: Mutex::new(r),
            requests,
            latency,
            claims,
            stale_reclaims,
            stalls,
            dispositions,
            delivery_latency,
            subscriptions,
            live_read_retries,
            live_watermarks,
            shared_reads,
            auth_failures,
            pool_users: Arc::new(AtomicI64::new(0)),
            pool_connections,
            pool_idle,
            pool_in_use,
            pool_waiters,
            listener_reconnects,
            listener_up,
            queue_usage,
            oldest_writer_age,
            websockets,
            connections_open,
            connections_evicted,
            connections_refused,
            audit_findings,
            audit_last_run,
            projected,
            projection_lag,
            projection_behind,
        }
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers a metric of a subsystem that keeps its own (the Temporal
    /// projection's), under the service's prefix.
    pub fn register(&self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).register(name, help, metric);
    }

    /// The text exposition after taking `sample`.
    pub fn render(&self, sample: Sample) -> String {
        for (pool, state, waiting) in [
            ("requests", sample.requests_pool, sample.requests_waiting),
            ("live", sample.live_pool, sample.live_waiting),
        ] {
            let label = PoolLabel { pool };
            let idle = state.idle as i64;
            self.pool_connections.get_or_create(&label).set(i64::from(state.size));
            self.pool_idle.get_or_create(&label).set(idle);
            self.pool_in_use.get_or_create(&label).set((i64::from(state.size) - idle).max(0));
            self.pool_waiters.get_or_create(&label).set(waiting);
        }
        // A counter follows the listener's own count of connections opened.
        let reconnects = sample.listener_connects.saturating_sub(1);
        let counted = self.listener_reconnects.get();
        if reconnects > counted {
            self.listener_reconnects.inc_by(reconnects - counted);
        }
        self.listener_up.set(i64::from(sample.listener_up));
        self.queue_usage.set(sample.queue_usage.unwrap_or(0.0));
        self.oldest_writer_age.set(sample.oldest_writer_age.unwrap_or(0.0));
        self.websockets.set(sample.websockets as i64);
        if let Some(audits) = sample.audits {
            for audit in audits {
                self.audit_last_run.get_or_create(&ScopeLabel { scope: audit.scope.clone() }).set(audit.finished_at);
                for (rule, n) in audit.findings {
                    self.audit_findings.get_or_create(&AuditLabel { scope: audit.scope.clone(), rule }).set(n);
                }
            }
        }
        for projection in sample.projections.into_iter().flatten() {
            let label = ProjectionLabel { projection: projection.name };
            self.projection_lag.get_or_create(&label).set(projection.lag_seconds);
            self.projection_behind.get_or_create(&label).set(projection.behind);
        }
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if encode(&mut text, &registry).is_err() {
            tracing::warn!("cannot encode the metrics");
        }
        text
    }

    /// The counts of the listener named `listener` (`api`, `metrics`), shown
    /// at zero from the start.
    pub fn door(&self, listener: &'static str) -> DoorCounts {
        let label = ListenerLabel { listener };
        DoorCounts {
            open: self.connections_open.get_or_create(&label).clone(),
            evicted: self.connections_evicted.get_or_create(&label).clone(),
            refused: self.connections_refused.get_or_create(&label).clone(),
        }
    }

    /// A request refused for want of a valid token on `surface`.
    pub fn auth_failed(&self, surface: &'static str) {
        self.auth_failures.get_or_create(&SurfaceLabel { surface }).inc();
    }

    pub fn disposition(&self, disposition: &str) {
        self.dispositions.get_or_create(&DispositionLabel { disposition: disposition.to_owned() }).inc();
    }

    /// A committed event reached a live subscriber now.
    pub fn delivered(&self, committed: chrono::DateTime<chrono::Utc>) {
        let age = (chrono::Utc::now() - committed).to_std().unwrap_or_default();
        self.delivery_latency.observe(age.as_secs_f64());
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}
