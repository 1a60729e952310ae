//! `serve`'s flags: the listener, the notifications, who may reach the
//! server from a browser, and the live subsystem and limits on clients,
//! turned into the [`ServerConfig`] the server runs with.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse::fleet_name;
use crate::db::{Notify, SessionLimits};
use crate::http::listener::default_max_connections;
use crate::http::{HttpConfig, METRICS_MAX_CONNECTIONS, ServerConfig, SurfaceConfig, WsConfig};
use crate::live::{ListenerConfig, LiveConfig, SweeperConfig, WardenConfig};
use crate::projector::ProjectorConfig;
use crate::temporal::{TemporalConfig, TemporalEndpoint};

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "WORK_LEDGER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Database connections in the pool.
    #[arg(long, env = "WORK_LEDGER_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,
    /// Fleet of the operator token minted on first start.
    #[arg(long, env = "WORK_LEDGER_FLEET", default_value = "default", value_parser = fleet_name)]
    pub fleet: String,
    /// How writes announce their events to live subscribers: `after-commit`
    /// (the server notifies right after its commits, at most once per fleet
    /// every few milliseconds; commits then share WAL flushes) or
    /// `in-transaction` (a trigger notifies inside every writing transaction).
    #[arg(long, env = "WORK_LEDGER_NOTIFY", value_enum, default_value_t = NotifyMode::AfterCommit)]
    pub notify: NotifyMode,
    /// Where Prometheus metrics are served (`GET /metrics`); empty: off.
    #[arg(long, env = "WORK_LEDGER_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub metrics_listen: String,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub surface: SurfaceArgs,
    #[command(flatten)]
    pub temporal: TemporalArgs,
}

/// The projection from Temporal (SPEC §12), with the options named as
/// Temporal's own CLI names them. Without `--temporal-address` it is off.
#[derive(Debug, Args, Clone)]
pub struct TemporalArgs {
    /// Temporal's frontend (`host:port`, gRPC) whose workflow histories are
    /// projected onto workflow-modelled units; unset: the projection is off.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_ADDRESS")]
    pub temporal_address: Option<String>,
    /// The namespace of units registered with a `workflowId` by hand (links
    /// name their own).
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_NAMESPACE", default_value = "default")]
    pub temporal_namespace: String,
    /// Connect with TLS (implied by the other TLS options and the API key).
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_TLS")]
    pub temporal_tls: bool,
    /// PEM file of the certificate authority that signed the server's certificate.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_TLS_CA_PATH")]
    pub temporal_tls_ca_path: Option<String>,
    /// PEM file of the client certificate (mTLS), with --temporal-tls-key-path.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_TLS_CERT_PATH")]
    pub temporal_tls_cert_path: Option<String>,
    /// PEM file of the client certificate's private key (mTLS).
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_TLS_KEY_PATH")]
    pub temporal_tls_key_path: Option<String>,
    /// The server name its certificate is checked against.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_TLS_SERVER_NAME")]
    pub temporal_tls_server_name: Option<String>,
    /// API key (Temporal Cloud); sent as a bearer token over TLS.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_API_KEY", hide_env_values = true)]
    pub temporal_api_key: Option<String>,
    /// Time between the projection's passes.
    #[arg(long, env = "WORK_LEDGER_TEMPORAL_INTERVAL", default_value = "1s", value_parser = crate::duration::parse)]
    pub temporal_interval: Duration,
}

impl TemporalArgs {
    pub fn config(&self) -> Option<TemporalConfig> {
        let address = self.temporal_address.clone().filter(|a| !a.trim().is_empty())?;
        let endpoint = TemporalEndpoint {
            address,
            namespace: self.temporal_namespace.clone(),
            tls: self.temporal_tls,
            tls_ca_path: self.temporal_tls_ca_path.clone(),
            tls_cert_path: self.temporal_tls_cert_path.clone(),
            tls_key_path: self.temporal_tls_key_path.clone(),
            tls_server_name: self.temporal_tls_server_name.clone(),
            api_key: self.temporal_api_key.clone(),
        };
        Some(TemporalConfig { interval: self.temporal_interval, ..TemporalConfig::new(endpoint) })
    }
}

/// `--notify` (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NotifyMode {
    AfterCommit,
    InTransaction,
}

impl From<NotifyMode> for Notify {
    fn from(mode: NotifyMode) -> Self {
        match mode {
            NotifyMode::AfterCommit => Notify::AfterCommit,
            NotifyMode::InTransaction => Notify::InTransaction,
        }
    }
}

impl ServeArgs {
    pub fn config(&self) -> ServerConfig {
        ServerConfig { surface: self.surface.config(), temporal: self.temporal.config(), ..self.live.config() }
    }
}

