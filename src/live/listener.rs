//! The one LISTEN connection of this server process.
//!
//! Notifications are hints: an event notification only says which fleet to
//! re-read (the feeds read the table from their own positions), so a lost
//! notification costs latency, never an event. When the connection is lost
//! the listener reconnects with backoff, and once it LISTENs again it wakes
//! every feed, which then reads whatever committed meanwhile. While it is
//! down the feeds are polled instead, and `/readyz` says 503.
//!
//! A connection can also die without an error (a half-open TCP connection
//! after a network partition or a killed host: the socket just stays
//! silent). So the listener pings itself: every `health_interval` it sends
//! a NOTIFY through the ordinary pool and expects it back on the LISTEN
//! connection within `health_timeout`, or it drops the connection. This
//! checks the very path notifications take, unlike a `SELECT 1`. The same
//! tick samples the notification queue's usage (a warning past half full:
//! when it is full every write fails) and the oldest in-flight event writer.

use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;
use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgNotification, PgPoolOptions};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::Live;
use crate::db::stmt;

pub const EVENTS_CHANNEL: &str = "work_ledger_events";
pub const TOKENS_CHANNEL: &str = "work_ledger_tokens";
const PING_CHANNEL: &str = "work_ledger_ping";
/// How the listener shows in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "work-ledger-listener";

#[derive(Debug, Clone)]
pub struct ListenerConfig {
    pub health_interval: Duration,
    pub health_timeout: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self { health_interval: Duration::from_secs(5), health_timeout: Duration::from_secs(5) }
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// A failover takes seconds: waiting longer would keep `/readyz` at 503
/// and subscribers on polling after the new primary is up.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

enum Ended {
    Stopped,
    Lost(String),
}

pub async fn run(live: Live) {
    let mut backoff = BACKOFF_MIN;
    let mut connected_before = false;
    loop {
        // Read afresh each time: the server may have moved (a failover).
        let pool = live.db().get_postgres_connection_pool();
        let options = (*pool.connect_options()).clone().application_name(APPLICATION_NAME);
        match tokio::time::timeout(CONNECT_TIMEOUT, connect(pool.options(), &options)).await {
            Ok(Ok(listener)) => {
                backoff = BACKOFF_MIN;
                if connected_before {
                    tracing::info!("LISTEN connection re-established; catching up from the event log");
                }
                connected_before = true;
                live.set_listening(true);
                live.catch_up().await;
                let ended = listen(&live, listener).await;
                live.set_listening(false);
                match ended {
                    Ended::Stopped => return,
                    Ended::Lost(why) => {
                        tracing::warn!(reason = %why, "LISTEN connection lost; reconnecting");
                        // The server itself may be gone: have it looked for.
                        crate::db::primary::suspect();
                    }
                }
            }
            Ok(Err(err)) => tracing::warn!(error = %err, retry_in = ?backoff, "cannot LISTEN"),
            Err(_) => tracing::warn!(retry_in = ?backoff, "cannot LISTEN: connecting timed out"),
        }
        // Down: poll instead, and try again.
        live.feeds().wake_all();
        tokio::select! {
            _ = live.stopping() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// A fresh single-connection pool per attempt: an abandoned connection (say,
/// half-open) can then never stand in the way of the next one. It takes the
/// live pool's checks (`pool_options`): a LISTEN on a read-only server would
/// hear nothing of the writes.
async fn connect(pool_options: &PgPoolOptions, options: &PgConnectOptions) -> Result<PgListener, sea_orm::sqlx::Error> {
    let pool = pool_options
        .clone()
        .min_connections(0)
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen_all([EVENTS_CHANNEL, TOKENS_CHANNEL, PING_CHANNEL]).await?;
    Ok(listener)
}

/// Dispatches notifications until the connection is lost or the server stops.
async fn listen(live: &Live, mut listener: PgListener) -> Ended {
    // The receiving loop runs on a task of its own, so that giving up on a
    // silent connection never means cancelling a read halfway through.
    let (tx, mut rx) = mpsc::channel::<Result<PgNotification, String>>(1024);
    let receiver = tokio::spawn(async move {
        loop {
            let next = match listener.try_recv().await {
                Ok(Some(notification)) => Ok(notification),
                Ok(None) => Err("connection closed".to_owned()),
                Err(err) => Err(err.to_string()),
            };
            let failed = next.is_err();
            if tx.send(next).await.is_err() || failed {
                return;
            }
        }
    });
    let _abort = AbortOnDrop(receiver);

    let config = live.listener_config();
    let instance = Uuid::new_v4();
    let mut ping_no: u64 = 0;
    let mut awaiting: Option<(String, Instant)> = None;
    let mut health = tokio::time::interval(config.health_interval);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = live.stopping() => return Ended::Stopped,
            received = rx.recv() => match received {
                Some(Ok(n)) => match n.channel() {
                    // Payloads are opaque and anyone may forge them: a
                    // signal wakes at most one re-read, a revocation notice only
                    // makes the open connections' tokens be checked again.
                    EVENTS_CHANNEL => live.feeds().wake_signalled(n.payload()),
                    TOKENS_CHANNEL => live.recheck_tokens(),
                    PING_CHANNEL if awaiting.as_ref().is_some_and(|(payload, _)| payload == n.payload()) => {
                        awaiting = None;
                    }
                    _ => {}
                },
                Some(Err(why)) => return Ended::Lost(why),
                None => return Ended::Lost("receiver stopped".to_owned()),
            },
            _ = health.tick() => {
                if let Some((_, sent)) = &awaiting {
                    if sent.elapsed() >= config.health_timeout {
                        return Ended::Lost(format!(
                            "a health ping did not come back within {:?} (half-open connection?)",
                            config.health_timeout
                        ));
                    }
                    continue;
                }
                ping_no += 1;
                let payload = format!("{instance}:{ping_no}");
                let ping = stmt(
                    "SELECT pg_notify($1, $2), pg_notification_queue_usage() AS usage",
                    [PING_CHANNEL.into(), payload.clone().into()],
                );
                let sent = tokio::time::timeout(config.health_timeout, live.db().query_one_raw(ping)).await;
                // If the database cannot be reached at all, the LISTEN
                // connection will report that itself.
                if let Ok(Ok(row)) = sent {
                    awaiting = Some((payload, Instant::now()));
                    if let Some(usage) = row.and_then(|r| r.try_get::<f64>("", "usage").ok()) {
                        live.record_queue_usage(usage);
                    }
                }
                live.sample_event_writers(config.health_timeout).await;
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
