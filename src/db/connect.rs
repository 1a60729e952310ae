//! Connecting: the pools of the server (with their session limits) and of
//! the commands, a pool beside another, a URL for the libpq tools, and the
//! migrations run under their lock.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr, SqlxPostgresConnector};

use super::{primary, target};

/// Limits every session of the server's pools runs under (SPEC §9): no
/// request statement runs longer than `statement_timeout`, and none waits
/// for a lock longer than `lock_timeout` (either is UNAVAILABLE for the
/// client, which retries with the same idempotency key); and no transaction
/// of the service sits idle, holding live delivery back or pinning the
/// notification queue, longer than the idle timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    pub statement_timeout: Duration,
    pub lock_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self { statement_timeout: Duration::from_secs(10), lock_timeout: Duration::from_secs(5) }
    }
}

/// A pooled connection idle this long is pinged before it is handed out (a
/// server restart or a proxy may have dropped it); a busier one is not: the
/// ping was a round trip of its own on every use of the pool, and a lost
/// connection still fails its next statement as UNAVAILABLE, which clients
/// retry with the same idempotency key.
pub const IDLE_PING: Duration = Duration::from_secs(1);

/// Role settings of `work_ledger_app` say the same, but
/// `SET ROLE` does not apply role settings.
pub const SERVICE_IDLE_IN_TRANSACTION_TIMEOUT: &str = "30s";

/// Opens a connection pool with no session limits (the CLI, migrations).
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, None).await
}

/// The service's pool with the default limits.
pub async fn connect_service(url: &str, max_connections: u32) -> Result<DatabaseConnection, DbErr> {
    connect_limited(url, max_connections, SessionLimits::default()).await
}

/// Opens the server's request pool: every session starts with the limits
/// set (startup parameters, so no statement is spent on them).
pub async fn connect_limited(
    url: &str,
    max_connections: u32,
    limits: SessionLimits,
) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, Some(limits)).await
}

/// The one way this process connects to its database (`serve`, `migrate`
/// and every other command): `url` names one server, or several of which
/// the read-write one is used and followed ([`primary`]).
async fn open(url: &str, max_connections: u32, limits: Option<SessionLimits>) -> Result<DatabaseConnection, DbErr> {
    let target = target::Target::parse(url)?;
    let mut options = pool_options(target.sqlx_url(), max_connections);
    // The service's pool keeps every connection it may need open, once
    // opened: connection slots are the cluster's, and a pool that must grow
    // under load would find them taken by whoever came first (SPEC §8).
    if limits.is_some() {
        options.min_connections(max_connections);
    }
    let settings = limits.map(|limits| {
        let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
        [
            ("statement_timeout", ms(limits.statement_timeout)),
            ("lock_timeout", ms(limits.lock_timeout)),
            ("idle_in_transaction_session_timeout", SERVICE_IDLE_IN_TRANSACTION_TIMEOUT.to_owned()),
        ]
    });
    let primary = if target.is_plain() { None } else { Some(primary::Primary::find(target).await?) };
    let aim = primary.clone();
    options.map_sqlx_postgres_opts(move |opts| {
        let opts = match &settings {
            Some(settings) => opts.options(settings.iter().map(|(k, v)| (*k, v.as_str()))),
            None => opts,
        };
        match &aim {
            Some(primary) => primary.point(&opts),
            None => opts,
        }
    });
    let Some(primary) = primary else {
        return Database::connect(options).await;
    };
    options.map_sqlx_postgres_pool_opts(primary::Primary::pool_options);
    // Composed by sea-orm after the idle ping of `pool_options`.
    let me = Arc::downgrade(&primary);
    options.map_sqlx_postgres_before_acquire(move |_, meta| {
        let fresh = primary::Primary::opened_since_move(&me, meta.age);
        Box::pin(async move { Ok(fresh) })
    });
    let db = Database::connect(options).await?;
    primary.adopt(db.get_postgres_connection_pool());
    Ok(db)
}

/// A pool of up to `max_connections` beside `leader`, for one part of the
/// process that must not wait for the leader's connections (the live pool,
/// the notifier): the same server, session limits and checks (a read-write
/// server only), connected on first use, named `application_name` in
/// `pg_stat_activity`, and moved with the leader's pool when its server
/// moves ([`primary::owner`]).
pub fn follower(leader: &DatabaseConnection, max_connections: u32, application_name: &str) -> DatabaseConnection {
    let leader = leader.get_postgres_connection_pool();
    let owner = primary::owner(leader);
    let options = match &owner {
        Some((_, opened)) => opened.clone(),
        None => (*leader.connect_options()).clone(),
    };
    let pool = leader
        .options()
        .clone()
        .max_connections(max_connections.max(1))
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options.application_name(application_name));
    if let Some((primary, _)) = owner {
        primary.adopt(&pool);
    }
    SqlxPostgresConnector::from_sqlx_postgres_pool(pool)
}

/// A URL for libpq tools (pg_dump, pg_restore): `url` itself when it names
/// one plain server, else the read-write server's alone.
pub async fn libpq_url(url: &str) -> Result<String, DbErr> {
    let target = target::Target::parse(url)?;
    if target.is_plain() {
        return Ok(url.to_owned());
    }
    Ok(primary::Primary::find(target).await?.libpq_url())
}

fn pool_options(url: &str, max_connections: u32) -> ConnectOptions {
    let mut options = ConnectOptions::new(url);
    options
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire_if_idle_for(IDLE_PING)
        .sqlx_logging(false);
    options
}

/// Applies pending migrations under the advisory lock, on a connection of
/// its own (a session-level lock belongs to one connection).
pub async fn migrate(url: &str) -> Result<(), DbErr> {
    let db = connect(url, 1).await?;
    let result = migration::migrate_locked(&db).await;
    db.close().await?;
    result
}
