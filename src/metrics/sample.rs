//! The states read at scrape time, which [`super::Metrics::render`] sets
//! the gauges from.

/// One pool's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolSample {
    pub size: u32,
    pub idle: usize,
}

/// The last recorded `work-ledger audit` of one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditSample {
    pub scope: String,
    /// Unix seconds.
    pub finished_at: f64,
    /// Findings per rule (every rule, zeros included).
    pub findings: Vec<(String, i64)>,
}

/// States read at scrape time.
#[derive(Debug, Default)]
pub struct Sample {
    pub requests_pool: PoolSample,
    /// Request tasks waiting for a request-pool connection: its users beyond its size.
    pub requests_waiting: i64,
    pub live_pool: PoolSample,
    /// Tasks waiting for a live-pool connection (not counted: always 0 unless known).
    pub live_waiting: i64,
    pub listener_connects: u64,
    pub listener_up: bool,
    /// `pg_notification_queue_usage()` at the last health tick.
    pub queue_usage: Option<f64>,
    /// Age in seconds of the oldest in-flight event writer at the last health tick (0: none).
    pub oldest_writer_age: Option<f64>,
    pub websockets: usize,
    /// `None` when the audit table could not be read (the gauges keep their values).
    pub audits: Option<Vec<AuditSample>>,
    /// `None` when the projections' state could not be read (likewise).
    pub projections: Option<Vec<crate::projector::status::Status>>,
}
