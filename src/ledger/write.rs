//! The one path every write of SPEC §3 takes: the operation's SQL function
//! ([`crate::db::writes`]) called once, in autocommit, with the hash of the
//! caller's token (the function authenticates it and acts as it: SPEC §8),
//! the idempotency key and fingerprint, and the caller's intent; its answer
//! row either is the unit or says why not, and [`answer`] turns that into
//! the domain's result or refusal. Races that a second run resolves (a
//! deadlock, two uses of one new key, a unit that became claimable mid-call)
//! are run again.

use std::future::Future;

use chrono::Utc;
use sea_orm::{DbErr, Value};
use uuid::Uuid;

use super::state_machine::legal_actions;
use super::{Ledger, LedgerError, UnitFacts, UnitModel, idempotency, validate};
use crate::auth::{Permission, Principal};
use crate::db::writes::{self, Written};

pub(super) const RETRIES: usize = 4;

/// What a write is, for its idempotency key: the operation's name and its
/// arguments as the key's fingerprint covers them.
pub(super) struct Keyed<'a> {
    pub operation: &'static str,
    pub key: Option<String>,
    pub args: &'a serde_json::Value,
}

impl Keyed<'_> {
    /// `p_key` and `p_hash`: the key and the request's fingerprint (NULLs
    /// without a key). Refuses a malformed key.
    pub(super) fn values(self) -> Result<[Value; 2], LedgerError> {
        validate::idempotency_key(self.key.as_deref())?;
        let hash = self.key.as_ref().map(|_| idempotency::fingerprint(self.operation, self.args));
        Ok([self.key.into(), hash.into()])
    }
}

impl Ledger {
    /// Calls write `function` for `who` with `args` after the common
    /// arguments (the token's hash, the notification mode, and for a keyed
    /// write the key and fingerprint) and returns its answer rows. A `RETRY`
    /// answer, like a deadlock, runs the call again.
    pub(super) async fn call(
        &self,
        who: &Principal,
        function: &'static str,
        keyed: Option<Keyed<'_>>,
        args: Vec<Value>,
    ) -> Result<Vec<Written>, LedgerError> {
        let values = self.call_values(who, keyed, args)?;
        let rows = retrying(function, || async {
            let rows = self.on_pool(writes::call(&self.db, function, values.clone())).await?;
            match rows.first() {
                Some(row) if row.result == "RETRY" => Err(LedgerError::Retry),
                _ => Ok(rows),
            }
        })
        .await?;
        self.called(who, &rows);
        Ok(rows)
    }

    /// The arguments every write function takes first (the caller's token
    /// hash, the notification mode, the key and fingerprint when keyed),
    /// then `args`.
    pub(super) fn call_values(
        &self,
        who: &Principal,
        keyed: Option<Keyed<'_>>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>, LedgerError> {
        let mut values: Vec<Value> = vec![who.token_hash.to_vec().into(), self.notifier.mode().setting().into()];
        if let Some(keyed) = keyed {
            values.extend(keyed.values()?);
        }
        values.extend(args);
        Ok(values)
    }

    /// After a write committed: a token the database no longer knows is
    /// forgotten, and a write that appended an event wakes the fleet's feed.
    pub(super) fn called(&self, who: &Principal, rows: &[Written]) {
        if rows.iter().any(|row| row.result == "UNAUTHENTICATED") {
            self.known_tokens().forget(&who.token_hash);
        }
        if rows.iter().any(|row| matches!(row.result.as_str(), "ok" | "claimed" | "reclaimed" | "renewed")) {
            self.notifier.committed(&who.fleet);
        }
    }

    /// [`Ledger::call`] for a write of one unit: the unit, or the refusal
    /// of `action` (the target state or operation the refusal names).
    pub(super) async fn call_one(
        &self,
        who: &Principal,
        function: &'static str,
        keyed: Option<Keyed<'_>>,
        args: Vec<Value>,
        action: &str,
    ) -> Result<(String, UnitModel), LedgerError> {
        let row = self.call(who, function, keyed, args).await?.pop();
        let row = row.ok_or_else(|| LedgerError::internal(format!("{function} answered no row")))?;
        answer(row, who, action)
    }

    /// Runs `statement`, one autocommit statement on the request pool (a
    /// SQL function that scopes itself to the caller's fleet), counted as a
    /// pool user while it waits for and holds its connection.
    pub(super) async fn on_pool<T>(&self, statement: impl Future<Output = Result<T, DbErr>>) -> Result<T, DbErr> {
        let _in_flight = crate::db::InFlight::new(&self.metrics.pool_users);
        statement.await
    }
}

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
            let may_register = who.has(Permission::UnitsRegister);
            LedgerError::DispositionImmutable { unit_id: unit.id, disposition, disposed_at, may_register }
                .about(facts(unit, who))
        }
        _ => illegal(unit, who, action),
    })
}

