//! The unit's life after the claim (SPEC §3): `transition`, `block`,
//! `unblock`, `release`, `recordCost` and `dispose`. Each validates, checks
//! permissions, runs one conditional statement ([`crate::db::transitions`])
//! through the write runner, and when it changed nothing lets
//! [`super::refusals`] say exactly why.

use serde_json::{Value, json};
use uuid::Uuid;

use super::write::{Outcome, or_explain};
use super::{Ledger, LedgerError, UnitModel, load, refusals, state_machine, validate};
use crate::auth::{Permission, Principal};
use crate::db::entities::{AttemptOutcome, Disposition, WorkState};
use crate::db::transitions::{self, Disposal};
use crate::db::units;

const DEFAULT_ASSIGNEE_GROUP: &str = "agent-questions";

/// Input of `release`.
pub struct Release {
    pub unit_id: Uuid,
    /// The caller's attempt, when it fences the write to it.
    pub attempt_id: Option<Uuid>,
    pub reason: Option<String>,
    pub outcome: Option<AttemptOutcome>,
}

/// What `recordCost` bills: an attempt, or the caller's attempt of a unit.
#[derive(Debug, Clone, Copy)]
pub enum CostTarget {
    Attempt(Uuid),
    /// The caller's latest attempt on the unit (an operator without one: the
    /// unit's current attempt).
    Unit(Uuid),
}

/// Input of `dispose`.
pub struct Dispose {
    pub unit_id: Uuid,
    /// The caller's attempt, when it fences the write to it.
    pub attempt_id: Option<Uuid>,
    pub disposition: Disposition,
    pub evidence_url: Option<String>,
    pub reason: Option<String>,
}

/// What `dispose` asks of the database: the state machine's rule for the
/// disposition, with the operator's states only for an operator.
fn disposal<'a>(
    unit_id: Uuid,
    disposition: Disposition,
    operator: bool,
    evidence_url: &'a Option<String>,
    reason: &'a Option<String>,
) -> Disposal<'a> {
    let rule = state_machine::dispose_rule(disposition);
    Disposal {
        unit_id,
        disposition,
        terminal_state: rule.terminal,
        evidence_url: evidence_url.as_deref(),
        reason: reason.as_deref(),
        holder_states: rule.holder_states,
        operator_states: if operator { rule.operator_states } else { &[] },
    }
}

/// The arguments a request is fingerprinted with, plus `attemptId` only when
/// given (so keys recorded before fencing existed still replay).
fn fenced(mut args: Value, attempt_id: Option<Uuid>) -> Value {
    if let (Some(attempt_id), Some(map)) = (attempt_id, args.as_object_mut()) {
        map.insert("attemptId".to_owned(), json!(attempt_id));
    }
    args
}

