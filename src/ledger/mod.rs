//! The domain: every ledger operation owns its transaction (through
//! [`db::in_fleet`]) and returns domain errors; resolvers only unpack
//! arguments and call one of these.
//!
//! | module | holds |
//! | --- | --- |
//! | [`write`] | the one write path: a SQL function call, its answer as a result or refusal, retries |
//! | [`claims`] | `claimNext`, `claimUnit`, `heartbeat` |
//! | [`lifecycle`] | `transition`, `block`, `unblock`, `release`, `recordCost`, `dispose` |
//! | [`state_machine`] | legal next actions and the dispose rules |
//! | [`reads`] | validated keyset pages and the DataLoaders' batches |
//! | [`situation`] | what is left to claim, for an agent whose `claimNext` found nothing |
//! | [`error`](LedgerError) | the domain error enum and its codes |

pub mod aggregates;
pub mod claims;
pub mod cursor;
mod error;
mod idempotency;
pub mod lifecycle;
pub mod notifier;
mod projected;
pub mod reads;
mod scans;
pub mod situation;
pub mod state_machine;
mod triage;
pub mod validate;
mod write;

pub use crate::db::temporal::RunMark;
pub use claims::ClaimOutcome;
pub use error::{LedgerError, UnitFacts};
pub use lifecycle::{CostTarget, Dispose, Release, ReleaseOutcome, Unblock};
pub use projected::Projected;
pub use situation::ClaimSituation;
use std::sync::Arc;

use sea_orm::{DatabaseConnection, DatabaseTransaction};
use uuid::Uuid;

use crate::auth::{self, AuthError, Permission, Principal};
use crate::db::entities::work_unit;
use crate::db::{self, Notify, events, units};
use crate::metrics::Metrics;
use notifier::Notifier;

pub type UnitModel = work_unit::Model;

/// The registration's SQL function (`writes.sql`).
const REGISTER: &str = "ledger_register";

/// Input of `registerUnits`.
pub struct RegisterUnit {
    pub external_ref: String,
    pub domain: Option<String>,
    pub workflow_id: Option<String>,
}

pub const DEFAULT_DOMAIN: &str = "default";

#[derive(Clone)]
pub struct Ledger {
    db: DatabaseConnection,
    metrics: Arc<Metrics>,
    notifier: Arc<Notifier>,
    scans: Arc<scans::ScanGate>,
    last_use: Arc<auth::LastUse>,
    known: Arc<auth::Known>,
}

impl Ledger {
    /// A ledger that notifies after its commits ([`Notify::AfterCommit`]).
    pub fn new(db: DatabaseConnection) -> Self {
        Self::notifying(db, Notify::AfterCommit)
    }

    /// A ledger whose writes announce their events as `notify` says.
    pub fn notifying(db: DatabaseConnection, notify: Notify) -> Self {
        let notifier = Arc::new(Notifier::new(db.clone(), notify));
        Self {
            db,
            metrics: Metrics::new(),
            notifier,
            scans: Arc::default(),
            last_use: Arc::default(),
            known: Arc::default(),
        }
    }

    /// Authenticates an `Authorization` header value (`auth::authenticate`).
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<(Principal, auth::Credential), AuthError> {
        auth::authenticate(&self.db, &self.last_use, &self.known, authorization).await
    }

    /// What this process knows of the tokens it authenticated
    /// ([`auth::Known`]): the live subsystem clears it on a revocation.
    pub fn known_tokens(&self) -> &Arc<auth::Known> {
        &self.known
    }

    /// Whether `who`'s token is still live and may read, in one statement
    /// (`ledger_session`): for an answer that reads no table but must not
    /// outlive a revocation (`me`).
    pub async fn still_live(&self, who: &Principal) -> Result<(), LedgerError> {
        let refused = self.on_pool(db::tokens::session(&self.db, &who.token_hash)).await?;
        match refused {
            None => Ok(()),
            Some(refusal) => Err(self.refused(who, refusal.into())),
        }
    }

    /// `err`, after forgetting `who`'s token when it is a refusal of it.
    fn refused(&self, who: &Principal, err: LedgerError) -> LedgerError {
        if matches!(err, LedgerError::Unauthenticated(_)) {
            self.known.forget(&who.token_hash);
        }
        err
    }

