//! The write path's mutations (SPEC §4): each unpacks its arguments and calls
//! one ledger operation, which owns the transaction. These fields are the
//! declaration of the agent's operations: MCP tools and CLI verbs are bound
//! to them ([`crate::contract`]) and take their arguments, documentation and
//! validation from here.

use async_graphql::{Context, Object};
use serde_json::json;
use uuid::Uuid;

use super::notes::note;
use super::types::WorkUnit;
use super::{Result, ledger, principal};
use crate::contract::{AGENT, BILLING, Operation, Root, TRIAGE, UNIT_ID, op};
use crate::db::entities::{Disposition, WorkState};
use crate::ledger::{ClaimSituation, CostTarget, Dispose, LedgerError, Release, ReleaseOutcome, Unblock};

#[derive(Default)]
pub struct WorkMutation;

/// The mutations, with the argument descriptions several of them share
/// written once (`$key`: the idempotency key; `$fence`: the attempt fence;
/// `$lease`: the lease length).
macro_rules! work_mutation {
    ($key:tt, $fence:tt, $lease:tt) => {
    #[Object]
    impl WorkMutation {
        /// Claims the oldest claimable unit (stale units first): a new attempt and
        /// a lease of `leaseSeconds` (30..86400, default 900). An agent holds at most
        /// one unit at a time ("holds" = a live claim: CLAIMED, IN_PROGRESS or BLOCKED):
        /// one that already holds a unit gets that unit back, lease renewed. A VERIFIED
        /// unit is no longer held (its attempt ended): claim the next one and still
        /// dispose of the verified one. Null when nothing is claimable.
        /// The response's `extensions.claim.outcome` says what happened: `claimed` (a new attempt),
        /// `renewed` (the unit you already hold, lease extended) or `held` (your BLOCKED unit, nothing
        /// written); with null, `drained` (nothing left in the domain: stop) or `busy` (units blocked or
        /// leased elsewhere; `blocked`, `leased` and `earliestLeaseEnd` say how many and until when).
        /// With null, the response's `extensions.claim` also counts the domain's finished units:
        /// `done` (DONE) and `disposed` (every disposition, DONE included); both zero means no unit
        /// was ever registered there.
        async fn claim_next(
            &self,
            ctx: &Context<'_>,
            #[graphql(desc = "Only units of this domain (any domain when omitted).")] domain: Option<String>,
            #[graphql(desc = $lease)] lease_seconds: Option<i32>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
        ) -> Result<Option<WorkUnit>> {
            let (ledger, who) = (ledger(ctx), principal(ctx)?);
            let claimed = ledger.claim_next(who, domain.clone(), lease_seconds, idempotency_key).await?;
            let Some((outcome, unit)) = claimed else {
                // Nothing claimable: say whether to stop or to wait, and for how long.
                let situation = ledger.claim_situation(who, domain).await?;
                let outcome = if situation.drained { "drained" } else { "busy" };
                let ClaimSituation { ready, stale, blocked, leased, earliest_lease_end, done, disposed, .. } =
                    situation;
                let said = json!({ "outcome": outcome, "ready": ready, "stale": stale, "blocked": blocked,
                                   "leased": leased, "earliestLeaseEnd": earliest_lease_end, "done": done,
                                   "disposed": disposed });
                note(ctx, "claim", said);
                return Ok(None);
            };
            note(ctx, "claim", json!({ "outcome": outcome.name() }));
            Ok(Some(WorkUnit::returned(ctx, unit).await))
        }

        /// Claims a named unit that is READY or stale; the response's `extensions.claim.outcome` says
        /// what happened, as for `claimNext`.
        async fn claim_unit(
            &self,
            ctx: &Context<'_>,
            id: Uuid,
            #[graphql(desc = $lease)] lease_seconds: Option<i32>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
        ) -> Result<WorkUnit> {
            let (outcome, unit) = ledger(ctx).claim_unit(principal(ctx)?, id, lease_seconds, idempotency_key).await?;
                note(ctx, "claim", json!({ "outcome": outcome.name() }));
                Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// Extends the lease of your current attempt (also after expiry, unless someone reclaimed the unit).
        async fn heartbeat(
            &self,
            ctx: &Context<'_>,
            #[graphql(desc = "The `currentAttemptId` of the unit you hold.")] attempt_id: Uuid,
            #[graphql(desc = $lease)] lease_seconds: Option<i32>,
        ) -> Result<WorkUnit> {
            let unit = ledger(ctx).heartbeat(principal(ctx)?, attempt_id, lease_seconds).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// CLAIMED -> IN_PROGRESS, or IN_PROGRESS -> VERIFIED with `evidenceUrl`.
        async fn transition(
            &self,
            ctx: &Context<'_>,
            unit_id: Uuid,
            to: WorkState,
            #[graphql(desc = "A link to the evidence (a pull request, a CI run): an absolute http(s) URL, required for VERIFIED.")]
            evidence_url: Option<String>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
            #[graphql(desc = $fence)]
            attempt_id: Option<Uuid>,
        ) -> Result<WorkUnit> {
            let ledger = ledger(ctx);
            let unit = ledger.transition(principal(ctx)?, unit_id, to, evidence_url, attempt_id, idempotency_key).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// IN_PROGRESS -> BLOCKED with a question (at most 8000 characters) for the triage service.
        async fn block(
            &self,
            ctx: &Context<'_>,
            unit_id: Uuid,
            question: String,
            assignee_group: Option<String>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
            #[graphql(desc = $fence)]
            attempt_id: Option<Uuid>,
        ) -> Result<WorkUnit> {
            let ledger = ledger(ctx);
            let unit = ledger.block(principal(ctx)?, unit_id, question, assignee_group, attempt_id, idempotency_key).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// Answers a blocked unit's question: back to IN_PROGRESS for its holder, or READY when it was released.
        /// With `alsoAnswerSimilar: true` the same answer also answers every other OPEN question of the fleet with
        /// the same normalised text (case, white space and trailing punctuation folded), each unit with its own
        /// `unblocked` event, in the same transaction. It returns the named unit; the response's
        /// `extensions.unblock` holds `alsoAnswered` (how many others this call answered) and
        /// `alsoAnsweredUnitIds`.
        async fn unblock(
            &self,
            ctx: &Context<'_>,
            unit_id: Uuid,
            #[graphql(
                desc = "The question you answer (`openQuestion.id`, or the id `blockingQuestionOpened` delivered): when given and it is not the unit's open question (answered, cancelled or replaced meanwhile), the answer is QUESTION_NOT_OPEN, naming the open one, and changes nothing. Always send it."
            )]
            question_id: Option<Uuid>,
            answer: String,
            #[graphql(
                desc = "Also answer every other OPEN question of the fleet with the same normalised text (default false)."
            )]
            also_answer_similar: Option<bool>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
        ) -> Result<WorkUnit> {
            let also_answer_similar = also_answer_similar.unwrap_or(false);
            let input = Unblock { unit_id, question_id, answer, also_answer_similar };
            let (unit, also) = ledger(ctx).unblock(principal(ctx)?, input, idempotency_key).await?;
            if also_answer_similar {
                note(ctx, "unblock", json!({ "alsoAnswered": also.len(), "alsoAnsweredUnitIds": also }));
            }
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// Gives the unit up: the attempt ends (ABANDONED, or FAILED when asked) and the unit is READY again;
        /// a BLOCKED unit stays blocked until its question is answered.
        async fn release(
            &self,
            ctx: &Context<'_>,
            unit_id: Uuid,
            reason: Option<String>,
            #[graphql(desc = "How your attempt ends: ABANDONED (the default) or FAILED (another agent gets the unit first).")]
            outcome: Option<ReleaseOutcome>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
            #[graphql(desc = $fence)]
            attempt_id: Option<Uuid>,
        ) -> Result<WorkUnit> {
            let input = Release { unit_id, attempt_id, reason, outcome };
            let unit = ledger(ctx).release(principal(ctx)?, input, idempotency_key).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// Adds `cents` (0..1,000,000,000) to an attempt and its unit; a replayed key counts once.
        /// Name the attempt either by `attemptId` or by `unitId` (your latest attempt on that unit):
        /// exactly one of the two. Allowed at any time to the attempt's agent or an operator, also
        /// after the attempt ended or the unit was disposed: bills arrive late.
        async fn record_cost(
            &self,
            ctx: &Context<'_>,
            attempt_id: Option<Uuid>,
            unit_id: Option<Uuid>,
            cents: i64,
            #[graphql(desc = $key)]
            idempotency_key: String,
        ) -> Result<WorkUnit> {
            let target = match (attempt_id, unit_id) {
                (Some(attempt), None) => CostTarget::Attempt(attempt),
                (None, Some(unit)) => CostTarget::Unit(unit),
                _ => {
                    return Err(LedgerError::invalid(
                        "attemptId/unitId",
                        "pass exactly one: `unitId` (your latest attempt on that unit) or `attemptId`",
                    )
                    .into());
                }
            };
            let unit = ledger(ctx).record_cost(principal(ctx)?, target, cents, idempotency_key).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }

        /// Sets the permanent disposition: MIGRATED from VERIFIED (DONE); DROPPED, DEFERRED or DEAD
        /// (ABANDONED) from IN_PROGRESS or BLOCKED by the holder, from any non-terminal state by an operator.
        /// `evidenceUrl` (a link to the evidence) is required for DROPPED, DEFERRED and DEAD; MIGRATED
        /// may omit it and keeps the verification evidence. A disposition is permanent.
        async fn dispose(
            &self,
            ctx: &Context<'_>,
            unit_id: Uuid,
            disposition: Disposition,
            evidence_url: Option<String>,
            reason: Option<String>,
            #[graphql(desc = $key)]
            idempotency_key: Option<String>,
            #[graphql(desc = $fence)]
            attempt_id: Option<Uuid>,
        ) -> Result<WorkUnit> {
            let input = Dispose { unit_id, attempt_id, disposition, evidence_url, reason };
            let unit = ledger(ctx).dispose(principal(ctx)?, input, idempotency_key).await?;
            Ok(WorkUnit::returned(ctx, unit).await)
        }
    }
    };
}

work_mutation!(
    "Your idempotency key, scoped to you (fleet and token name): resending it with the same arguments returns the current unit and writes nothing; with other arguments it is IDEMPOTENCY_KEY_REUSED. Another agent's identical key is unrelated.",
    "Your current attempt: when given and not the unit's current attempt (a newer claim replaced it), the write is LEASE_LOST and changes nothing.",
    "Lease length in seconds, 30..86400 (default 900): heartbeat before it runs out, or the unit becomes reclaimable."
);

/// These fields' bindings on MCP and the agent CLI ([`crate::contract`]).
pub const BINDINGS: &[Operation] = &[
    Operation { tool: Some("claim_next"), verb: Some("claim"), ..op("claimNext", Root::Mutation, AGENT) },
    Operation {
        tool: Some("claim_unit"),
        verb: Some("claim"),
        renamed: UNIT_ID,
        ..op("claimUnit", Root::Mutation, AGENT)
    },
    Operation { tool: Some("heartbeat"), verb: Some("heartbeat"), ..op("heartbeat", Root::Mutation, AGENT) },
    Operation {
        tool: Some("start_work"),
        verb: Some("start"),
        preset: &[("to", "IN_PROGRESS")],
        omits: &["evidenceUrl"],
        doc: "Starts work on the unit you claimed: CLAIMED -> IN_PROGRESS. Heartbeat before the lease runs out.",
        ..op("transition", Root::Mutation, AGENT)
    },
    Operation {
        tool: Some("verify"),
        verb: Some("verify"),
        preset: &[("to", "VERIFIED")],
        positional: Some("evidenceUrl"),
        doc: "Records that the work is done and verified: IN_PROGRESS -> VERIFIED, with `evidenceUrl` a link to the \
              evidence (a pull request, a CI run). Your attempt ends and the lease is cleared: claim your next unit, \
              and still dispose of this one with MIGRATED.",
        ..op("transition", Root::Mutation, AGENT)
    },
    Operation {
        tool: Some("block"),
        verb: Some("block"),
        positional: Some("question"),
        note: "You keep the unit: wait for the answer (wait_for_answer, or the unit's `questions`) or release it. \
               When `openQuestion.similarAnswered` lists answers to the same question, read them first.",
        ..op("block", Root::Mutation, AGENT)
    },
    Operation { tool: Some("release"), verb: Some("release"), ..op("release", Root::Mutation, AGENT) },
    Operation {
        tool: Some("record_cost"),
        verb: Some("cost"),
        positional: Some("cents"),
        ..op("recordCost", Root::Mutation, BILLING)
    },
    Operation {
        tool: Some("dispose"),
        verb: Some("dispose"),
        positional: Some("disposition"),
        ..op("dispose", Root::Mutation, BILLING)
    },
    Operation { tool: Some("answer_question"), ..op("unblock", Root::Mutation, TRIAGE) },
];
