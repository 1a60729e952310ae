//! A subscription's reads beside its fleet's feed: its starting point
//! (read together with the others starting at once), the pages of its
//! catch-up, the delivery watermark they may stop at, and the patience of
//! each read with a database that is briefly out of reach.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use async_graphql::dataloader::Loader;
use sea_orm::{DatabaseConnection, DbErr};

use super::{Live, feed, unshare};
use crate::db;
use crate::ledger::LedgerError;

/// "Now" in the event log for many subscriptions starting at once, from one
/// read on the request pool. A starting point (the delivery watermark and a
/// snapshot, [`crate::db::events::start`]) reads no fleet's rows, so one read
/// serves every fleet of the batch; the batch is read after each of its
/// subscriptions joined its fleet's broadcast, which is all a start needs
/// ([`tail`](super::tail)). No cache: a later subscription gets a later read.
pub(super) struct Starts {
    pub(super) requests: DatabaseConnection,
    pub(super) users: Arc<AtomicI64>,
}

impl Loader<String> for Starts {
    type Value = db::events::Start;
    type Error = Arc<DbErr>;

    async fn load(&self, fleets: &[String]) -> Result<HashMap<String, Self::Value>, Self::Error> {
        let Some(fleet) = fleets.first() else { return Ok(HashMap::new()) };
        let start = db::in_fleet_counted::<_, DbErr, _>(&self.requests, Some(&self.users), fleet, |tx| {
            Box::pin(async move { db::events::start(tx).await })
        })
        .await
        .map_err(Arc::new)?;
        Ok(fleets.iter().map(|f| (f.clone(), start.clone())).collect())
    }
}
/// The first and the longest pause between tries of a subscription's read
/// ([`Live::patiently`]).
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

impl Live {
    /// Up to [`feed::BATCH`] events of `fleet` after `after` for a catching-up
    /// subscription, below the watermark `below` (`None`: a new one), from a
    /// statement of its own on the request pool ([`feed::read`]).
    pub async fn catch_up_read(
        &self,
        fleet: &str,
        after: db::events::Position,
        below: Option<i64>,
    ) -> Result<db::events::Batch, LedgerError> {
        Ok(feed::read(&self.0.requests, &self.0.request_users, &self.0.known, fleet, after, below).await?)
    }

    /// The newest delivery watermark a read of this process returned (None
    /// before the first): a read that starts after this call may stop there
    /// ([`watermark::Known`](super::watermark::Known)).
    pub fn known_watermark(&self) -> Option<i64> {
        self.0.known.get()
    }

    /// Notes the watermark of a read made elsewhere (a resume).
    pub fn note_watermark(&self, watermark: i64) {
        self.0.known.note(watermark);
    }

    /// `read` until it succeeds, fails for good, or has failed transiently
    /// (UNAVAILABLE: [`LedgerError::is_transient`]) for longer than the
    /// configured patience: a subscription's reads wait out a restart of the
    /// database or a moment of overload instead of ending the subscription,
    /// whose client would then come back through a new connection, a token
    /// lookup and a resume further back, and add to the load that failed the
    /// read. Tries are spaced from 100 ms doubling to 2 s, with jitter so that
    /// subscriptions failed together do not come back together.
    pub async fn patiently<T, F, Fut>(&self, mut read: F) -> Result<T, LedgerError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, LedgerError>>,
    {
        let give_up = tokio::time::Instant::now() + self.0.config.read_patience;
        let mut wait = RETRY_MIN;
        loop {
            match read().await {
                Err(err) if err.is_transient() => {
                    let pause = wait.mul_f64(rand::random_range(0.5..=1.0));
                    if tokio::time::Instant::now() + pause >= give_up {
                        return Err(err);
                    }
                    self.0.read_retries.inc();
                    tokio::time::sleep(pause).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
                done => return done,
            }
        }
    }

    /// Where the event log is now, for a subscription of `fleet` that has
    /// joined its fleet's broadcast; starts asked at once share one read.
    pub async fn start_now(&self, fleet: &str) -> Result<db::events::Start, LedgerError> {
        let start = self.0.starts.load_one(fleet.to_owned()).await.map_err(unshare)?;
        let start = start.ok_or_else(|| DbErr::RecordNotFound("the event log's starting point".into()))?;
        self.note_watermark(start.watermark);
        Ok(start)
    }
}