    pub fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    /// What this ledger counted (claims, dispositions, operations).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub async fn register_units(
        &self,
        who: &Principal,
        input: Vec<RegisterUnit>,
    ) -> Result<Vec<UnitModel>, LedgerError> {
        who.require(Permission::UnitsRegister)?;
        if input.is_empty() || input.len() > validate::MAX_REGISTER_BATCH {
            return Err(LedgerError::invalid(
                "units",
                format!("must hold 1 to {} units per call (got {})", validate::MAX_REGISTER_BATCH, input.len()),
            ));
        }
        let (mut refs, mut domains, mut workflows) = (Vec::new(), Vec::new(), Vec::new());
        for (i, unit) in input.into_iter().enumerate() {
            validate::external_ref(&format!("units[{i}].externalRef"), &unit.external_ref)?;
            if let Some(domain) = &unit.domain {
                validate::label(&format!("units[{i}].domain"), domain)?;
            }
            if let Some(workflow) = &unit.workflow_id {
                validate::label(&format!("units[{i}].workflowId"), workflow)?;
            }
            refs.push(unit.external_ref);
            domains.push(unit.domain.unwrap_or_else(|| DEFAULT_DOMAIN.to_owned()));
            workflows.push(unit.workflow_id.unwrap_or_default());
        }
        let rows = self.call(who, REGISTER, None, vec![refs.into(), domains.into(), workflows.into()]).await?;
        rows.into_iter().map(|row| write::answer(row, who, "READY").map(|(_, unit)| unit)).collect()
    }

    /// Which of `refs` are registered in the caller's fleet already.
    pub async fn existing_refs(&self, who: &Principal, refs: Vec<String>) -> Result<Vec<String>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(units::existing_refs(tx, &refs).await?) })).await
    }

    /// Runs a read in the caller's fleet; needs `ledger:read`.
    pub async fn read<T, F>(&self, who: &Principal, read: F) -> Result<T, LedgerError>
    where
        T: Send,
        F: for<'t> FnOnce(&'t DatabaseTransaction) -> db::BoxFuture<'t, Result<T, LedgerError>> + Send,
    {
        who.require(Permission::LedgerRead)?;
        db::in_session(&self.db, Some(&self.metrics.pool_users), &who.token_hash, read)
            .await
            .map_err(|err| self.refused(who, err))
    }

    /// Where a subscription resumed after the event `id` starts (no later than
    /// just before batch `floor`), with its first page of up to `limit`
    /// events below the watermark `below` (`None`: one the database takes;
    /// [`events::events_resumed`]): one statement in autocommit on
    /// the request pool, which takes the app role and the fleet itself, so it
    /// needs no transaction of [`Ledger::read`] around it. `None` when the
    /// caller's fleet has no such event.
    pub async fn events_resumed(
        &self,
        who: &Principal,
        id: Uuid,
        floor: Option<i64>,
        below: Option<i64>,
        limit: usize,
    ) -> Result<Option<(events::Position, events::Batch)>, LedgerError> {
        who.require(Permission::LedgerRead)?;
        let _in_flight = db::InFlight::new(&self.metrics.pool_users);
        Ok(events::events_resumed(&self.db, &who.fleet, id, floor, below, limit).await?)
    }

    /// [`Ledger::read`] of a read that scans the caller's whole fleet: at
    /// most `scans::MAX_PER_TOKEN` of them at once per token.
    pub async fn scan<T, F>(&self, who: &Principal, read: F) -> Result<T, LedgerError>
    where
        T: Send,
        F: for<'t> FnOnce(&'t DatabaseTransaction) -> db::BoxFuture<'t, Result<T, LedgerError>> + Send,
    {
        who.require(Permission::LedgerRead)?;
        let _turn = self.scans.enter(who.token_id).await?;
        self.read(who, read).await
    }

    /// Whether the caller's token would get its turn for a fleet-wide read
    /// ([`Ledger::scan`]) at once.
    pub fn scan_turn_free(&self, who: &Principal) -> bool {
        self.scans.is_free(who.token_id)
    }

    /// The unit the caller holds (a live claim: CLAIMED, IN_PROGRESS or BLOCKED).
    pub async fn held_unit(&self, who: &Principal) -> Result<Option<UnitModel>, LedgerError> {
        let (fleet, agent) = (who.fleet.clone(), who.name.clone());
        self.read(who, move |tx| Box::pin(async move { Ok(units::held_by(tx, &fleet, &agent).await?) })).await
    }

    /// VERIFIED units the caller still has to dispose of.
    pub async fn awaiting_disposition(&self, who: &Principal) -> Result<Vec<UnitModel>, LedgerError> {
        let (fleet, agent) = (who.fleet.clone(), who.name.clone());
        self.read(who, move |tx| Box::pin(async move { Ok(units::awaiting_disposition(tx, &fleet, &agent).await?) }))
            .await
    }

    pub async fn unit(&self, who: &Principal, id: Uuid) -> Result<Option<UnitModel>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(units::by_id(tx, id).await?) })).await
    }

    pub async fn unit_by_ref(&self, who: &Principal, external_ref: String) -> Result<Option<UnitModel>, LedgerError> {
        validate::external_ref("externalRef", &external_ref)?;
        self.read(who, move |tx| Box::pin(async move { Ok(units::by_ref(tx, &external_ref).await?) })).await
    }
}

impl Ledger {
    /// The argument checks of a write on `unit_id`. When they fail the unit
    /// is read, and a disposed unit is refused as such first (SPEC §5: what
    /// matters most comes before any argument); otherwise the argument error
    /// carries the unit's facts. An unknown unit leaves the argument error.
    async fn check_args(
        &self,
        who: &Principal,
        unit_id: Uuid,
        action: &str,
        dispose: bool,
        checks: Result<(), LedgerError>,
    ) -> Result<(), LedgerError> {
        let Err(err) = checks else { return Ok(()) };
        let found = db::in_session(&self.db, Some(&self.metrics.pool_users), &who.token_hash, move |tx| {
            Box::pin(async move { Ok::<_, LedgerError>(units::by_id(tx, unit_id).await?) })
        })
        .await;
        match found {
            Ok(Some(unit)) => {
                Err(write::disposed(&unit, who, action, dispose).unwrap_or_else(|| err.about(write::facts(&unit, who))))
            }
            // A token that may not read the unit: the argument error alone.
            Ok(None) | Err(LedgerError::Forbidden(_)) => Err(err),
            Err(db_err) => Err(db_err),
        }
    }
}
