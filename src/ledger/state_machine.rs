//! The state machine of SPEC §3 as the caller sees it: which actions are
//! legal next for this principal on this unit, and from which states a
//! disposition may be set. The database enforces the same transitions
//! (trigger `work_units_guard`); this module explains them.

use chrono::{DateTime, Utc};

use crate::auth::{Permission, Principal};
use crate::db::entities::{Disposition, WorkState, work_unit};

/// One thing a caller may do next: a root field, the arguments the action
/// fixes (`to: IN_PROGRESS`) and those the caller supplies beyond the unit.
/// Its `Display` is the GraphQL call shape an agent can copy
/// (`transition(to: VERIFIED, evidenceUrl)`); the MCP tool and the CLI verb
/// for it are the operation contract's ([`crate::contract::render_action`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Action {
    pub field: &'static str,
    pub fixed: &'static [(&'static str, &'static str)],
    pub needs: &'static [&'static str],
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.field)?;
        let parts: Vec<String> = self
            .fixed
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .chain(self.needs.iter().map(|name| (*name).to_owned()))
            .collect();
        if !parts.is_empty() {
            write!(f, "({})", parts.join(", "))?;
        }
        Ok(())
    }
}

const fn action(
    field: &'static str,
    fixed: &'static [(&'static str, &'static str)],
    needs: &'static [&'static str],
) -> Action {
    Action { field, fixed, needs }
}

pub const CLAIM_UNIT: Action = action("claimUnit", &[], &[]);
pub const CLAIM_NEXT: Action = action("claimNext", &[], &[]);
pub const HEARTBEAT: Action = action("heartbeat", &[], &["attemptId"]);
pub const START: Action = action("transition", &[("to", "IN_PROGRESS")], &[]);
pub const VERIFY: Action = action("transition", &[("to", "VERIFIED")], &["evidenceUrl"]);
pub const BLOCK: Action = action("block", &[], &["question"]);
pub const RELEASE: Action = action("release", &[], &[]);
pub const RECORD_COST: Action = action("recordCost", &[], &["unitId", "cents", "idempotencyKey"]);
pub const UNBLOCK: Action = action("unblock", &[], &["questionId", "answer"]);
pub const WAIT_FOR_ANSWER: Action = action("waitForAnswer", &[], &[]);
pub const DISPOSE_MIGRATED: Action = action("dispose", &[("disposition", "MIGRATED")], &[]);
pub const DISPOSE_ABANDON: Action = action("dispose", &[("disposition", "DROPPED|DEFERRED|DEAD")], &["evidenceUrl"]);

/// Every action [`legal_actions`] can name.
pub const ACTIONS: &[&Action] = &[
    &CLAIM_UNIT,
    &CLAIM_NEXT,
    &HEARTBEAT,
    &START,
    &VERIFY,
    &BLOCK,
    &RELEASE,
    &RECORD_COST,
    &UNBLOCK,
    &WAIT_FOR_ANSWER,
    &DISPOSE_MIGRATED,
    &DISPOSE_ABANDON,
];

/// One state of the holder's loop: what the agent that holds a unit in
/// `state` may do with it, and what to do then in a sentence.
pub struct Step {
    pub state: WorkState,
    pub actions: &'static [&'static Action],
    pub says: &'static str,
}

/// The holder's loop, declared once: [`next_actions`] gives these actions
/// to the holder (an agent's `legalActions`), and the MCP instructions are
/// written from the same rows ([`crate::contract::holder_loop`]). VERIFIED
/// is no longer held (the attempt ended) but the agent is still its
/// holder of record, the one that disposes of it.
pub const HOLDER_LOOP: &[Step] = &[
    Step {
        state: WorkState::Claimed,
        actions: &[&HEARTBEAT, &START, &RELEASE, &RECORD_COST],
        says: "start work (or release the unit if it is not for you)",
    },
    Step {
        state: WorkState::InProgress,
        actions: &[&HEARTBEAT, &VERIFY, &BLOCK, &RELEASE, &RECORD_COST, &DISPOSE_ABANDON],
        says: "heartbeat before the lease runs out; verify with an evidence link when done; block with a question \
               when stuck; dispose DROPPED, DEFERRED or DEAD with evidence when the unit should not be migrated",
    },
    Step {
        state: WorkState::Blocked,
        actions: &[&WAIT_FOR_ANSWER, &RELEASE, &RECORD_COST, &DISPOSE_ABANDON],
        says: "wait for the answer (it returns the unit IN_PROGRESS with the answer in its `questions`), or \
               release the unit to take other work",
    },
    Step {
        state: WorkState::Verified,
        actions: &[&DISPOSE_MIGRATED, &RECORD_COST, &CLAIM_NEXT],
        says: "the attempt has ended and you hold nothing: claim your next unit, and still dispose of this one \
               with MIGRATED",
    },
];

