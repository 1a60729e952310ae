//! `work-ledger backup --out FILE` and `work-ledger restore FILE`: the
//! restore drill (PRD NF4) around `pg_dump` and `pg_restore`. A backup is
//! the ledger database's schema and data in `pg_dump`'s custom format,
//! without owners; a restore goes into an empty database only: it creates
//! the cluster-wide roles the grants and row-level security policies name
//! (as `migrate` does), restores, then applies any migration newer than
//! the backup. A backup of a database made by a development build before
//! the schema baseline (at its last schema) becomes a baseline database on
//! the way (`migration::adopt_pre_baseline`). Per-fleet Grafana logins are cluster-wide roles, not data:
//! re-create them with `work-ledger reader create` after a restore.

use std::path::Path;
use std::process::Stdio;

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::AnyError;
use crate::db::{self, stmt};
use crate::embedded_pg::client_tool;

fn tool(name: &str) -> Result<std::path::PathBuf, AnyError> {
    client_tool(name).ok_or_else(|| {
        format!("`{name}` not found beside the PostgreSQL server binaries or on PATH; install the PostgreSQL client")
            .into()
    })
}

async fn run(program: &Path, args: &[&str]) -> Result<(), AnyError> {
    let out = tokio::process::Command::new(program).args(args).stdin(Stdio::null()).output().await?;
    if out.status.success() {
        return Ok(());
    }
    let name = program.file_name().and_then(|n| n.to_str()).unwrap_or("tool");
    Err(format!("{name} failed: {}", String::from_utf8_lossy(&out.stderr).trim()).into())
}

/// Writes the ledger database at `url` to `out`.
pub async fn backup(url: &str, out: &Path) -> Result<(), AnyError> {
    let out = out.to_str().ok_or("the output path is not UTF-8")?;
    let url = db::libpq_url(url).await?;
    run(&tool("pg_dump")?, &["--format=custom", "--no-owner", "--file", out, "--dbname", &url]).await
}

/// True when the database holds no table of its own (a fresh `CREATE DATABASE`).
async fn is_empty(db: &DatabaseConnection) -> Result<bool, AnyError> {
    let row = db
        .query_one_raw(stmt(
            "SELECT count(*) AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind IN ('r', 'p', 'v', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                AND n.nspname NOT LIKE 'pg_toast%'",
            [],
        ))
        .await?
        .ok_or("cannot count the tables")?;
    Ok(row.try_get::<i64>("", "n")? == 0)
}

/// Restores `file` into the empty database at `url`, then migrates it.
pub async fn restore(url: &str, file: &Path) -> Result<(), AnyError> {
    let file = file.to_str().ok_or("the backup path is not UTF-8")?;
    let conn = db::connect(url, 1).await?;
    let empty = is_empty(&conn).await;
    let roles = match empty {
        Ok(true) => conn.execute_unprepared(migration::ROLES).await.map(|_| ()).map_err(AnyError::from),
        Ok(false) => Err("the target database is not empty: restore into a freshly created database".into()),
        Err(err) => Err(err),
    };
    conn.close().await?;
    roles?;
    let libpq = db::libpq_url(url).await?;
    // The file after `--`: a name that starts with `-` is still a file name.
    let args = ["--no-owner", "--exit-on-error", "--single-transaction", "--dbname", &libpq, "--", file];
    run(&tool("pg_restore")?, &args).await?;
    let conn = db::connect(url, 1).await?;
    let adopted = migration::adopt_pre_baseline(&conn).await;
    conn.close().await?;
    adopted?;
    db::migrate(url).await?;
    Ok(())
}
