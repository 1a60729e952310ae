//! The metrics listener's one route: the registry as text, after the
//! states it shows were sampled.

use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// `GET /metrics` on the metrics listener: Prometheus text, the states
/// sampled now (the last audit results read from the database).
pub(super) async fn scrape(State(state): State<AppState>) -> Response {
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
    let projections =
        match tokio::time::timeout(Duration::from_secs(2), crate::projector::status::all(state.live.pool())).await {
            Ok(Ok(projections)) => Some(projections),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot read the projections' state for the metrics");
                None
            }
            Err(_) => None,
        };
    let sample = crate::metrics::Sample {
        projections,
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
