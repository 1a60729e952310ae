//! The domain: every ledger operation owns its transaction (through
//! [`db::in_fleet`]) and returns domain errors; resolvers only unpack
//! arguments and call one of these.

pub mod cursor;
mod error;
mod idempotency;
mod ops;
pub mod reads;
pub mod state_machine;
pub mod validate;

pub use error::LedgerError;
pub use ops::{Dispose, Release};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use crate::auth::{Permission, Principal};
use crate::db::entities::work_unit;
use crate::db::{self, units};

pub type UnitModel = work_unit::Model;

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
}

impl Ledger {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    pub fn db(&self) -> &DatabaseConnection {
        &self.db
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
        let mut units = Vec::with_capacity(input.len());
        for (i, unit) in input.into_iter().enumerate() {
            validate::external_ref(&format!("units[{i}].externalRef"), &unit.external_ref)?;
            if let Some(domain) = &unit.domain {
                validate::label(&format!("units[{i}].domain"), domain)?;
            }
            if let Some(workflow) = &unit.workflow_id {
                validate::label(&format!("units[{i}].workflowId"), workflow)?;
            }
            units.push(units::NewUnit {
                external_ref: unit.external_ref,
                domain: unit.domain.unwrap_or_else(|| DEFAULT_DOMAIN.to_owned()),
                workflow_id: unit.workflow_id,
            });
        }
        let (fleet, agent) = (who.fleet.clone(), who.name.clone());
        db::in_fleet(&self.db, &who.fleet, move |tx| {
            Box::pin(async move { Ok(units::register(tx, &fleet, &agent, &units).await?) })
        })
        .await
    }

    /// Runs a read in the caller's fleet; needs `ledger:read`.
    pub async fn read<T, F>(&self, who: &Principal, read: F) -> Result<T, LedgerError>
    where
        T: Send,
        F: for<'t> FnOnce(&'t sea_orm::DatabaseTransaction) -> db::BoxFuture<'t, Result<T, LedgerError>> + Send,
    {
        who.require(Permission::LedgerRead)?;
        db::in_fleet(&self.db, &who.fleet, read).await
    }

    pub async fn unit(&self, who: &Principal, id: Uuid) -> Result<Option<UnitModel>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(units::by_id(tx, id).await?) })).await
    }

    pub async fn unit_by_ref(&self, who: &Principal, external_ref: String) -> Result<Option<UnitModel>, LedgerError> {
        self.read(who, move |tx| Box::pin(async move { Ok(units::by_ref(tx, &external_ref).await?) })).await
    }
}
