//! Load generator: N concurrent agents against the real server over HTTP,
//! beside, in the same run, the seed architecture's claim transaction as raw
//! SQL (the ceiling), the project's own claim statement straight over a pool,
//! and graphile-worker (when Node is installed; `benches/peers/`).
//!
//!   cargo bench --bench load -- [--agents 64] [--race-agents 256] [--seconds 10] [--pool 32] [--peer-pool 64]
//!                                 [--notify in-transaction]
//!   cargo bench --bench load -- --at-size 1000000 [--agents 64] [--seconds 10]
//!   cargo bench --bench load -- --floor-only             (the HTTP floor alone)
//!   cargo bench --bench load -- --baseline PATH/TO/OLD/work-ledger   (also runs the HTTP floor and both
//!                                 claim-and-finish phases against that build, on a database of its own)
//!
//! `WL_BENCH_EVENT_POSITION=no-marker` runs the same phases with the live
//! event writer marker (migration 0004's advisory lock) left out of the
//! events trigger, to measure what the marker costs; `xid-only` goes back to
//! migration 0003's trigger (transaction id only, no batch sequence). Both
//! break live delivery's exactness and exist only for this comparison.
//! `WL_BENCH_IDS=random` gives units, attempts, events and questions random
//! (version 4) ids again instead of migration 0026's time-ordered ones, to
//! measure the WAL and time that random index pages cost.
//! `WL_BENCH_AGENT_LATEST=off` leaves each name's latest attempt unkept
//! (migration 0040's trigger disabled), to measure what keeping it costs a
//! claim; the roster is wrong in that run.
//!
//! Uses DATABASE_URL when set (a scratch database is created next to it),
//! otherwise an embedded PostgreSQL in a temporary folder. Prints a Markdown
//! report for docs/BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use serde_json::{Value, json};
use work_ledger::auth::{self, Role};
use work_ledger::db::entities::Disposition;
use work_ledger::db::writes;
use work_ledger::db::{self, Notify, stmt};
use work_ledger::http::Application;
use work_ledger::ledger::{Ledger, claims, lifecycle};

mod peers;
mod support;

/// The service's allocator (src/main.rs): the server runs in this process.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use peers::{Peer, graphile_worker, seed};
use support::{AnyError, Samples, scratch_database, timed};

struct Args {
    agents: usize,
    race_agents: usize,
    seconds: u64,
    /// The server's database pool.
    pool: u32,
    /// graphile-worker's pool (its default is 10).
    peer_pool: usize,
    /// How the server announces events (`--notify in-transaction` for the trigger).
    notify: Notify,
    /// Only the metrics' overhead: claimNext over HTTP against a server
    /// without metrics and one with them (scraped every second), alternated.
    metrics_overhead: bool,
    /// Units (and tokens) seeded per agent for each phase (`--per-agent`):
    /// enough that no phase runs out within its seconds on an idle machine.
    per_agent: usize,
    /// Only writes at size (`--at-size UNITS`): claim-and-finish over HTTP on
    /// an almost empty ledger, then after the reads bench's seed has grown
    /// the same database to UNITS units and 10 events per unit.
    at_size: Option<i64>,
    /// A previous build's binary to measure beside this one (`--baseline BIN`).
    baseline: Option<String>,
    /// Only the HTTP floor (`--floor-only`), to look at it alone.
    floor_only: bool,
}

fn args() -> Args {
    let mut args = Args {
        agents: 64,
        race_agents: 256,
        seconds: 10,
        pool: 32,
        peer_pool: 64,
        notify: Notify::AfterCommit,
        metrics_overhead: false,
        per_agent: 600,
        at_size: None,
        baseline: None,
        floor_only: false,
    };
    let argv: Vec<String> = std::env::args().collect();
    args.metrics_overhead = argv.iter().any(|a| a == "--metrics-overhead");
    args.floor_only = argv.iter().any(|a| a == "--floor-only");
    for pair in argv.windows(2) {
        let value = pair[1].parse::<u64>().ok();
        match (pair[0].as_str(), value) {
            ("--agents", Some(v)) => args.agents = v as usize,
            ("--race-agents", Some(v)) => args.race_agents = v as usize,
            ("--seconds", Some(v)) => args.seconds = v,
            ("--pool", Some(v)) => args.pool = v as u32,
            ("--peer-pool", Some(v)) => args.peer_pool = v as usize,
            ("--per-agent", Some(v)) => args.per_agent = v as usize,
            ("--at-size", Some(v)) => args.at_size = Some(v as i64),
            ("--notify", _) if pair[1] == "in-transaction" => args.notify = Notify::InTransaction,
            ("--baseline", _) => args.baseline = Some(pair[1].clone()),
            _ => {}
        }
    }
    args
}

