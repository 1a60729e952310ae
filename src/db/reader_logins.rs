//! Read-only database roles for Grafana, one per fleet (migration 0002 has the
//! policies). Run by the CLI as the migrating role, never by request code.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, TransactionTrait};

use super::stmt;

/// Creates LOGIN role `role` for `fleet`: member of `work_ledger_reader`,
/// `work_ledger.fleet` as its default setting, and pinned to the fleet by the
/// `fleet_reader` policies whatever it sets.
pub async fn create(db: &DatabaseConnection, role: &str, fleet: &str, password: &str) -> Result<(), DbErr> {
    let tx = db.begin().await?;
    // format() quotes the identifier and the literals; DDL takes no parameters.
    let row = tx
        .query_one_raw(stmt(
            "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L NOSUPERUSER NOBYPASSRLS IN ROLE work_ledger_reader', $1::text, $3::text) AS create_role,
                    format('ALTER ROLE %I SET work_ledger.fleet = %L', $1::text, $2::text) AS set_fleet",
            [role.into(), fleet.into(), password.into()],
        ))
        .await?
        .ok_or(DbErr::RecordNotFound("format".into()))?;
    let create_role: String = row.try_get("", "create_role")?;
    let set_fleet: String = row.try_get("", "set_fleet")?;
    tx.execute_unprepared(&create_role).await?;
    tx.execute_unprepared(&set_fleet).await?;
    tx.execute_raw(stmt("INSERT INTO fleet_readers (role_name, fleet) VALUES ($1, $2)", [role.into(), fleet.into()]))
        .await?;
    tx.commit().await
}
