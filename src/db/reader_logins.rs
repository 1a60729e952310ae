//! Read-only database roles for Grafana, one per fleet (the
//! policies). Run by the CLI as the migrating role, never by request code.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};

use super::stmt;

/// Limits every reader login gets: a session that LISTENs
/// and then idles in a transaction, or runs one endless statement, would pin
/// the notification queue, and a full queue stops every write.
pub const READER_STATEMENT_TIMEOUT: &str = "60s";
pub const READER_IDLE_IN_TRANSACTION_TIMEOUT: &str = "60s";
/// What the settings promise, kept by the server's reader warden
/// (`live::warden`) even when a login changes its own settings.
pub const MAX_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(60);

/// Creates LOGIN role `role` for `fleet`: member of `work_ledger_reader`,
/// `work_ledger.fleet` as its default setting, pinned to the fleet by the
/// `fleet_reader` policies whatever it sets, with `statement_timeout` and
/// `idle_in_transaction_session_timeout` as role settings, and a member of
/// `work_ledger_warden`, which ends its overlong transactions.
pub async fn create(db: &DatabaseConnection, role: &str, fleet: &str, password: &str) -> Result<(), DbErr> {
    let tx = crate::db::begin(db).await?;
    // format() quotes the identifier and the literals; DDL takes no parameters.
    let row = tx
        .query_one_raw(stmt(
            "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L NOSUPERUSER NOBYPASSRLS IN ROLE work_ledger_reader', $1::text, $3::text) AS create_role,
                    format('ALTER ROLE %I SET work_ledger.fleet = %L', $1::text, $2::text) AS set_fleet,
                    format('ALTER ROLE %I SET statement_timeout = %L', $1::text, $4::text) AS set_statement_timeout,
                    format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', $1::text, $5::text) AS set_idle_timeout,
                    format('GRANT %I TO work_ledger_warden', $1::text) AS grant_warden",
            [
                role.into(),
                fleet.into(),
                password.into(),
                READER_STATEMENT_TIMEOUT.into(),
                READER_IDLE_IN_TRANSACTION_TIMEOUT.into(),
            ],
        ))
        .await?
        .ok_or(DbErr::RecordNotFound("format".into()))?;
    let create_role: String = row.try_get("", "create_role")?;
    tx.execute_unprepared(&create_role).await?;
    for setting in ["set_fleet", "set_statement_timeout", "set_idle_timeout", "grant_warden"] {
        let sql: String = row.try_get("", setting)?;
        tx.execute_unprepared(&sql).await?;
    }
    tx.execute_raw(stmt("INSERT INTO fleet_readers (role_name, fleet) VALUES ($1, $2)", [role.into(), fleet.into()]))
        .await?;
    // CONNECT to this database alone, its connection limit and temporary files (warden.sql).
    tx.execute_raw(stmt("SELECT ledger_admit_reader($1)", [role.into()])).await?;
    tx.commit().await
}

/// The databases of the cluster other than the ledger's that `role` may
/// connect to. Advisory locks, connection slots and the notification queue
/// are the cluster's: a reader login in another database can fill what
/// every write of the ledger needs. The deployments the project ships
/// revoke CONNECT from PUBLIC on every other database; an external
/// cluster's operator does it by hand.
pub async fn other_databases(db: &DatabaseConnection, role: &str) -> Result<Vec<String>, DbErr> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT d.datname::text AS datname FROM pg_database d
              WHERE d.datallowconn AND d.datname <> current_database()
                AND has_database_privilege($1, d.datname, 'CONNECT')
              ORDER BY 1",
            [role.into()],
        ))
        .await?;
    rows.iter().map(|row| row.try_get("", "datname")).collect()
}
