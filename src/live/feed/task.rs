//! A feed's task: it learns its fleet's notification tag, fixes where it
//! starts, then reads and broadcasts the fleet's events whenever it is woken
//! (or its recheck timer fires), until its subscribers have left.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::channels::Feed;
use super::read::{BATCH, read};
use crate::db;
use crate::db::events::{self, Position};
use crate::live::watermark::{Fresh, Known};

/// How soon a feed whose events wait for an older transaction looks again
/// when no notification wakes it first; doubled up to the maximum.
const RECHECK_MIN: Duration = Duration::from_millis(5);
const RECHECK_MAX: Duration = Duration::from_secs(1);

pub(super) struct FeedTask {
    pub(super) db: DatabaseConnection,
    pub(super) fleet: String,
    pub(super) feed: Weak<Feed>,
    pub(super) wake: Arc<Notify>,
    pub(super) held: Arc<AtomicBool>,
    pub(super) tag: Arc<OnceLock<String>>,
    pub(super) stop: CancellationToken,
    pub(super) waiting: Arc<AtomicI64>,
    pub(super) known: Arc<Known>,
    pub(super) fresh: Arc<Fresh>,
}

impl FeedTask {
    pub(super) async fn run(self) {
        if !self.learn_tag().await {
            return;
        }
        let Some(mut after) = self.begin().await else { return };
        let mut recheck = RECHECK_MIN;
        let mut woken = Instant::now();
        loop {
            let Some(feed) = self.feed.upgrade() else { return };
            let held = self.drain(&feed, &mut after, woken).await;
            self.held.store(held, Ordering::Relaxed);
            drop(feed);
            // A notification is only a hint (SPEC §6): an idle feed still
            // re-reads every RECHECK_MAX, so an event whose NOTIFY never came
            // (its writer died after committing, a forged queue) is late by at
            // most that, never lost. A held feed looks sooner, backing off.
            let wait = if held { recheck } else { RECHECK_MAX };
            // Woken by a notification: a watermark taken after the newest
            // notification was received (this one's, or a later one's)
            // reaches its commit. By the timer: one taken from now on.
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = self.wake.notified() => {
                    recheck = RECHECK_MIN;
                    woken = self.fresh.noticed();
                }
                _ = tokio::time::sleep(wait) => {
                    recheck = (recheck * 2).min(RECHECK_MAX);
                    woken = Instant::now();
                }
            }
        }
    }

    /// Asks the database for the fleet's notification tag, until it answers
    /// (false: the server stops or the feed's subscribers left meanwhile).
    /// Notifications before it are not needed: the first read comes after.
    async fn learn_tag(&self) -> bool {
        let fleet = &self.fleet;
        let tag = self
            .retried("cannot learn the fleet's notification tag", || {
                let fleet = fleet.clone();
                db::in_fleet::<_, DbErr, _>(&self.db, &self.fleet, move |tx| {
                    Box::pin(async move { events::fleet_tag(tx, &fleet).await })
                })
            })
            .await;
        tag.is_some_and(|tag| {
            let _ = self.tag.set(tag);
            true
        })
    }

    /// Where the first read starts: the present, or the lowest position a
    /// tail that joined before asked for (see [`Feed::covers`]). None: the
    /// server stops or the subscribers left before the database answered.
    async fn begin(&self) -> Option<Position> {
        let start = self
            .retried("cannot read the event log", || {
                db::in_fleet::<_, DbErr, _>(&self.db, &self.fleet, |tx| {
                    Box::pin(async move { events::start(tx).await })
                })
            })
            .await?;
        self.known.note(start.watermark);
        Some(self.feed.upgrade()?.begin(start.position()))
    }

    /// `read` until it succeeds, its failures logged as `failed` and tried
    /// again from [`RECHECK_MIN`] doubling to [`RECHECK_MAX`] apart. None
    /// when the server stops or the feed's subscribers have all left first.
    async fn retried<T, F, Fut>(&self, failed: &str, mut read: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, DbErr>>,
    {
        let mut retry = RECHECK_MIN;
        loop {
            match read().await {
                Ok(value) => return Some(value),
                Err(err) => tracing::warn!(fleet = %self.fleet, error = %err, "{failed}"),
            }
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                _ = tokio::time::sleep(retry) => retry = (retry * 2).min(RECHECK_MAX),
            }
            if self.feed.strong_count() == 0 {
                return None;
            }
        }
    }

    /// Reads and broadcasts everything deliverable below a watermark taken
    /// after `woken`; true when some committed events wait for an older
    /// transaction (or a read failed) and the feed must look again without a
    /// notification.
    async fn drain(&self, feed: &Feed, after: &mut Position, woken: Instant) -> bool {
        let below = match self.fresh.after(woken).await {
            Ok(watermark) => watermark,
            // Retried on the recheck timer.
            Err(err) => {
                tracing::warn!(fleet = %self.fleet, error = %err, "cannot take the delivery watermark");
                return true;
            }
        };
        loop {
            let from = *after;
            let batch = match read(&self.db, &self.waiting, &self.known, &self.fleet, from, Some(below)).await {
                Ok(read) => read,
                // Retried on the recheck timer.
                Err(err) => {
                    tracing::warn!(fleet = %self.fleet, error = %err, "cannot read the event log");
                    return true;
                }
            };
            for event in &batch.events {
                feed.send(event.clone());
            }
            *after = batch.next_after(from, BATCH);
            if batch.events.len() < BATCH {
                return batch.held;
            }
        }
    }
}
