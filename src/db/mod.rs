//! Database access: connecting, migrating, the one transaction helper that
//! request code goes through, and the SQL of each table, one room per job:
//!
//! | module | holds |
//! | --- | --- |
//! | [`writes`] | every write: one call of its SQL function (`migration/src/sql/repeatable/writes.sql`) |
//! | [`events`] | the event log: reads in delivery order, notifications |
//! | [`units`] | single-unit lookups, what an agent holds |
//! | [`reads`] | keyset pages, DataLoader batches and the SQL views |
//! | [`situation`] | what is left to claim (`claimSituation`), whether a domain exists |
//! | [`tokens`] | `api_tokens` |
//! | [`reader_logins`] | per-fleet Grafana logins |
//! | [`target`], [`primary`] | multi-host URLs: finding and following the read-write server |
//!
//! | [`connect`] | the pools, with their session limits; migrating |
//! | [`transaction`] | beginning a transaction, a fleet's or a request's session in one, pool users counted |
//!
//! Nothing here knows the domain's error type: functions return [`DbErr`]
//! and [`in_fleet`] hands the caller's own error type back.

pub mod aggregates;
mod connect;
pub mod entities;
pub mod events;
pub mod primary;
pub mod questions;
pub mod reader_logins;
pub mod reads;
pub mod situation;
pub mod target;
pub mod temporal;
pub mod tokens;
mod transaction;
pub mod units;
pub mod writes;

use sea_orm::{DbBackend, DbErr, RuntimeErr, Statement, Value};

pub use connect::{
    IDLE_PING, SERVICE_IDLE_IN_TRANSACTION_TIMEOUT, SessionLimits, connect, connect_limited, connect_service, follower,
    libpq_url, migrate,
};
pub use transaction::{APP_ROLE, BoxFuture, InFlight, begin, in_fleet, in_fleet_counted, in_session, waiters};

pub fn stmt(sql: &str, values: impl IntoIterator<Item = Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// How the events a write appends are announced (SPEC §6):
/// the write functions take it as `p_notify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// The events trigger issues `pg_notify` inside the transaction.
    InTransaction,
    /// The caller notifies after the commit (`work_ledger.notify =
    /// 'after-commit'`); the trigger stays silent.
    AfterCommit,
}

impl Notify {
    /// The value of the transaction-local `work_ledger.notify` setting.
    pub fn setting(self) -> &'static str {
        match self {
            Self::InTransaction => "",
            Self::AfterCommit => "after-commit",
        }
    }
}

/// The SQLSTATE and constraint name of a database error, when it is one.
pub fn violation(err: &DbErr) -> Option<(String, String)> {
    let runtime = match err {
        DbErr::Exec(e) | DbErr::Query(e) | DbErr::Conn(e) => e,
        _ => return None,
    };
    let RuntimeErr::SqlxError(sqlx_err) = runtime else {
        return None;
    };
    let db_err = sqlx_err.as_database_error()?;
    Some((
        db_err.code().map(|c| c.into_owned()).unwrap_or_default(),
        db_err.constraint().unwrap_or_default().to_owned(),
    ))
}

/// True when `err` says the database is out of reach rather than that the
/// request was wrong: no connection could be had or the one in use broke
/// (I/O, TLS, protocol, pool timeout), or the server is shutting down,
/// starting up, lost the connection or turned read-only (SQLSTATE classes
/// 08 and 57P0x, 25006). A client retries such a request with the same
/// idempotency key.
pub fn is_unavailable(err: &DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    let runtime = match err {
        DbErr::ConnectionAcquire(_) => return true,
        DbErr::Exec(e) | DbErr::Query(e) | DbErr::Conn(e) => e,
        _ => return false,
    };
    let RuntimeErr::SqlxError(sqlx_err) = runtime else {
        return false;
    };
    match sqlx_err.as_ref() {
        Sqlx::Io(_) | Sqlx::Tls(_) | Sqlx::Protocol(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed => true,
        // 25006 read_only_sql_transaction: the server was demoted under us.
        Sqlx::Database(db_err) => db_err.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "53300" | "25006")
        }),
        _ => false,
    }
}

/// True when a statement ran into the session's statement or lock timeout
/// (SQLSTATE 57014 query_canceled, 55P03 lock_not_available).
pub fn is_timeout(err: &DbErr) -> bool {
    violation(err).is_some_and(|(code, _)| code == "57014" || code == "55P03")
}

/// True when `err` is a violation of the named constraint or unique index.
pub fn is_violation_of(err: &DbErr, constraint: &str) -> bool {
    violation(err).is_some_and(|(_, name)| name == constraint)
}
