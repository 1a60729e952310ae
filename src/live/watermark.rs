//! Delivery watermarks as this process's live reads use
//! them. Taking one has the database scan `pg_locks` for the in-flight
//! event writers' markers, which costs about as much as the read that
//! follows (BENCHMARKS, round 3, sessions 14 and 16), so the process takes
//! as few as exactness allows:
//!
//! - a subscriber catching up reads below the newest watermark any read of
//!   the process returned ([`Known`]), as it stands after the subscriber
//!   joined its broadcast;
//! - feeds woken together share one taking ([`Fresh`]): each needs a
//!   watermark taken after the commit it was woken for, and one statement
//!   that began after every one of their wake-ups serves them all.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering, fence};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::Shared;
use sea_orm::{DatabaseConnection, DbErr};
use tokio::time::Instant;

use crate::db;

/// The newest delivery watermark a read of this process returned: every
/// event of a batch below it is final for good, so any read
/// that starts later may stop there instead of having the database scan its
/// locks for a new one. A feed notes its read's watermark
/// before it broadcasts the read's events, so a subscriber that joined a
/// broadcast and then reads below the watermark noted now reaches every
/// event the broadcast had sent before it joined. A feed also notes its
/// starting watermark before it fixes where it starts ([`super::feed`]), so
/// a subscriber that finds the feed starting past its reads reaches that
/// start with one more read below the watermark noted then. Like a
/// subscriber's position, it assumes that the log never loses a committed
/// batch: a failover that loses acknowledged commits (docs/operating.md,
/// high availability, while replication is asynchronous) breaks both alike.
#[derive(Debug, Default)]
pub struct Known(AtomicI64);

