//! Command line and environment (SPEC §10): flags, each with a
//! `WORK_LEDGER_*` variable, and defaults that work on a laptop. The
//! commands are here; `serve`'s flags in [`serve`], the rules values follow
//! (a fleet's name, a time) in [`parse`].

mod parse;
mod serve;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{ArgGroup, Args, Parser, Subcommand};
use uuid::Uuid;

pub use parse::fleet_name;
use parse::{future_time, identifier, list_filter};
pub use serve::{LiveArgs, NotifyMode, ServeArgs, SurfaceArgs, TemporalArgs};

use crate::agent_cli;
use crate::auth::Role;

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

// Parsed once per process: the size of `serve`'s flags costs nothing.
#[allow(clippy::large_enum_variant)]
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
        #[arg(long, value_parser = fleet_name)]
        fleet: Option<String>,
        /// Compare every workflow-modelled unit with Temporal's status of its
        /// workflow instead (SPEC §12, O4; needs --temporal-address), listing
        /// unit, ledger state, Temporal status and last projected event;
        /// exits 1 on a mismatch.
        #[arg(long)]
        temporal: bool,
        #[command(flatten)]
        endpoint: TemporalArgs,
    },
    /// Which Temporal workflows become units of a fleet (SPEC §12).
    #[command(subcommand)]
    Temporal(TemporalCommand),
    /// The read models, projections of the event log: where each stands, and rebuilds.
    #[command(subcommand)]
    Projections(ProjectionsCommand),
    /// Work a unit as an agent: a client of a running server over HTTP (never the database).
    #[command(after_help = agent_cli::AFTER_HELP)]
    Agent(agent_cli::AgentArgs),
}

#[derive(Debug, Subcommand)]
pub enum TemporalCommand {
    /// New workflows of NAMESPACE matching QUERY become units of FLEET
    /// (`externalRef` and `workflowId`: the workflow id) and their runs are
    /// projected by every `serve --temporal-address`.
    Link(LinkArgs),
    /// Removes a link (the units it registered stay).
    Unlink(LinkArgs),
    /// Every link: fleet, namespace, query.
    Links,
}

#[derive(Debug, Args, Clone)]
pub struct LinkArgs {
    #[arg(long, value_parser = fleet_name)]
    pub fleet: String,
    #[arg(long, default_value = "default", value_parser = identifier)]
    pub namespace: String,
    /// A Temporal list filter, e.g. `WorkflowType='MigrateUnit'`.
    #[arg(long, value_parser = list_filter)]
    pub query: String,
}

#[derive(Debug, Subcommand)]
pub enum ProjectionsCommand {
    /// Each projection's mark, the events past it and how old the oldest is, and whether its definition is current.
    Status,
    /// Rebuild a projection (every one without NAME) from the whole log; reads stay exact meanwhile.
    Rebuild {
        /// The projection (see `status`).
        name: Option<String>,
    },
}

#[derive(Debug, Args, Clone)]
pub struct ImportArgs {
    /// The backlog file, or `-` for standard input.
    pub file: String,
    /// The fleet the units belong to.
    #[arg(long, env = "WORK_LEDGER_FLEET", default_value = "default", value_parser = fleet_name)]
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
        #[arg(long, value_parser = fleet_name)]
        fleet: String,
        /// Role name (default `grafana_<fleet>`).
        #[arg(long, value_parser = identifier)]
        name: Option<String>,
        /// Password (default: a random one, printed on stdout).
        #[arg(long, env = "WORK_LEDGER_READER_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
}
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token; prints the secret alone on stdout (shown once, stored hashed).
    Create {
        #[arg(long, value_parser = fleet_name)]
        fleet: String,
        /// The subject: the agent id recorded on claims and events.
        #[arg(long, value_parser = identifier)]
        name: String,
        #[arg(long, value_enum)]
        role: Role,
        /// The token stops working this long after it is minted: `90s`, `15m`, `12h`, `30d`.
        /// Without it (or `--expires-at`) the token never expires.
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse, conflicts_with = "expires_at")]
        expires_in: Option<Duration>,
        /// The token stops working at this RFC 3339 time (`2027-01-31T18:00:00Z`), which must be in the future.
        #[arg(long, value_name = "TIME", value_parser = future_time)]
        expires_at: Option<DateTime<Utc>>,
    },
    /// List tokens (never their secrets): status, expiry and last use.
    List,
    /// Revoke a token by id, or every token unused for a while; takes effect on its next request.
    #[command(group(ArgGroup::new("which").required(true).args(["id", "unused_for"])))]
    Revoke {
        /// The token to revoke.
        id: Option<Uuid>,
        /// Revoke every token not used for this long instead (`30d`); a token never used counts from its
        /// creation. Prints what it revoked.
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse)]
        unused_for: Option<Duration>,
    },
}