struct Report {
    name: String,
    ops: usize,
    elapsed: Duration,
    samples: Vec<(&'static str, Samples)>,
}

impl Report {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// `args.agents` tasks each running `job` over and over (a fresh agent name
/// `{prefix}-{task}-{n}` each time) until the deadline, `args.per_agent`
/// runs (so that phases sharing the seed's table each have their share of
/// it) or until it finds nothing left to claim (`Ok(false)`); each run is
/// one `op` sample.
async fn until_drained<J, Fut>(
    pool: &DatabaseConnection,
    args: &Args,
    name: &str,
    op: &'static str,
    prefix: &'static str,
    job: J,
) -> Report
where
    J: Fn(DatabaseConnection, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<bool, AnyError>> + Send + 'static,
{
    let (pool, label, per_agent) = (pool.clone(), name.to_owned(), args.per_agent);
    drive(args.agents, args.seconds, name, move |i, deadline| {
        let (pool, job, label) = (pool.clone(), job.clone(), label.clone());
        async move {
            let mut s = Samples::default();
            let mut n = 0;
            while Instant::now() < deadline && n < per_agent {
                match timed(&mut s, job(pool.clone(), format!("{prefix}-{i}-{n}"))).await {
                    Ok(true) => n += 1,
                    Ok(false) => break,
                    Err(err) => {
                        eprintln!("{label} failed: {err}");
                        break;
                    }
                }
            }
            vec![(op, s)]
        }
    })
    .await
}

/// Runs `agents` tasks until the deadline; each returns (ops, per-op samples).
async fn drive<F, Fut>(agents: usize, seconds: u64, name: &str, task: F) -> Report
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Vec<(&'static str, Samples)>> + Send + 'static,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let handles: Vec<_> = (0..agents).map(|i| tokio::spawn(task(i, deadline))).collect();
    let mut merged: Vec<(&'static str, Samples)> = Vec::new();
    for handle in handles {
        for (op, samples) in handle.await.unwrap_or_default() {
            match merged.iter_mut().find(|(name, _)| *name == op) {
                Some((_, all)) => all.0.extend(samples.0),
                None => merged.push((op, samples)),
            }
        }
    }
    let elapsed = start.elapsed();
    let ops = merged.first().map(|(_, s)| s.0.len()).unwrap_or(0);
    Report { name: name.to_owned(), ops, elapsed, samples: merged }
}

/// Inserts `n` READY units for `fleet` in one statement (setup, not measured).
async fn seed_units(db: &DatabaseConnection, fleet: &str, n: usize) -> Result<(), AnyError> {
    db.execute_raw(stmt(
        "INSERT INTO work_units (fleet, external_ref) SELECT $1, 'unit-' || g FROM generate_series(1, $2) g",
        [fleet.into(), (n as i64).into()],
    ))
    .await?;
    Ok(())
}

/// Mints in one statement a token for every agent the raw-SQL phases of
/// `fleet` name (`{fleet}-{task}-{n}`, [`raw_claims`]), known by the hash
/// [`sql_agent`] gives the name: every write acts as a token (SPEC §8).
async fn seed_sql_agents(db: &DatabaseConnection, fleet: &str, tasks: usize, per_task: usize) -> Result<(), AnyError> {
    db.execute_raw(stmt(
        "INSERT INTO api_tokens (fleet, name, permissions, token_hash)
         SELECT $1, n, ARRAY['ledger:read', 'units:claim'], sha256(convert_to(n, 'UTF8'))
           FROM generate_series(0, $2 - 1) t, generate_series(0, $3 - 1) k, LATERAL (SELECT $1 || '-' || t || '-' || k) AS x(n)",
        [fleet.into(), (tasks as i64).into(), (per_task as i64).into()],
    ))
    .await?;
    Ok(())
}

/// The token hash [`seed_sql_agents`] gave agent `name`.
fn sql_agent(name: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(name.as_bytes()).to_vec()
}

/// Mints `n` agent tokens for `fleet` in one statement; returns the secrets.
async fn seed_tokens(db: &DatabaseConnection, fleet: &str, prefix: &str, n: usize) -> Result<Vec<String>, AnyError> {
    let (mut names, mut hashes, mut secrets) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (secret, hash) = auth::new_token();
        names.push(format!("{prefix}-{i}"));
        hashes.push(hex::encode(hash));
        secrets.push(secret);
    }
    let permissions: Vec<String> = Role::Agent.permissions().iter().map(|p| p.as_str().to_owned()).collect();
    db.execute_raw(stmt(
        "INSERT INTO api_tokens (fleet, name, permissions, token_hash)
         SELECT $1, name, $3, decode(hash, 'hex') FROM unnest($2::text[], $4::text[]) AS t(name, hash)",
        [fleet.into(), names.into(), permissions.into(), hashes.into()],
    ))
    .await?;
    Ok(secrets)
}

const CLAIM: &str = "mutation { claimNext(leaseSeconds: 900) { id currentAttemptId } }";

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = args();
    let scratch = scratch_database("wl_bench").await?;
    let url = scratch.url.clone();
    if args.metrics_overhead {
        let owner = db::connect(&url, (args.agents + 4) as u32).await?;
        return metrics_overhead(&args, &url, &owner).await;
    }
    if let Some(units) = args.at_size {
        let owner = db::connect(&url, 4).await?;
        at_size(&args, &url, &owner, units).await?;
        owner.close().await?;
        match scratch.embedded {
            Some(pg) => pg.stop().await,
            None => support::drop_scratch(&url).await?,
        }
        return Ok(());
    }
    if args.floor_only {
        let owner = db::connect(&url, 4).await?;
        let tokens = Arc::new(seed_tokens(&owner, "api", "floor", args.agents).await?);
        let http = serve(&args, &url, args.agents).await?;
        let floor = floor_phase(&http, &args, "HTTP floor: { __typename } with a token", tokens).await;
        print_table(&[&floor], None);
        owner.close().await?;
        return Ok(());
    }
    // Setup and settling only; each phase opens the pool it needs and closes
    // it after, so that the phases fit under a shared server's max_connections.
    let owner = db::connect(&url, 4).await?;
    // The profile: time spent in each PL/pgSQL function (triggers included),
    // by the sessions opened after this.
    let profiled = owner
        .execute_unprepared(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = ''pl''', current_database()); END $$",
        )
        .await
        .is_ok();
    let position = std::env::var("WL_BENCH_EVENT_POSITION").unwrap_or_else(|_| "marker".into());
    event_position_variant(&owner, &position).await?;
    if std::env::var("WL_BENCH_IDS").is_ok_and(|ids| ids == "random") {
        for table in ["work_units", "work_unit_attempts", "work_unit_events", "blocking_questions"] {
            owner
                .execute_unprepared(&format!("ALTER TABLE {table} ALTER COLUMN id SET DEFAULT gen_random_uuid()"))
                .await?;
        }
    }
    if std::env::var("WL_BENCH_AGENT_LATEST").is_ok_and(|kept| kept == "off") {
        owner
            .execute_unprepared("ALTER TABLE work_unit_attempts DISABLE TRIGGER work_unit_attempts_agent_latest")
            .await?;
        eprintln!("agent_latest variant: off");
    }

    let per_agent = args.per_agent;
    let claims_needed = args.agents * per_agent;
    let race_needed = args.race_agents * 60;

    eprintln!("seeding {claims_needed} units and tokens per phase...");
    for fleet in ["warm", "raw", "raw-notify", "rls", "api", "paced", "finish", "finish-keyed", "finish-sql"] {
        seed_units(&owner, fleet, claims_needed).await?;
    }
    for fleet in ["warm", "raw", "raw-notify", "rls"] {
        seed_sql_agents(&owner, fleet, args.agents, per_agent).await?;
    }
    seed_sql_agents(&owner, "finish-sql", args.agents, 1).await?;
    seed_units(&owner, "race", race_needed).await?;
    seed_units(&owner, "life", claims_needed / 4).await?;
    let api_tokens = Arc::new(seed_tokens(&owner, "api", "agent", claims_needed).await?);
    let paced_tokens = Arc::new(seed_tokens(&owner, "paced", "agent", claims_needed).await?);
    let race_tokens = Arc::new(seed_tokens(&owner, "race", "agent", race_needed).await?);
    let finish_tokens = Arc::new(seed_tokens(&owner, "finish", "agent", args.agents).await?);
    let keyed_tokens = Arc::new(seed_tokens(&owner, "finish-keyed", "agent", args.agents).await?);
    let life_tokens = Arc::new(seed_tokens(&owner, "life", "agent", args.agents).await?);
    let floor_tokens = Arc::new(seed_tokens(&owner, "api", "floor", args.agents).await?);
    // Three times: the seed's transaction, the same claim as one statement,
    // and the seed's claim-and-finish.
    seed::create(&owner, 3 * claims_needed).await?;
    owner.execute_unprepared("VACUUM ANALYZE").await?;

    // Every phase starts from a vacuumed table: on two cores an autovacuum of
    // work_units triggered by the previous phase's updates would otherwise
    // run inside the next phase and be charged to it.
    // The read models are folded too (the projector would otherwise fold the
    // previous phase's events inside the next one): each phase pays for the
    // folding of its own events only, which the server's projector does
    // while it runs.
    let settle = || async {
        owner.execute_unprepared("SELECT ledger_project(p.name, 100000000) FROM ledger_projections() p").await?;
        owner.execute_unprepared("VACUUM ANALYZE work_units, work_unit_attempts, work_unit_events").await?;
        owner.execute_unprepared("CHECKPOINT").await.map(|_| ())
    };

    // The peer first, while none of our pools holds connections.
    let peer = match graphile_worker(&url, &args).await {
        Ok(peer) => peer,
        Err(why) => {
            eprintln!("graphile-worker peer not run: {why}");
            None
        }
    };
    settle().await?;

    let raw_pool = db::connect(&url, (args.agents + 2) as u32).await?;
    // Warm-up (not reported): caches, plans, and the first autovacuum after seeding.
    eprintln!("warm-up...");
    {
        let raw_pool = raw_pool.clone();
        drive(args.agents, 3, "warm-up", move |i, deadline| {
            let pool = raw_pool.clone();
            async move {
                raw_claims(&pool, "warm", i, deadline, per_agent, after_commit()).await;
                Vec::new()
            }
        })
        .await;
    }
    settle().await?;

    // The ceiling: the seed architecture's claim transaction on its own schema.
    eprintln!("seed claim transaction...");
    let seed = until_drained(&raw_pool, &args, "seed claim transaction (raw SQL, 6 round trips)", "claim", "seed", {
        |pool, agent| async move { seed::claim(&pool, &agent).await }
    })
    .await;
    settle().await?;

    // The same minimal claim as one autocommit statement: the least any claim can cost.
    eprintln!("seed claim statement...");
    let wal_before = wal_position(&owner).await?;
    let seed_one =
        until_drained(&raw_pool, &args, "seed claim as one statement (raw SQL, 1 round trip)", "claim", "seed1", {
            |pool, agent| async move { Ok(seed::claim_statement(&pool, &agent).await?.is_some()) }
        })
        .await;
    let seed_one_wal = wal_position(&owner).await? - wal_before;
    settle().await?;

    // The least a job with its records can cost: the seed's one-statement
    // claim, then start and finish as one statement each (state and event),
    // as claim-and-finish does them. What graphile-worker is compared with.
    eprintln!("seed claim-and-finish...");
    let seed_finish =
        until_drained(&raw_pool, &args, "seed claim-and-finish (raw SQL, 3 statements)", "job", "seedf", {
            |pool, agent| async move {
                let Some(unit) = seed::claim_statement(&pool, &agent).await? else { return Ok(false) };
                for (from, to) in [("claimed", "in_progress"), ("in_progress", "dropped")] {
                    if !seed::step(&pool, unit, &agent, from, to).await? {
                        return Err(format!("{from} -> {to} changed nothing").into());
                    }
                }
                Ok(true)
            }
        })
        .await;
    settle().await?;

    // The project's claim statement as one autocommit round trip, as the
    // owner (the function runs as the writer role, under row-level
    // security), in the notification mode the service sends.
    eprintln!("raw SQL claim...");
    let raw_wal_before = wal_position(&owner).await?;
    let raw = {
        let pool = raw_pool.clone();
        drive(args.agents, args.seconds, "project claim statement (autocommit, owner)", move |i, deadline| {
            let pool = pool.clone();
            async move {
                let s = raw_claims(&pool, "raw", i, deadline, per_agent, after_commit()).await;
                vec![("claim", s)]
            }
        })
        .await
    };
    let raw_wal = wal_position(&owner).await? - raw_wal_before;
    settle().await?;

    // The same statement notifying inside its transaction, as hand-written
    // SQL and the sweeper do: PostgreSQL serialises every notifying commit on
    // one database-wide lock (PreCommit_Notify), which the service avoids.
    eprintln!("raw SQL claim, notifying in the transaction...");
    let raw_notify = {
        let pool = raw_pool.clone();
        drive(
            args.agents,
            args.seconds,
            "project claim statement (autocommit, notify in transaction)",
            move |i, deadline| {
                let pool = pool.clone();
                async move {
                    let s = raw_claims(&pool, "raw-notify", i, deadline, per_agent, None).await;
                    vec![("claim", s)]
                }
            },
        )
        .await
    };
    settle().await?;

    // The same statement in the service's former transaction shape: BEGIN, role + fleet, statement, COMMIT.
    eprintln!("raw SQL claim under RLS...");
    let rls = {
        let pool = raw_pool.clone();
        drive(args.agents, args.seconds, "project claim statement (transaction, app role + RLS)", move |i, deadline| {
            let pool = pool.clone();
            async move {
                let mut s = Samples::default();
                let mut n = 0;
                while Instant::now() < deadline && n < per_agent {
                    let agent = format!("rls-{i}-{n}");
                    let claimed = timed(&mut s, async {
                        let agent = agent.clone();
                        db::in_fleet::<_, DbErr, _>(&pool, "rls", move |tx| {
                            Box::pin(async move { claim_next_sql(tx, &agent, after_commit()).await })
                        })
                        .await
                        .ok()
                        .flatten()
                    })
                    .await;
                    if claimed.is_none() {
                        break;
                    }
                    n += 1;
                }
                vec![("claim", s)]
            }
        })
        .await
    };
    settle().await?;

    // The ceiling of claim-and-finish: the service's own three statements
    // (ledger_claim, ledger_transition, ledger_dispose, one autocommit round
    // trip each, under RLS) straight over the pool, one agent per task. No
    // notification is sent (after-commit mode with nobody to notify), so it
    // does less than the server does.
    eprintln!("claim-and-finish as SQL...");
    let finish_sql = {
        let pool = raw_pool.clone();
        drive(args.agents, args.seconds, "claim-and-finish as SQL (3 statements)", move |i, deadline| {
            let pool = pool.clone();
            async move { claim_and_finish_sql(&pool, &format!("finish-sql-{i}-0"), deadline).await }
        })
        .await
    };
    raw_pool.close().await?;
    settle().await?;

    let http = serve(&args, &url, args.race_agents).await?;

    // claimNext through the server: HTTP, auth, GraphQL, RLS. A fresh agent
    // (token) per claim, so every call is a new claim.
    eprintln!("claimNext over HTTP...");
    let api =
        fresh_claims(&http, args.agents, args.seconds, "claimNext over HTTP", api_tokens.clone(), None, None).await;
    settle().await?;

    // The floor of every request: HTTP, the token (cached), GraphQL, and a
    // field that reads nothing. No write over HTTP can run faster on the
    // same cores.
    eprintln!("HTTP floor...");
    let floor = floor_phase(&http, &args, "HTTP floor: { __typename } with a token", floor_tokens).await;

    // The same agents below saturation: 80% of the rate just measured.
    let offered = (api.rate() * 0.8).max(1.0);
    eprintln!("paced claimNext over HTTP at {offered:.0}/s...");
    // Where the paced tail comes from: when each call started, and what
    // PostgreSQL ran in the background meanwhile (autovacuum, checkpoints).
    let paced_starts: Arc<CallStarts> = Arc::default();
    let paced_from = Instant::now();
    let watcher = tokio::spawn(background_work(owner.clone(), paced_from, Duration::from_secs(args.seconds)));
    let paced = fresh_claims(
        &http,
        args.agents,
        args.seconds,
        &format!("claimNext over HTTP, paced at {offered:.0}/s (80%)"),
        paced_tokens,
        Some(Duration::from_secs_f64(args.agents as f64 / offered)),
        Some(paced_starts.clone()),
    )
    .await;
    let background = watcher.await??;
    settle().await?;

    // The shortest whole job: claimNext, transition(IN_PROGRESS), dispose(DROPPED); one token per agent.
    // Beside it, how far the server's projector trails the log (SPEC §7):
    // the age of the oldest event no projection has folded yet.
    eprintln!("claim-and-finish over HTTP...");
    let lag_sampler = tokio::spawn(projector_lag(owner.clone(), Instant::now(), Duration::from_secs(args.seconds)));
    let finish = finish_phase(&http, &args, "claim-and-finish over HTTP", finish_tokens).await;
    let lag = lag_sampler.await??;
    settle().await?;

    // The same job in the shape the project's own clients send it (MCP, the
    // agent CLI): a domain, an idempotency key on every write, the attempt
    // fence on start and dispose.
    eprintln!("claim-and-finish over HTTP, keyed and fenced...");
    let finish_keyed =
        keyed_phase(&http, &args, "claim-and-finish over HTTP (domain, keys, fence)", keyed_tokens).await;
    settle().await?;

    // The same three phases against the baseline build, right after.
    let baseline = match &args.baseline {
        Some(bin) => Some(baseline_phases(&args, &url, bin).await?),
        None => None,
    };

    // The race: many more agents than connections, each claim by a fresh agent.
    eprintln!("{} agents racing...", args.race_agents);
    let race = fresh_claims(
        &http,
        args.race_agents,
        args.seconds,
        &format!("claimNext over HTTP, {} agents", args.race_agents),
        race_tokens,
        None,
        None,
    )
    .await;
    let twice = claimed_twice(&owner, "race").await?;
    settle().await?;

    // Full lifecycles over HTTP: claim, start, cost, verify, dispose.
    eprintln!("lifecycles over HTTP...");
    let life = {
        let http = http.clone();
        drive(args.agents, args.seconds, "lifecycle over HTTP", move |i, deadline| {
            let (http, token) = (http.clone(), life_tokens[i].clone());
            async move { lifecycle(&http, &token, i, deadline).await }
        })
        .await
    };

    let events = owner.query_one_raw(stmt("SELECT count(*) AS n FROM work_unit_events", [])).await?;
    let events: i64 = events.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
    println!("Machine: {}", support::machine(&owner).await?);
    println!(
        "Agents: {}, {} s per phase, server pool {}, notifications {:?}",
        args.agents, args.seconds, args.pool, args.notify
    );
    println!();
    print_table(
        &[
            &seed,
            &seed_one,
            &seed_finish,
            &raw,
            &raw_notify,
            &rls,
            &finish_sql,
            &floor,
            &api,
            &paced,
            &finish,
            &finish_keyed,
            &race,
            &life,
        ],
        peer.as_ref(),
    );
    println!();
    let pct = |a: f64, b: f64| 100.0 * a / b;
    println!("claimNext over HTTP vs seed claim transaction: {:.0}%", pct(api.rate(), seed.rate()));
    println!("claimNext over HTTP vs project claim statement as owner: {:.0}%", pct(api.rate(), raw.rate()));
    println!(
        "HTTP floor vs seed claim transaction: {:.0}% (no request over HTTP runs faster than the floor)",
        pct(floor.rate(), seed.rate())
    );
    // Both saturate the same two cores, so their costs per operation add:
    // the seed's one-statement claim behind the HTTP floor is the most any
    // claim over HTTP could reach here.
    let bound = 1.0 / (1.0 / floor.rate() + 1.0 / seed_one.rate());
    println!(
        "bound for any claim over HTTP (HTTP floor + seed claim statement): {bound:.0}/s, {:.0}% of the seed claim transaction",
        pct(bound, seed.rate())
    );
    match &peer {
        Some(peer) => println!(
            "claim-and-finish over HTTP vs graphile-worker jobs: {:.0}% ({:.0} vs {:.0} per second)",
            pct(finish.rate(), peer.rate()),
            finish.rate(),
            peer.rate()
        ),
        None => println!("claim-and-finish over HTTP vs graphile-worker jobs: not measured (no peer)"),
    }
    println!(
        "claim-and-finish keyed and fenced vs plain: {:.0}% ({:.0} vs {:.0} per second)",
        pct(finish_keyed.rate(), finish.rate()),
        finish_keyed.rate(),
        finish.rate()
    );
    // The seed's three statements behind three requests at the floor: the
    // most any claim-and-finish over HTTP that keeps its attempt and events
    // could reach here (issue 28 measures against it).
    let finish_bound = 1.0 / (3.0 / floor.rate() + 1.0 / seed_finish.rate());
    if let Some(peer) = &peer {
        println!(
            "claim-and-finish as SQL vs graphile-worker jobs: {:.0}%; HTTP floor / 3 vs graphile-worker jobs: {:.0}%",
            pct(finish_sql.rate(), peer.rate()),
            pct(floor.rate() / 3.0, peer.rate())
        );
        println!(
            "bound for claim-and-finish over HTTP (3 x HTTP floor + seed claim-and-finish): {finish_bound:.0}/s, {:.0}% of graphile-worker",
            pct(finish_bound, peer.rate())
        );
    }
    println!(
        "claim-and-finish over HTTP vs its bound (3 x HTTP floor + seed claim-and-finish, {finish_bound:.0}/s): plain {:.0}%, domain + keys + fence {:.0}%",
        pct(finish.rate(), finish_bound),
        pct(finish_keyed.rate(), finish_bound)
    );
    println!(
        "projector lag while claim-and-finish over HTTP runs ({} samples, 100 ms apart): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        lag.0.len(),
        lag.pct(0.5),
        lag.pct(0.99),
        lag.pct(1.0)
    );
    println!(
        "project claim statement vs seed claim as one statement: {:.0}% (notifying in the transaction: {:.0}%)",
        pct(raw.rate(), seed_one.rate()),
        pct(raw_notify.rate(), seed_one.rate())
    );
    // The WAL each claim wrote, page images included: both phases start
    // right after a checkpoint (settle), as every phase does.
    let per_claim = |bytes: i64, r: &Report| bytes as f64 / r.ops.max(1) as f64;
    println!(
        "WAL per claim after a checkpoint: project claim statement {:.0} bytes, seed claim as one statement {:.0} bytes",
        per_claim(raw_wal, &raw),
        per_claim(seed_one_wal, &seed_one)
    );
    println!(
        "paced claim p99 at 80% of the saturated rate: {:.2} ms",
        paced.samples.first().map(|(_, s)| s.pct(0.99)).unwrap_or(0.0)
    );
    print_paced_tail(&paced, paced_from, &paced_starts, &background);
    println!(
        "{} agents vs {}: {:.0}% of the throughput; units claimed twice: {twice}",
        args.race_agents,
        args.agents,
        pct(race.rate(), api.rate())
    );
    if let Some([base_floor, base_finish, base_keyed]) = &baseline {
        println!();
        print_table(&[base_floor, base_finish, base_keyed], None);
        println!(
            "this build vs the baseline in the same run: HTTP floor {:.2}x ({:.0} vs {:.0}/s), claim-and-finish plain {:.2}x ({:.0} vs {:.0}/s), domain + keys + fence {:.2}x ({:.0} vs {:.0}/s)",
            floor.rate() / base_floor.rate(),
            floor.rate(),
            base_floor.rate(),
            finish.rate() / base_finish.rate(),
            finish.rate(),
            base_finish.rate(),
            finish_keyed.rate() / base_keyed.rate(),
            finish_keyed.rate(),
            base_keyed.rate()
        );
    }
    println!("events written in the run: {events}");
    if profiled {
        print_functions(&owner).await?;
    }

    owner.close().await?;
    match scratch.embedded {
        Some(pg) => pg.stop().await,
        None => support::drop_scratch(&url).await?,
    }
    Ok(())
}

/// The HTTP floor: `{ __typename }` with a token, one token per agent.
async fn floor_phase(http: &Http, args: &Args, name: &str, tokens: Arc<Vec<String>>) -> Report {
    let http = http.clone();
    drive(args.agents, args.seconds, name, move |i, deadline| {
        let (http, token) = (http.clone(), tokens[i].clone());
        async move {
            let mut s = Samples::default();
            while Instant::now() < deadline {
                let resp = timed(&mut s, http.gql(&token, "{ __typename }", json!({}))).await;
                if resp["data"]["__typename"] != "QueryRoot" && resp["data"]["__typename"] != "Query" {
                    eprintln!("HTTP floor failed: {resp}");
                    break;
                }
            }
            vec![("request", s)]
        }
    })
    .await
}

/// claimNext, transition(IN_PROGRESS), dispose(DROPPED); one token per agent.
async fn finish_phase(http: &Http, args: &Args, name: &str, tokens: Arc<Vec<String>>) -> Report {
    let http = http.clone();
    drive(args.agents, args.seconds, name, move |i, deadline| {
        let (http, token) = (http.clone(), tokens[i].clone());
        async move { claim_and_finish(&http, &token, deadline).await }
    })
    .await
}

/// [`finish_phase`] with a domain, an idempotency key on every write and
/// the attempt fence.
async fn keyed_phase(http: &Http, args: &Args, name: &str, tokens: Arc<Vec<String>>) -> Report {
    let http = http.clone();
    drive(args.agents, args.seconds, name, move |i, deadline| {
        let (http, token) = (http.clone(), tokens[i].clone());
        async move { claim_and_finish_keyed(&http, &token, i, deadline).await }
    })
    .await
}

/// The HTTP floor and both claim-and-finish phases against the baseline
/// build `bin` ([`support::baseline`]), seeded as this build's are.
async fn baseline_phases(args: &Args, beside: &str, bin: &str) -> Result<[Report; 3], AnyError> {
    eprintln!("baseline {bin}...");
    let base = support::baseline::Baseline::start(bin, beside, args.pool).await?;
    let owner = db::connect(&base.url, 4).await?;
    let needed = args.agents * args.per_agent;
    for fleet in ["finish", "finish-keyed"] {
        seed_units(&owner, fleet, needed).await?;
    }
    let finish_tokens = Arc::new(seed_tokens(&owner, "finish", "agent", args.agents).await?);
    let keyed_tokens = Arc::new(seed_tokens(&owner, "finish-keyed", "agent", args.agents).await?);
    let floor_tokens = Arc::new(seed_tokens(&owner, "finish", "floor", args.agents).await?);
    let settle = || owner.execute_unprepared("VACUUM ANALYZE work_units, work_unit_attempts, work_unit_events");
    settle().await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.agents).build()?;
    let http = Http { client, endpoint: base.endpoint.clone() };
    let floor = floor_phase(&http, args, "baseline: HTTP floor", floor_tokens).await;
    settle().await?;
    let finish = finish_phase(&http, args, "baseline: claim-and-finish over HTTP", finish_tokens).await;
    settle().await?;
    let keyed = keyed_phase(&http, args, "baseline: claim-and-finish (domain, keys, fence)", keyed_tokens).await;
    owner.close().await?;
    base.stop().await?;
    Ok([floor, finish, keyed])
}

/// The service on a port of its own (the bench's pool size and notify mode),
/// and a client keeping up to `clients` connections to it.
async fn serve(args: &Args, url: &str, clients: usize) -> Result<Http, AnyError> {
    let pool = db::connect_service(url, args.pool).await?;
    let app = Application::build(Ledger::notifying(pool, args.notify), "127.0.0.1:0").await?;
    let endpoint = format!("http://{}/graphql", app.local_addr()?);
    tokio::spawn(app.run_until(std::future::pending()));
    let client = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    Ok(Http { client, endpoint })
}

#[derive(Clone)]
struct Http {
    client: reqwest::Client,
    endpoint: String,
}

impl Http {
    async fn gql(&self, token: &str, query: &str, vars: Value) -> Value {
        let body = json!({ "query": query, "variables": vars });
        match self.client.post(&self.endpoint).bearer_auth(token).json(&body).send().await {
            Ok(resp) => resp.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }
}

/// `agents` agents claiming as fast as they can (or each once per `pace`),
/// every claim by the next fresh token.
async fn fresh_claims(
    http: &Http,
    agents: usize,
    seconds: u64,
    name: &str,
    tokens: Arc<Vec<String>>,
    pace: Option<Duration>,
    starts: Option<Arc<CallStarts>>,
) -> Report {
    let next = Arc::new(AtomicUsize::new(0));
    let http = http.clone();
    drive(agents, seconds, name, move |i, deadline| {
        let (http, tokens, next, starts) = (http.clone(), tokens.clone(), next.clone(), starts.clone());
        async move {
            let mut s = Samples::default();
            let mut tick = pace.map(|pace| {
                // Spread the agents' first calls over one interval.
                let first = tokio::time::Instant::now() + pace.mul_f64(i as f64 / agents as f64);
                tokio::time::interval_at(first, pace)
            });
            while Instant::now() < deadline {
                if let Some(tick) = &mut tick {
                    tick.tick().await;
                }
                let Some(token) = tokens.get(next.fetch_add(1, Ordering::SeqCst)) else { break };
                let started = Instant::now();
                let resp = timed(&mut s, http.gql(token, CLAIM, json!({}))).await;
                if let Some(starts) = &starts
                    && let Ok(mut starts) = starts.lock()
                {
                    starts.push((started, started.elapsed()));
                }
                if resp["data"]["claimNext"].is_null() {
                    eprintln!("claimNext failed: {resp}");
                    break;
                }
            }
            vec![("claim", s)]
        }
    })
    .await
}

const START: &str =
    "mutation($u: UUID!, $to: WorkState!, $e: String) { transition(unitId: $u, to: $to, evidenceUrl: $e) { state } }";

async fn claim_and_finish(http: &Http, token: &str, deadline: Instant) -> Vec<(&'static str, Samples)> {
    let mut ops: Vec<(&'static str, Samples)> =
        ["job", "claimNext", "transition", "dispose"].into_iter().map(|n| (n, Samples::default())).collect();
    while Instant::now() < deadline {
        let start = Instant::now();
        let claim = timed(&mut ops[1].1, http.gql(token, CLAIM, json!({}))).await;
        let Some(unit) = claim["data"]["claimNext"]["id"].as_str().map(str::to_owned) else { break };
        timed(&mut ops[2].1, http.gql(token, START, json!({ "u": unit, "to": "IN_PROGRESS" }))).await;
        let d = "mutation($u: UUID!) { dispose(unitId: $u, disposition: DROPPED, evidenceUrl: \"https://ci.example/noop\") { state } }";
        let done = timed(&mut ops[3].1, http.gql(token, d, json!({ "u": unit }))).await;
        if done["data"]["dispose"]["state"] != "ABANDONED" {
            eprintln!("claim-and-finish failed: {done}");
            break;
        }
        ops[0].1.0.push(start.elapsed());
    }
    ops
}

/// One agent's claim-and-finish loop as the project's clients send it: a
/// domain and a key on the claim, a key and the attempt fence on start and
/// dispose.
async fn claim_and_finish_keyed(http: &Http, token: &str, i: usize, deadline: Instant) -> Vec<(&'static str, Samples)> {
    const CLAIM_KEYED: &str = "mutation($k: String) { claimNext(domain: \"default\", leaseSeconds: 900, idempotencyKey: $k) { id currentAttemptId } }";
    const START_KEYED: &str = "mutation($u: UUID!, $a: UUID, $k: String) { transition(unitId: $u, to: IN_PROGRESS, idempotencyKey: $k, attemptId: $a) { state } }";
    const DISPOSE_KEYED: &str = "mutation($u: UUID!, $a: UUID, $k: String) { dispose(unitId: $u, disposition: DROPPED, evidenceUrl: \"https://ci.example/noop\", idempotencyKey: $k, attemptId: $a) { state } }";
    let mut ops: Vec<(&'static str, Samples)> =
        ["job", "claimNext", "transition", "dispose"].into_iter().map(|n| (n, Samples::default())).collect();
    let mut n = 0;
    while Instant::now() < deadline {
        let start = Instant::now();
        let key = |step: &str| format!("bench-{i}-{n}-{step}");
        let claim = timed(&mut ops[1].1, http.gql(token, CLAIM_KEYED, json!({ "k": key("claim") }))).await;
        let (Some(unit), Some(attempt)) = (
            claim["data"]["claimNext"]["id"].as_str().map(str::to_owned),
            claim["data"]["claimNext"]["currentAttemptId"].as_str().map(str::to_owned),
        ) else {
            break;
        };
        let vars = |step: &str| json!({ "u": unit, "a": attempt, "k": key(step) });
        timed(&mut ops[2].1, http.gql(token, START_KEYED, vars("start"))).await;
        let done = timed(&mut ops[3].1, http.gql(token, DISPOSE_KEYED, vars("dispose"))).await;
        if done["data"]["dispose"]["state"] != "ABANDONED" {
            eprintln!("claim-and-finish (keyed) failed: {done}");
            break;
        }
        ops[0].1.0.push(start.elapsed());
        n += 1;
    }
    ops
}

/// One agent's claim-and-finish loop as the service's own statements over
/// the pool (the SQL ceiling of the HTTP phase).
async fn claim_and_finish_sql(
    pool: &DatabaseConnection,
    agent: &str,
    deadline: Instant,
) -> Vec<(&'static str, Samples)> {
    let mut ops: Vec<(&'static str, Samples)> =
        ["job", "claimNext", "transition", "dispose"].into_iter().map(|n| (n, Samples::default())).collect();
    while Instant::now() < deadline {
        let start = Instant::now();
        let claimed = timed(&mut ops[1].1, claim_next_sql(pool, agent, after_commit())).await;
        let Ok(Some(unit)) = claimed else {
            if let Err(err) = claimed {
                eprintln!("claim-and-finish as SQL failed: {err}");
            }
            break;
        };
        let common = || -> Vec<sea_orm::Value> {
            vec![sql_agent(agent).into(), after_commit().into(), None::<String>.into(), None::<String>.into()]
        };
        let mut start_args = common();
        start_args.extend([unit.into(), None::<uuid::Uuid>.into(), "in_progress".into(), None::<String>.into()]);
        let started = timed(&mut ops[2].1, writes::call(pool, lifecycle::TRANSITION, start_args)).await;
        let mut dispose_args = common();
        dispose_args.extend([
            unit.into(),
            None::<uuid::Uuid>.into(),
            Disposition::Dropped.as_sql().into(),
            "https://ci.example/noop".into(),
            None::<String>.into(),
        ]);
        let done = timed(&mut ops[3].1, writes::call(pool, lifecycle::DISPOSE, dispose_args)).await;
        let ok = |r: &Result<Vec<writes::Written>, DbErr>| matches!(r, Ok(rows) if rows.first().is_some_and(|w| w.result == "ok"));
        if !(ok(&started) && ok(&done)) {
            eprintln!("claim-and-finish as SQL failed: {started:?} {done:?}");
            break;
        }
        ops[0].1.0.push(start.elapsed());
    }
    ops
}

async fn lifecycle(http: &Http, token: &str, i: usize, deadline: Instant) -> Vec<(&'static str, Samples)> {
    let mut ops: Vec<(&'static str, Samples)> = ["lifecycle", "claimNext", "transition", "recordCost", "dispose"]
        .into_iter()
        .map(|n| (n, Samples::default()))
        .collect();
    let mut n = 0;
    while Instant::now() < deadline {
        let start = Instant::now();
        let claim = timed(&mut ops[1].1, http.gql(token, CLAIM, json!({}))).await;
        let (Some(unit), Some(attempt)) =
            (claim["data"]["claimNext"]["id"].as_str(), claim["data"]["claimNext"]["currentAttemptId"].as_str())
        else {
            break;
        };
        let (unit, attempt) = (unit.to_owned(), attempt.to_owned());
        timed(&mut ops[2].1, http.gql(token, START, json!({ "u": unit, "to": "IN_PROGRESS" }))).await;
        let c = "mutation($a: UUID!, $k: String!) { recordCost(attemptId: $a, cents: 250, idempotencyKey: $k) { costCents } }";
        timed(&mut ops[3].1, http.gql(token, c, json!({ "a": attempt, "k": format!("bill-{i}-{n}") }))).await;
        let v = json!({ "u": unit, "to": "VERIFIED", "e": format!("https://ci.example/run/{i}/{n}") });
        timed(&mut ops[2].1, http.gql(token, START, v)).await;
        let d = "mutation($u: UUID!) { dispose(unitId: $u, disposition: MIGRATED) { state } }";
        let done = timed(&mut ops[4].1, http.gql(token, d, json!({ "u": unit }))).await;
        if done["data"]["dispose"]["state"] != "DONE" {
            eprintln!("lifecycle failed: {done}");
            break;
        }
        ops[0].1.0.push(start.elapsed());
        n += 1;
    }
    ops
}

/// Units of `fleet` with more than one `claimed` event or attempt.
/// When each call of a phase started, and how long it took.
type CallStarts = std::sync::Mutex<Vec<(Instant, Duration)>>;

/// What PostgreSQL runs beside the requests for `length` from `from`:
/// autovacuum workers (and what they work on) and checkpoints, sampled every
/// 50 ms as (seconds since `from`, what).
async fn background_work(db: DatabaseConnection, from: Instant, length: Duration) -> Result<Vec<(f64, String)>, DbErr> {
    let mut seen = Vec::new();
    let mut last_checkpoints: Option<i64> = None;
    while from.elapsed() < length {
        let rows = db
            .query_all_raw(stmt(
                "SELECT 'autovacuum: ' || regexp_replace(query, '^autovacuum: ', '') AS what FROM pg_stat_activity
                  WHERE backend_type = 'autovacuum worker' AND query <> ''
                 UNION ALL
                 SELECT 'checkpoints so far: ' || (checkpoints_timed + checkpoints_req) FROM pg_stat_bgwriter",
                [],
            ))
            .await?;
        let at = from.elapsed().as_secs_f64();
        for row in rows {
            let what: String = row.try_get("", "what")?;
            if let Some(n) = what.strip_prefix("checkpoints so far: ").and_then(|n| n.parse::<i64>().ok()) {
                if last_checkpoints.is_some_and(|last| last != n) {
                    seen.push((at, "a checkpoint ended".to_owned()));
                }
                last_checkpoints = Some(n);
            } else {
                seen.push((at, what));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(seen)
}

/// The projector's lag, sampled every 100 ms for `length`: the largest
/// lag_seconds of any projection (the age of its oldest unfolded event).
async fn projector_lag(db: DatabaseConnection, from: Instant, length: Duration) -> Result<Samples, DbErr> {
    let mut lags = Samples::default();
    while from.elapsed() < length {
        if let Some(row) =
            db.query_one_raw(stmt("SELECT max(lag_seconds) AS lag FROM ledger_projections_status()", [])).await?
        {
            let lag: f64 = row.try_get("", "lag")?;
            lags.0.push(Duration::from_secs_f64(lag.max(0.0)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(lags)
}

/// The paced phase's slowest 1% by when they started (250 ms windows), and
/// the background work seen in those windows: a tail in a few windows is a
/// stall, one spread over the run is queueing.
fn print_paced_tail(paced: &Report, from: Instant, starts: &CallStarts, background: &[(f64, String)]) {
    let Some((_, samples)) = paced.samples.first() else { return };
    let p99 = Duration::from_secs_f64(samples.pct(0.99) / 1000.0);
    let Ok(starts) = starts.lock() else { return };
    let mut windows = std::collections::BTreeMap::<u64, (usize, Duration)>::new();
    for (start, took) in starts.iter().filter(|(_, took)| *took >= p99) {
        let window = (start.duration_since(from).as_secs_f64() / 0.25) as u64;
        let entry = windows.entry(window).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(*took);
    }
    let slow: usize = windows.values().map(|(n, _)| n).sum();
    println!("paced tail: {slow} calls at or over p99, started in {} windows of 250 ms:", windows.len());
    for (window, (n, worst)) in &windows {
        let (lo, hi) = (*window as f64 * 0.25, (*window + 1) as f64 * 0.25);
        let mut what: Vec<&str> =
            background.iter().filter(|(at, _)| *at >= lo - 0.25 && *at < hi).map(|(_, what)| what.as_str()).collect();
        what.sort_unstable();
        what.dedup();
        println!(
            "  {lo:>5.2}-{hi:.2} s: {n} calls, worst {:.1} ms; background: {}",
            worst.as_secs_f64() * 1000.0,
            if what.is_empty() { "none seen".to_owned() } else { what.join("; ") }
        );
    }
}

/// The server's WAL position now, as bytes since its start.
async fn wal_position(db: &DatabaseConnection) -> Result<i64, AnyError> {
    let row = db.query_one_raw(stmt("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS n", [])).await?;
    Ok(row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0))
}

async fn claimed_twice(db: &DatabaseConnection, fleet: &str) -> Result<i64, AnyError> {
    let row = db
        .query_one_raw(stmt(
            "SELECT (SELECT count(*) FROM (SELECT unit_id FROM work_unit_events WHERE fleet = $1 AND event_type = 'claimed'
                                            GROUP BY unit_id HAVING count(*) > 1) e)
                  + (SELECT count(*) FROM work_units WHERE fleet = $1 AND attempt_count > 1) AS n",
            [fleet.into()],
        ))
        .await?;
    Ok(row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0))
}

/// One agent's loop of the bare claim statement, one autocommit round trip
/// each, as the owner; a fresh agent name per claim.
/// Replaces the events trigger's position function for a comparison run
/// (see the module comment); `marker` keeps migration 0004's.
async fn event_position_variant(owner: &DatabaseConnection, variant: &str) -> Result<(), AnyError> {
    let body = match variant {
        "marker" => return Ok(()),
        // The shipped function (migration 0004) without its marker statement.
        "no-marker" => {
            let row = owner
                .query_one_raw(stmt("SELECT pg_get_functiondef('work_unit_events_position'::regproc) AS def", []))
                .await?
                .ok_or("work_unit_events_position() is missing")?;
            let shipped: String = row.try_get("", "def")?;
            let unmarked = without_piece(&shipped, "PERFORM pg_advisory_xact_lock_shared(", ");")
                .ok_or("work_unit_events_position() takes no marker: nothing to leave out")?;
            owner.execute_unprepared(&unmarked).await?;
            eprintln!("event position variant: {variant}");
            return Ok(());
        }
        "xid-only" => "BEGIN NEW.tx_id := pg_current_xact_id()::text::bigint; RETURN NEW; END",
        other => return Err(format!("WL_BENCH_EVENT_POSITION: unknown variant {other:?}").into()),
    };
    owner
        .execute_unprepared(&format!(
            "CREATE OR REPLACE FUNCTION work_unit_events_position() RETURNS trigger LANGUAGE plpgsql AS $body$ {body} $body$"
        ))
        .await?;
    eprintln!("event position variant: {variant}");
    Ok(())
}

/// `text` without its first piece that starts with `from` and ends with the
/// next `to` (inclusive); None when there is no such piece.
fn without_piece(text: &str, from: &str, to: &str) -> Option<String> {
    let start = text.find(from)?;
    let end = start + text[start..].find(to)? + to.len();
    Some(format!("{}{}", &text[..start], &text[end..]))
}

/// The notification mode the service sends with every write.
fn after_commit() -> Option<&'static str> {
    Some(Notify::AfterCommit.setting())
}

/// Claims by fresh agents of `fleet` straight over the pool until `deadline`
/// or `limit`. `notify` is the transaction's notification mode: the service
/// always sends after-commit; `None` is hand-written SQL's, where the events
/// trigger notifies inside the transaction.
async fn raw_claims(
    owner: &DatabaseConnection,
    fleet: &str,
    i: usize,
    deadline: Instant,
    limit: usize,
    notify: Option<&str>,
) -> Samples {
    let mut s = Samples::default();
    for n in 0..limit {
        if Instant::now() >= deadline {
            break;
        }
        let agent = format!("{fleet}-{i}-{n}");
        if timed(&mut s, async { claim_next_sql(owner, &agent, notify).await.ok().flatten() }).await.is_none() {
            break;
        }
    }
    s
}

/// The profile: PL/pgSQL functions and triggers by total time over the run.
async fn print_functions(db: &DatabaseConnection) -> Result<(), AnyError> {
    let rows = db
        .query_all_raw(stmt(
            "SELECT funcname, calls, round(total_time::numeric, 0)::text AS total_ms,
                    round((1000 * self_time / greatest(calls, 1))::numeric, 1)::text AS self_us
               FROM pg_stat_user_functions ORDER BY total_time DESC LIMIT 12",
            [],
        ))
        .await?;
    println!();
    println!("| function (pg_stat_user_functions, whole run) | calls | total ms | self µs per call |");
    println!("| --- | ---: | ---: | ---: |");
    for r in rows {
        let (name, calls, total, per): (String, i64, String, String) = (
            r.try_get("", "funcname")?,
            r.try_get("", "calls")?,
            r.try_get("", "total_ms")?,
            r.try_get("", "self_us")?,
        );
        println!("| {name} | {calls} | {total} | {per} |");
    }
    Ok(())
}

fn print_table(reports: &[&Report], peer: Option<&Peer>) {
    println!("| phase | ops | ops/s | p50 ms | p95 ms | p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in reports {
        for (op, s) in &r.samples {
            let rate = s.0.len() as f64 / r.elapsed.as_secs_f64();
            println!(
                "| {} / {op} | {} | {rate:.0} | {:.2} | {:.2} | {:.2} |",
                r.name,
                s.0.len(),
                s.pct(0.5),
                s.pct(0.95),
                s.pct(0.99)
            );
        }
    }
    if let Some(peer) = peer {
        println!(
            "| graphile-worker {} (concurrency {}, pool {}) / job | {} | {:.0} | | | |",
            peer.version,
            peer.concurrency,
            peer.pool,
            peer.jobs,
            peer.rate()
        );
    }
}

/// claimNext over HTTP with metrics off (no `--metrics-listen`: no counting
/// extension, no listener) and on (the listener, scraped every second as a
/// Prometheus would, far more often than its default 15 s), each on a server
/// of its own with its own pool over the same database; the phases alternate
/// off, on, off, on so that drift (autovacuum, a shared machine) hits both.
async fn metrics_overhead(args: &Args, url: &str, owner: &DatabaseConnection) -> Result<(), AnyError> {
    use work_ledger::http::ServerConfig;
    let per_agent = args.per_agent;
    let claims_needed = args.agents * per_agent;
    let mut endpoints = Vec::new();
    for metrics in [false, true] {
        let config = ServerConfig { metrics_listen: metrics.then(|| "127.0.0.1:0".to_owned()), ..Default::default() };
        let app = Application::build_with(Ledger::new(db::connect(url, 32).await?), "127.0.0.1:0", config).await?;
        let endpoint = format!("http://{}/graphql", app.local_addr()?);
        if let Some(addr) = app.metrics_addr() {
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Ok(resp) = client.get(format!("http://{addr}/metrics")).send().await {
                        let _ = resp.text().await;
                    }
                }
            });
        }
        tokio::spawn(app.run_until(std::future::pending()));
        endpoints.push(endpoint);
    }
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.agents * 2).build()?;
    let phases = [("off", 0), ("on", 1), ("off", 0), ("on", 1)];
    eprintln!("seeding {claims_needed} units and tokens per phase...");
    let mut tokens = Vec::new();
    for (n, _) in phases.iter().enumerate() {
        let fleet = format!("m{n}");
        seed_units(owner, &fleet, claims_needed).await?;
        tokens.push(Arc::new(seed_tokens(owner, &fleet, "agent", claims_needed).await?));
    }
    seed_units(owner, "mwarm", claims_needed).await?;
    let warm_tokens = Arc::new(seed_tokens(owner, "mwarm", "agent", claims_needed).await?);
    let mut reports = Vec::new();
    for (n, (label, server)) in [("warm-up", 0)].into_iter().chain(phases).enumerate() {
        owner.execute_unprepared("VACUUM ANALYZE work_units, work_unit_attempts, work_unit_events").await?;
        let tokens = if n == 0 { warm_tokens.clone() } else { tokens[n - 1].clone() };
        let endpoint = endpoints[server].clone();
        let client = client.clone();
        let next = Arc::new(AtomicUsize::new(0));
        let seconds = if n == 0 { 3 } else { args.seconds };
        let name = format!("claimNext over HTTP, metrics {label}");
        eprintln!("{name}...");
        let report = drive(args.agents, seconds, &name, move |_, deadline| {
            let (client, endpoint, tokens, next) = (client.clone(), endpoint.clone(), tokens.clone(), next.clone());
            async move {
                let mut s = Samples::default();
                while Instant::now() < deadline {
                    let Some(token) = tokens.get(next.fetch_add(1, Ordering::SeqCst)) else { break };
                    let http = Http { client: client.clone(), endpoint: endpoint.clone() };
                    let resp = timed(&mut s, http.gql(token, CLAIM, json!({}))).await;
                    if resp["data"]["claimNext"].is_null() {
                        eprintln!("claimNext failed: {resp}");
                        break;
                    }
                }
                vec![("claim", s)]
            }
        })
        .await;
        if n > 0 {
            reports.push((label, report));
        }
    }
    println!("Machine: {}", support::machine(owner).await?);
    println!("Agents: {}, {} s per phase", args.agents, args.seconds);
    println!();
    println!("| phase | ops | ops/s | p50 ms | p95 ms | p99 ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (_, r) in &reports {
        for (op, s) in &r.samples {
            println!(
                "| {} / {op} | {} | {:.0} | {:.2} | {:.2} | {:.2} |",
                r.name,
                s.0.len(),
                r.rate(),
                s.pct(0.5),
                s.pct(0.95),
                s.pct(0.99)
            );
        }
    }
    let rate = |which: &str| {
        let (ops, secs) = reports
            .iter()
            .filter(|(label, _)| *label == which)
            .fold((0usize, 0f64), |(o, t), (_, r)| (o + r.ops, t + r.elapsed.as_secs_f64()));
        ops as f64 / secs
    };
    let (off, on) = (rate("off"), rate("on"));
    println!();
    println!("metrics on: {on:.0} claims/s, off: {off:.0} claims/s: overhead {:.1}%", (1.0 - on / off) * 100.0);
    Ok(())
}

/// The service's claim statement as raw SQL: one call of `ledger_claim`
/// (claimNext without a key or domain) as `agent`'s token
/// ([`seed_sql_agents`]); the claimed unit's id.
async fn claim_next_sql(
    db: &impl ConnectionTrait,
    agent: &str,
    notify: Option<&str>,
) -> Result<Option<uuid::Uuid>, DbErr> {
    let args: Vec<sea_orm::Value> = vec![
        sql_agent(agent).into(),
        notify.map(str::to_owned).into(),
        None::<String>.into(),
        None::<String>.into(),
        900.into(),
        None::<String>.into(),
        None::<uuid::Uuid>.into(),
    ];
    let rows = writes::call(db, claims::CLAIM, args).await?;
    Ok(rows.into_iter().find(|w| w.result == "claimed" || w.result == "reclaimed").and_then(|w| w.unit).map(|u| u.id))
}

/// Writes at size (issue 27): the same claim-and-finish over HTTP, one token
/// per agent, on a ledger that holds only the phases' own units, then after
/// `support::seed` has grown that database to `units` units and ten events
/// per unit (10 fleets, `bench` holding half, two years of history): in a
/// small fleet of its own again, and in `bench` (its READY fifth, 100,000
/// units at a million), and last in `bench` again on units of its own
/// registered as its oldest (so that the same claim takes them first): the
/// seeded READY units are reworked units with two years of history on cold
/// pages, a heavier claim than a fresh unit's, and this phase tells the
/// fleet's size apart from that. Each phase starts vacuumed and checkpointed.
async fn at_size(args: &Args, url: &str, owner: &DatabaseConnection, units: i64) -> Result<(), AnyError> {
    let needed = args.agents * args.per_agent;
    for fleet in ["awarm", "small", "small-after"] {
        seed_units(owner, fleet, needed).await?;
    }
    let warm = Arc::new(seed_tokens(owner, "awarm", "agent", args.agents).await?);
    let small = Arc::new(seed_tokens(owner, "small", "agent", args.agents).await?);
    let after = Arc::new(seed_tokens(owner, "small-after", "agent", args.agents).await?);
    // Names no seeded unit is held by (the seed's holders are agent-N).
    let big = Arc::new(seed_tokens(owner, "bench", "load", args.agents).await?);
    let big_fresh = Arc::new(seed_tokens(owner, "bench", "fresh", args.agents).await?);
    let settle = || async {
        owner.execute_unprepared("VACUUM ANALYZE").await?;
        owner.execute_unprepared("CHECKPOINT").await.map(|_| ())
    };
    settle().await?;

    let http = serve(args, url, args.agents).await?;
    let phase = |name: String, seconds: u64, tokens: Arc<Vec<String>>| {
        let http = http.clone();
        async move {
            eprintln!("{name}...");
            drive(args.agents, seconds, &name, move |i, deadline| {
                let (http, token) = (http.clone(), tokens[i].clone());
                async move { claim_and_finish(&http, &token, deadline).await }
            })
            .await
        }
    };
    phase("warm-up".into(), 3, warm).await;
    settle().await?;
    let empty = phase("claim-and-finish over HTTP, empty ledger".into(), args.seconds, small).await;

    eprintln!("seeding {units} units and {} events...", units * 10);
    // One connection: the seed's steps share temporary tables.
    let seeder = db::connect(url, 1).await?;
    let seeded = support::seed::seed(&seeder, units, units * 10).await?;
    seeder.close().await?;
    settle().await?;
    let counts = owner
        .query_one_raw(stmt(
            "SELECT (SELECT count(*) FROM work_units) AS units, (SELECT count(*) FROM work_unit_events) AS events",
            [],
        ))
        .await?
        .ok_or("no counts")?;
    let (ledger_units, ledger_events): (i64, i64) = (counts.try_get("", "units")?, counts.try_get("", "events")?);
    let sized = format!("{ledger_units} units, {ledger_events} events");
    let small_after =
        phase(format!("claim-and-finish over HTTP, small fleet, ledger of {sized}"), args.seconds, after).await;
    settle().await?;
    let in_big =
        phase(format!("claim-and-finish over HTTP, fleet `bench`, ledger of {sized}"), args.seconds, big).await;
    owner
        .execute_raw(stmt(
            "INSERT INTO work_units (fleet, external_ref, created_at)
             SELECT 'bench', 'fresh-' || g, now() - interval '3 years' FROM generate_series(1, $1) g",
            [(needed as i64).into()],
        ))
        .await?;
    settle().await?;
    let in_big_fresh = phase(
        format!("claim-and-finish over HTTP, fleet `bench`, fresh units first, ledger of {sized}"),
        args.seconds,
        big_fresh,
    )
    .await;

    println!("Machine: {}", support::machine(owner).await?);
    println!("Agents: {}, {} s per phase, server pool {}", args.agents, args.seconds, args.pool);
    println!(
        "Seeded in {:.0} s: {}",
        seeded.steps.iter().map(|(_, s)| s).sum::<f64>(),
        seeded.steps.iter().map(|(n, s)| format!("{n} {s:.0} s")).collect::<Vec<_>>().join(", ")
    );
    println!();
    print_table(&[&empty, &small_after, &in_big, &in_big_fresh], None);
    println!();
    let pct = |a: &Report| 100.0 * a.rate() / empty.rate();
    println!(
        "writes: units={ledger_units} events={ledger_events} empty_per_s={:.0} small_fleet_pct={:.0} big_fleet_pct={:.0} big_fleet_fresh_pct={:.0}",
        empty.rate(),
        pct(&small_after),
        pct(&in_big),
        pct(&in_big_fresh)
    );
    Ok(())
}