/// A write's answer row as the domain's result: the outcome (`ok`,
/// `claimed`, `reclaimed`, `renewed`, `held`, `replayed`) and the unit, or
/// the refusal the function decided, with the unit's facts for `who`.
pub fn answer(row: Written, who: &Principal, action: &str) -> Result<(String, UnitModel), LedgerError> {
    // A refusal that lacks what its message names is the function's bug:
    // INTERNAL, never a nil id or an empty name in front of the client.
    let missing = |key: &str| LedgerError::internal(format!("{action}: {} answered without {key}", row.result));
    let need_str = |key: &str| row.info_str(key).map(str::to_owned).ok_or_else(|| missing(key));
    let refusal = match row.result.as_str() {
        "ok" | "claimed" | "reclaimed" | "renewed" | "held" | "replayed" => {
            let unit = row.unit.ok_or_else(|| LedgerError::internal(format!("{action}: answered without a unit")))?;
            return Ok((row.result, unit));
        }
        "NOT_FOUND" => {
            let what = if row.info_str("what") == Some("attempt") { "attempt" } else { "unit" };
            return Err(LedgerError::not_found(what, need_str("id")?));
        }
        "IDEMPOTENCY_KEY_REUSED" => {
            return Err(LedgerError::IdempotencyKeyReused { key: need_str("key")? });
        }
        // The token was revoked or expired after the request authenticated,
        // or lacks what the write needs: the database's word is the last.
        "UNAUTHENTICATED" => {
            return Err(LedgerError::Unauthenticated(match row.info.get("expired_at").and_then(|at| at.as_str()) {
                Some(at) => crate::auth::expired(at.parse().map_err(|_| missing("expired_at"))?).into(),
                None => crate::auth::UNKNOWN_TOKEN.into(),
            }));
        }
        "FORBIDDEN" => {
            let permission = need_str("permission")?.parse().map_err(|_| missing("permission"))?;
            return Err(LedgerError::Forbidden(permission));
        }
        "INVALID_INPUT" => LedgerError::invalid(need_str("argument")?, need_str("rule")?),
        "EVIDENCE_REQUIRED" => LedgerError::EvidenceRequired {
            action: if row.info_str("action") == Some("verify") { "transition to VERIFIED" } else { "dispose" },
        },
        "RETRY" => return Err(LedgerError::Retry),
        code => {
            let Some(unit) = &row.unit else {
                return Err(LedgerError::internal(format!("{action}: refusal {code} without a unit")));
            };
            refused(code, unit, &row, who, action)?
        }
    };
    Err(match &row.unit {
        Some(unit) => refusal.about(facts(unit, who)),
        None => refusal,
    })
}

/// A refusal about `unit` that names what its answer row's `info` says.
fn refused(
    code: &str,
    unit: &UnitModel,
    row: &Written,
    who: &Principal,
    action: &str,
) -> Result<LedgerError, LedgerError> {
    let uuid = |key: &str| row.info_str(key).and_then(|s| s.parse::<Uuid>().ok());
    let missing = |key: &str| LedgerError::internal(format!("{action}: {code} answered without {key}"));
    let need_uuid = |key: &str| uuid(key).ok_or_else(|| missing(key));
    let need_str = |key: &str| row.info_str(key).map(str::to_owned).ok_or_else(|| missing(key));
    Ok(match code {
        "ILLEGAL_TRANSITION" => return Err(illegal(unit, who, action)),
        "DISPOSITION_IMMUTABLE" => {
            return Err(disposed(unit, who, action, true).unwrap_or_else(|| illegal(unit, who, action)));
        }
        "LEASE_LOST" => LedgerError::LeaseLost { attempt_id: need_uuid("attempt_id")?, unit_id: unit.id },
        "NOT_CLAIM_HOLDER" => {
            LedgerError::NotClaimHolder { unit_id: unit.id, holder: row.info_str("holder").map(str::to_owned) }
        }
        "UNIT_ALREADY_CLAIMED" => LedgerError::UnitAlreadyClaimed {
            unit_id: unit.id,
            holder: need_str("holder")?,
            lease_expires_at: unit.lease_expires_at,
        },
        "QUESTION_NOT_OPEN" => LedgerError::QuestionNotOpen {
            unit_id: unit.id,
            question_id: need_uuid("question_id")?,
            open_question: uuid("open_question_id"),
        },
        "AGENT_BUSY" => LedgerError::AgentBusy { held: need_uuid("held_id")?, held_ref: need_str("held_ref")? },
        "WORKFLOW_OWNED" => LedgerError::WorkflowOwned { unit_id: unit.id, workflow_id: need_str("workflow_id")? },
        other => return Err(LedgerError::internal(format!("{action}: unknown answer {other:?}"))),
    })
}
/// Runs `run` again while it ends in a race that a second run resolves
/// (`LedgerError::Retry`: a deadlock or serialization failure, a key used
/// twice at once), at most [`RETRIES`] times.
pub(super) async fn retrying<T, Fut>(operation: &str, mut run: impl FnMut() -> Fut) -> Result<T, LedgerError>
where
    Fut: Future<Output = Result<T, LedgerError>>,
{
    for _ in 0..RETRIES {
        match run().await {
            Err(LedgerError::Retry) => continue,
            other => return other,
        }
    }
    Err(LedgerError::internal(format!("{operation}: still conflicting after {RETRIES} runs")))
}
