//! What the load bench measures the service against, in the same run and on
//! the same PostgreSQL: the seed architecture's claim transaction (its own
//! small schema in the scratch database) and graphile-worker (Node, from npm,
//! in this folder).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use work_ledger::db::{self, stmt};

use super::{AnyError, Args};

pub mod seed {
    //! The seed architecture: a queue table, attempts and events with no
    //! triggers, no row-level security and no NOTIFY. Its claim is one
    //! transaction of four statements: pick the oldest READY unit with
    //! `FOR UPDATE SKIP LOCKED`, take it, open the attempt, append the event.

    use super::*;

    const SCHEMA: &str = "
        CREATE SCHEMA seed;
        CREATE TABLE seed.units (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            external_ref text NOT NULL,
            state text NOT NULL DEFAULT 'ready',
            claimed_by text,
            attempt_count int NOT NULL DEFAULT 0,
            lease_expires_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE INDEX seed_units_ready ON seed.units (created_at, id) WHERE state = 'ready';
        CREATE TABLE seed.attempts (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            unit_id uuid NOT NULL REFERENCES seed.units,
            attempt_no int NOT NULL,
            agent_id text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE TABLE seed.events (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            unit_id uuid NOT NULL REFERENCES seed.units,
            attempt_id uuid REFERENCES seed.attempts,
            event_type text NOT NULL,
            agent_id text,
            detail jsonb NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );";

    /// Creates the seed schema with `units` READY units.
    pub async fn create(db: &DatabaseConnection, units: usize) -> Result<(), AnyError> {
        db.execute_unprepared(SCHEMA).await?;
        db.execute_raw(stmt(
            "INSERT INTO seed.units (external_ref) SELECT 'unit-' || g FROM generate_series(1, $1) g",
            [(units as i64).into()],
        ))
        .await?;
        Ok(())
    }

    /// One claim by `agent`: BEGIN, four statements, COMMIT. False when no
    /// unit was left.
    pub async fn claim(db: &DatabaseConnection, agent: &str) -> Result<bool, AnyError> {
        let tx = db.begin().await?;
        let picked = tx
            .query_one_raw(stmt(
                "SELECT id, attempt_count FROM seed.units WHERE state = 'ready'
                  ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                [],
            ))
            .await?;
        let Some(row) = picked else {
            tx.rollback().await?;
            return Ok(false);
        };
        let (unit, count): (uuid::Uuid, i32) = (row.try_get("", "id")?, row.try_get("", "attempt_count")?);
        tx.execute_raw(stmt(
            "UPDATE seed.units SET state = 'claimed', claimed_by = $2, attempt_count = $3,
                    lease_expires_at = now() + interval '900 seconds', updated_at = clock_timestamp()
              WHERE id = $1",
            [unit.into(), agent.into(), (count + 1).into()],
        ))
        .await?;
        let attempt = tx
            .query_one_raw(stmt(
                "INSERT INTO seed.attempts (unit_id, attempt_no, agent_id) VALUES ($1, $2, $3) RETURNING id",
                [unit.into(), (count + 1).into(), agent.into()],
            ))
            .await?
            .ok_or("no attempt id")?;
        let attempt: uuid::Uuid = attempt.try_get("", "id")?;
        tx.execute_raw(stmt(
            "INSERT INTO seed.events (unit_id, attempt_id, event_type, agent_id, detail)
             VALUES ($1, $2, 'claimed', $3, jsonb_build_object('attempt_no', $4::int))",
            [unit.into(), attempt.into(), agent.into(), (count + 1).into()],
        ))
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The same claim as one autocommit statement (the four as one CTE):
    /// the least SQL any claim can send, with none of the ledger's checks.
    /// The unit claimed, if any was left.
    pub async fn claim_statement(db: &DatabaseConnection, agent: &str) -> Result<Option<uuid::Uuid>, AnyError> {
        let claimed = db
            .query_one_raw(stmt(
                "WITH pick AS (
                     SELECT id, attempt_count FROM seed.units WHERE state = 'ready'
                      ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
                 ), taken AS (
                     UPDATE seed.units u SET state = 'claimed', claimed_by = $1, attempt_count = pick.attempt_count + 1,
                            lease_expires_at = now() + interval '900 seconds', updated_at = clock_timestamp()
                       FROM pick WHERE u.id = pick.id
                     RETURNING u.id, u.attempt_count
                 ), attempt AS (
                     INSERT INTO seed.attempts (unit_id, attempt_no, agent_id)
                     SELECT id, attempt_count, $1 FROM taken
                     RETURNING id, unit_id, attempt_no
                 ), ev AS (
                     INSERT INTO seed.events (unit_id, attempt_id, event_type, agent_id, detail)
                     SELECT unit_id, id, 'claimed', $1, jsonb_build_object('attempt_no', attempt_no) FROM attempt
                 )
                 SELECT unit_id FROM attempt",
                [agent.into()],
            ))
            .await?;
        Ok(claimed.map(|row| row.try_get("", "unit_id")).transpose()?)
    }

    /// One step of the holder's unit as one autocommit statement: the state
    /// from `from` to `to` and its event (the seed's start and finish).
    pub async fn step(
        db: &DatabaseConnection,
        unit: uuid::Uuid,
        agent: &str,
        from: &str,
        to: &str,
    ) -> Result<bool, AnyError> {
        let stepped = db
            .query_one_raw(stmt(
                "WITH u AS (
                     UPDATE seed.units SET state = $4, updated_at = clock_timestamp()
                      WHERE id = $1 AND claimed_by = $2 AND state = $3
                     RETURNING id
                 ), ev AS (
                     INSERT INTO seed.events (unit_id, event_type, agent_id, detail)
                     SELECT id, 'transitioned', $2, jsonb_build_object('from', $3::text, 'to', $4::text) FROM u
                 )
                 SELECT id FROM u",
                [unit.into(), agent.into(), from.into(), to.into()],
            ))
            .await?;
        Ok(stepped.is_some())
    }
}

/// graphile-worker's result.
pub struct Peer {
    pub version: String,
    pub concurrency: usize,
    pub pool: usize,
    pub jobs: u64,
    pub seconds: f64,
}

impl Peer {
    pub fn rate(&self) -> f64 {
        self.jobs as f64 / self.seconds
    }
}

/// Runs graphile-worker (`benches/peers/graphile.mjs`) with no-op jobs and
/// `agents` concurrency in a database of its own beside `url`. `None` when
/// Node is not installed; installs the npm package on first use.
pub async fn graphile_worker(url: &str, args: &Args) -> Result<Option<Peer>, AnyError> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
    if tokio::process::Command::new("node").arg("--version").output().await.is_err() {
        return Ok(None);
    }
    if !dir.join("node_modules/graphile-worker").exists() {
        eprintln!("npm install (graphile-worker)...");
        let status = tokio::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .await?;
        if !status.success() {
            return Err("npm install failed".into());
        }
    }
    let version = std::fs::read_to_string(dir.join("node_modules/graphile-worker/package.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_default();

    let mut peer_url = url::Url::parse(url)?;
    let name = format!("{}_gw", peer_url.path().trim_start_matches('/'));
    let mut admin_url = peer_url.clone();
    admin_url.set_path("/postgres");
    let admin = db::connect(admin_url.as_str(), 1).await?;
    admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await?;
    peer_url.set_path(&format!("/{name}"));

    eprintln!("graphile-worker {version}...");
    // More than an idle 2-core machine runs in the window (about 3,500/s
    // there), so that the rate is a rate and not a floor.
    let jobs = (args.seconds as usize + 2) * 8000;
    let out = tokio::time::timeout(
        Duration::from_secs(args.seconds + 120),
        tokio::process::Command::new("node")
            .arg("graphile.mjs")
            .args([
                peer_url.as_str(),
                &args.agents.to_string(),
                &args.seconds.to_string(),
                &jobs.to_string(),
                &args.peer_pool.to_string(),
            ])
            .current_dir(&dir)
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output(),
    )
    .await;
    admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
    admin.close().await?;
    let out = out.map_err(|_| "graphile-worker did not finish in time")??;
    if !out.status.success() {
        return Err(format!("graphile-worker exited with {}", out.status).into());
    }
    let line: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let (Some(done), Some(seconds)) = (line["jobs"].as_u64(), line["seconds"].as_f64()) else {
        return Err(format!("unexpected graphile-worker output: {line}").into());
    };
    if line["leftover"].as_u64() == Some(0) {
        eprintln!("graphile-worker ran out of jobs: its rate is a floor");
    }
    Ok(Some(Peer { version, concurrency: args.agents, pool: args.peer_pool, jobs: done, seconds }))
}
