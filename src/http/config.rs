//! What `serve` configures beyond the database and the address, and the
//! limits on slow and greedy clients every listener applies.

use std::time::Duration;

use super::listener::default_max_connections;
use super::{SurfaceConfig, WsConfig};
use crate::db;
use crate::live::LiveConfig;

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
    /// The projection from Temporal (SPEC §12); `None`: off.
    pub temporal: Option<crate::temporal::TemporalConfig>,
}

/// Slow and greedy clients (SPEC §9, §10), on every listener: how long a
/// client may take to send a request's headers (then the connection is
/// closed) and its body (then 408), and how many connections each listener
/// keeps open at once ([`listener`](super::listener)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    /// Open connections of the API listener, WebSockets included.
    pub max_connections: usize,
    /// Open connections of the metrics listener.
    pub metrics_max_connections: usize,
}

/// The metrics listener's default cap: a scraper or two, and room for a flood to evict itself.
pub const METRICS_MAX_CONNECTIONS: usize = 64;

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            metrics_max_connections: METRICS_MAX_CONNECTIONS,
        }
    }
}
