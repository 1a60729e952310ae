//! Load generator: N concurrent agents against the real server over HTTP,
//! and the same claim SQL straight over a pool in the same run (the ceiling).
//!
//!   cargo bench --bench load -- [--agents 64] [--seconds 10]
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
use work_ledger::db::claims;
use work_ledger::db::entities::{Disposition, WorkState};
use work_ledger::db::events::{Actor, IdempotencyKey};
use work_ledger::db::transitions::{self, Disposal};
use work_ledger::db::{self, stmt};
use work_ledger::http::Application;
use work_ledger::ledger::Ledger;

mod support;

use support::{AnyError, Samples, scratch_database, timed};

struct Args {
    agents: usize,
    seconds: u64,
    /// Only the metrics' overhead: claimNext over HTTP against a server
    /// without metrics and one with them (scraped every second), alternated.
    metrics_overhead: bool,
}

fn args() -> Args {
    let mut args = Args { agents: 64, seconds: 10, metrics_overhead: false };
    let argv: Vec<String> = std::env::args().collect();
    args.metrics_overhead = argv.iter().any(|a| a == "--metrics-overhead");
    for pair in argv.windows(2) {
        match pair[0].as_str() {
            "--agents" => args.agents = pair[1].parse().unwrap_or(args.agents),
            "--seconds" => args.seconds = pair[1].parse().unwrap_or(args.seconds),
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

async fn gql(client: &reqwest::Client, url: &str, token: &str, query: &str, vars: Value) -> Value {
    let resp = client.post(url).bearer_auth(token).json(&json!({ "query": query, "variables": vars })).send().await;
    match resp {
        Ok(resp) => resp.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = args();
    let scratch = scratch_database("wl_bench").await?;
    let url = scratch.url.clone();
    let owner = db::connect(&url, (args.agents + 4) as u32).await?;
    if args.metrics_overhead {
        return metrics_overhead(&args, &url, &owner).await;
    }

    let per_agent = 250;
    let claims_needed = args.agents * per_agent;
    let pool = db::connect(&url, 32).await?;
    let app = Application::build(Ledger::new(pool), "127.0.0.1:0").await?;
    let endpoint = format!("http://{}/graphql", app.local_addr()?);
    tokio::spawn(app.run_until(std::future::pending()));
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.agents).build()?;

    eprintln!("seeding {claims_needed} units and tokens per phase...");
    for fleet in ["warm", "raw", "rls", "api", "life", "rawlife"] {
        seed_units(&owner, fleet, claims_needed).await?;
    }
    let api_tokens = Arc::new(seed_tokens(&owner, "api", "agent", claims_needed).await?);
    let life_tokens = Arc::new(seed_tokens(&owner, "life", "agent", args.agents).await?);
    owner.execute_unprepared("VACUUM ANALYZE").await?;

    // Warm-up (not reported): caches, plans, and the first autovacuum after seeding.
    eprintln!("warm-up...");
    {
        let owner = owner.clone();
        drive(args.agents, 3, "warm-up", move |i, deadline| {
            let owner = owner.clone();
            async move {
                raw_claims(&owner, "warm", i, deadline, per_agent).await;
                Vec::new()
            }
        })
        .await;
    }

    // Every phase starts from a vacuumed table: on two cores an autovacuum of
    // work_units triggered by the previous phase's updates would otherwise
    // run inside the next phase and be charged to it.
    let settle =
        || async { owner.execute_unprepared("VACUUM ANALYZE work_units, work_unit_attempts, work_unit_events").await };
    settle().await?;

    // Phase 1: the ceiling: the claim CTE as one autocommit statement, as the owner (no RLS, no role switch).
    eprintln!("raw SQL claim...");
    let raw = {
        let owner = owner.clone();
        drive(args.agents, args.seconds, "raw SQL claim (autocommit, owner)", move |i, deadline| {
            let owner = owner.clone();
            async move {
                let s = raw_claims(&owner, "raw", i, deadline, per_agent).await;
                vec![("claim", s)]
            }
        })
        .await
    };

    settle().await?;

    // Phase 2: the same statement in the service's transaction shape: role + fleet setting, RLS on.
    eprintln!("raw SQL claim under RLS...");
    let rls = {
        let owner = owner.clone();
        drive(args.agents, args.seconds, "raw SQL claim (transaction, app role + RLS)", move |i, deadline| {
            let owner = owner.clone();
            async move {
                let mut s = Samples::default();
                let mut n = 0;
                while Instant::now() < deadline && n < per_agent {
                    let agent = format!("rls-{i}-{n}");
                    let claimed = timed(&mut s, async {
                        let agent = agent.clone();
                        db::in_fleet::<_, DbErr, _>(&owner, "rls", move |tx| {
                            Box::pin(async move {
                                let w = Actor { fleet: "rls", agent: &agent, key: None };
                                Ok(claims::claim_next(tx, &w, 900, None).await?.map(|c| c.unit))
                            })
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

    // Phase 3: claimNext through the server: HTTP, auth, GraphQL, RLS. A fresh
    // agent (token) per claim, so every call is a new claim.
    eprintln!("claimNext over HTTP...");
    let next_token = Arc::new(AtomicUsize::new(0));
    let api = {
        let (client, endpoint) = (client.clone(), endpoint.clone());
        drive(args.agents, args.seconds, "claimNext over HTTP", move |_, deadline| {
            let (client, endpoint, tokens, next) =
                (client.clone(), endpoint.clone(), api_tokens.clone(), next_token.clone());
            async move {
                let mut s = Samples::default();
                while Instant::now() < deadline {
                    let Some(token) = tokens.get(next.fetch_add(1, Ordering::SeqCst)) else { break };
                    let resp = timed(&mut s, gql(&client, &endpoint, token, CLAIM, json!({}))).await;
                    if resp["data"]["claimNext"].is_null() {
                        eprintln!("claimNext failed: {resp}");
                        break;
                    }
                }
                vec![("claim", s)]
            }
        })
        .await
    };

    settle().await?;

    // Phase 3b: the same 64 agents below saturation: each claims at a fixed
    // pace so that the offered load is half of what phase 3 sustained.
    eprintln!("paced claimNext over HTTP...");
    let paced_tokens = Arc::new(seed_tokens(&owner, "paced", "agent", claims_needed).await?);
    seed_units(&owner, "paced", claims_needed).await?;
    settle().await?;
    let offered = (api.rate() / 2.0).max(1.0);
    let interval = Duration::from_secs_f64(args.agents as f64 / offered);
    let next_paced = Arc::new(AtomicUsize::new(0));
    let paced = {
        let (client, endpoint) = (client.clone(), endpoint.clone());
        drive(
            args.agents,
            args.seconds,
            &format!("claimNext over HTTP, paced at {offered:.0}/s"),
            move |i, deadline| {
                let (client, endpoint, tokens, next) =
                    (client.clone(), endpoint.clone(), paced_tokens.clone(), next_paced.clone());
                async move {
                    let mut s = Samples::default();
                    // Spread the agents' first calls over one interval.
                    tokio::time::sleep(interval.mul_f64(i as f64 / 64.0)).await;
                    let mut tick = tokio::time::interval(interval);
                    while Instant::now() < deadline {
                        tick.tick().await;
                        let Some(token) = tokens.get(next.fetch_add(1, Ordering::SeqCst)) else { break };
                        let resp = timed(&mut s, gql(&client, &endpoint, token, CLAIM, json!({}))).await;
                        if resp["data"]["claimNext"].is_null() {
                            break;
                        }
                    }
                    vec![("claim", s)]
                }
            },
        )
        .await
    };

    settle().await?;

    // Phase 4: full lifecycles over HTTP: claim, start, cost, verify, dispose.
    eprintln!("lifecycles over HTTP...");
    let life = {
        let (client, endpoint) = (client.clone(), endpoint.clone());
        drive(args.agents, args.seconds, "lifecycle over HTTP", move |i, deadline| {
            let (client, endpoint, token) = (client.clone(), endpoint.clone(), life_tokens[i].clone());
            async move {
                let mut ops: Vec<(&'static str, Samples)> = ["lifecycle", "claimNext", "transition", "recordCost", "dispose"]
                    .into_iter()
                    .map(|n| (n, Samples::default()))
                    .collect();
                let mut n = 0;
                while Instant::now() < deadline {
                    let start = Instant::now();
                    let claim = timed(&mut ops[1].1, gql(&client, &endpoint, &token, CLAIM, json!({}))).await;
                    let (Some(unit), Some(attempt)) =
                        (claim["data"]["claimNext"]["id"].as_str(), claim["data"]["claimNext"]["currentAttemptId"].as_str())
                    else {
                        break;
                    };
                    let (unit, attempt) = (unit.to_owned(), attempt.to_owned());
                    let t = "mutation($u: UUID!, $to: WorkState!, $e: String) { transition(unitId: $u, to: $to, evidenceUrl: $e) { state } }";
                    timed(&mut ops[2].1, gql(&client, &endpoint, &token, t, json!({ "u": unit, "to": "IN_PROGRESS" }))).await;
                    let c = "mutation($a: UUID!, $k: String!) { recordCost(attemptId: $a, cents: 250, idempotencyKey: $k) { costCents } }";
                    timed(&mut ops[3].1, gql(&client, &endpoint, &token, c, json!({ "a": attempt, "k": format!("bill-{i}-{n}") }))).await;
                    let v = json!({ "u": unit, "to": "VERIFIED", "e": format!("https://ci.example/run/{i}/{n}") });
                    timed(&mut ops[2].1, gql(&client, &endpoint, &token, t, v)).await;
                    let d = "mutation($u: UUID!) { dispose(unitId: $u, disposition: MIGRATED) { state } }";
                    let done = timed(&mut ops[4].1, gql(&client, &endpoint, &token, d, json!({ "u": unit }))).await;
                    if done["data"]["dispose"]["state"] != "DONE" {
                        eprintln!("lifecycle failed: {done}");
                        break;
                    }
                    ops[0].1.0.push(start.elapsed());
                    n += 1;
                }
                ops
            }
        })
        .await
    };

    settle().await?;

    // Phase 5: the same lifecycle as raw SQL in the service's transaction shape.
    eprintln!("lifecycles as raw SQL...");
    let rawlife = {
        let owner = owner.clone();
        drive(args.agents, args.seconds, "lifecycle as raw SQL (app role + RLS)", move |i, deadline| {
            let owner = owner.clone();
            async move {
                let mut s = Samples::default();
                let agent = format!("rawlife-{i}");
                let mut n = 0;
                while Instant::now() < deadline {
                    let ok = timed(&mut s, raw_lifecycle(&owner, &agent, n)).await;
                    if !ok {
                        break;
                    }
                    n += 1;
                }
                vec![("lifecycle", s)]
            }
        })
        .await
    };

    let events = owner.query_one_raw(stmt("SELECT count(*) AS n FROM work_unit_events", [])).await?;
    let events: i64 = events.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
    print_report(&args, &[&raw, &rls, &api, &life, &rawlife, &paced], events, &owner).await?;

    owner.close().await?;
    if let Some(pg) = scratch.embedded {
        pg.stop().await;
    }
    Ok(())
}

/// One agent's loop of the bare claim statement, one autocommit round trip
/// each, as the owner; a fresh agent name per claim.
async fn raw_claims(owner: &DatabaseConnection, fleet: &str, i: usize, deadline: Instant, limit: usize) -> Samples {
    let mut s = Samples::default();
    for n in 0..limit {
        if Instant::now() >= deadline {
            break;
        }
        let agent = format!("{fleet}-{i}-{n}");
        let w = Actor { fleet, agent: &agent, key: None };
        if timed(&mut s, async { claims::claim_next(owner, &w, 900, None).await.ok().flatten() }).await.is_none() {
            break;
        }
    }
    s
}

async fn raw_lifecycle(db: &DatabaseConnection, agent: &str, n: usize) -> bool {
    let step = |sql: &'static str, key: Option<String>| {
        let agent = agent.to_owned();
        async move {
            db::in_fleet::<_, DbErr, _>(db, "rawlife", move |tx| {
                Box::pin(async move {
                    let w = Actor {
                        fleet: "rawlife",
                        agent: &agent,
                        key: key.as_deref().map(|id| IdempotencyKey { id, hash: "h" }),
                    };
                    let unit = match sql {
                        "claim" => claims::claim_next(tx, &w, 900, None).await?.map(|c| c.unit),
                        _ => claims::held_by(tx, "rawlife", &agent).await?,
                    };
                    Ok(unit)
                })
            })
            .await
            .ok()
            .flatten()
        }
    };
    let Some(unit) = step("claim", None).await else { return false };
    let agent_owned = agent.to_owned();
    let result = db::in_fleet::<_, DbErr, _>(db, "rawlife", move |tx| {
        Box::pin(async move {
            let w = Actor { fleet: "rawlife", agent: &agent_owned, key: None };
            transitions::start(tx, &w, unit.id).await?;
            Ok(unit)
        })
    })
    .await;
    let Ok(unit) = result else { return false };
    let (agent_owned, key) = (agent.to_owned(), format!("bill-{agent}-{n}"));
    let attempt = unit.current_attempt_id.unwrap_or_default();
    let cost = db::in_fleet::<_, DbErr, _>(db, "rawlife", move |tx| {
        Box::pin(async move {
            let w = Actor { fleet: "rawlife", agent: &agent_owned, key: Some(IdempotencyKey { id: &key, hash: "h" }) };
            transitions::record_cost(tx, &w, attempt, 250, false).await
        })
    })
    .await;
    if cost.is_err() {
        return false;
    }
    let agent_owned = agent.to_owned();
    let verified = db::in_fleet::<_, DbErr, _>(db, "rawlife", move |tx| {
        Box::pin(async move {
            let w = Actor { fleet: "rawlife", agent: &agent_owned, key: None };
            transitions::verify(tx, &w, unit.id, "https://ci.example/raw").await
        })
    })
    .await;
    if !matches!(verified, Ok(Some(_))) {
        return false;
    }
    let agent_owned = agent.to_owned();
    let disposed = db::in_fleet::<_, DbErr, _>(db, "rawlife", move |tx| {
        Box::pin(async move {
            let w = Actor { fleet: "rawlife", agent: &agent_owned, key: None };
            let disposal = Disposal {
                unit_id: unit.id,
                disposition: Disposition::Migrated,
                terminal_state: WorkState::Done,
                evidence_url: None,
                reason: None,
                holder_states: &[WorkState::Verified],
                operator_states: &[],
            };
            transitions::dispose(tx, &w, &disposal).await
        })
    })
    .await;
    matches!(disposed, Ok(Some(_)))
}

async fn print_report(args: &Args, reports: &[&Report], events: i64, db: &DatabaseConnection) -> Result<(), AnyError> {
    println!("Machine: {}", support::machine(db).await?);
    println!("Agents: {}, {} s per phase", args.agents, args.seconds);
    println!();
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
    println!();
    let (raw, rls, api, life, rawlife) = (reports[0], reports[1], reports[2], reports[3], reports[4]);
    println!("claimNext over HTTP vs raw SQL ceiling: {:.0}%", 100.0 * api.rate() / raw.rate());
    println!("claimNext over HTTP vs raw SQL under RLS: {:.0}%", 100.0 * api.rate() / rls.rate());
    println!("lifecycle over HTTP vs raw SQL lifecycle: {:.0}%", 100.0 * life.rate() / rawlife.rate());
    println!("events written in the run: {events}");
    Ok(())
}

/// claimNext over HTTP with metrics off (no `--metrics-listen`: no counting
/// extension, no listener) and on (the listener, scraped every second as a
/// Prometheus would, far more often than its default 15 s), each on a server
/// of its own with its own pool over the same database; the phases alternate
/// off, on, off, on so that drift (autovacuum, a shared machine) hits both.
async fn metrics_overhead(args: &Args, url: &str, owner: &DatabaseConnection) -> Result<(), AnyError> {
    use work_ledger::http::ServerConfig;
    let per_agent = 250;
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
                    let resp = timed(&mut s, gql(&client, &endpoint, token, CLAIM, json!({}))).await;
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
