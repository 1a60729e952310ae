//! The state machine of SPEC §3 as the caller sees it: which actions are
//! legal next for this principal on this unit. The database enforces the same transitions
//! (trigger `work_units_guard`); this module explains them.

use chrono::{DateTime, Utc};

use super::claims::{self, act::CLAIM_NEXT};
use super::lifecycle::{self, act::DISPOSE_ABANDON};
use crate::auth::{Permission, Principal};
use crate::db::entities::{WorkState, work_unit};

/// One thing a caller may do next: a root field, the arguments the action
/// fixes (`to: IN_PROGRESS`), those the caller supplies beyond the unit,
/// the states in which the holder of a unit may take it, and the move of
/// `ledger_moves()` it makes, if it moves the unit. Its `Display`
/// is the GraphQL call shape an agent can copy
/// (`transition(to: VERIFIED, evidenceUrl)`); the MCP tool and the CLI verb
/// for it are its binding's ([`crate::graphql::bindings::render_action`]).
/// An action is declared beside the ledger method that performs it
/// (`claims::ACTIONS`, `lifecycle::ACTIONS`).
#[derive(Debug, PartialEq, Eq)]
pub struct Action {
    pub field: &'static str,
    pub fixed: &'static [(&'static str, &'static str)],
    pub needs: &'static [&'static str],
    /// The states in which the holder of a unit may take it: the holder's
    /// loop. Empty for an action the holder does not take (a claim,
    /// answering a question) or that [`next_actions`] offers otherwise.
    pub holder: &'static [WorkState],
    /// The states in which a claimant (`units:claim`, not the holder) may
    /// take it: a unit under a live lease only once the lease ran out.
    pub claimant: &'static [WorkState],
    /// The states in which an answerer (`questions:answer`) may take it.
    pub answerer: &'static [WorkState],
    /// The states in which an operator (`units:dispose-any`) may take it.
    pub operator: &'static [WorkState],
    /// The action of `ledger_moves()` (state_machine.sql) it makes, if it
    /// moves the unit; a test holds `holder` to that declaration.
    pub moves: Option<&'static str>,
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

pub const fn action(
    field: &'static str,
    fixed: &'static [(&'static str, &'static str)],
    needs: &'static [&'static str],
    holder: &'static [WorkState],
    moves: Option<&'static str>,
) -> Action {
    Action { field, fixed, needs, holder, claimant: &[], answerer: &[], operator: &[], moves }
}

/// `waitForAnswer` is a read of the live feed (`live::wait`), not a ledger
/// method, so its action is declared here.
pub const WAIT_FOR_ANSWER: Action = action("waitForAnswer", &[], &[], &[WorkState::Blocked], None);

/// Every action [`legal_actions`] can name, in the order it names them.
pub fn actions() -> impl Iterator<Item = &'static Action> {
    let own: &'static [&'static Action] = &[&WAIT_FOR_ANSWER];
    own.iter().chain(claims::ACTIONS).chain(lifecycle::ACTIONS).copied()
}

/// The holder's loop: what the agent that holds a unit in `state` may do
/// with it, in [`actions`]' order. [`next_actions`] gives these to the
/// holder (an agent's `legalActions`), and MCP's instructions teach the
/// same ([`crate::graphql::bindings::holder_loop`]). VERIFIED is no longer
/// held (the attempt ended) but the agent is still its holder of record,
/// the one that disposes of it.
pub fn holder_actions(state: WorkState) -> Vec<&'static Action> {
    let mut held: Vec<&'static Action> = actions().filter(|action| action.holder.contains(&state)).collect();
    // In a state its holder acts in but no longer holds (VERIFIED), it may
    // claim its next unit: after everything about this one, so that the
    // unit is disposed of before (or besides) the next claim.
    if !held.is_empty() && !state.is_live_claim() {
        held.push(&CLAIM_NEXT);
    }
    held
}

/// The states in which a holder acts, in the order of a unit's life.
pub fn holder_states() -> Vec<WorkState> {
    use sea_orm::Iterable;
    WorkState::iter().filter(|state| !holder_actions(*state).is_empty()).collect()
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
/// or what a claimant may (a workflow's unit is its workflow's:
/// WORKFLOW_OWNED), and what an answerer or an operator may do besides,
/// each from the actions' declarations.
pub fn next_actions(unit: &work_unit::Model, who: &Principal, now: DateTime<Utc>) -> Vec<&'static Action> {
    let state = unit.state;
    let mut next: Vec<&'static Action> = Vec::new();
    if is_holder(unit, who) && who.has(Permission::UnitsClaim) {
        next.extend(holder_actions(state));
    } else if who.has(Permission::UnitsClaim) && unit.workflow_id.is_none() {
        let claimable = unit.lease_expires_at.is_none() || is_stale(unit, now);
        next.extend(actions().filter(|action| claimable && action.claimant.contains(&state)));
    }
    if who.has(Permission::QuestionsAnswer) {
        // Before a dispose: answering is what a blocked unit waits for.
        let at = next.iter().position(|a| *a == &DISPOSE_ABANDON).unwrap_or(next.len());
        let answers: Vec<_> = actions().filter(|action| action.answerer.contains(&state)).collect();
        next.splice(at..at, answers);
    }
    if who.has(Permission::UnitsDisposeAny) {
        let operated: Vec<_> =
            actions().filter(|action| action.operator.contains(&state) && !next.contains(action)).collect();
        next.extend(operated);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_is_the_actions_declared_for_the_holder() {
        for state in [WorkState::Claimed, WorkState::InProgress, WorkState::Blocked, WorkState::Verified] {
            assert!(holder_states().contains(&state), "{state:?}");
        }
        assert_eq!(holder_actions(WorkState::Blocked).first(), Some(&&WAIT_FOR_ANSWER));
        let verified = holder_actions(WorkState::Verified);
        assert_eq!((verified.first(), verified.last()), (Some(&&lifecycle::act::DISPOSE_MIGRATED), Some(&&CLAIM_NEXT)));
        assert!(holder_actions(WorkState::Done).is_empty());
        let names: Vec<String> = actions().map(ToString::to_string).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "an action declared twice: {names:?}");
    }
}
