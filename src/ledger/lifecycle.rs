//! The unit's life after the claim (SPEC §3): `transition`, `block`,
//! `unblock`, `release`, `recordCost` and `dispose`. Each checks the
//! permission and the arguments, then is one call of its SQL function
//! ([`crate::db::writes`]), which also says why when it changed nothing.

use serde_json::{Value, json};
use uuid::Uuid;

use super::write::Keyed;
use super::{Ledger, LedgerError, UnitModel, validate};
use crate::auth::{Permission, Principal};
use crate::db::entities::{AttemptOutcome, Disposition, WorkState};

/// The SQL functions (`writes.sql`) of the writes below, each called by one
/// method.
pub const TRANSITION: &str = "ledger_transition";
pub const BLOCK: &str = "ledger_block";
pub const UNBLOCK: &str = "ledger_unblock";
pub const RELEASE: &str = "ledger_release";
pub const RECORD_COST: &str = "ledger_record_cost";
pub const DISPOSE: &str = "ledger_dispose";

/// What a caller may do next with these methods ([`super::state_machine`]),
/// with the states in which the holder of the unit may (the moves
/// themselves are `ledger_moves()`'s, state_machine.sql, and a test holds
/// the two together). Answering and an operator's dispose are offered by
/// `next_actions`.
pub mod act {
    use super::super::state_machine::{Action, action};
    use crate::db::entities::WorkState::{Blocked, Claimed, InProgress, Ready, Verified};

    pub const START: Action = action("transition", &[("to", "IN_PROGRESS")], &[], &[Claimed], Some("start"));
    pub const VERIFY: Action =
        action("transition", &[("to", "VERIFIED")], &["evidenceUrl"], &[InProgress], Some("verify"));
    pub const BLOCK: Action = action("block", &[], &["question"], &[InProgress], Some("block"));
    pub const RELEASE: Action = action("release", &[], &[], &[Claimed, InProgress, Blocked], Some("release"));
    pub const RECORD_COST: Action = action(
        "recordCost",
        &[],
        &["unitId", "cents", "idempotencyKey"],
        &[Claimed, InProgress, Blocked, Verified],
        None,
    );
    pub const UNBLOCK: Action =
        Action { answerer: &[Blocked], ..action("unblock", &[], &["questionId", "answer"], &[], Some("unblock")) };
    pub const DISPOSE_MIGRATED: Action = Action {
        operator: &[Verified],
        ..action("dispose", &[("disposition", "MIGRATED")], &[], &[Verified], Some("dispose"))
    };
    pub const DISPOSE_ABANDON: Action = Action {
        operator: &[Ready, Claimed, InProgress, Blocked, Verified],
        ..action(
            "dispose",
            &[("disposition", "DROPPED|DEFERRED|DEAD")],
            &["evidenceUrl"],
            &[InProgress, Blocked],
            Some("dispose"),
        )
    };
}

/// The actions above, in the order `legalActions` names them.
pub const ACTIONS: &[&super::state_machine::Action] = &[
    &act::START,
    &act::VERIFY,
    &act::BLOCK,
    &act::RELEASE,
    &act::DISPOSE_MIGRATED,
    &act::RECORD_COST,
    &act::UNBLOCK,
    &act::DISPOSE_ABANDON,
];

const DEFAULT_ASSIGNEE_GROUP: &str = "agent-questions";

/// Input of `unblock`.
pub struct Unblock {
    pub unit_id: Uuid,
    /// The question answered: refused with QUESTION_NOT_OPEN when it is not the unit's open one.
    pub question_id: Option<Uuid>,
    pub answer: String,
    /// Answer every open question of the fleet with the same normalised text too.
    pub also_answer_similar: bool,
}

/// Input of `release`.
pub struct Release {
    pub unit_id: Uuid,
    /// The caller's attempt, when it fences the write to it.
    pub attempt_id: Option<Uuid>,
    pub reason: Option<String>,
    pub outcome: Option<ReleaseOutcome>,
}

/// How a release ends the attempt: the two outcomes that mean giving a unit
/// up (the others are set by a verification, a block or a reclaim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, async_graphql::Enum)]
pub enum ReleaseOutcome {
    /// Given up without a verdict on the unit (the default).
    Abandoned,
    /// Tried and failed: `claimNext` hands the unit to another agent first.
    Failed,
}

