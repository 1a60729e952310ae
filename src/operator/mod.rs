//! Operator commands that work on the database directly, like the token
//! commands: [`import`] a backlog, [`audit`] the ledger's cross-table
//! invariants, [`backup`] and restore it.

pub mod audit;
pub mod backup;
pub mod import;