/// Who may reach the server from a browser (DNS rebinding, cross-site
/// WebSockets). Comma-separated lists.
#[derive(Debug, Args, Clone)]
pub struct SurfaceArgs {
    /// Host names the server answers to (`Host` header, port ignored); other
    /// names get 421. Default: the --listen host and `localhost`. An address
    /// by number is always accepted; `*` accepts any name.
    #[arg(long, env = "WORK_LEDGER_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://grafana.example:3000`) whose pages may open
    /// WebSockets, besides the server's own; others get 403. Clients that
    /// send no `Origin` are unaffected. `*` allows any.
    #[arg(long, env = "WORK_LEDGER_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// The URL clients reach the server by, when it is not `http://` and the
    /// `Host` they send (behind a TLS-terminating proxy:
    /// `https://ledger.example.com`); the quick start at `GET /` prints it.
    #[arg(long, env = "WORK_LEDGER_PUBLIC_URL", value_parser = public_url)]
    pub public_url: Option<String>,
}

impl SurfaceArgs {
    pub fn config(&self) -> SurfaceConfig {
        let list = |items: &[String]| items.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
        SurfaceConfig {
            allowed_hosts: list(&self.allowed_hosts),
            allowed_origins: list(&self.allowed_origins),
            public_url: self.public_url.clone(),
        }
    }
}

