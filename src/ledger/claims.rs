//! Claims and leases (SPEC §3): `claimNext`, `claimUnit` and `heartbeat`,
//! each one call of `ledger_claim` or `ledger_heartbeat`.

use serde_json::json;
use uuid::Uuid;

use super::write::Keyed;
use super::{Ledger, LedgerError, UnitModel, validate};
use crate::auth::{Permission, Principal};
use crate::db::writes::function;

/// What a claim did (SPEC §3, "claim outcome").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// A new attempt on a READY unit, or on a stale one (`reclaimed`).
    Claimed { reclaimed: bool },
    /// The unit the agent already holds, its lease extended.
    Renewed,
    /// The BLOCKED unit the agent holds; nothing written.
    Held,
    /// An earlier request with the same idempotency key: the unit as it is
    /// now, nothing written; `renewed` when that request renewed the lease
    /// (else it claimed: a request that wrote nothing kept no key).
    Replayed { renewed: bool },
}

impl ClaimOutcome {
    /// From `ledger_claim`'s `result`; a replay's `first` is what the
    /// earlier request answered (`ledger_replay`'s `info.outcome`).
    fn from_result(result: &str, first: Option<&str>) -> Self {
        match result {
            "claimed" => Self::Claimed { reclaimed: false },
            "reclaimed" => Self::Claimed { reclaimed: true },
            "renewed" => Self::Renewed,
            "replayed" => Self::Replayed { renewed: first == Some("renewed") },
            _ => Self::Held,
        }
    }

    /// The outcome's name on every surface: `claimed`, `renewed` or `held`
    /// (a replay says what the first request said).
    pub fn name(self) -> &'static str {
        match self {
            Self::Claimed { .. } | Self::Replayed { renewed: false } => "claimed",
            Self::Renewed | Self::Replayed { renewed: true } => "renewed",
            Self::Held => "held",
        }
    }
}

impl Ledger {
    /// `claimNext`: the unit and what the claim did, or `None` when nothing is claimable.
    pub async fn claim_next(
        &self,
        who: &Principal,
        domain: Option<String>,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<Option<(ClaimOutcome, UnitModel)>, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        if let Some(domain) = &domain {
            validate::label("domain", domain)?;
        }
        let args = json!({ "domain": domain, "leaseSeconds": lease });
        let keyed = Keyed { operation: "claimNext", key, args: &args };
        let values = vec![lease.into(), domain.into(), Option::<Uuid>::None.into()];
        self.claim(who, keyed, values).await
    }

    pub async fn claim_unit(
        &self,
        who: &Principal,
        unit_id: Uuid,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<(ClaimOutcome, UnitModel), LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let checks =
            validate::idempotency_key(key.as_deref()).and_then(|()| validate::lease_seconds(lease_seconds).map(|_| ()));
        self.check_args(who, unit_id, "CLAIMED", false, checks).await?;
        let lease = validate::lease_seconds(lease_seconds)?;
        let args = json!({ "id": unit_id, "leaseSeconds": lease });
        let keyed = Keyed { operation: "claimUnit", key, args: &args };
        let values = vec![lease.into(), Option::<String>::None.into(), Some(unit_id).into()];
        let claimed = self.claim(who, keyed, values).await?;
        claimed.ok_or_else(|| LedgerError::internal(format!("{} answered no row", function::CLAIM)))
    }

    /// One call of `ledger_claim`: the unit and what the claim did, `None`
    /// when it answered no row (nothing claimable).
    async fn claim(
        &self,
        who: &Principal,
        keyed: Keyed<'_>,
        values: Vec<sea_orm::Value>,
    ) -> Result<Option<(ClaimOutcome, UnitModel)>, LedgerError> {
        let Some(row) = self.call(who, function::CLAIM, Some(keyed), values).await?.pop() else {
            return Ok(None);
        };
        let first = row.info_str("outcome").map(str::to_owned);
        let (result, unit) = super::write::answer(row, who, "CLAIMED")?;
        Ok(Some(self.claimed(&result, first.as_deref(), unit)))
    }

    /// Counts a claim that took a unit and names it in the operation's span.
    fn claimed(&self, result: &str, first: Option<&str>, unit: UnitModel) -> (ClaimOutcome, UnitModel) {
        let outcome = ClaimOutcome::from_result(result, first);
        if let ClaimOutcome::Claimed { reclaimed } = outcome {
            self.metrics.claims.inc();
            if reclaimed {
                self.metrics.stale_reclaims.inc();
            }
        }
        tracing::Span::current().record("unit_id", unit.id.to_string());
        (outcome, unit)
    }

    pub async fn heartbeat(
        &self,
        who: &Principal,
        attempt_id: Uuid,
        lease_seconds: Option<i32>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        let values = vec![attempt_id.into(), lease.into()];
        Ok(self.call_one(who, function::HEARTBEAT, None, values, "heartbeat").await?.1)
    }
}
