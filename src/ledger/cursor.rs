//! Opaque keyset cursors: the text form of a [`Cursor`] (`(created_at, id)`
//! of the last row of a page), tagged with the list it belongs to. A cursor
//! of another list, or anything that does not decode, is INVALID_INPUT.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Datelike};

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
        let invalid = || {
            LedgerError::invalid(
                "after",
                "not a cursor of this list: pass the `endCursor` (or an edge `cursor`) this same list returned",
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let mut parts = text.split(':');
        let (Some("wl1"), Some(tag), Some(micros), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        if tag != list.tag() {
            return Err(invalid());
        }
        let micros: i64 = micros.parse().map_err(|_| invalid())?;
        // Every timestamp the ledger writes lies well inside PostgreSQL's
        // range; a forged one outside years 1..=9999 is not a cursor of ours.
        let created_at =
            DateTime::from_timestamp_micros(micros).filter(|t| (1..=9999).contains(&t.year())).ok_or_else(invalid)?;
        Ok(Self { created_at, id: id.parse().map_err(|_| invalid())? })
    }
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
    }
}
