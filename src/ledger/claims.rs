//! Claims and leases (SPEC §3): `claimNext`, `claimUnit` and `heartbeat`,
//! each one call of `ledger_claim` or `ledger_heartbeat`.

use serde_json::json;
use uuid::Uuid;

use super::write::Keyed;
use super::{Ledger, LedgerError, UnitModel, validate};
use crate::auth::{Permission, Principal};
use crate::db::writes::Written;

/// The claim's SQL function (`writes.sql`), which `claimNext` and
/// `claimUnit` call.
pub const CLAIM: &str = "ledger_claim";
/// The heartbeat's SQL function.
pub const HEARTBEAT: &str = "ledger_heartbeat";

/// What a caller may do next with these methods ([`super::state_machine`]):
/// a claim for a claimable unit (offered by `next_actions`), a heartbeat by
/// the holder while the lease runs, and the next claim after a verification.
pub mod act {
    use super::super::state_machine::{Action, action};
    use crate::db::entities::WorkState::{Claimed, InProgress, Ready};

    pub const CLAIM_UNIT: Action =
        Action { claimant: &[Ready, Claimed, InProgress], ..action("claimUnit", &[], &[], &[], Some("claim")) };
    /// The holder claims its next unit in every state it acts in but holds
    /// no longer (`state_machine::holder_actions`), VERIFIED.
    pub const CLAIM_NEXT: Action = Action { claimant: &[Ready], ..action("claimNext", &[], &[], &[], None) };
    pub const HEARTBEAT: Action = action("heartbeat", &[], &["attemptId"], &[Claimed, InProgress], None);
}

/// The actions above, in the order `legalActions` names them.
pub const ACTIONS: &[&super::state_machine::Action] = &[&act::CLAIM_UNIT, &act::CLAIM_NEXT, &act::HEARTBEAT];

/// What a claim did (SPEC §3, "claim outcome").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// A new attempt on a READY unit, or on a stale one (`reclaimed`).
    Claimed { reclaimed: bool },
    /// The unit the agent already holds, its lease extended.
    Renewed,
    /// The BLOCKED unit the agent holds; nothing written.
    Held,
}

impl ClaimOutcome {
    /// The outcome of a claim's answer: what the call did, or for a replay
    /// of its idempotency key what the first call did.
    fn from_result(result: &str) -> Self {
        match result {
            "claimed" => Self::Claimed { reclaimed: false },
            "reclaimed" => Self::Claimed { reclaimed: true },
            "renewed" => Self::Renewed,
            _ => Self::Held,
        }
    }

    /// The outcome's name on every surface: `claimed`, `renewed` or `held`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Claimed { .. } => "claimed",
            Self::Renewed => "renewed",
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
        let Some(row) = self.call(who, CLAIM, Some(keyed), values).await?.pop() else {
            return Ok(None);
        };
        Ok(Some(self.claimed(row, who)?))
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
        let row = self.call(who, CLAIM, Some(keyed), values).await?.pop();
        let row = row.ok_or_else(|| LedgerError::internal("ledger_claim answered no row"))?;
        self.claimed(row, who)
    }

    /// A claim's answer: what it did, or for a replay of its idempotency key
    /// what the first call did (SPEC §3: the replay answers what the first
    /// call answered). Counts a claim that took a unit (a replay took none)
    /// and names the unit in the operation's span.
    fn claimed(&self, row: Written, who: &Principal) -> Result<(ClaimOutcome, UnitModel), LedgerError> {
        let first = (row.result == "replayed").then(|| row.info_str("outcome").unwrap_or_default().to_owned());
        let (result, unit) = super::write::answer(row, who, "CLAIMED")?;
        let outcome = ClaimOutcome::from_result(first.as_deref().unwrap_or(&result));
        if let (ClaimOutcome::Claimed { reclaimed }, None) = (outcome, first.as_ref()) {
            self.metrics.claims.inc();
            if reclaimed {
                self.metrics.stale_reclaims.inc();
            }
        }
        tracing::Span::current().record("unit_id", unit.id.to_string());
        Ok((outcome, unit))
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
        Ok(self.call_one(who, HEARTBEAT, None, values, "heartbeat").await?.1)
    }
}
