//! The write runner every operation of SPEC §3 goes through: the caller's
//! context, the idempotency check and replay, the transaction (through
//! [`db::in_fleet`]), and the retry of races that a second run resolves.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr};
use serde_json::Value;

use super::{Ledger, LedgerError, UnitModel, idempotency, validate};
use crate::auth::Principal;
use crate::db::events::{Actor, IdempotencyKey};
use crate::db::{self, BoxFuture, Notify, units};

pub(super) const RETRIES: usize = 4;

/// The caller of a write, owned so the operation can be retried.
pub struct WriteCtx {
    pub who: Principal,
    /// The idempotency key and the request's fingerprint, when the caller sent a key.
    key: Option<(String, String)>,
    /// Set by an operation whose run claimed a unit (counted once committed).
    claimed: AtomicBool,
    /// ... and the unit's lease had expired.
    reclaimed: AtomicBool,
}

impl WriteCtx {
    /// This run claimed a unit (not a renewal of a held one); `reclaimed`:
    /// one whose lease had expired.
    pub fn mark_claimed(&self, reclaimed: bool) {
        self.claimed.store(true, Ordering::Relaxed);
        self.reclaimed.store(reclaimed, Ordering::Relaxed);
    }

    /// The caller as the SQL of a write sees it.
    pub fn actor(&self) -> Actor<'_> {
        let key = self.key.as_ref().map(|(id, hash)| IdempotencyKey { id, hash });
        Actor { fleet: &self.who.fleet, agent: &self.who.name, key }
    }
}

pub enum Outcome<T> {
    /// The idempotency key was seen before: the unit as it is now.
    Replayed(Box<UnitModel>),
    Done(T),
}

impl Outcome<UnitModel> {
    pub fn unit(self) -> UnitModel {
        match self {
            Self::Replayed(unit) => *unit,
            Self::Done(unit) => unit,
        }
    }
}

/// "Run this statement, or explain the refusal": what a conditional write
/// returned, or, when it changed nothing, the error `refusal` works out (by
/// reading the unit). `refusal` is only awaited when needed.
pub async fn or_explain<T>(written: Option<T>, refusal: impl Future<Output = LedgerError>) -> Result<T, LedgerError> {
    match written {
        Some(value) => Ok(value),
        None => Err(refusal.await),
    }
}

impl Ledger {
    /// Runs `op` in a fleet transaction after the idempotency check, retrying
    /// the races a second run resolves.
    pub(super) async fn write<T, F>(
        &self,
        who: &Principal,
        operation: &str,
        args: Value,
        key: Option<String>,
        op: F,
    ) -> Result<Outcome<T>, LedgerError>
    where
        T: Send + 'static,
        F: for<'t> Fn(&'t DatabaseTransaction, &'t WriteCtx) -> BoxFuture<'t, Result<T, LedgerError>>
            + Send
            + Sync
            + 'static,
    {
        validate::idempotency_key(key.as_deref())?;
        // Only a keyed request needs its fingerprint.
        let key = key.map(|key| (key, idempotency::fingerprint(operation, &args)));
        let ctx = Arc::new(WriteCtx {
            who: who.clone(),
            key,
            claimed: AtomicBool::new(false),
            reclaimed: AtomicBool::new(false),
        });
        let op = Arc::new(op);
        let result = retrying(operation, || {
            ctx.claimed.store(false, Ordering::Relaxed);
            ctx.reclaimed.store(false, Ordering::Relaxed);
            let (run_ctx, op) = (ctx.clone(), op.clone());
            let users = Some(&*self.metrics.pool_users);
            db::in_fleet_with(&self.db, users, &who.fleet, self.notifier.mode(), move |tx| {
                let ctx = run_ctx;
                Box::pin(async move {
                    if let Some(unit) = idempotency::replayed(tx, &ctx.actor()).await? {
                        let unit = units::by_id(tx, unit)
                            .await?
                            .ok_or_else(|| LedgerError::internal("replayed unit vanished"))?;
                        return Ok(Outcome::Replayed(Box::new(unit)));
                    }
                    Ok(Outcome::Done(op(tx, &ctx).await?))
                })
            })
        })
        .await;
        if matches!(result, Ok(Outcome::Done(_))) {
            self.notifier.committed(&who.fleet);
        }
        if result.is_ok() && ctx.claimed.load(Ordering::Relaxed) {
            self.metrics.claims.inc();
            if ctx.reclaimed.load(Ordering::Relaxed) {
                self.metrics.stale_reclaims.inc();
            }
        }
        result
    }

    /// A write with neither an idempotency key nor an attempt fence, as one
    /// autocommit statement: `statement` runs as the caller (without a key)
    /// on the pool (a SQL function
    /// of migration 0010 or 0011 that scopes itself to the caller's fleet
    /// and announces its events as `Notify` says). When it writes nothing,
    /// `refusal` explains why (to the caller, its second argument) in a
    /// read transaction of the fleet; the explanation describes the unit as
    /// that read finds it, as the transaction path's does after its own
    /// statement. Races are retried as [`Ledger::write`] retries them.
    pub(super) async fn write_now<F, R>(
        &self,
        who: &Principal,
        operation: &str,
        statement: F,
        refusal: R,
    ) -> Result<UnitModel, LedgerError>
    where
        F: for<'c> Fn(&'c DatabaseConnection, Actor<'c>, Notify) -> BoxFuture<'c, Result<Option<UnitModel>, DbErr>>,
        R: for<'t> FnOnce(&'t DatabaseTransaction, Principal) -> BoxFuture<'t, LedgerError> + Clone + Send + 'static,
    {
        retrying(operation, || async {
            let actor = Actor { fleet: &who.fleet, agent: &who.name, key: None };
            let written = self.on_pool(statement(&self.db, actor, self.notifier.mode())).await?;
            match written {
                Some(unit) => {
                    self.notifier.committed(&who.fleet);
                    Ok(unit)
                }
                // A conflict in the read that explains is retried as well:
                // it explained nothing.
                None => {
                    let (caller, refusal) = (who.clone(), refusal.clone());
                    let users = Some(&*self.metrics.pool_users);
                    db::in_fleet_counted(&self.db, users, &who.fleet, |tx| {
                        Box::pin(async move { Err(refusal(tx, caller).await) })
                    })
                    .await
                }
            }
        })
        .await
    }

    /// Runs `statement`, one autocommit statement on the request pool (a
    /// SQL function that scopes itself to the caller's fleet), counted as a
    /// pool user while it waits for and holds its connection.
    pub(super) async fn on_pool<T>(&self, statement: impl Future<Output = Result<T, DbErr>>) -> Result<T, DbErr> {
        let _in_flight = db::InFlight::new(&self.metrics.pool_users);
        statement.await
    }
}

/// Runs `run` again while it ends in a race that a second run resolves
/// (`LedgerError::Retry`: a deadlock or serialization failure), at most
/// [`RETRIES`] times.
pub(super) async fn retrying<T, Fut>(operation: &str, mut run: impl FnMut() -> Fut) -> Result<T, LedgerError>
where
    Fut: Future<Output = Result<T, LedgerError>>,
{
    for _ in 0..RETRIES {
        match run().await {
            Err(LedgerError::Retry) => continue,
            other => return other,
        }
    }
    Err(LedgerError::internal(format!("{operation}: still conflicting after {RETRIES} runs")))
}
