//! Fan-out: one feed per fleet that has subscribers in this process. The
//! listener only says "the fleet with this opaque tag has news" (the tag is
//! an HMAC of the fleet name that only the database can compute, migration
//! 0004; each feed asks for its own fleet's tag when it starts); the feed
//! then reads the fleet's new events once, in delivery order and under the
//! fleet's row-level security (`db::in_fleet`), and broadcasts them to that
//! fleet's subscribers alone. One read per fleet and wake-up, however many
//! subscribers it has. A forged notification costs at most one such read.
//!
//! A feed reads below a watermark taken after it was woken, one taking for
//! every feed woken together ([`Fresh`]), and notes it in the process's
//! [`Known`] watermark before it broadcasts the read's events; a subscriber
//! catching up reads below that one instead of having the database take
//! another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use sea_orm::{DatabaseConnection, DbErr, Iterable};
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::watermark::{Fresh, Known};
use crate::db;
use crate::db::entities::EventType;
use crate::db::events::{self, Batch, LiveEvent, Position};

/// Events per fleet a read returns at most (a feed's, a tail's page).
pub const BATCH: usize = 500;
/// How soon a feed whose events wait for an older transaction looks again
/// when no notification wakes it first; doubled up to the maximum.
const RECHECK_MIN: Duration = Duration::from_millis(5);
const RECHECK_MAX: Duration = Duration::from_secs(1);

/// What subscribers of one fleet hold: the broadcast of its events, in
/// delivery order, and, for subscribers that deliver one type of event only,
/// a broadcast of that type's events, so that they are not woken for the
/// others (a triage service's `blockingQuestionOpened` waits for one event
/// in ten).
pub struct Feed {
    events: broadcast::Sender<Arc<LiveEvent>>,
    /// Indexed by `EventType as usize`; each made by its first subscriber.
    of_type: Vec<OnceLock<broadcast::Sender<Arc<LiveEvent>>>>,
    capacity: usize,
    wake: Arc<Notify>,
    coverage: Mutex<Coverage>,
}

/// From where the feed broadcasts every event. A tail whose own reads of
/// the table end before that point would otherwise skip what committed in
/// between (its catch-up ended, then the new feed's first read began at the
/// present).
#[derive(Debug, Clone, Copy)]
enum Coverage {
    /// The first read has not begun: it starts no later than the lowest
    /// position a tail asked for.
    NotStarted { from: Option<Position> },
    /// Every event after this position is broadcast.
    Since(Position),
}

impl Feed {
    fn new(capacity: usize, wake: Arc<Notify>) -> Self {
        Self {
            events: broadcast::channel(capacity).0,
            of_type: EventType::iter().map(|_| OnceLock::new()).collect(),
            capacity,
            wake,
            coverage: Mutex::new(Coverage::NotStarted { from: None }),
        }
    }

    /// Every event from now on, or, with `only`, the events of that type.
    /// Either way an event reaches the receiver once the feed read it after
    /// this call, so [`Feed::covers`] holds for both.
    pub fn subscribe(&self, only: Option<EventType>) -> broadcast::Receiver<Arc<LiveEvent>> {
        match only {
            None => self.events.subscribe(),
            Some(kind) => self.of_type[kind as usize].get_or_init(|| broadcast::channel(self.capacity).0).subscribe(),
        }
    }

    /// Broadcasts one event to every subscriber and to those of its type.
    fn send(&self, event: Arc<LiveEvent>) {
        // No receiver is not an error: a subscriber may be leaving.
        if let Some(typed) = self.of_type[event.event.event_type as usize].get() {
            let _ = typed.send(event.clone());
        }
        let _ = self.events.send(event);
    }

    /// True when everything after `position` reaches a receiver taken from
    /// [`Feed::subscribe`] before this call; false when the caller must read
    /// the table further first (the feed began later than `position`).
    pub fn covers(&self, position: Position) -> bool {
        let mut coverage = self.coverage.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *coverage {
            Coverage::NotStarted { from } => {
                *from = Some(from.map_or(position, |f| f.min(position)));
                true
            }
            Coverage::Since(since) => *since <= position,
        }
    }

    /// Fixes where the feed starts: `present`, or earlier when a tail asked.
    fn begin(&self, present: Position) -> Position {
        let mut coverage = self.coverage.lock().unwrap_or_else(|e| e.into_inner());
        let since = match *coverage {
            Coverage::NotStarted { from } => from.map_or(present, |f| f.min(present)),
            Coverage::Since(since) => since,
        };
        *coverage = Coverage::Since(since);
        since
    }
}

impl Drop for Feed {
    /// The last subscriber left: let the task notice and stop.
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

struct Entry {
    feed: Weak<Feed>,
    wake: Arc<Notify>,
    held: Arc<AtomicBool>,
    /// The fleet's notification tag, once the feed has learnt it.
    tag: Arc<OnceLock<String>>,
}

pub struct Feeds {
    db: DatabaseConnection,
    capacity: usize,
    stop: CancellationToken,
    entries: Mutex<HashMap<String, Entry>>,
    /// Reads using or waiting for a connection of the pool.
    waiting: Arc<AtomicI64>,
    known: Arc<Known>,
    fresh: Arc<Fresh>,
}

impl Feeds {
    /// `waiting` counts reads using or waiting for a connection of `db`'s
    /// pool: those beyond the pool's size wait (the `db_pool_waiting` metric).
    /// Every read's watermark is noted in `known`; feeds take theirs from
    /// `fresh`.
    pub fn new(
        db: DatabaseConnection,
        capacity: usize,
        stop: CancellationToken,
        waiting: Arc<AtomicI64>,
        known: Arc<Known>,
        fresh: Fresh,
    ) -> Self {
        Self { db, capacity, stop, entries: Mutex::new(HashMap::new()), waiting, known, fresh: Arc::new(fresh) }
    }

