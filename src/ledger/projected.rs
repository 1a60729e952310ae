//! The Temporal projection's writes (SPEC §12): each is one of the write
//! functions every write calls (`writes.sql`), as the projection's token
//! acting for the unit's workflow, keyed by the Temporal event it records
//! (`temporal:<namespace>:<workflowId>:<runId>:<eventId>`), so a replay
//! appends nothing; the run's mark moves in the same transaction, so a
//! restart or another replica resumes after it.

use sea_orm::{TransactionTrait, Value};

use super::write::{Keyed, answer, retrying};
use super::{Ledger, LedgerError, UnitModel};
use crate::auth::Principal;
use crate::db::temporal::RunMark;
use crate::db::{self, writes};

/// One projected write: the function, the operation its key's fingerprint
/// names with the arguments it covers, the key, and the function's own
/// arguments after the common ones.
pub struct Projected<'a> {
    pub function: &'static str,
    pub operation: &'static str,
    pub key: String,
    pub args: &'a serde_json::Value,
    pub values: Vec<Value>,
}

impl Ledger {
    /// Runs `write` as `who` and moves `mark` in the same transaction. The
    /// result is the write's answer (`ok`, `claimed`, `replayed`) and the
    /// unit, or the refusal the function decided (the mark moves then too:
    /// the event is recorded as refused, not retried forever).
    pub async fn project(
        &self,
        who: &Principal,
        write: Projected<'_>,
        mark: &RunMark,
    ) -> Result<Result<(String, UnitModel), LedgerError>, LedgerError> {
        let keyed = Keyed { operation: write.operation, key: Some(write.key), args: write.args };
        let values = self.call_values(who, Some(keyed), write.values)?;
        let function = write.function;
        let row = retrying(function, || async {
            let tx = self.db.begin().await?;
            let row = writes::call(&tx, function, values.clone()).await?.pop();
            let row = row.ok_or_else(|| LedgerError::internal(format!("{function} answered no row")))?;
            if row.result == "RETRY" {
                return Err(LedgerError::Retry);
            }
            db::temporal::mark(&tx, &who.token_hash, mark).await?;
            tx.commit().await?;
            Ok(row)
        })
        .await?;
        self.called(who, std::slice::from_ref(&row));
        Ok(answer(row, who, write.operation))
    }
}
