//! Opaque keyset cursors: the text form of a [`Cursor`] (`(created_at, id)`
//! of the last row of a page), tagged with the list it belongs to. A cursor
//! of another list (or of the same list in the other order), or anything that
//! does not decode, is INVALID_INPUT.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Datelike};

use super::LedgerError;
pub use crate::db::reads::Cursor;

/// The lists that page by keyset. A list read in its other order is another
/// list: a position means "after this row" only in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum List {
    /// Oldest first (the default order of `units`).
    Units,
    UnitsNewestFirst,
    /// Newest first (the default order of `events`).
    Events,
    EventsOldestFirst,
    Questions,
    Stalls,
    CostPerUnit,
    Rework,
    Dispositions,
    /// The roster, by name (its cursors carry a name: [`encode_name`]).
    Agents,
}

impl List {
    /// `units` in the given order.
    pub fn units(newest_first: bool) -> Self {
        if newest_first { Self::UnitsNewestFirst } else { Self::Units }
    }

    /// `events` (top level or of one unit) in the given order.
    pub fn events(newest_first: bool) -> Self {
        if newest_first { Self::Events } else { Self::EventsOldestFirst }
    }

    /// True for the event lists, whose cursors may carry a floor.
    fn is_events(self) -> bool {
        matches!(self, Self::Events | Self::EventsOldestFirst)
    }

    fn tag(self) -> &'static str {
        match self {
            Self::Units => "u",
            Self::UnitsNewestFirst => "ud",
            Self::Events => "e",
            Self::EventsOldestFirst => "ea",
            Self::Questions => "q",
            Self::Stalls => "s",
            Self::CostPerUnit => "c",
            Self::Rework => "r",
            Self::Dispositions => "d",
            Self::Agents => "a",
        }
    }
}

/// The opaque text form of a keyset position, as clients see it.
pub trait CursorText: Sized {
    fn encode(self, list: List) -> String;
    fn decode(list: List, cursor: &str) -> Result<Self, LedgerError>;
    fn decode_opt(list: List, cursor: Option<&str>) -> Result<Option<Self>, LedgerError> {
        cursor.map(|c| Self::decode(list, c)).transpose()
    }
}

impl CursorText for Cursor {
    fn encode(self, list: List) -> String {
        URL_SAFE_NO_PAD.encode(format!("wl1:{}:{}:{}", list.tag(), self.created_at.timestamp_micros(), self.id))
    }

    fn decode(list: List, cursor: &str) -> Result<Self, LedgerError> {
        parse(list, cursor).map(|(at, _)| at)
    }
}

/// The cursor of an event as the API hands it out. `floor` is set on events
/// read through a list (`events`, `WorkUnit.events`): the delivery watermark
/// taken just before the list's snapshot, i.e. every batch below it had
/// committed when the list was read. `ledgerEvents(after:)` resumes from
/// `min(the event's position, just before batch floor)`, so an event that a
/// transaction still open at list time commits later is never behind the
/// cursor (the resume may repeat events the list showed). Events a stream
/// delivered carry no floor: the stream only delivers final events, so
/// their own position is exact.
///
/// `list` is the event list (and so the order) the cursor pages in; a
/// stream resumes from a cursor of either order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventCursor {
    pub at: Cursor,
    pub floor: Option<i64>,
    pub list: List,
}

impl EventCursor {
    pub fn encode(self) -> String {
        match self.floor {
            None => self.at.encode(self.list),
            Some(floor) => URL_SAFE_NO_PAD.encode(format!(
                "wl1:{}:{}:{}:{floor}",
                self.list.tag(),
                self.at.created_at.timestamp_micros(),
                self.at.id
            )),
        }
    }

    /// A cursor of either event list (a stream resumes from any).
    pub fn decode(cursor: &str) -> Result<Self, LedgerError> {
        parse(List::Events, cursor).map(|(at, floor)| Self { at, floor, list: List::Events }).or_else(|_| {
            parse(List::EventsOldestFirst, cursor).map(|(at, floor)| Self { at, floor, list: List::EventsOldestFirst })
        })
    }
}

/// The opaque cursor of a list keyed by a name (the roster): `wl1:<list>:<name>`.
pub fn encode_name(list: List, name: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("wl1:{}:{name}", list.tag()))
}

/// The name a cursor of [`encode_name`] carries; anything else is INVALID_INPUT.
pub fn decode_name(list: List, cursor: &str) -> Result<String, LedgerError> {
    let text = URL_SAFE_NO_PAD.decode(cursor).ok().and_then(|bytes| String::from_utf8(bytes).ok());
    let name = text.as_deref().and_then(|t| t.strip_prefix("wl1:")).and_then(|t| t.strip_prefix(list.tag()));
    match name.and_then(|t| t.strip_prefix(':')) {
        Some(name) if !name.is_empty() => Ok(name.to_owned()),
        _ => Err(not_a_cursor()),
    }
}

