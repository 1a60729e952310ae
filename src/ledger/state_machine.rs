//! The state machine of SPEC §3 as the caller sees it: which actions are
//! legal next for this principal on this unit, and from which states a
//! disposition may be set. The database enforces the same transitions
//! (trigger `work_units_guard`); this module explains them.

use chrono::{DateTime, Utc};

use crate::auth::{Permission, Principal};
use crate::db::entities::{Disposition, WorkState, work_unit};

pub const DISPOSE_ABANDON: &str = "dispose(disposition: DROPPED|DEFERRED|DEAD, evidenceUrl)";
pub const DISPOSE_MIGRATED: &str = "dispose(disposition: MIGRATED)";

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

/// What `who` may do next with `unit`, as mutation call shapes an agent can
/// copy (for example `transition(to: IN_PROGRESS)`).
pub fn legal_actions(unit: &work_unit::Model, who: &Principal, now: DateTime<Utc>) -> Vec<String> {
    let holder = is_holder(unit, who) && who.has(Permission::UnitsClaim);
    let operator = who.has(Permission::UnitsDisposeAny);
    let mut actions: Vec<&str> = Vec::new();
    match unit.state {
        WorkState::Ready => {
            if who.has(Permission::UnitsClaim) {
                actions.extend(["claimUnit", "claimNext"]);
            }
        }
        WorkState::Claimed | WorkState::InProgress if holder => {
            actions.push("heartbeat(attemptId)");
            if unit.state == WorkState::Claimed {
                actions.push("transition(to: IN_PROGRESS)");
            } else {
                actions.extend(["transition(to: VERIFIED, evidenceUrl)", "block(question)"]);
            }
            actions.extend(["release", "recordCost(unitId, cents, idempotencyKey)"]);
        }
        WorkState::Claimed | WorkState::InProgress => {
            if is_stale(unit, now) && who.has(Permission::UnitsClaim) {
                actions.push("claimUnit");
            }
        }
        WorkState::Blocked => {
            if holder {
                actions.extend(["release", "recordCost(unitId, cents, idempotencyKey)"]);
            }
            if who.has(Permission::QuestionsAnswer) {
                actions.push("unblock(answer)");
            }
        }
        WorkState::Verified => {
            if holder || operator {
                actions.push(DISPOSE_MIGRATED);
            }
            if holder {
                actions.push("recordCost(unitId, cents, idempotencyKey)");
            }
        }
        WorkState::Done | WorkState::Abandoned => {}
    }
    let holder_may_abandon = holder && matches!(unit.state, WorkState::InProgress | WorkState::Blocked);
    if !unit.state.is_terminal() && (operator || holder_may_abandon) {
        actions.push(DISPOSE_ABANDON);
    }
    actions.into_iter().map(str::to_owned).collect()
}
