//! What the subscribers of one fleet hold: its broadcasts, and from where
//! they carry every event.

use std::sync::{Arc, Mutex, OnceLock};

use sea_orm::Iterable;
use tokio::sync::{Notify, broadcast};

use crate::db::entities::EventType;
use crate::db::events::{LiveEvent, Position};

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
    pub(super) fn new(capacity: usize, wake: Arc<Notify>) -> Self {
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
    pub(super) fn send(&self, event: Arc<LiveEvent>) {
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
    pub(super) fn begin(&self, present: Position) -> Position {
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