fn not_a_cursor() -> LedgerError {
    LedgerError::invalid(
        "after",
        "not a cursor of this list in this order: pass the `endCursor` (or an edge `cursor`) this same list \
         returned, with the same `order`",
    )
}

/// `wl1:<list>:<micros>:<id>`, and for events an optional `:<floor>`.
fn parse(list: List, cursor: &str) -> Result<(Cursor, Option<i64>), LedgerError> {
    let invalid = not_a_cursor;
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let mut parts = text.split(':');
    let (Some("wl1"), Some(tag), Some(micros), Some(id), floor, None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid());
    };
    if tag != list.tag() || (floor.is_some() && !list.is_events()) {
        return Err(invalid());
    }
    let floor = floor.map(|f| f.parse::<i64>().ok().filter(|f| *f >= 0).ok_or_else(invalid)).transpose()?;
    let micros: i64 = micros.parse().map_err(|_| invalid())?;
    // Every timestamp the ledger writes lies well inside PostgreSQL's range;
    // a forged one outside years 1..=9999 is not a cursor of ours.
    let created_at =
        DateTime::from_timestamp_micros(micros).filter(|t| (1..=9999).contains(&t.year())).ok_or_else(invalid)?;
    Ok((Cursor { created_at, id: id.parse().map_err(|_| invalid())? }, floor))
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_lists_and_garbage() {
        let cursor = Cursor {
            created_at: DateTime::from_timestamp_micros(1_764_000_000_123_456).expect("ts"),
            id: Uuid::new_v4(),
        };
        let encoded = cursor.encode(List::Units);
        assert_eq!(Cursor::decode(List::Units, &encoded).ok(), Some(cursor));
        assert!(Cursor::decode(List::Events, &encoded).is_err());
        let nil = Uuid::nil();
        let far_future = URL_SAFE_NO_PAD.encode(format!("wl1:u:{}:{nil}", i64::MAX));
        let far_past = URL_SAFE_NO_PAD.encode(format!("wl1:u:-210866803200000000:{nil}"));
        for garbage in ["", "!!!", "d2wxOnU6eDp5", &URL_SAFE_NO_PAD.encode("wl1:u:1:2:3"), &far_future, &far_past] {
            assert!(Cursor::decode(List::Units, garbage).is_err(), "{garbage}");
        }
        assert!(Cursor::decode(List::UnitsNewestFirst, &encoded).is_err(), "the other order");
        let newest_first = cursor.encode(List::UnitsNewestFirst);
        assert_eq!(Cursor::decode(List::UnitsNewestFirst, &newest_first).ok(), Some(cursor));
        assert!(Cursor::decode(List::Units, &newest_first).is_err());
        let oldest_first = EventCursor { at: cursor, floor: Some(7), list: List::EventsOldestFirst };
        assert_eq!(EventCursor::decode(&oldest_first.encode()).ok(), Some(oldest_first));
        assert!(Cursor::decode(List::Events, &oldest_first.encode()).is_err(), "the other order");
        let listed = EventCursor { at: cursor, floor: Some(42), list: List::Events };
        let text = listed.encode();
        assert_eq!(EventCursor::decode(&text).ok(), Some(listed));
        assert_eq!(Cursor::decode(List::Events, &text).ok(), Some(cursor), "pages like any event cursor");
        assert!(Cursor::decode(List::Units, &text).is_err());
        let named = encode_name(List::Agents, "agent:7 é");
        assert_eq!(decode_name(List::Agents, &named).ok().as_deref(), Some("agent:7 é"));
        assert!(Cursor::decode(List::Units, &named).is_err(), "a name cursor pages no other list");
        assert!(decode_name(List::Agents, &encoded).is_err(), "nor does another list's cursor page the roster");
        for garbage in ["", "!!!", &URL_SAFE_NO_PAD.encode("wl1:a:"), &URL_SAFE_NO_PAD.encode("wl1:ab:x")] {
            assert!(decode_name(List::Agents, garbage).is_err(), "{garbage}");
        }
        let streamed = EventCursor { at: cursor, floor: None, list: List::Events };
        assert_eq!(streamed.encode(), cursor.encode(List::Events));
        assert_eq!(EventCursor::decode(&streamed.encode()).ok(), Some(streamed));
        let id = cursor.id;
        for bad in [
            format!("wl1:e:1:{id}:x"),
            format!("wl1:e:1:{id}:-1"),
            format!("wl1:u:1:{id}:5"),
            format!("wl1:e:1:{id}:5:6"),
        ] {
            assert!(EventCursor::decode(&URL_SAFE_NO_PAD.encode(&bad)).is_err(), "{bad}");
        }
    }
}
