//! Command line and environment (SPEC §10): flags, each with a
//! `WORK_LEDGER_*` variable, and defaults that work on a laptop.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use uuid::Uuid;

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