/// An absolute http(s) URL with a host and nothing after the path.
fn public_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text.trim()).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    let fits = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !fits {
        return Err(format!(
            "`{text}` must be an http(s) URL like https://ledger.example.com, without credentials or query"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Live events (the stall sweeper, WebSockets, the LISTEN connection) and
/// the limits on slow or greedy clients.
/// Durations read `5s`, `500ms` or `2m`; a bare number is seconds.
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Time between stall sweeps.
    #[arg(long, env = "WORK_LEDGER_SWEEP_INTERVAL", default_value = "5s", value_parser = crate::duration::parse)]
    pub sweep_interval: Duration,
    /// Expired attempts reported per sweep statement.
    #[arg(long, env = "WORK_LEDGER_SWEEP_BATCH", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub sweep_batch: u32,
    /// How long a sweep may take to report what it found: its reports go
    /// out evenly over this time (within 80% of the interval) instead of at
    /// once, so that live subscribers get them as a stream, not a burst
    /// (`50ms` or less: at once).
    #[arg(long, env = "WORK_LEDGER_SWEEP_SPREAD", default_value = "4s", value_parser = crate::duration::parse)]
    pub sweep_spread: Duration,
    /// Time between the projector's passes, which fold the events below the
    /// watermark into the read models (SPEC §7; reads are exact whatever it
    /// is: they add the events past each projection's mark).
    #[arg(long, env = "WORK_LEDGER_PROJECT_INTERVAL", default_value = "250ms", value_parser = crate::duration::parse)]
    pub project_interval: Duration,
    /// Time between the reader warden's passes, which end reader logins'
    /// transactions open longer than 60 s (SPEC §8).
    #[arg(long, env = "WORK_LEDGER_READER_CHECK_INTERVAL", default_value = "5s", value_parser = crate::duration::parse)]
    pub reader_check_interval: Duration,
    /// How long a WebSocket client has to send `connection_init`.
    #[arg(long, env = "WORK_LEDGER_WS_INIT_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub ws_init_timeout: Duration,
    /// Time between the server's WebSocket pings.
    #[arg(long, env = "WORK_LEDGER_WS_PING_INTERVAL", default_value = "15s", value_parser = crate::duration::parse)]
    pub ws_ping_interval: Duration,
    /// Operations one WebSocket connection may run at once.
    #[arg(long, env = "WORK_LEDGER_WS_MAX_SUBSCRIPTIONS", default_value_t = 64)]
    pub ws_max_subscriptions: usize,
    /// Time between health pings of the LISTEN connection; one that does not
    /// come back within as long gets the connection replaced.
    #[arg(long, env = "WORK_LEDGER_LISTENER_HEALTH_INTERVAL", default_value = "5s", value_parser = crate::duration::parse)]
    pub listener_health_interval: Duration,
    /// WebSocket connections one token may have open at once (4429 for the next).
    #[arg(long, env = "WORK_LEDGER_WS_MAX_PER_TOKEN", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub ws_max_per_token: u32,
    /// How long a client may take to send a request's headers (then the connection is closed).
    #[arg(long, env = "WORK_LEDGER_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body (then 408).
    #[arg(long, env = "WORK_LEDGER_BODY_READ_TIMEOUT", default_value = "30s", value_parser = crate::duration::parse)]
    pub body_read_timeout: Duration,
    /// Connections the API listener keeps open at once, WebSockets included
    /// (at the cap a connection that has sent no request yet gives way, else
    /// the new one gets 503). Default: half the open-files limit (the soft
    /// limit, first raised to the hard one), at least 64, at most 16384.
    #[arg(long, env = "WORK_LEDGER_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Connections the metrics listener keeps open at once.
    #[arg(long, env = "WORK_LEDGER_METRICS_MAX_CONNECTIONS", default_value_t = METRICS_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub metrics_max_connections: u32,
    /// Longest a request's database statement may run (then UNAVAILABLE, nothing written).
    #[arg(long, env = "WORK_LEDGER_STATEMENT_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub statement_timeout: Duration,
    /// Longest a request may wait for a row lock (then UNAVAILABLE, nothing written).
    #[arg(long, env = "WORK_LEDGER_LOCK_TIMEOUT", default_value = "5s", value_parser = crate::duration::parse)]
    pub lock_timeout: Duration,
}

impl LiveArgs {
    pub fn config(&self) -> ServerConfig {
        ServerConfig {
            live: LiveConfig {
                sweeper: SweeperConfig {
                    interval: self.sweep_interval,
                    batch_size: self.sweep_batch,
                    spread: self.sweep_spread,
                },
                warden: WardenConfig { interval: self.reader_check_interval, ..WardenConfig::default() },
                projector: ProjectorConfig { interval: self.project_interval, ..ProjectorConfig::default() },
                listener: ListenerConfig {
                    health_interval: self.listener_health_interval,
                    health_timeout: self.listener_health_interval,
                },
                ..LiveConfig::default()
            },
            ws: WsConfig {
                init_timeout: self.ws_init_timeout,
                ping_interval: self.ws_ping_interval,
                max_subscriptions: self.ws_max_subscriptions,
                max_per_token: self.ws_max_per_token as usize,
            },
            // `serve` sets it from its own flag.
            metrics_listen: None,
            http: HttpConfig {
                header_read_timeout: self.header_read_timeout,
                body_read_timeout: self.body_read_timeout,
                max_connections: self.max_connections.map_or_else(default_max_connections, |n| n as usize),
                metrics_max_connections: self.metrics_max_connections as usize,
            },
            db: SessionLimits { statement_timeout: self.statement_timeout, lock_timeout: self.lock_timeout },
            surface: SurfaceConfig::default(),
            temporal: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::{Cli, Command};

    #[test]
    fn live_flags_default_to_the_live_defaults() {
        let cli = Cli::try_parse_from(["work-ledger", "serve"]).expect("parse");
        let Command::Serve(args) = cli.command else { panic!("serve") };
        let (flags, defaults) = (args.live.config(), ServerConfig::default());
        assert_eq!(flags.live.sweeper.interval, defaults.live.sweeper.interval);
        assert_eq!(flags.live.sweeper.batch_size, defaults.live.sweeper.batch_size);
        assert_eq!(flags.live.sweeper.spread, defaults.live.sweeper.spread);
        assert_eq!(flags.live.warden.interval, defaults.live.warden.interval);
        assert_eq!(flags.live.warden.max_transaction, std::time::Duration::from_secs(60));
        assert_eq!(flags.live.listener.health_interval, defaults.live.listener.health_interval);
        assert_eq!(flags.ws.init_timeout, defaults.ws.init_timeout);
        assert_eq!(flags.ws.ping_interval, defaults.ws.ping_interval);
        assert_eq!(flags.ws.max_subscriptions, defaults.ws.max_subscriptions);
        assert_eq!(flags.ws.max_per_token, defaults.ws.max_per_token);
        assert_eq!(flags.http, defaults.http);
        assert_eq!(flags.db, defaults.db);
        assert!(args.config().surface.allowed_hosts.is_empty() && args.config().surface.allowed_origins.is_empty());
        assert!(args.config().surface.public_url.is_none());
    }

    #[test]
    fn public_urls_are_plain_http_urls() {
        assert_eq!(public_url("https://ledger.example.com/").as_deref(), Ok("https://ledger.example.com"));
        assert_eq!(public_url("http://10.0.0.1:8080/ledger").as_deref(), Ok("http://10.0.0.1:8080/ledger"));
        for bad in ["ledger.example.com", "ftp://x.example", "https://u:p@x.example", "https://x.example/?a=1", ""] {
            assert!(public_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_lists_are_comma_separated() {
        let cli = Cli::try_parse_from([
            "work-ledger",
            "serve",
            "--allowed-hosts",
            "ledger.example, localhost",
            "--allowed-origins=https://grafana.example:3000",
        ])
        .expect("parse");
        let Command::Serve(args) = cli.command else { panic!("serve") };
        let surface = args.config().surface;
        assert_eq!(surface.allowed_hosts, ["ledger.example", "localhost"]);
        assert_eq!(surface.allowed_origins, ["https://grafana.example:3000"]);
    }
}
