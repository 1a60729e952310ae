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
//!
//! Here, the feeds of the process by fleet; what one fleet's subscribers
//! hold is in [`channels`], a feed's task in [`task`], the read both a feed
//! and a catching-up tail make in [`read`](mod@read).

mod channels;
mod read;
mod task;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use channels::Feed;
pub use read::BATCH;
pub(super) use read::read;
use task::FeedTask;

use super::watermark::{Fresh, Known};
use crate::db::events;

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