impl Known {
    /// The fences pair a feed's note-then-send with a subscriber's
    /// join-then-read for every channel, including a one-type channel that
    /// the joining subscriber creates (a `OnceLock`, no lock shared with
    /// the send): one of the two sees the other's first step.
    pub fn note(&self, watermark: i64) {
        self.0.fetch_max(watermark, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// None before any read returned one.
    pub fn get(&self) -> Option<i64> {
        fence(Ordering::SeqCst);
        Some(self.0.load(Ordering::SeqCst)).filter(|w| *w > 0)
    }
}

type Taking = Shared<Pin<Box<dyn Future<Output = Result<i64, Arc<DbErr>>> + Send>>>;

/// Watermarks taken for the feeds, each by one statement that serves every
/// feed woken before it began. A feed woken at `t` (a notification received
/// then, whose commit came before) needs a watermark whose taking began at
/// or after `t`: everything that had committed by then lies below it or is
/// held back by a writer still in flight. A replica's commits are notified
/// in one statement naming many fleets, so their feeds wake within
/// microseconds of each other and share one taking (the first to ask starts
/// it; those woken before it began join it; those woken later start the
/// next, which the rest of the burst joins).
pub struct Fresh {
    db: DatabaseConnection,
    /// Statements using or waiting for a connection of the pool.
    waiting: Arc<AtomicI64>,
    state: Mutex<State>,
    /// When the newest notification (or a wake of every feed) was received:
    /// a feed it woke reads below a watermark taken after it.
    noticed: Mutex<Instant>,
    takings: prometheus_client::metrics::counter::Counter,
}

#[derive(Default)]
struct State {
    /// The newest watermark taken, with when its taking began.
    newest: Option<(Instant, i64)>,
    /// The taking in flight, with when it began.
    running: Option<(Instant, Taking)>,
}

impl Fresh {
    /// Takes watermarks on `db`'s pool, counting the statements in `waiting`
    /// and in `takings`.
    pub fn new(
        db: DatabaseConnection,
        waiting: Arc<AtomicI64>,
        takings: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        Self { db, waiting, state: Mutex::new(State::default()), noticed: Mutex::new(Instant::now()), takings }
    }

    /// Marks the moment before feeds are woken by a notification.
    pub fn notice(&self) {
        *self.noticed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// When the newest notification was received ([`Fresh::notice`]): a
    /// feed woken by one (this one's, or a later one's) passes it to
    /// [`Fresh::after`].
    pub fn noticed(&self) -> Instant {
        *self.noticed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A watermark whose taking began at or after `woken`.
    pub async fn after(&self, woken: Instant) -> Result<i64, DbErr> {
        self.after_with(woken, || {
            let (db, waiting) = (self.db.clone(), self.waiting.clone());
            async move {
                let _in_flight = db::InFlight::new(&waiting);
                db::events::watermark(&db).await
            }
        })
        .await
    }

    /// [`Fresh::after`] with `take` as the statement.
    async fn after_with<F, Fut>(&self, woken: Instant, take: F) -> Result<i64, DbErr>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<i64, DbErr>> + Send + 'static,
    {
        let (began, taking) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((began, watermark)) = state.newest
                && began >= woken
            {
                return Ok(watermark);
            }
            match &state.running {
                Some((began, taking)) if *began >= woken => (*began, taking.clone()),
                _ => {
                    let began = Instant::now();
                    let statement = take();
                    let taking: Taking = async move { statement.await.map_err(Arc::new) }.boxed().shared();
                    self.takings.inc();
                    state.running = Some((began, taking.clone()));
                    (began, taking)
                }
            }
        };
        let taken = taking.await;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.running.as_ref().is_some_and(|(b, _)| *b == began) {
            state.running = None;
        }
        if let Ok(watermark) = taken
            && state.newest.is_none_or(|(b, _)| b < began)
        {
            state.newest = Some((began, watermark));
        }
        taken.map_err(super::unshare)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    fn fresh() -> Fresh {
        Fresh::new(DatabaseConnection::default(), Arc::default(), Default::default())
    }

    /// A statement that answers `watermark` once `go` lets it (at once when
    /// `go` is None), counted in `takings`.
    fn statement(
        takings: &Arc<AtomicUsize>,
        watermark: i64,
        go: Option<Arc<tokio::sync::Notify>>,
    ) -> impl FnOnce() -> Pin<Box<dyn Future<Output = Result<i64, DbErr>> + Send>> + use<> {
        let takings = takings.clone();
        move || {
            takings.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if let Some(go) = go {
                    go.notified().await;
                }
                Ok(watermark)
            })
        }
    }

    #[tokio::test]
    async fn feeds_woken_before_a_taking_began_share_it_and_later_ones_take_their_own() {
        let fresh = fresh();
        let takings = Arc::new(AtomicUsize::new(0));
        let woken = Instant::now();
        // Five feeds woken at `woken`, asking while the first's statement runs: one statement.
        let go = Arc::new(tokio::sync::Notify::new());
        let five = futures::future::join_all(
            (0..5).map(|i| fresh.after_with(woken, statement(&takings, 10 + i, Some(go.clone())))),
        );
        let release = async {
            tokio::task::yield_now().await;
            go.notify_one();
        };
        let (got, ()) = futures::future::join(five, release).await;
        let got: Vec<i64> = got.into_iter().map(|w| w.expect("watermark")).collect();
        assert_eq!((got, takings.load(Ordering::SeqCst)), (vec![10; 5], 1));
        // Woken before that taking began: its answer, no statement.
        assert_eq!(fresh.after_with(woken, statement(&takings, 20, None)).await.expect("watermark"), 10);
        assert_eq!(takings.load(Ordering::SeqCst), 1);
        // Woken after it began: a statement of its own.
        let later = Instant::now();
        assert_eq!(fresh.after_with(later, statement(&takings, 30, None)).await.expect("watermark"), 30);
        assert_eq!(takings.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_feed_woken_while_a_taking_runs_does_not_join_it() {
        let fresh = Arc::new(fresh());
        let takings = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(tokio::sync::Notify::new());
        let first = {
            let (fresh, statement) = (fresh.clone(), statement(&takings, 1, Some(go.clone())));
            tokio::spawn(async move { fresh.after_with(Instant::now(), statement).await })
        };
        while takings.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await; // the first taking has begun
        }
        let woken = Instant::now();
        let second = fresh.after_with(woken, statement(&takings, 2, None)).await.expect("watermark");
        go.notify_one();
        assert_eq!((first.await.expect("task").expect("watermark"), second), (1, 2));
        assert_eq!(takings.load(Ordering::SeqCst), 2);
        // The newest is the later taking's, although it ended first.
        assert_eq!(fresh.after_with(woken, statement(&takings, 3, None)).await.expect("watermark"), 2);
    }

    #[tokio::test]
    async fn a_failed_taking_fails_its_joiners_and_the_next_feed_takes_again() {
        let fresh = fresh();
        let woken = Instant::now();
        let go = Arc::new(tokio::sync::Notify::new());
        let failing = |go: Arc<tokio::sync::Notify>| {
            move || async move {
                go.notified().await;
                Err::<i64, _>(DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout))
            }
        };
        let release = async {
            tokio::task::yield_now().await;
            go.notify_one();
        };
        let (first, second, ()) = futures::future::join3(
            fresh.after_with(woken, failing(go.clone())),
            fresh.after_with(woken, failing(go.clone())),
            release,
        )
        .await;
        assert!(first.is_err() && second.is_err(), "{first:?} {second:?}");
        let takings = Arc::new(AtomicUsize::new(0));
        assert_eq!(fresh.after_with(woken, statement(&takings, 7, None)).await.expect("watermark"), 7);
        assert_eq!(takings.load(Ordering::SeqCst), 1);
    }
}
