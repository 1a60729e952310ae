//! One subscriber's exactly-once view of its fleet's event log.
//!
//! A tail joins its fleet's broadcast first, then fixes its position (a
//! cursor's event, or a snapshot of "now"), then reads the table from that
//! position up to the present before it takes live events. Everything the
//! feed broadcasts from the moment the tail joined is in its receiver, and
//! everything before is in reach of its own reads, so the two overlap and
//! never leave a gap; the position (strictly increasing in delivery order)
//! drops the overlap. A tail that falls behind the broadcast reads the table
//! again from its position, so a slow subscriber loses nothing either. A read
//! that fails for a moment (the database restarting, overload) is tried again
//! from the same position ([`Live::patiently`]): the subscription goes on
//! instead of ending, and still delivers each event once.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError};

use super::Live;
use super::feed::Feed;
use crate::auth::Principal;
use crate::db::entities::EventType;
use crate::db::events::{Batch, LiveEvent, Position, Start};
use crate::ledger::cursor::EventCursor;
use crate::ledger::{Ledger, LedgerError};

/// Events per read of the table when catching up.
const PAGE: usize = super::feed::BATCH;
/// Events read with a resumed subscription's position: one, not a page. A
/// reconnect storm sets up thousands of resumed subscriptions at once, and
/// with a page each they held up to 500 events apiece before sending any
/// (10,000 subscribers: peak RSS 273-318 MiB with a page, 242 with one);
/// the rest comes in catch-up pages as the client takes them.
const RESUME_PAGE: usize = 1;

pub struct Tail {
    /// The process's live subsystem (its reads of the log).
    subsystem: Live,
    ledger: Ledger,
    who: Principal,
    feed: Arc<Feed>,
    live: broadcast::Receiver<Arc<LiveEvent>>,
    /// Everything at or before it has been delivered or skipped.
    position: Position,
    /// Without a cursor: events that had committed when the subscription
    /// began are skipped although they sort after `position`.
    start: Option<Start>,
    /// Read the table before taking live events.
    catching_up: bool,
    pending: VecDeque<Arc<LiveEvent>>,
}

impl Tail {
    /// Starts with what commits after this call. With `only`, the live
    /// events are that type's alone (its subscriber delivers no other), and
    /// the tail wakes for nothing else; events read from the table while
    /// catching up come in every type.
    pub async fn from_now(
        live: &Live,
        ledger: &Ledger,
        who: &Principal,
        only: Option<EventType>,
    ) -> Result<Self, LedgerError> {
        who.require(crate::auth::Permission::LedgerRead)?;
        let (feed, receiver) = join(live, who, only);
        let start = live.patiently(|| live.start_now(&who.fleet)).await?;
        Ok(Self::new(live, ledger, who, feed, receiver, start.position(), Some(start)))
    }

    /// Starts right after the event `cursor` names (a `WorkUnitEvent.cursor`).
    /// A cursor read from a list carries the list's floor: the tail then
    /// starts no later than just before that batch, so nothing that was not
    /// yet committed when the list was read is behind it (see [`EventCursor`]).
    /// `only` as for [`Tail::from_now`].
    pub async fn after(
        live: &Live,
        ledger: &Ledger,
        who: &Principal,
        cursor: &str,
        only: Option<EventType>,
    ) -> Result<Self, LedgerError> {
        let EventCursor { at, floor, .. } = EventCursor::decode(cursor).map_err(|_| foreign_cursor())?;
        let (feed, receiver) = join(live, who, only);
        // The cursor's event and what follows it in one statement, below the
        // newest watermark known now, after the join above.
        let below = live.known_watermark();
        let resumed = live.patiently(|| ledger.events_resumed(who, at.id, floor, below, RESUME_PAGE)).await?;
        let (from, batch) = resumed.ok_or_else(foreign_cursor)?;
        live.note_watermark(batch.watermark);
        let mut tail = Self::new(live, ledger, who, feed, receiver, from, None);
        tail.take(from, &batch, RESUME_PAGE);
        Ok(tail)
    }

    fn new(
        subsystem: &Live,
        ledger: &Ledger,
        who: &Principal,
        feed: Arc<Feed>,
        live: broadcast::Receiver<Arc<LiveEvent>>,
        position: Position,
        start: Option<Start>,
    ) -> Self {
        ledger.metrics().subscriptions.inc();
        Self {
            subsystem: subsystem.clone(),
            ledger: ledger.clone(),
            who: who.clone(),
            feed,
            live,
            position,
            start,
            catching_up: true,
            pending: VecDeque::new(),
        }
    }

    /// The next event in delivery order; `None` once the server stops.
    pub async fn next(&mut self) -> Result<Option<Arc<LiveEvent>>, LedgerError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if !self.before_start(&event) {
                    return Ok(Some(event));
                }
                continue;
            }
            if self.catching_up {
                self.catch_up().await?;
                continue;
            }
            match self.live.recv().await {
                Ok(event) => {
                    if event.position <= self.position {
                        continue;
                    }
                    self.position = event.position;
                    if !self.before_start(&event) {
                        self.ledger.metrics().delivered(event.event.created_at);
                        return Ok(Some(event));
                    }
                }
                // The broadcast dropped events this tail had not taken yet.
                Err(RecvError::Lagged(_)) => self.catching_up = true,
                Err(RecvError::Closed) => return Ok(None),
            }
        }
    }

    fn before_start(&self, event: &LiveEvent) -> bool {
        self.start.as_ref().is_some_and(|s| s.committed_before(event.position))
    }

    /// One page of the table after `position`; catching up ends with the
    /// first page that is not full and reaches where the feed's broadcast
    /// begins (a feed started after this tail joined may begin later than
    /// the tail's first reads reached). A page is read below the newest
    /// watermark this process knows as it stands after the tail joined its
    /// broadcast ([`super::watermark::Known`]): it reaches everything the
    /// broadcast sent before the tail joined, and, once the feed has fixed
    /// its start, that start; the database takes no new one for it
    ///. Not a new one either when a page ends short of the
    /// feed's start: a new watermark can be lower than an earlier one (an
    /// event writer between reading the batch sequence and taking its
    /// marker), and the tail would read again and again while it stayed so.
    async fn catch_up(&mut self) -> Result<(), LedgerError> {
        let from = self.position;
        let (subsystem, fleet) = (&self.subsystem, &self.who.fleet);
        let below = subsystem.known_watermark();
        let batch = subsystem.patiently(|| subsystem.catch_up_read(fleet, from, below)).await?;
        self.take(from, &batch, PAGE);
        Ok(())
    }

    /// A page of the table read after `from` with `limit`: pending
    /// delivery, and whether the next page is needed before live events.
    fn take(&mut self, from: Position, batch: &Batch, limit: usize) {
        self.position = batch.next_after(from, limit);
        self.catching_up = batch.events.len() >= limit || !self.feed.covers(self.position);
        self.pending.extend(batch.events.iter().cloned());
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.ledger.metrics().subscriptions.dec();
    }
}

/// Joins the fleet's broadcast (before the position is fixed: see above).
fn join(live: &Live, who: &Principal, only: Option<EventType>) -> (Arc<Feed>, broadcast::Receiver<Arc<LiveEvent>>) {
    let feed = live.feeds().feed(&who.fleet);
    let receiver = feed.subscribe(only);
    (feed, receiver)
}

fn foreign_cursor() -> LedgerError {
    LedgerError::invalid(
        "after",
        "not an event cursor of your fleet: pass the `cursor` of a WorkUnitEvent (from `ledgerEvents` or `events`)",
    )
}
