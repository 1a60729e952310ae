//! Why a write changed nothing. Every write is one conditional statement;
//! when it matched no row, the unit is read (in the same transaction) and
//! one of these works out the refusal an agent can act on, ordered by what
//! matters most (SPEC §5). Every refusal about an existing unit carries the
//! unit's id, state and legal next actions ([`UnitFacts`]).

use chrono::Utc;
use sea_orm::DatabaseTransaction;
use uuid::Uuid;

use super::state_machine::{self, legal_actions};
use super::{LedgerError, UnitFacts, UnitModel, load, load_attempt};
use crate::auth::{Permission, Principal};
use crate::db::claims;
use crate::db::entities::{AttemptOutcome, Disposition, WorkState};
use crate::db::units;

/// The unit as a refusal reports it to `who`.
pub fn facts(unit: &UnitModel, who: &Principal) -> UnitFacts {
    UnitFacts { unit_id: unit.id, state: unit.state, legal_actions: legal_actions(unit, who, Utc::now()) }
}

/// ILLEGAL_TRANSITION from the unit's state to `to`, with what is legal instead.
pub fn illegal(unit: &UnitModel, who: &Principal, to: &str) -> LedgerError {
    LedgerError::IllegalTransition {
        unit_id: unit.id,
        from: unit.state,
        to: to.to_owned(),
        legal: legal_actions(unit, who, Utc::now()),
    }
    .about(facts(unit, who))
}

/// The refusal of any write on a disposed unit, which comes before anything
/// else about the request (SPEC §5): DISPOSITION_IMMUTABLE for a dispose,
/// ILLEGAL_TRANSITION for the rest. `None` while the unit is not terminal.
pub fn disposed(unit: &UnitModel, who: &Principal, action: &str, dispose: bool) -> Option<LedgerError> {
    if !unit.state.is_terminal() {
        return None;
    }
    Some(match (dispose, unit.disposition, unit.disposed_at) {
        (true, Some(disposition), Some(disposed_at)) => {
            LedgerError::DispositionImmutable { unit_id: unit.id, disposition, disposed_at }.about(facts(unit, who))
        }
        _ => illegal(unit, who, action),
    })
}

/// The attempt fence of SPEC §3: when the caller names its attempt, the
/// unit's row is locked (so no reclaim can slip in before the write) and its
/// current attempt must be that one, else LEASE_LOST. A disposed unit says
/// so first, as every refusal about a terminal unit does.
pub async fn fence(
    tx: &DatabaseTransaction,
    unit_id: Uuid,
    attempt_id: Option<Uuid>,
    who: &Principal,
    to: &str,
) -> Result<(), LedgerError> {
    let Some(attempt_id) = attempt_id else { return Ok(()) };
    let unit = units::lock_by_id(tx, unit_id).await?.ok_or_else(|| LedgerError::not_found("unit", unit_id))?;
    if let Some(refusal) = disposed(&unit, who, to, to.starts_with("dispose")) {
        return Err(refusal);
    }
    if unit.current_attempt_id == Some(attempt_id) {
        return Ok(());
    }
    Err(LedgerError::LeaseLost { attempt_id, unit_id }.about(facts(&unit, who)))
}

/// Why a write on a unit that is not holder-only (unblock) changed nothing:
/// the state machine forbids it.
pub async fn unit(tx: &DatabaseTransaction, unit_id: Uuid, who: &Principal, to: &str) -> LedgerError {
    match load(tx, unit_id).await {
        Ok(unit) => illegal(&unit, who, to),
        Err(err) => err,
    }
}

/// Why `recordCost` changed nothing: the attempt is not the caller's (or
/// does not exist in the fleet).
pub async fn cost(tx: &DatabaseTransaction, attempt_id: Uuid, who: &Principal) -> LedgerError {
    let attempt = match load_attempt(tx, attempt_id).await {
        Ok(attempt) => attempt,
        Err(err) => return err,
    };
    let refusal = LedgerError::NotClaimHolder { unit_id: attempt.unit_id, holder: Some(attempt.agent_id) };
    match load(tx, attempt.unit_id).await {
        Ok(unit) => refusal.about(facts(&unit, who)),
        Err(err) => err,
    }
}

