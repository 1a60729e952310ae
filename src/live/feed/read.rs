//! One read of a fleet's events, for a feed and a catching-up tail alike.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use sea_orm::{DatabaseConnection, DbErr};

use crate::db;
use crate::db::events::{self, Batch, Position};
use crate::live::watermark::Known;

/// Events per fleet a read returns at most (a feed's, a tail's page).
pub const BATCH: usize = 500;

/// The fleet's events after `after` (up to [`BATCH`]) below the watermark
/// `below`, or a new one when it is `None`, in a statement of its own in
/// autocommit on `db`'s pool, counted in `waiting` while it uses or waits for
/// a connection: a feed's read (the live pool, a watermark taken after it
/// was woken, [`Fresh`](crate::live::watermark::Fresh)) and a catching-up
/// tail's page (the request pool, the newest [`Known`] one,
/// [`Live::catch_up_read`](crate::live::Live::catch_up_read)) alike. The
/// read's watermark is noted in `known` before the events are returned.
///
/// Not gathered with other fleets' reads into one statement, as migration
/// 0033 had it: measured on two cores, gathering the feeds' reads cost each
/// live delivery about 2 ms (p50) and 15% more server CPU at 3,000
/// subscribers, and gathering the tails' catch-up pages made a reconnect
/// storm of 10,000 slower, not faster (a statement of many pages holds them
/// all until its last row, and fails them all at once; BENCHMARKS, round 3,
/// session 15).
pub(in crate::live) async fn read(
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