/// The holder's actions in `state` (none where the loop has no step).
pub fn holder_actions(state: WorkState) -> &'static [&'static Action] {
    HOLDER_LOOP.iter().find(|step| step.state == state).map_or(&[], |step| step.actions)
}

/// Where a disposition leads and from which states it may be set.
pub struct DisposeRule {
    pub terminal: WorkState,
    /// States in which the holder may set it.
    pub holder_states: &'static [WorkState],
    /// States in which an operator (`units:dispose-any`) may set it.
    pub operator_states: &'static [WorkState],
}

/// MIGRATED only from VERIFIED (-> DONE); DROPPED, DEFERRED and DEAD by the
/// holder from IN_PROGRESS or BLOCKED, by an operator from any non-terminal
/// state (-> ABANDONED).
pub fn dispose_rule(disposition: Disposition) -> DisposeRule {
    use WorkState::*;
    match disposition {
        Disposition::Migrated => {
            DisposeRule { terminal: Done, holder_states: &[Verified], operator_states: &[Verified] }
        }
        Disposition::Dropped | Disposition::Deferred | Disposition::Dead => DisposeRule {
            terminal: Abandoned,
            holder_states: &[InProgress, Blocked],
            operator_states: &[Ready, Claimed, InProgress, Blocked, Verified],
        },
    }
}

/// True when a CLAIMED or IN_PROGRESS unit's lease has run out before `now`
/// (strictly, as the claim SQL decides it: `lease_expires_at < now()`).
pub fn is_stale(unit: &work_unit::Model, now: DateTime<Utc>) -> bool {
    matches!(unit.state, WorkState::Claimed | WorkState::InProgress)
        && unit.lease_expires_at.is_some_and(|lease| lease < now)
}

pub fn is_holder(unit: &work_unit::Model, who: &Principal) -> bool {
    unit.claimed_by.as_deref() == Some(who.name.as_str())
}

/// What `who` may do next with `unit`, as GraphQL call shapes an agent can
/// copy (for example `transition(to: IN_PROGRESS)`); [`next_actions`] gives
/// them as [`Action`]s for the other surfaces.
pub fn legal_actions(unit: &work_unit::Model, who: &Principal, now: DateTime<Utc>) -> Vec<String> {
    next_actions(unit, who, now).into_iter().map(ToString::to_string).collect()
}

/// What `who` may do next with `unit`: the holder's loop for its holder,
/// a claim for a claimant of a claimable unit, and what an answerer or an
/// operator may do besides.
pub fn next_actions(unit: &work_unit::Model, who: &Principal, now: DateTime<Utc>) -> Vec<&'static Action> {
    let holder = is_holder(unit, who) && who.has(Permission::UnitsClaim);
    let operator = who.has(Permission::UnitsDisposeAny);
    let mut actions: Vec<&'static Action> = Vec::new();
    if holder {
        actions.extend(holder_actions(unit.state));
    } else if who.has(Permission::UnitsClaim) && unit.workflow_id.is_none() {
        // A workflow's unit is its workflow's (WORKFLOW_OWNED): no claim.
        match unit.state {
            WorkState::Ready => actions.extend([&CLAIM_UNIT, &CLAIM_NEXT]),
            WorkState::Claimed | WorkState::InProgress if is_stale(unit, now) => actions.push(&CLAIM_UNIT),
            _ => {}
        }
    }
    if unit.state == WorkState::Blocked && who.has(Permission::QuestionsAnswer) {
        // Before a dispose: answering is what a blocked unit waits for.
        let at = actions.iter().position(|a| *a == &DISPOSE_ABANDON).unwrap_or(actions.len());
        actions.insert(at, &UNBLOCK);
    }
    if operator && unit.state == WorkState::Verified && !actions.contains(&&DISPOSE_MIGRATED) {
        actions.insert(0, &DISPOSE_MIGRATED);
    }
    if operator && !unit.state.is_terminal() && !actions.contains(&&DISPOSE_ABANDON) {
        actions.push(&DISPOSE_ABANDON);
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_names_each_holding_state_once() {
        let mut states: Vec<String> = HOLDER_LOOP.iter().map(|step| format!("{:?}", step.state)).collect();
        let count = states.len();
        states.dedup();
        assert_eq!(states.len(), count);
        assert!(holder_actions(WorkState::Blocked).contains(&&WAIT_FOR_ANSWER));
        assert!(holder_actions(WorkState::Verified).contains(&&CLAIM_NEXT));
        assert!(holder_actions(WorkState::Done).is_empty());
    }
}
