//! Database access: connecting, migrating, the one transaction helper that
//! request code goes through, and the SQL of each table, one room per job:
//!
//! | module | holds |
//! | --- | --- |
//! | [`writes`] | every write: one call of its SQL function (`migration/src/sql/repeatable/writes.sql`) |
//! | [`events`] | the event log: reads in delivery order, notifications |
//! | [`units`] | single-unit lookups, what an agent holds |
//! | [`reads`] | keyset pages, DataLoader batches and the SQL views |
//! | [`situation`] | what is left to claim (`claimSituation`), whether a domain exists |
//! | [`tokens`] | `api_tokens` |
//! | [`reader_logins`] | per-fleet Grafana logins |
//! | [`target`], [`primary`] | multi-host URLs: finding and following the read-write server |
//!
//! Nothing here knows the domain's error type: functions return [`DbErr`]
//! and [`in_fleet`] hands the caller's own error type back.

pub mod aggregates;
pub mod entities;
pub mod events;
pub mod primary;
pub mod questions;
pub mod reader_logins;
pub mod reads;
pub mod situation;
pub mod target;
pub mod tokens;
pub mod units;
pub mod writes;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, RuntimeErr,
    SqlxPostgresConnector, Statement, TransactionTrait, Value,
};

/// The non-superuser role every request transaction runs as (created by the
/// first migration); row-level security applies to it.
pub const APP_ROLE: &str = "work_ledger_app";

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

/// Role settings of `work_ledger_app` (migration 0004) say the same, but
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

pub fn stmt(sql: &str, values: impl IntoIterator<Item = Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// Begins a transaction on `db` that is begun and ended whatever becomes of
/// the caller. sqlx cannot take back a `BEGIN` whose future is dropped before
/// the server's answer (its rollback guard does nothing before the answer is
/// counted), and the pool then hands the connection, still inside that
/// transaction, to the next user: a one-statement write would be answered as
/// done and never commit, holding its row locks until the connection dies
/// (a subscription dropped as its WebSocket closes while its first read
/// begins, a request whose client went away).
/// So the `BEGIN` runs in a task of its own: when the caller is gone, the
/// transaction is dropped there, which rolls it back before the connection
/// goes back to the pool. The only way this process begins a transaction.
/// (sqlx 0.9.0; upstream transact-rs/sqlx#4393, fixed by #4394 after it.)
pub async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let db = db.clone();
    match tokio::spawn(async move { db.begin().await }).await {
        Ok(begun) => begun,
        Err(failed) => Err(DbErr::Custom(format!("beginning a transaction failed: {failed}"))),
    }
}

/// Runs `work` in one transaction as the application role, scoped to `fleet`
/// by the transaction-local setting that every row-level security policy
/// reads: it opens the transaction, sets role and fleet, runs the closure,
/// and commits (or rolls back when the closure fails). The service's own
/// reads of a fleet go through it (feeds, subscriptions' starting points);
/// a request's reads go through [`in_session`], which takes the fleet from
/// the caller's token instead. The event log's tail sets them itself
/// instead, in SQL: [`events::events_after`] (the reads of feeds and the
/// pages of catching-up subscribers) and [`events::events_resumed`]
/// (migration 0034), one round trip each.
/// Database failures reach the caller as `E::from(DbErr)`.
pub async fn in_fleet<T, E, F>(db: &DatabaseConnection, fleet: &str, work: F) -> Result<T, E>
where
    T: Send,
    E: From<DbErr>,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<T, E>> + Send,
{
    in_fleet_counted(db, None, fleet, work).await
}

/// [`in_fleet_counted`] for a request's reads: the transaction's first
/// statement authenticates the caller's token by its hash and takes the app
/// role and the token's fleet ([`tokens::SESSION`]), so a read costs no
/// statement of its own for its authentication, and a token revoked or
/// expired since the request was admitted is refused here
/// (`E::from(Refusal)`) before anything is read.
pub async fn in_session<T, E, F>(
    db: &DatabaseConnection,
    users: Option<&AtomicI64>,
    token: &[u8; 32],
    work: F,
) -> Result<T, E>
where
    T: Send,
    E: From<DbErr> + From<tokens::Refusal>,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<T, E>> + Send,
{
    let _in_flight = users.map(InFlight::new);
    let tx = begin(db).await?;
    if let Some(refused) = tokens::session(&tx, token).await? {
        if let Err(rollback) = tx.rollback().await {
            tracing::warn!(error = %rollback, "rollback failed");
        }
        return Err(E::from(refused));
    }
    finish(tx, work).await
}

