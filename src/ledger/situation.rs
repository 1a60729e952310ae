//! What an agent learns when `claimNext` finds nothing: whether its domain
//! (or the whole fleet) is finished, so it stops, or only busy, so it waits
//! and for about how long.

use async_graphql::SimpleObject;
use chrono::{DateTime, Utc};

use super::{Ledger, LedgerError, validate};
use crate::auth::Principal;
use crate::db::situation::{self, SituationRow};

/// Where the work of a domain (or the whole fleet) stands for a claimer:
/// what `claimNext` could take now, what may become claimable later, and
/// whether nothing ever will.
#[derive(Debug, Clone, PartialEq, Eq, SimpleObject)]
pub struct ClaimSituation {
    /// READY units: claimable now (call `claimNext` again).
    pub ready: i64,
    /// CLAIMED or IN_PROGRESS units whose lease expired: claimable now, and
    /// taken before READY ones.
    pub stale: i64,
    /// BLOCKED units: back to work once their question is answered (their
    /// holder's again, or READY when the holder released them).
    pub blocked: i64,
    /// CLAIMED or IN_PROGRESS units under a live lease: claimable only if the
    /// lease runs out.
    pub leased: i64,
    /// When the first of those leases ends; null when none is leased.
    pub earliest_lease_end: Option<DateTime<Utc>>,
    /// True when nothing is READY, stale, BLOCKED or leased: the domain is
    /// finished (only VERIFIED units awaiting `dispose` and terminal ones are
    /// left) and claiming there is over until new units are registered. Stop.
    pub drained: bool,
    /// DONE units (disposed MIGRATED), when `drained` (null otherwise).
    /// With `disposed`, what tells a finished domain (drained, units
    /// disposed) from one where nothing was ever registered (drained, both
    /// zero).
    pub done: Option<i64>,
    /// Units with a permanent disposition, DONE ones and ABANDONED ones
    /// (DROPPED, DEFERRED or DEAD), when `drained` (null otherwise).
    pub disposed: Option<i64>,
}

impl From<SituationRow> for ClaimSituation {
    fn from(row: SituationRow) -> Self {
        let SituationRow { ready, stale, leased, earliest_lease_end, blocked, done, disposed } = row;
        let drained = ready == 0 && stale == 0 && blocked == 0 && leased == 0;
        Self { ready, stale, blocked, leased, earliest_lease_end, drained, done, disposed }
    }
}

impl Ledger {
    /// The claim situation of `domain` (the whole fleet when `None`), read
    /// in one statement in the caller's fleet; needs `ledger:read`. An
    /// unknown domain reads as drained.
    pub async fn claim_situation(
        &self,
        who: &Principal,
        domain: Option<String>,
    ) -> Result<ClaimSituation, LedgerError> {
        validate::filter("domain", domain.as_deref())?;
        let fleet = who.fleet.clone();
        let row = self
            .read(who, move |tx| {
                Box::pin(async move { Ok(situation::situation(tx, &fleet, domain.as_deref()).await?) })
            })
            .await?;
        Ok(row.into())
    }
}
