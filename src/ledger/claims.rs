//! Claims and leases (SPEC §3): `claimNext`, `claimUnit` and `heartbeat`.
//! The SQL is in [`crate::db::claims`].

use serde_json::json;
use uuid::Uuid;

use super::write::{Outcome, or_explain, retrying};
use super::{Ledger, LedgerError, UnitModel, load, refusals, state_machine, validate};
use crate::auth::{Permission, Principal};
use crate::db::claims::{self, ClaimNext};
use crate::db::entities::WorkState;

impl Ledger {
    pub async fn claim_next(
        &self,
        who: &Principal,
        domain: Option<String>,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<Option<UnitModel>, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        if let Some(domain) = &domain {
            validate::label("domain", domain)?;
        }
        if domain.is_none() && key.is_none() {
            return self.claim_next_now(who, lease).await;
        }
        let args = json!({ "domain": domain, "leaseSeconds": lease });
        let outcome = self
            .write(who, "claimNext", args, key, move |tx, ctx| {
                let domain = domain.clone();
                Box::pin(async move {
                    let actor = ctx.actor();
                    if let Some(claimed) = claims::claim_next(tx, &actor, lease, domain.as_deref()).await? {
                        ctx.mark_claimed(claimed.reclaimed);
                        tracing::Span::current().record("unit_id", claimed.unit.id.to_string());
                        return Ok(Some(claimed.unit));
                    }
                    // Nothing claimed: either nothing is claimable, or the
                    // agent already holds a unit, which it gets back renewed.
                    if let Some(unit) = claims::heartbeat(tx, &actor, lease, None, "claimNext", None).await? {
                        return Ok(Some(unit));
                    }
                    Ok(claims::held_by(tx, actor.fleet, actor.agent).await?)
                })
            })
            .await?;
        Ok(match outcome {
            Outcome::Replayed(unit) => Some(*unit),
            Outcome::Done(unit) => unit,
        })
    }

    /// The common `claimNext` (no domain, no idempotency key) as one
    /// autocommit statement (`db::claims::claim_next_now`): the same claim,
    /// renewal or read as the transaction above, one round trip.
    async fn claim_next_now(&self, who: &Principal, lease: i32) -> Result<Option<UnitModel>, LedgerError> {
        let (fleet, agent, mode) = (&who.fleet, &who.name, self.notifier.mode());
        let found = retrying("claimNext", || async {
            Ok(self.on_pool(claims::claim_next_now(&self.db, fleet, agent, lease, mode)).await?)
        })
        .await?;
        match found.as_ref().map(|(outcome, _)| *outcome) {
            Some(ClaimNext::Claimed { reclaimed }) => {
                self.metrics.claims.inc();
                if reclaimed {
                    self.metrics.stale_reclaims.inc();
                }
                self.notifier.committed(fleet);
            }
            Some(ClaimNext::Renewed) => self.notifier.committed(fleet),
            Some(ClaimNext::Held) | None => {}
        }
        if let Some((_, unit)) = &found {
            tracing::Span::current().record("unit_id", unit.id.to_string());
        }
        Ok(found.map(|(_, unit)| unit))
    }

    pub async fn claim_unit(
        &self,
        who: &Principal,
        unit_id: Uuid,
        lease_seconds: Option<i32>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let checks =
            validate::idempotency_key(key.as_deref()).and_then(|()| validate::lease_seconds(lease_seconds).map(|_| ()));
        self.check_args(who, unit_id, "CLAIMED", false, checks).await?;
        let lease = validate::lease_seconds(lease_seconds)?;
        let args = json!({ "id": unit_id, "leaseSeconds": lease });
        let outcome = self
            .write(who, "claimUnit", args, key, move |tx, ctx| {
                Box::pin(async move {
                    let actor = ctx.actor();
                    if let Some(claimed) = claims::claim_unit(tx, &actor, lease, unit_id).await? {
                        ctx.mark_claimed(claimed.reclaimed);
                        tracing::Span::current().record("unit_id", claimed.unit.id.to_string());
                        return Ok(claimed.unit);
                    }
                    let unit = load(tx, unit_id).await?;
                    if state_machine::is_holder(&unit, &ctx.who) && unit.state.is_live_claim() {
                        // Claiming what you already hold renews the lease (when it has one).
                        return match unit.current_attempt_id {
                            // A reclaim that committed since the read above makes
                            // the renewal match nothing: LEASE_LOST, as a heartbeat.
                            Some(attempt) if unit.state != WorkState::Blocked => {
                                or_explain(
                                    claims::heartbeat(tx, &actor, lease, Some(attempt), "claimUnit", None).await?,
                                    refusals::attempt(tx, attempt, &ctx.who, "claimUnit"),
                                )
                                .await
                            }
                            _ => Ok(unit),
                        };
                    }
                    Err(refusals::claim(tx, &unit, &ctx.who).await)
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn heartbeat(
        &self,
        who: &Principal,
        attempt_id: Uuid,
        lease_seconds: Option<i32>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let lease = validate::lease_seconds(lease_seconds)?;
        // Fenced by its attempt in its WHERE, it needs no lock first: one
        // autocommit statement (ledger_heartbeat, migration 0011).
        self.write_now(
            who,
            "heartbeat",
            move |db, actor, notify| {
                Box::pin(async move {
                    claims::heartbeat(db, &actor, lease, Some(attempt_id), "heartbeat", Some(notify)).await
                })
            },
            move |tx, who| Box::pin(async move { refusals::attempt(tx, attempt_id, &who, "heartbeat").await }),
        )
        .await
    }
}
