//! Operator commands that work on the database directly, like the token
//! commands: [`import`] a backlog, [`audit`] the ledger's cross-table
//! invariants, [`backup`] and restore it, see and rebuild the read models'
//! [`projections`], link fleets to Temporal and reconcile with it ([`temporal`]).

pub mod audit;
pub mod backup;
pub mod import;
pub mod projections;
pub mod temporal;

/// What an operator command fails with: any error, its text shown to the
/// operator (`main` prints it and exits non-zero).
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;
