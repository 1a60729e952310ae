//! Prometheus metrics (SPEC §10): a registry per server process
//! (`prometheus-client`; every [`Ledger`](crate::ledger::Ledger) carries one),
//! counted where things happen and sampled where they are states, served as
//! text on a listener of its own (`--metrics-listen`) so that the API's
//! listener never exposes them.
//!
//! Labels are bounded: operation names come from the schema's root fields,
//! result codes from SPEC §5, dispositions from their enum. No fleet, agent
//! or unit label.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    pub operation: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationName {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DispositionLabel {
    pub disposition: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

/// The metrics of one server process.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// GraphQL operations by root field and result code (`OK` or SPEC §5's).
    pub requests: Family<Operation, Counter>,
    pub latency: Family<OperationName, Histogram, fn() -> Histogram>,
    /// Units claimed (`claimNext`, `claimUnit`, MCP alike; a renewal of a held unit is not a claim).
    pub claims: Counter,
    /// Permanent dispositions set, by disposition.
    pub dispositions: Family<DispositionLabel, Counter>,
    // Sampled when scraped (see `Sample`).
    pool_size: Gauge,
    pool_idle: Gauge,
    listener_connects: Gauge<u64, AtomicU64>,
    listener_up: Gauge,
    websockets: Gauge,
}

/// States read at scrape time.
pub struct Sample {
    pub pool_size: u32,
    pub pool_idle: usize,
    pub listener_connects: u64,
    pub listener_up: bool,
    pub websockets: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("work_ledger");
        let requests = Family::<Operation, Counter>::default();
        registry.register("graphql_operations", "GraphQL operations by root field and result code", requests.clone());
        let latency = Family::<OperationName, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register("graphql_operation_seconds", "GraphQL operation latency by root field", latency.clone());
        let claims = Counter::default();
        registry.register("claims", "Units claimed", claims.clone());
        let dispositions = Family::<DispositionLabel, Counter>::default();
        registry.register("dispositions", "Permanent dispositions set", dispositions.clone());
        let pool_size = Gauge::default();
        registry.register("db_pool_connections", "Open connections of the request pool", pool_size.clone());
        let pool_idle = Gauge::default();
        registry.register("db_pool_idle_connections", "Idle connections of the request pool", pool_idle.clone());
        let listener_connects = Gauge::<u64, AtomicU64>::default();
        registry.register(
            "listener_connects",
            "LISTEN connections opened so far (one more per reconnect)",
            listener_connects.clone(),
        );
        let listener_up = Gauge::default();
        registry.register("listener_up", "1 while the LISTEN connection is up", listener_up.clone());
        let websockets = Gauge::default();
        registry.register("websocket_connections", "Open WebSocket connections", websockets.clone());
        Self {
            registry: Mutex::new(registry),
            requests,
            latency,
            claims,
            dispositions,
            pool_size,
            pool_idle,
            listener_connects,
            listener_up,
            websockets,
        }
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The text exposition after taking `sample`.
    pub fn render(&self, sample: Sample) -> String {
        self.pool_size.set(i64::from(sample.pool_size));
        self.pool_idle.set(sample.pool_idle as i64);
        self.listener_connects.set(sample.listener_connects);
        self.listener_up.set(i64::from(sample.listener_up));
        self.websockets.set(sample.websockets as i64);
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if encode(&mut text, &registry).is_err() {
            tracing::warn!("cannot encode the metrics");
        }
        text
    }

    pub fn disposition(&self, disposition: &str) {
        self.dispositions.get_or_create(&DispositionLabel { disposition: disposition.to_owned() }).inc();
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}
