//! Why a write changed nothing. Every write is one conditional statement;
//! when it matched no row, the unit is read (in the same transaction) and
//! one of these works out the refusal an agent can act on, ordered by what
//! matters most (SPEC §5).

use chrono::Utc;
use sea_orm::DatabaseTransaction;
use uuid::Uuid;

use super::state_machine::{self, legal_actions};
use super::{LedgerError, UnitModel, load, load_attempt};
use crate::auth::{Permission, Principal};
use crate::db::claims;
use crate::db::entities::{AttemptOutcome, Disposition, WorkState};
use crate::db::units;

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
pub async fn cost(tx: &DatabaseTransaction, attempt_id: Uuid) -> LedgerError {
    match load_attempt(tx, attempt_id).await {
        Ok(attempt) => LedgerError::NotClaimHolder { unit_id: attempt.unit_id, holder: Some(attempt.agent_id) },
        Err(err) => err,
    }
}

/// ILLEGAL_TRANSITION from the unit's state to `to`, with what is legal instead.
pub fn illegal(unit: &UnitModel, who: &Principal, to: &str) -> LedgerError {
    LedgerError::IllegalTransition {
        unit_id: unit.id,
        from: unit.state,
        to: to.to_owned(),
        legal: legal_actions(unit, who, Utc::now()),
    }
}

/// Why a holder-only write on a unit changed nothing.
pub async fn holder(tx: &DatabaseTransaction, unit_id: Uuid, who: &Principal, to: &str) -> LedgerError {
    let unit = match load(tx, unit_id).await {
        Ok(unit) => unit,
        Err(err) => return err,
    };
    if unit.state.is_terminal() {
        return illegal(&unit, who, to);
    }
    if !state_machine::is_holder(&unit, who) {
        return not_holder(tx, &unit, who).await;
    }
    illegal(&unit, who, to)
}

/// NOT_CLAIM_HOLDER, or LEASE_LOST when the caller's own attempt on this
/// unit was superseded by a reclaim.
async fn not_holder(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    match units::latest_attempt_of(tx, unit.id, &who.name).await {
        Ok(Some(attempt)) if attempt.outcome == Some(AttemptOutcome::Superseded) => {
            LedgerError::LeaseLost { attempt_id: attempt.id, unit_id: unit.id }
        }
        Ok(_) => LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by.clone() },
        Err(err) => err.into(),
    }
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
    if attempt.agent_id != who.name {
        return LedgerError::NotClaimHolder { unit_id: unit.id, holder: unit.claimed_by };
    }
    if attempt.outcome == Some(AttemptOutcome::Superseded) {
        return LedgerError::LeaseLost { attempt_id, unit_id: unit.id };
    }
    illegal(&unit, who, action)
}

/// Why a named claim changed nothing.
pub async fn claim(tx: &DatabaseTransaction, unit: &UnitModel, who: &Principal) -> LedgerError {
    let held_elsewhere = match claims::held_by(tx, &who.fleet, &who.name).await {
        Ok(held) => held.filter(|held| held.id != unit.id),
        Err(err) => return err.into(),
    };
    match (unit.state, &unit.claimed_by) {
        (WorkState::Claimed | WorkState::InProgress, Some(holder)) if !state_machine::is_stale(unit, Utc::now()) => {
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
            None => LedgerError::Retry,
        },
        _ => illegal(unit, who, "CLAIMED"),
    }
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
    if let (Some(existing), Some(at)) = (unit.disposition, unit.disposed_at) {
        return LedgerError::DispositionImmutable { unit_id, disposition: existing, disposed_at: at };
    }
    let holder = state_machine::is_holder(&unit, who);
    let operator = who.has(Permission::UnitsDisposeAny);
    if !holder && !operator {
        return not_holder(tx, &unit, who).await;
    }
    illegal(&unit, who, &format!("dispose {}", disposition.as_sql()))
}
