//! Command line and environment (SPEC §10): flags, each with a
//! `WORK_LEDGER_*` variable, and defaults that work on a laptop.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use uuid::Uuid;

use crate::auth::Role;
use crate::http::{ServerConfig, SurfaceConfig, WsConfig};
use crate::live::{ListenerConfig, LiveConfig, SweeperConfig};

#[derive(Debug, Parser)]
#[command(name = "work-ledger", version, about = "System of record for fleets of AI coding agents")]
pub struct Cli {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct DatabaseArgs {
    /// PostgreSQL URL. Unset: an embedded PostgreSQL under --data-dir.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the embedded PostgreSQL keeps its data.
    #[arg(long, env = "WORK_LEDGER_DATA_DIR", default_value = ".work-ledger", global = true)]
    pub data_dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrate, then serve GraphQL (and GraphiQL on /).
    Serve(ServeArgs),
    /// Apply pending migrations and exit.
    Migrate,
    /// Manage bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print the GraphQL schema (SDL) to stdout.
    PrintSchema,
    /// Read-only database roles for Grafana.
    #[command(subcommand)]
    Reader(ReaderCommand),
    /// Register a backlog of units from a CSV or JSON Lines file (`-` for stdin); idempotent.
    #[command(after_help = "CSV: a header row naming externalRef and optionally domain and workflowId.\n\
        JSON Lines: one object per line with the same keys.\n\
        Exit status: 0 when every line was imported or already present; 1 when a line was refused \
        (the others are imported all the same) or the database failed.")]
    Import(ImportArgs),
    /// Write the ledger database to a file (pg_dump's custom format).
    Backup {
        /// The backup file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Restore a backup into an empty database (DATABASE_URL), then migrate it.
    Restore {
        /// The backup file `backup` wrote.
        file: PathBuf,
    },
    /// Check every cross-table invariant of the ledger, read-only; exits non-zero on findings.
    Audit {
        /// Only this fleet (default: every fleet).
        #[arg(long)]
        fleet: Option<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct ImportArgs {
    /// The backlog file, or `-` for standard input.
    pub file: String,
    /// The fleet the units belong to.
    #[arg(long, env = "WORK_LEDGER_FLEET", default_value = "default")]
    pub fleet: String,
    /// The file's format (default: from the file name, else from its first character).
    #[arg(long, value_enum)]
    pub format: Option<crate::operator::import::Format>,
    /// Check every line and report what would be inserted, without writing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum ReaderCommand {
    /// Create a LOGIN role that reads one fleet's views and tables (and nothing else).
    Create {
        #[arg(long)]
        fleet: String,
        /// Role name (default `grafana_<fleet>`).
        #[arg(long)]
        name: Option<String>,
        /// Password (default: a random one, printed on stdout).
        #[arg(long, env = "WORK_LEDGER_READER_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "WORK_LEDGER_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Database connections in the pool.
    #[arg(long, env = "WORK_LEDGER_DB_POOL_SIZE", default_value_t = 32)]
    pub db_pool_size: u32,
    /// Fleet of the operator token minted on first start.
    #[arg(long, env = "WORK_LEDGER_FLEET", default_value = "default")]
    pub fleet: String,
    /// Where Prometheus metrics are served (`GET /metrics`); empty: off.
    #[arg(long, env = "WORK_LEDGER_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub metrics_listen: String,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub surface: SurfaceArgs,
}

impl ServeArgs {
    pub fn config(&self) -> ServerConfig {
        ServerConfig { surface: self.surface.config(), ..self.live.config() }
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
}

impl SurfaceArgs {
    pub fn config(&self) -> SurfaceConfig {
        let list = |items: &[String]| items.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
        SurfaceConfig { allowed_hosts: list(&self.allowed_hosts), allowed_origins: list(&self.allowed_origins) }
    }
}

/// Live events: the stall sweeper, WebSockets and the LISTEN connection.
/// Durations read `5s`, `500ms` or `2m`; a bare number is seconds.
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Time between stall sweeps.
    #[arg(long, env = "WORK_LEDGER_SWEEP_INTERVAL", default_value = "5s", value_parser = duration)]
    pub sweep_interval: Duration,
    /// Expired attempts reported per sweep statement.
    #[arg(long, env = "WORK_LEDGER_SWEEP_BATCH", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub sweep_batch: u32,
    /// How long a WebSocket client has to send `connection_init`.
    #[arg(long, env = "WORK_LEDGER_WS_INIT_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub ws_init_timeout: Duration,
    /// Time between the server's WebSocket pings.
    #[arg(long, env = "WORK_LEDGER_WS_PING_INTERVAL", default_value = "15s", value_parser = duration)]
    pub ws_ping_interval: Duration,
    /// Operations one WebSocket connection may run at once.
    #[arg(long, env = "WORK_LEDGER_WS_MAX_SUBSCRIPTIONS", default_value_t = 64)]
    pub ws_max_subscriptions: usize,
    /// Time between health pings of the LISTEN connection; one that does not
    /// come back within as long gets the connection replaced.
    #[arg(long, env = "WORK_LEDGER_LISTENER_HEALTH_INTERVAL", default_value = "5s", value_parser = duration)]
    pub listener_health_interval: Duration,
}

impl LiveArgs {
    pub fn config(&self) -> ServerConfig {
        ServerConfig {
            live: LiveConfig {
                sweeper: SweeperConfig { interval: self.sweep_interval, batch_size: self.sweep_batch },
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
            },
            // `serve` sets it from its own flag.
            metrics_listen: None,
            surface: SurfaceConfig::default(),
        }
    }
}

/// A positive duration: `250ms`, `5s`, `2m`, or a number of seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration like 5s or 500ms"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        other => return Err(format!("unknown unit `{other}`: use ms, s or m")),
    };
    if !(seconds > 0.0 && seconds < 1e9) {
        return Err(format!("`{text}` must be more than zero"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token; prints the secret alone on stdout (shown once, stored hashed).
    Create {
        #[arg(long)]
        fleet: String,
        /// The subject: the agent id recorded on claims and events.
        #[arg(long)]
        name: String,
        #[arg(long, value_enum)]
        role: Role,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token by id; takes effect on its next request.
    Revoke { id: Uuid },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert!(duration("0s").is_err());
        assert!(duration("5h").is_err());
        assert!(duration("soon").is_err());
    }

    #[test]
    fn live_flags_default_to_the_live_defaults() {
        let cli = Cli::try_parse_from(["work-ledger", "serve"]).expect("parse");
        let Command::Serve(args) = cli.command else { panic!("serve") };
        let (flags, defaults) = (args.live.config(), ServerConfig::default());
        assert_eq!(flags.live.sweeper.interval, defaults.live.sweeper.interval);
        assert_eq!(flags.live.sweeper.batch_size, defaults.live.sweeper.batch_size);
        assert_eq!(flags.live.listener.health_interval, defaults.live.listener.health_interval);
        assert_eq!(flags.ws.init_timeout, defaults.ws.init_timeout);
        assert_eq!(flags.ws.ping_interval, defaults.ws.ping_interval);
        assert_eq!(flags.ws.max_subscriptions, defaults.ws.max_subscriptions);
        assert!(args.config().surface.allowed_hosts.is_empty() && args.config().surface.allowed_origins.is_empty());
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