    /// The fleet's feed, started on first use.
    pub fn feed(&self, fleet: &str) -> Arc<Feed> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(feed) = entries.get(fleet).and_then(|e| e.feed.upgrade()) {
            return feed;
        }
        entries.retain(|_, e| e.feed.strong_count() > 0);
        let wake = Arc::new(Notify::new());
        let held = Arc::new(AtomicBool::new(false));
        let tag = Arc::new(OnceLock::new());
        let feed = Arc::new(Feed::new(self.capacity, wake.clone()));
        let entry = Entry { feed: Arc::downgrade(&feed), wake: wake.clone(), held: held.clone(), tag: tag.clone() };
        entries.insert(fleet.to_owned(), entry);
        let task = FeedTask {
            db: self.db.clone(),
            fleet: fleet.to_owned(),
            feed: Arc::downgrade(&feed),
            wake,
            held,
            tag,
            stop: self.stop.clone(),
            waiting: self.waiting.clone(),
            known: self.known.clone(),
            fresh: self.fresh.clone(),
        };
        tokio::spawn(task.run());
        feed
    }

    /// A fleet committed events: `signal` is a nonce and its MAC under that
    /// fleet's tag, so only the feed that knows the tag recognises it (a
    /// signal no feed recognises is ignored). Feeds whose events wait for an
    /// older event writer are woken too: any commit may be the one they
    /// wait for.
    pub fn wake_signalled(&self, signal: &str) {
        self.fresh.notice();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries.values() {
            if entry.held.load(Ordering::Relaxed) || entry.tag.get().is_some_and(|t| events::signal_matches(t, signal))
            {
                entry.wake.notify_one();
            }
        }
    }

    /// Every feed reads again: after a reconnect (notifications were lost)
    /// and, while the listener is down, as a polling fallback.
    pub fn wake_all(&self) {
        self.fresh.notice();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries.values() {
            entry.wake.notify_one();
        }
    }
}

struct FeedTask {
    db: DatabaseConnection,
    fleet: String,
    feed: Weak<Feed>,
    wake: Arc<Notify>,
    held: Arc<AtomicBool>,
    tag: Arc<OnceLock<String>>,
    stop: CancellationToken,
    waiting: Arc<AtomicI64>,
    known: Arc<Known>,
    fresh: Arc<Fresh>,
}

impl FeedTask {
    async fn run(self) {
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

/// The fleet's events after `after` (up to [`BATCH`]) below the watermark
/// `below`, or a new one when it is `None`, in a statement of its own in
/// autocommit on `db`'s pool, counted in `waiting` while it uses or waits for
/// a connection: a feed's read (the live pool, a watermark taken after it
/// was woken, [`Fresh`]) and a catching-up tail's page (the request pool,
/// the newest [`Known`] one, [`super::Live::catch_up_read`]) alike. The
/// read's watermark is noted in `known` before the events are returned.
///
/// Not gathered with other fleets' reads into one statement, as migration
/// 0033 had it: measured on two cores, gathering the feeds' reads cost each
/// live delivery about 2 ms (p50) and 15% more server CPU at 3,000
/// subscribers, and gathering the tails' catch-up pages made a reconnect
/// storm of 10,000 slower, not faster (a statement of many pages holds them
/// all until its last row, and fails them all at once; BENCHMARKS, round 3,
/// session 15).
pub(super) async fn read(
    db: &DatabaseConnection,
    waiting: &Arc<AtomicI64>,
    known: &Known,
    fleet: &str,
    after: Position,
    below: Option<i64>,
) -> Result<Batch, DbErr> {
    let _in_flight = db::InFlight::new(waiting);
    let batch = events::events_after(db, fleet, after, below, BATCH).await?;
    known.note(batch.watermark);
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::entities::event;

    fn event(seq: i64, event_type: EventType) -> Arc<LiveEvent> {
        let event = event::Model {
            id: uuid::Uuid::nil(),
            seq,
            fleet: "f".into(),
            unit_id: uuid::Uuid::nil(),
            attempt_id: None,
            event_type,
            from_state: None,
            to_state: None,
            agent_id: None,
            cost_delta_cents: 0,
            detail: serde_json::json!({}),
            source_event_id: None,
            request_hash: None,
            created_at: chrono::Utc::now(),
        };
        Arc::new(LiveEvent { position: Position { batch: 1, tx: 1, seq }, event })
    }

    #[test]
    fn a_subscriber_of_one_type_receives_that_type_only_and_the_others_everything() {
        let feed = Feed::new(64, Arc::new(Notify::new()));
        let mut everything = feed.subscribe(None);
        let mut blocked = feed.subscribe(Some(EventType::Blocked));
        let mut stalled = feed.subscribe(Some(EventType::Stalled));
        let kinds = [EventType::Registered, EventType::Claimed, EventType::Blocked, EventType::Heartbeat];
        for (seq, kind) in kinds.iter().cycle().take(20).enumerate() {
            feed.send(event(seq as i64, *kind));
        }
        let drain = |rx: &mut broadcast::Receiver<Arc<LiveEvent>>| {
            std::iter::from_fn(|| rx.try_recv().ok()).map(|e| (e.event.seq, e.event.event_type)).collect::<Vec<_>>()
        };
        assert_eq!(drain(&mut everything).len(), 20, "every event reaches a subscriber of all of them");
        let only_blocked = drain(&mut blocked);
        assert_eq!(only_blocked, (0..5).map(|i| (i * 4 + 2, EventType::Blocked)).collect::<Vec<_>>());
        assert!(drain(&mut stalled).is_empty(), "nothing wakes a subscriber of a type that did not occur");
    }
}
