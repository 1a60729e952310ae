//! What the listener's health ticks sample besides its own connection: the
//! notification queue's usage and the oldest in-flight event writer, each
//! logged past its warning and kept for the metrics and tests.

use std::time::Duration;

use sea_orm::DbErr;
use tokio::sync::watch;

use super::Live;
use crate::db;
use crate::db::events::EventWriter;

/// Past this share of the notification queue, the listener warns: once the
/// queue is full, every write's `pg_notify` fails.
pub const QUEUE_USAGE_WARNING: f64 = 0.5;
/// An event writer open this long is logged at every health tick: it holds
/// live delivery back for every fleet until it ends.
pub const WRITER_AGE_WARNING: Duration = Duration::from_secs(30);

impl Live {
    /// `pg_notification_queue_usage()` (0 to 1) as the listener last saw it,
    /// as it changes; `None` before the first health tick.
    pub fn notification_queue_usage(&self) -> watch::Receiver<Option<f64>> {
        self.0.queue_usage.subscribe()
    }

    /// The oldest in-flight transaction that appended events in this
    /// database, asked now. Only such transactions hold live delivery back.
    pub async fn oldest_event_writer(&self) -> Result<Option<EventWriter>, DbErr> {
        db::events::oldest_event_writer(&self.0.db).await
    }

    /// The oldest in-flight event writer as the last health tick saw it.
    pub fn oldest_event_writer_sampled(&self) -> watch::Receiver<Option<EventWriter>> {
        self.0.oldest_writer.subscribe()
    }

    pub(super) fn record_queue_usage(&self, usage: f64) {
        if usage > QUEUE_USAGE_WARNING {
            tracing::warn!(
                usage = format!("{:.1}%", usage * 100.0),
                "the notification queue is more than half full; a session that LISTENs and stays in a \
                 transaction holds it (see pg_stat_activity); when it is full every write fails"
            );
        }
        self.0.queue_usage.send_replace(Some(usage));
    }

    pub(super) async fn sample_event_writers(&self, limit: Duration) {
        let Ok(Ok(writer)) = tokio::time::timeout(limit, self.oldest_event_writer()).await else { return };
        if let Some(EventWriter { pid, age: Some(age) }) = &writer
            && *age >= WRITER_AGE_WARNING
        {
            tracing::warn!(
                pid,
                open_for = ?age,
                "live delivery is held back by a transaction that appended events and is still open"
            );
        }
        self.0.oldest_writer.send_replace(writer);
    }
}
