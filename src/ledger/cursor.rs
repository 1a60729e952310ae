//! Opaque keyset cursors: the text form of a [`Cursor`] (`(created_at, id)`
//! of the last row of a page), tagged with the list it belongs to. A cursor
//! of another list, or anything that does not decode, is INVALID_INPUT.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::DateTime;

use super::LedgerError;
pub use crate::db::reads::Cursor;

/// The lists that page by keyset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Units,
    Events,
    Questions,
    Stalls,
    CostPerUnit,
    Rework,
    Dispositions,
}

impl List {
    fn tag(self) -> &'static str {
        match self {
            Self::Units => "u",
            Self::Events => "e",
            Self::Questions => "q",
            Self::Stalls => "s",
            Self::CostPerUnit => "c",
            Self::Rework => "r",
            Self::Dispositions => "d",
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventCursor {
    pub at: Cursor,
    pub floor: Option<i64>,
}

impl EventCursor {
    pub fn encode(self) -> String {
        match self.floor {
            None => self.at.encode(List::Events),
            Some(floor) => URL_SAFE_NO_PAD.encode(format!(
                "wl1:{}:{}:{}:{floor}",
                List::Events.tag(),
                self.at.created_at.timestamp_micros(),
                self.at.id
            )),
        }
    }

    pub fn decode(cursor: &str) -> Result<Self, LedgerError> {
        parse(List::Events, cursor).map(|(at, floor)| Self { at, floor })
    }
}

/// `wl1:<list>:<micros>:<id>`, and for events an optional `:<floor>`.
fn parse(list: List, cursor: &str) -> Result<(Cursor, Option<i64>), LedgerError> {
    let invalid = || {
        LedgerError::invalid(
            "after",
            "not a cursor of this list: pass the `endCursor` (or an edge `cursor`) this same list returned",
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let mut parts = text.split(':');
    let (Some("wl1"), Some(tag), Some(micros), Some(id), floor, None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid());
    };
    if tag != list.tag() || (floor.is_some() && list != List::Events) {
        return Err(invalid());
    }
    let floor = floor.map(|f| f.parse::<i64>().ok().filter(|f| *f >= 0).ok_or_else(invalid)).transpose()?;
    let micros: i64 = micros.parse().map_err(|_| invalid())?;
    let created_at = DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
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
        for garbage in ["", "!!!", "d2wxOnU6eDp5", &URL_SAFE_NO_PAD.encode("wl1:u:1:2:3")] {
            assert!(Cursor::decode(List::Units, garbage).is_err(), "{garbage}");
        }
        let listed = EventCursor { at: cursor, floor: Some(42) };
        let text = listed.encode();
        assert_eq!(EventCursor::decode(&text).ok(), Some(listed));
        assert_eq!(Cursor::decode(List::Events, &text).ok(), Some(cursor), "pages like any event cursor");
        assert!(Cursor::decode(List::Units, &text).is_err());
        let streamed = EventCursor { at: cursor, floor: None };
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