impl From<ReleaseOutcome> for AttemptOutcome {
    fn from(outcome: ReleaseOutcome) -> Self {
        match outcome {
            ReleaseOutcome::Abandoned => Self::Abandoned,
            ReleaseOutcome::Failed => Self::Failed,
        }
    }
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
        let args = fenced(json!({ "unitId": unit_id, "to": to.api_name(), "evidenceUrl": evidence_url }), attempt_id);
        let keyed = Keyed { operation: "transition", key, args: &args };
        let values = vec![unit_id.into(), attempt_id.into(), to.as_sql().into(), evidence_url.into()];
        Ok(self.call_one(who, TRANSITION, Some(keyed), values, to.api_name()).await?.1)
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
        let keyed = Keyed { operation: "block", key, args: &args };
        let values = vec![unit_id.into(), attempt_id.into(), question.into(), group.into()];
        Ok(self.call_one(who, BLOCK, Some(keyed), values, "BLOCKED").await?.1)
    }

    /// `question`, when given, must be the unit's open question
    /// (QUESTION_NOT_OPEN otherwise).
    /// Answers the unit's open question; with `also_answer_similar`, every
    /// other open question of the fleet with the same normalised text too
    /// (one transaction, each unit with its own `unblocked` event). Returns
    /// the named unit and the other units this call answered.
    pub async fn unblock(
        &self,
        who: &Principal,
        input: Unblock,
        key: Option<String>,
    ) -> Result<(UnitModel, Vec<Uuid>), LedgerError> {
        who.require(Permission::QuestionsAnswer)?;
        let Unblock { unit_id, question_id, answer, also_answer_similar } = input;
        let checks = validate::idempotency_key(key.as_deref()).and_then(|()| validate::long_text("answer", &answer));
        self.check_args(who, unit_id, "IN_PROGRESS (unblock)", false, checks).await?;
        let mut args = json!({ "unitId": unit_id, "answer": answer });
        if let Some(map) = args.as_object_mut() {
            if let Some(question) = question_id {
                map.insert("questionId".to_owned(), json!(question));
            }
            if also_answer_similar {
                map.insert("alsoAnswerSimilar".to_owned(), json!(true));
            }
        }
        let keyed = Keyed { operation: "unblock", key, args: &args };
        let values = vec![unit_id.into(), question_id.into(), answer.into(), also_answer_similar.into()];
        let row = self.call(who, UNBLOCK, Some(keyed), values).await?.pop();
        let row = row.ok_or_else(|| LedgerError::internal("ledger_unblock answered no row"))?;
        let also: Vec<Uuid> =
            row.info.get("also_answered").and_then(|ids| serde_json::from_value(ids.clone()).ok()).unwrap_or_default();
        let (_, unit) = super::write::answer(row, who, "IN_PROGRESS (unblock)")?;
        Ok((unit, also))
    }

    pub async fn release(
        &self,
        who: &Principal,
        input: Release,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        who.require(Permission::UnitsClaim)?;
        let requested = AttemptOutcome::from(input.outcome.unwrap_or(ReleaseOutcome::Abandoned));
        let checks = validate::idempotency_key(key.as_deref())
            .and_then(|()| input.reason.as_deref().map_or(Ok(()), |r| validate::long_text("reason", r)));
        self.check_args(who, input.unit_id, "READY (release)", false, checks).await?;
        let Release { unit_id, attempt_id, reason, .. } = input;
        let args = fenced(json!({ "unitId": unit_id, "reason": reason, "outcome": requested.as_sql() }), attempt_id);
        let keyed = Keyed { operation: "release", key, args: &args };
        let values = vec![unit_id.into(), attempt_id.into(), requested.as_sql().into(), reason.into()];
        Ok(self.call_one(who, RELEASE, Some(keyed), values, "READY (release)").await?.1)
    }

    pub async fn record_cost(
        &self,
        who: &Principal,
        target: CostTarget,
        cents: i64,
        key: String,
    ) -> Result<UnitModel, LedgerError> {
        if !who.has(Permission::UnitsDisposeAny) {
            who.require(Permission::UnitsClaim)?;
        }
        validate::cents(cents)?;
        let (args, attempt, unit) = match target {
            CostTarget::Attempt(id) => (json!({ "attemptId": id, "cents": cents }), Some(id), None),
            CostTarget::Unit(id) => (json!({ "unitId": id, "cents": cents }), None, Some(id)),
        };
        let keyed = Keyed { operation: "recordCost", key: Some(key), args: &args };
        let values = vec![attempt.into(), unit.into(), cents.into()];
        Ok(self.call_one(who, RECORD_COST, Some(keyed), values, "recordCost").await?.1)
    }

    pub async fn dispose(
        &self,
        who: &Principal,
        input: Dispose,
        key: Option<String>,
    ) -> Result<UnitModel, LedgerError> {
        if !who.has(Permission::UnitsDisposeAny) {
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
        let args = fenced(
            json!({ "unitId": unit_id, "disposition": disposition.as_sql(), "evidenceUrl": evidence_url, "reason": reason }),
            attempt_id,
        );
        let keyed = Keyed { operation: "dispose", key, args: &args };
        let values =
            vec![unit_id.into(), attempt_id.into(), disposition.as_sql().into(), evidence_url.into(), reason.into()];
        let (result, unit) = self.call_one(who, DISPOSE, Some(keyed), values, &action).await?;
        if result == "ok" {
            self.metrics.disposition(disposition.as_sql());
        }
        Ok(unit)
    }
}
