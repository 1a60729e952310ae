//! The projection's numbers in `/metrics` (SPEC §12).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;

use crate::metrics::Metrics;

#[derive(Clone, Default)]
pub struct TemporalMetrics {
    /// The largest age (seconds from Temporal's event time) of a batch of
    /// events read since the previous pass (0: nothing new).
    pub lag: Gauge<f64, AtomicU64>,
    /// Ledger events appended from Temporal histories by this process.
    pub projected: Counter,
    /// History events that record nothing (types the ledger skips, later
    /// activity starts) or that the ledger refused.
    pub skipped: Counter,
}

impl TemporalMetrics {
    /// Made and registered in the service's registry.
    pub fn registered(metrics: &Metrics) -> Self {
        let me = Self::default();
        metrics.register(
            "temporal_lag_seconds",
            "How far behind Temporal the projection was since its last pass (largest age of a batch of events read, from Temporal's event time)",
            me.lag.clone(),
        );
        metrics.register(
            "temporal_projected_events",
            "Ledger events projected from Temporal histories",
            me.projected.clone(),
        );
        metrics.register(
            "temporal_skipped_events",
            "Temporal history events that record nothing in the ledger (skipped or refused)",
            me.skipped.clone(),
        );
        me
    }
}
