//! What the load generators share: a scratch database beside DATABASE_URL (or
//! in an embedded PostgreSQL), latency samples, and the machine description.

#![allow(dead_code)] // each bench uses a different part

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection};
use work_ledger::db::{self, stmt};
use work_ledger::embedded_pg::EmbeddedPostgres;

pub mod baseline;
pub mod seed;

pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// A freshly migrated database for one benchmark run.
pub struct Scratch {
    pub url: String,
    pub embedded: Option<EmbeddedPostgres>,
}

pub async fn scratch_database(prefix: &str) -> Result<Scratch, AnyError> {
    let (base_url, embedded) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let dir = tempfile::Builder::new().prefix("wl-bench-").tempdir()?.keep();
            let pg = EmbeddedPostgres::start(&dir).await?;
            (pg.url().to_owned(), Some(pg))
        }
    };
    let url = empty_database(&base_url, &format!("{prefix}_{}", std::process::id())).await?;
    db::migrate(&url).await?;
    Ok(Scratch { url, embedded })
}

/// A database an earlier run kept on the server of DATABASE_URL, migrated to
/// this build's schema, then vacuumed and analyzed: what the migrations
/// added or rewrote, and what earlier runs wrote, is read as autovacuum
/// would leave it (a server may run without it; pages already all-visible
/// are skipped, a few seconds at 10,000,000 events).
pub async fn kept_database(name: &str) -> Result<Scratch, AnyError> {
    let base = std::env::var("DATABASE_URL").map_err(|_| "--ledger needs DATABASE_URL (the server that keeps it)")?;
    let url = database_url(&base, name)?;
    db::migrate(&url).await?;
    let owner = db::connect(&url, 1).await?;
    owner.execute_unprepared("VACUUM (ANALYZE)").await?;
    owner.close().await?;
    Ok(Scratch { url, embedded: None })
}

/// `CREATE DATABASE name` on the server of `url`; returns its URL.
pub async fn empty_database(url: &str, name: &str) -> Result<String, AnyError> {
    admin(url, &format!("CREATE DATABASE {name}")).await?;
    database_url(url, name)
}

/// The URL of database `name` on the server of `url`.
fn database_url(url: &str, name: &str) -> Result<String, AnyError> {
    let mut url = url::Url::parse(url)?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// The name of the database `url` connects to.
pub fn database_name(url: &str) -> Result<String, AnyError> {
    Ok(url::Url::parse(url)?.path().trim_start_matches('/').to_owned())
}

/// One statement on the server of `url`, from its `postgres` database.
pub async fn admin(url: &str, sql: &str) -> Result<(), AnyError> {
    let mut admin_url = url::Url::parse(url)?;
    admin_url.set_path("/postgres");
    let admin = db::connect(admin_url.as_str(), 1).await?;
    admin.execute_unprepared(sql).await?;
    admin.close().await?;
    Ok(())
}

/// Drops a scratch database made beside DATABASE_URL (a shared server keeps
/// what a run leaves otherwise).
pub async fn drop_scratch(url: &str) -> Result<(), AnyError> {
    admin(url, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", database_name(url)?)).await
}

/// Latencies of one operation.
#[derive(Default, Clone)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    pub fn pct(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return 0.0;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i].as_secs_f64() * 1000.0
    }
}

pub async fn timed<T>(samples: &mut Samples, fut: impl std::future::Future<Output = T>) -> T {
    let t = Instant::now();
    let out = fut.await;
    samples.0.push(t.elapsed());
    out
}

/// One line naming the machine and the PostgreSQL it measured.
pub async fn machine(db: &DatabaseConnection) -> Result<String, AnyError> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<u64>().ok()))
        .map(|kb| kb / 1024 / 1024)
        .unwrap_or(0);
    let row = db
        .query_one_raw(stmt(
            "SELECT split_part(version(), ' on ', 1) AS v, current_setting('fsync') AS fsync,
                    current_setting('synchronous_commit') AS sc, current_setting('shared_buffers') AS sb",
            [],
        ))
        .await?
        .ok_or("no version row")?;
    let (v, fsync, sc, sb): (String, String, String, String) =
        (row.try_get("", "v")?, row.try_get("", "fsync")?, row.try_get("", "sc")?, row.try_get("", "sb")?);
    Ok(format!(
        "{cores} cores ({cpu}), {mem_gib} GiB RAM; {v} (fsync={fsync}, synchronous_commit={sc}, shared_buffers={sb})"
    ))
}
