//! `waitForAnswer`: one request that holds until a BLOCKED unit moves on
//! (its question answered, or the unit disposed) or a timeout passes, then
//! answers with the unit as it is.
//!
//! It joins its fleet's [`feed`](super::feed) (the broadcast subscriptions
//! read), so an event of the unit wakes it within the feed's delivery, and
//! it re-reads the unit at least every [`RECHECK`] besides (a notification
//! is only a hint, SPEC §6). Each read is a short transaction of its own:
//! while it waits, the request holds no connection and no transaction.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;
use uuid::Uuid;

use super::Live;
use crate::auth::{Permission, Principal};
use crate::db::entities::WorkState;
use crate::db::events::LiveEvent;
use crate::ledger::{Ledger, LedgerError, UnitModel};

/// How long a wait may last, in seconds: within every HTTP timeout of the
/// request path (the body read ends before it starts).
pub const WAIT_SECONDS: RangeInclusive<i32> = 1..=60;
pub const DEFAULT_WAIT_SECONDS: i32 = 30;
/// The safety net: how long a wait trusts the feed before it reads again.
const RECHECK: Duration = Duration::from_secs(1);

impl Live {
    /// The unit `unit_id` once it is no longer BLOCKED, or as it is after
    /// `timeout_seconds` (or when the server stops). Needs `ledger:read`;
    /// another fleet's unit is NOT_FOUND.
    pub async fn wait_for_answer(
        &self,
        ledger: &Ledger,
        who: &Principal,
        unit_id: Uuid,
        timeout_seconds: i32,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::LedgerRead)?;
        if !WAIT_SECONDS.contains(&timeout_seconds) {
            return Err(LedgerError::invalid(
                "timeoutSeconds",
                format!("must be {} to {} seconds (got {timeout_seconds})", WAIT_SECONDS.start(), WAIT_SECONDS.end()),
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(u64::from(timeout_seconds.unsigned_abs()));
        // Joined before the first read: whatever commits after that read is
        // in the receiver, so no answer falls between a read and the wait.
        let feed = self.feeds().feed(&who.fleet);
        let mut news = feed.subscribe(None);
        loop {
            let unit = ledger.unit(who, unit_id).await?.ok_or_else(|| LedgerError::not_found("unit", unit_id))?;
            if unit.state != WorkState::Blocked || Instant::now() >= deadline {
                return Ok(unit);
            }
            tokio::select! {
                _ = self.stopping() => return Ok(unit),
                _ = tokio::time::sleep_until((Instant::now() + RECHECK).min(deadline)) => {}
                _ = news_of(&mut news, unit_id) => {}
            }
        }
    }
}

/// Resolves at the next event of `unit`, or when events may have been
/// missed (the receiver lagged); never when the feed is gone (the caller's
/// timer takes over).
async fn news_of(news: &mut broadcast::Receiver<Arc<LiveEvent>>, unit: Uuid) {
    loop {
        match news.recv().await {
            Ok(event) if event.event.unit_id == unit => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}