impl Ledger {
    pub async fn transition(
        &self,
        who: &Principal,
        unit_id: Uuid,
        to: WorkState,
        evidence_url: Option<String>,
        attempt_id: Option<Uuid>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let checks = validate::idempotency_key(key.as_deref()).and_then(|()| match (to, &evidence_url) {
            (WorkState::Verified, None) => Err(LedgerError::EvidenceRequired { action: "transition to VERIFIED" }),
            (_, Some(url)) => validate::evidence_url(url),
            _ => Ok(()),
        });
        self.check_args(who, unit_id, to.api_name(), false, checks).await?;
        if key.is_none() && attempt_id.is_none() {
            return self
                .write_now(
                    who,
                    "transition",
                    move |db, actor, notify| {
                        let evidence_url = evidence_url.clone();
                        Box::pin(async move {
                            match (to, evidence_url.as_deref()) {
                                (WorkState::InProgress, _) => {
                                    transitions::start(db, &actor, unit_id, Some(notify)).await
                                }
                                (WorkState::Verified, Some(url)) => {
                                    transitions::verify(db, &actor, unit_id, url, Some(notify)).await
                                }
                                _ => Ok(None),
                            }
                        })
                    },
                    move |tx, who| Box::pin(async move { refusals::holder(tx, unit_id, &who, to.api_name()).await }),
                )
                .await;
        }
        let args = fenced(json!({ "unitId": unit_id, "to": to.api_name(), "evidenceUrl": evidence_url }), attempt_id);
        let outcome = self
            .write(who, "transition", args, key, move |tx, ctx| {
                let evidence_url = evidence_url.clone();
                Box::pin(async move {
                    refusals::fence(tx, unit_id, attempt_id, &ctx.who, to.api_name()).await?;
                    let actor = ctx.actor();
                    let written = match (to, evidence_url.as_deref()) {
                        (WorkState::InProgress, _) => transitions::start(tx, &actor, unit_id, None).await?,
                        (WorkState::Verified, Some(url)) => transitions::verify(tx, &actor, unit_id, url, None).await?,
                        _ => None,
                    };
                    or_explain(written, refusals::holder(tx, unit_id, &ctx.who, to.api_name())).await
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn block(
        &self,
        who: &Principal,
        unit_id: Uuid,
        question: String,
        assignee_group: Option<String>,
        attempt_id: Option<Uuid>,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        validate::visible_text("question", &question)?;
        let group = assignee_group.unwrap_or_else(|| DEFAULT_ASSIGNEE_GROUP.to_owned());
        let checks = validate::idempotency_key(key.as_deref())
            .and_then(|()| validate::long_text("question", &question))
            .and_then(|()| validate::label("assigneeGroup", &group));
        self.check_args(who, unit_id, "BLOCKED", false, checks).await?;
        let args = fenced(json!({ "unitId": unit_id, "question": question, "assigneeGroup": group }), attempt_id);
        let outcome = self
            .write(who, "block", args, key, move |tx, ctx| {
                let (question, group) = (question.clone(), group.clone());
                Box::pin(async move {
                    refusals::fence(tx, unit_id, attempt_id, &ctx.who, "BLOCKED").await?;
                    or_explain(
                        transitions::block(tx, &ctx.actor(), unit_id, &question, &group).await?,
                        refusals::holder(tx, unit_id, &ctx.who, "BLOCKED"),
                    )
                    .await
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn unblock(
        &self,
        who: &Principal,
        unit_id: Uuid,
        answer: String,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::QuestionsAnswer)?;
        let checks = validate::idempotency_key(key.as_deref()).and_then(|()| validate::long_text("answer", &answer));
        self.check_args(who, unit_id, "IN_PROGRESS (unblock)", false, checks).await?;
        let args = json!({ "unitId": unit_id, "answer": answer });
        let outcome = self
            .write(who, "unblock", args, key, move |tx, ctx| {
                let answer = answer.clone();
                Box::pin(async move {
                    let lease = validate::DEFAULT_LEASE_SECONDS;
                    or_explain(
                        transitions::unblock(tx, &ctx.actor(), unit_id, &answer, lease).await?,
                        refusals::unit(tx, unit_id, &ctx.who, "IN_PROGRESS (unblock)"),
                    )
                    .await
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn release(
        &self,
        who: &Principal,
        input: Release,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let requested = input.outcome.unwrap_or(AttemptOutcome::Abandoned);
        let checks = validate::idempotency_key(key.as_deref())
            .and_then(|()| match requested {
                AttemptOutcome::Abandoned | AttemptOutcome::Failed => Ok(()),
                other => Err(LedgerError::invalid(
                    "outcome",
                    format!("a release ends the attempt as ABANDONED or FAILED, not {other:?}"),
                )),
            })
            .and_then(|()| input.reason.as_deref().map_or(Ok(()), |r| validate::long_text("reason", r)));
        self.check_args(who, input.unit_id, "READY (release)", false, checks).await?;
        let outcome = requested;
        let Release { unit_id, attempt_id, reason, .. } = input;
        let args = fenced(json!({ "unitId": unit_id, "reason": reason, "outcome": outcome.as_sql() }), attempt_id);
        let result = self
            .write(who, "release", args, key, move |tx, ctx| {
                let reason = reason.clone();
                Box::pin(async move {
                    refusals::fence(tx, unit_id, attempt_id, &ctx.who, "READY (release)").await?;
                    or_explain(
                        transitions::release(tx, &ctx.actor(), unit_id, outcome.as_sql(), reason.as_deref()).await?,
                        refusals::holder(tx, unit_id, &ctx.who, "READY (release)"),
                    )
                    .await
                })
            })
            .await?;
        Ok(result.unit())
    }

    pub async fn record_cost(
        &self,
        who: &Principal,
        target: CostTarget,
        cents: i64,
        key: String,
    ) -> Result<UnitModel, LedgerError> {
        let operator = who.has(Permission::UnitsDisposeAny);
        if !operator {
            who.require(Permission::UnitsClaim)?;
        }
        validate::cents(cents)?;
        let args = match target {
            CostTarget::Attempt(id) => json!({ "attemptId": id, "cents": cents }),
            CostTarget::Unit(id) => json!({ "unitId": id, "cents": cents }),
        };
        let outcome = self
            .write(who, "recordCost", args, Some(key), move |tx, ctx| {
                Box::pin(async move {
                    let attempt_id = match target {
                        CostTarget::Attempt(id) => id,
                        CostTarget::Unit(unit_id) => {
                            or_explain(
                                units::attempt_to_bill(tx, unit_id, &ctx.who.name, operator).await?,
                                refusals::nothing_to_bill(tx, unit_id, &ctx.who),
                            )
                            .await?
                        }
                    };
                    let unit_id = or_explain(
                        transitions::record_cost(tx, &ctx.actor(), attempt_id, cents, operator).await?,
                        refusals::cost(tx, attempt_id, &ctx.who),
                    )
                    .await?;
                    // A new statement: it sees the roll-up the trigger made.
                    load(tx, unit_id).await
                })
            })
            .await?;
        Ok(outcome.unit())
    }

    pub async fn dispose(
        &self,
        who: &Principal,
        input: Dispose,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        let operator = who.has(Permission::UnitsDisposeAny);
        if !operator {
            who.require(Permission::UnitsClaim)?;
        }
        let checks = validate::idempotency_key(key.as_deref())
            .and_then(|()| match (&input.evidence_url, input.disposition) {
                (Some(url), _) => validate::evidence_url(url),
                (None, Disposition::Migrated) => Ok(()), // may reuse the verification evidence
                (None, _) => Err(LedgerError::EvidenceRequired { action: "dispose" }),
            })
            .and_then(|()| input.reason.as_deref().map_or(Ok(()), |r| validate::long_text("reason", r)));
        let action = format!("dispose {}", input.disposition.as_sql());
        self.check_args(who, input.unit_id, &action, true, checks).await?;
        let Dispose { unit_id, attempt_id, disposition, evidence_url, reason } = input;
        if key.is_none() && attempt_id.is_none() {
            let unit = self
                .write_now(
                    who,
                    "dispose",
                    move |db, actor, notify| {
                        let (evidence_url, reason) = (evidence_url.clone(), reason.clone());
                        Box::pin(async move {
                            let disposal = disposal(unit_id, disposition, operator, &evidence_url, &reason);
                            transitions::dispose(db, &actor, &disposal, Some(notify)).await
                        })
                    },
                    move |tx, who| Box::pin(async move { refusals::dispose(tx, unit_id, &who, disposition).await }),
                )
                .await?;
            self.metrics.disposition(disposition.as_sql());
            return Ok(unit);
        }
        let args = fenced(
            json!({ "unitId": unit_id, "disposition": disposition.as_sql(), "evidenceUrl": evidence_url, "reason": reason }),
            attempt_id,
        );
        let outcome = self
            .write(who, "dispose", args, key, move |tx, ctx| {
                let (evidence_url, reason) = (evidence_url.clone(), reason.clone());
                Box::pin(async move {
                    refusals::fence(tx, unit_id, attempt_id, &ctx.who, &format!("dispose {}", disposition.as_sql()))
                        .await?;
                    let disposal = disposal(unit_id, disposition, operator, &evidence_url, &reason);
                    or_explain(
                        transitions::dispose(tx, &ctx.actor(), &disposal, None).await?,
                        refusals::dispose(tx, unit_id, &ctx.who, disposition),
                    )
                    .await
                })
            })
            .await?;
        if matches!(outcome, Outcome::Done(_)) {
            self.metrics.disposition(disposition.as_sql());
        }
        Ok(outcome.unit())
    }
}
