//! GraphQL object types over the entity models, one file per object: the
//! caller ([`principal`]), a unit ([`unit`]), its attempts ([`attempt`]),
//! questions ([`question`]) and events ([`event`]).

mod attempt;
mod event;
mod principal;
mod question;
mod unit;

use chrono::{DateTime, Utc};

pub use attempt::Attempt;
pub use event::{EVENT_OWN_FIELDS, WorkUnitEvent};
pub use principal::PrincipalObject;
pub use question::BlockingQuestion;
pub use unit::WorkUnit;

/// Whole seconds from `since` to `until` (never negative).
pub fn seconds_between(since: DateTime<Utc>, until: DateTime<Utc>) -> i64 {
    (until - since).num_seconds().max(0)
}
