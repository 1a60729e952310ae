//! The one mapping from domain errors to GraphQL errors: `extensions.code`,
//! the actionable message, and machine-readable details where an agent needs
//! them. Database text never gets here (see `LedgerError::internal`).

use async_graphql::{Error, ErrorExtensions};

use crate::ledger::LedgerError;

impl From<LedgerError> for Error {
    fn from(err: LedgerError) -> Self {
        Error::new(err.to_string()).extend_with(|_, ext| {
            ext.set("code", err.code());
            match &err {
                LedgerError::IllegalTransition { legal, from, to, .. } => {
                    ext.set("legalActions", legal.clone());
                    ext.set("from", from.api_name());
                    ext.set("to", to.clone());
                }
                LedgerError::UnitAlreadyClaimed { holder, until, .. } => {
                    ext.set("holder", holder.clone());
                    ext.set("leaseExpiresAt", until.clone());
                }
                LedgerError::AgentBusy { held, .. } => ext.set("heldUnitId", held.to_string()),
                LedgerError::Forbidden(permission) => ext.set("permission", permission.as_str()),
                LedgerError::InvalidInput { argument, .. } => ext.set("argument", argument.clone()),
                LedgerError::Internal { correlation_id } => ext.set("correlationId", correlation_id.to_string()),
                _ => {}
            }
        })
    }
}

pub type Result<T> = std::result::Result<T, Error>;
