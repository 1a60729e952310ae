//! Transactions: the one way this process begins one ([`begin`]), a
//! fleet's or a request's session in one ([`in_fleet`], [`in_session`]),
//! and the pool users counted while they wait for a connection
//! ([`InFlight`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};

use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};

use super::{stmt, tokens};

/// The non-superuser role every request transaction runs as (created by the
/// first migration); row-level security applies to it.
pub const APP_ROLE: &str = "work_ledger_app";

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
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
/// instead, in SQL: [`events::events_after`](super::events::events_after)
/// (the reads of feeds and the pages of catching-up subscribers) and
/// [`events::events_resumed`](super::events::events_resumed) (migration
/// 0034), one round trip each.
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

/// [`in_fleet`], counting the task in `users` while it waits for or holds
/// its connection ([`InFlight`]): the pool's users beyond its size are its
/// waiters, which sqlx does not report (the `db_pool_waiting` metric).
/// (Request transactions only read: every write is one call of its SQL
/// function, [`writes`](super::writes).)
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