/// Why `recordCost(unitId:)` found no attempt to bill: the caller never
/// worked on the unit.
pub async fn nothing_to_bill(tx: &DatabaseTransaction, unit_id: Uuid, who: &Principal) -> LedgerError {
    match load(tx, unit_id).await {
        Ok(unit) => LedgerError::NotClaimHolder { unit_id, holder: unit.claimed_by.clone() }.about(facts(&unit, who)),
        Err(err) => err,
    }
}

/// Why a holder-only write on a unit changed nothing.
pub async fn holder(tx: &DatabaseTransaction, unit_id: Uuid, who: &Principal, to: &str) -> LedgerError {
    let unit = match load(tx, unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    if unit.state.is_terminal() || state_machine::is_holder(&unit, who) {
        return illegal(&unit, who, to);
    }
    not_holder(tx, &unit, who).await
}

/// NOT_CLAIM_HOLDER, or LEASE_LOST when the caller's own attempt on this
/// unit was superseded by a reclaim.
async fn not_holder(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    let refusal = match units::latest_attempt_of(tx, unit.id, &who.name).await {
        Ok(Some(attempt)) if attempt.outcome == Some(AttemptOutcome::Superseded) => {
            LedgerError::LeaseLost { attempt_id: attempt.id, unit_id: unit.id }
        }
        Ok(_) => LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by.clone() },
        Err(err) => return err.into(),
    };
    refusal.about(facts(unit, who))
}

/// Why an attempt-fenced write (heartbeat) changed nothing.
pub async fn attempt(tx: &DatabaseTransaction, attempt_id: Uuid, who: &Principal, action: &str) -> LedgerError {
    let attempt = match load_attempt(tx, attempt_id).await {
        Ok(attempt) => attempt,
        Err(err) => return err,
    };
    let unit = match load(tx, attempt.unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    let refusal = if attempt.agent_id != who.name {
        LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by.clone() }
    } else if attempt.outcome == Some(AttemptOutcome::Superseded) {
        LedgerError::LeaseLost { attempt_id, unit_id: unit.id }
    } else {
        return illegal(&unit, who, action);
    };
    refusal.about(facts(&unit, who))
}

/// Why a named claim changed nothing.
pub async fn claim(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    let held_elsewhere = match claims::held_by(tx, &who.fleet, &who.name).await {
        Ok(held) => held.filter(|held| held.id != unit.id),
        Err(err) => return err.into(),
    };
    // The claim statement judged staleness by the database's now(); so does
    // its explanation (a server clock ahead of the database's would call the
    // lease stale, retry, and never find it claimable).
    let now = match units::db_now(tx).await {
        Ok(now) => now,
        Err(err) => return err.into(),
    };
    let refusal = match (unit.state, &unit.claimed_by) {
        (WorkState::Claimed | WorkState::InProgress, Some(holder)) if !state_machine::is_stale(unit, now) => {
            LedgerError::UnitAlreadyClaimed {
                unit_id: unit.id,
                holder: holder.clone(),
                lease_expires_at: unit.lease_expires_at,
            }
        }
        (WorkState::Blocked, Some(holder)) => {
            LedgerError::UnitAlreadyClaimed { unit_id: unit.id, holder: holder.clone(), lease_expires_at: None }
        }
        (WorkState::Ready | WorkState::Claimed | WorkState::InProgress, _) => match held_elsewhere {
            Some(held) => LedgerError::AgentBusy { held: held.id, held_ref: held.external_ref },
            // The unit became claimable between the write and this read.
            None => return LedgerError::Retry,
        },
        _ => return illegal(unit, who, "CLAIMED"),
    };
    refusal.about(facts(unit, who))
}

/// Why a dispose changed nothing.
pub async fn dispose(
    tx: &DatabaseTransaction,
    unit_id: Uuid,
    who: &Principal,
    disposition: Disposition,
) -> LedgerError {
    let unit = match load(tx, unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    let action = format!("dispose {}", disposition.as_sql());
    if let Some(refusal) = disposed(&unit, who, &action, true) {
        return refusal;
    }
    let holder = state_machine::is_holder(&unit, who);
    let operator = who.has(Permission::UnitsDisposeAny);
    if !holder && !operator {
        return not_holder(tx, &unit, who).await;
    }
    illegal(&unit, who, &action)
}