/// Runs `work` in `tx` and commits, or rolls back when it fails.
async fn finish<T, E, F>(tx: DatabaseTransaction, work: F) -> Result<T, E>
where
    T: Send,
    E: From<DbErr>,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<T, E>> + Send,
{
    match work(&tx).await {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(err) => {
            // Dropping the transaction would roll back as well; doing it here
            // returns the connection to the pool clean and logs a failure.
            if let Err(rollback) = tx.rollback().await {
                tracing::warn!(error = %rollback, "rollback failed");
            }
            Err(err)
        }
    }
}

/// How the events a write appends are announced (SPEC §6, migration 0010):
/// the write functions take it as `p_notify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// The events trigger issues `pg_notify` inside the transaction.
    InTransaction,
    /// The caller notifies after the commit (`work_ledger.notify =
    /// 'after-commit'`); the trigger stays silent.
    AfterCommit,
}

impl Notify {
    /// The value of the transaction-local `work_ledger.notify` setting.
    pub fn setting(self) -> &'static str {
        match self {
            Self::InTransaction => "",
            Self::AfterCommit => "after-commit",
        }
    }
}

/// [`in_fleet`], counting the task in `users` while it waits for or holds
/// its connection ([`InFlight`]): the pool's users beyond its size are its
/// waiters, which sqlx does not report (the `db_pool_waiting` metric).
/// (Request transactions only read: every write is one call of its SQL
/// function, [`writes`].)
pub async fn in_fleet_counted<T, E, F>(
    db: &DatabaseConnection,
    users: Option<&AtomicI64>,
    fleet: &str,
    work: F,
) -> Result<T, E>
where
    T: Send,
    E: From<DbErr>,
    F: for<'t> FnOnce(&'t DatabaseTransaction) -> BoxFuture<'t, Result<T, E>> + Send,
{
    let _in_flight = users.map(InFlight::new);
    let tx = begin(db).await?;
    tx.execute_raw(stmt(
        "SELECT set_config('role', $1, true), set_config('work_ledger.fleet', $2, true)",
        [APP_ROLE.into(), fleet.into()],
    ))
    .await?;
    finish(tx, work).await
}

/// One task counted as a user of a pool until dropped (also when its future
/// is cancelled): from before it asks for a connection until it has given
/// it back. A request's transaction and its one-statement writes are
/// counted, so users beyond the pool's size are waiting for a connection (a
/// lower bound: token lookups and the notifier's statements take
/// connections uncounted).
pub struct InFlight<'a>(&'a AtomicI64);

impl<'a> InFlight<'a> {
    pub fn new(count: &'a AtomicI64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

/// The tasks waiting for a connection of `db`'s pool: its users counted
/// in `users` ([`InFlight`]) beyond the pool's size.
pub fn waiters(db: &DatabaseConnection, users: &AtomicI64) -> i64 {
    let max = db.get_postgres_connection_pool().options().get_max_connections();
    (users.load(Ordering::Relaxed) - i64::from(max)).max(0)
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The SQLSTATE and constraint name of a database error, when it is one.
pub fn violation(err: &DbErr) -> Option<(String, String)> {
    let runtime = match err {
        DbErr::Exec(e) | DbErr::Query(e) | DbErr::Conn(e) => e,
        _ => return None,
    };
    let RuntimeErr::SqlxError(sqlx_err) = runtime else {
        return None;
    };
    let db_err = sqlx_err.as_database_error()?;
    Some((
        db_err.code().map(|c| c.into_owned()).unwrap_or_default(),
        db_err.constraint().unwrap_or_default().to_owned(),
    ))
}

/// True when `err` says the database is out of reach rather than that the
/// request was wrong: no connection could be had or the one in use broke
/// (I/O, TLS, protocol, pool timeout), or the server is shutting down,
/// starting up, lost the connection or turned read-only (SQLSTATE classes
/// 08 and 57P0x, 25006). A client retries such a request with the same
/// idempotency key.
pub fn is_unavailable(err: &DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    let runtime = match err {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Exec(e) | DbErr::Query(e) | DbErr::Conn(e) => e,
        _ => return false,
    };
    let RuntimeErr::SqlxError(sqlx_err) = runtime else {
        return false;
    };
    match sqlx_err.as_ref() {
        Sqlx::Io(_) | Sqlx::Tls(_) | Sqlx::Protocol(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed => true,
        // 25006 read_only_sql_transaction: the server was demoted under us.
        Sqlx::Database(db_err) => db_err.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "53300" | "25006")
        }),
        _ => false,
    }
}

/// True when a statement ran into the session's statement or lock timeout
/// (SQLSTATE 57014 query_canceled, 55P03 lock_not_available).
pub fn is_timeout(err: &DbErr) -> bool {
    violation(err).is_some_and(|(code, _)| code == "57014" || code == "55P03")
}

/// True when `err` is a violation of the named constraint or unique index.
pub fn is_violation_of(err: &DbErr, constraint: &str) -> bool {
    violation(err).is_some_and(|(_, name)| name == constraint)
}
