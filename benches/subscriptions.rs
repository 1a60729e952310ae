//! Live-events benchmark (SPEC §11): many WebSocket subscribers across
//! fleets while events commit at a steady rate; delivery latency from commit
//! to client, the server's memory and CPU; then stall detection latency from
//! lease expiry to the `unitStalled` payload.
//!
//!   cargo bench --bench subscriptions -- [--subscribers 1000] [--fleets 10]
//!       [--rate 50] [--seconds 30] [--stalls 40] [--sweep 5s]
//!
//! The server is the real binary (`work-ledger serve`, release build) in a
//! process of its own, so its RSS and CPU are its own; the subscribers and
//! the writer run here. Uses DATABASE_URL when set (a scratch database is
//! created next to it), otherwise an embedded PostgreSQL in a temporary
//! folder. Prints a Markdown report for docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{SinkExt, StreamExt};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use work_ledger::auth::{self, Role};
use work_ledger::db::{self, stmt};

mod support;

use support::AnyError;

struct Args {
    subscribers: usize,
    fleets: usize,
    rate: f64,
    seconds: u64,
    stalls: usize,
    /// The server's sweep interval (`WORK_LEDGER_SWEEP_INTERVAL`).
    sweep: String,
}

fn args() -> Args {
    let mut args = Args { subscribers: 1000, fleets: 10, rate: 50.0, seconds: 30, stalls: 40, sweep: "5s".to_owned() };
    let argv: Vec<String> = std::env::args().collect();
    for pair in argv.windows(2) {
        let value = pair[1].as_str();
        match pair[0].as_str() {
            "--subscribers" => args.subscribers = value.parse().unwrap_or(args.subscribers),
            "--fleets" => args.fleets = value.parse().unwrap_or(args.fleets).max(1),
            "--rate" => args.rate = value.parse().unwrap_or(args.rate),
            "--seconds" => args.seconds = value.parse().unwrap_or(args.seconds),
            "--stalls" => args.stalls = value.parse().unwrap_or(args.stalls),
            "--sweep" => args.sweep = value.to_owned(),
            _ => {}
        }
    }
    args
}

const EVENTS: &str = "subscription { ledgerEvents { id unitId eventType createdAt } }";
const STALLS: &str =
    "subscription { unitStalled(includeCurrent: false) { unit { externalRef } agentId leaseExpiredAt } }";

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = args();
    let support::Scratch { url, embedded } = support::scratch_database("wl_subs").await?;
    let owner = db::connect(&url, 4).await?;

    // Tokens first: `serve` mints none when live tokens exist. One per
    // subscriber, as separate processes would have: the server lets one
    // token hold at most 32 WebSockets (SPEC §9).
    let mut readers = Vec::new();
    for i in 0..args.subscribers {
        readers.push(mint(&owner, &format!("fleet{}", i % args.fleets), &format!("reader-{i}")).await?);
    }
    let monitor = mint(&owner, "stalls", "monitor").await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("serve")
        .env("DATABASE_URL", &url)
        .env("WORK_LEDGER_LISTEN", format!("127.0.0.1:{port}"))
        .env("WORK_LEDGER_LOG", "warn")
        // Every subscriber is a connection; the default cap is half the open-files limit.
        .env("WORK_LEDGER_MAX_CONNECTIONS", (args.subscribers + 64).to_string())
        .env("WORK_LEDGER_SWEEP_INTERVAL", &args.sweep)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = server.id().ok_or("server pid")?;
    wait_ready(port).await?;
    let rss_idle = rss_kib(pid, "VmRSS");

    eprintln!("connecting {} subscribers over {} fleets...", args.subscribers, args.fleets);
    let stop = CancellationToken::new();
    let received: Arc<Vec<AtomicUsize>> = Arc::new((0..args.subscribers).map(|_| AtomicUsize::new(0)).collect());
    let connecting = Arc::new(Semaphore::new(64));
    let mut subscribers = Vec::new();
    for i in 0..args.subscribers {
        let token = readers[i].clone();
        let (stop, received, connecting) = (stop.clone(), received.clone(), connecting.clone());
        subscribers.push(tokio::spawn(async move {
            let permit = connecting.acquire_owned().await;
            let mut ws = match subscribe(port, &token, EVENTS).await {
                Ok(ws) => ws,
                Err(err) => {
                    eprintln!("subscriber {i}: {err}");
                    return Vec::new();
                }
            };
            drop(permit);
            let mut seen: Vec<(Uuid, Instant)> = Vec::new();
            loop {
                let frame = tokio::select! {
                    _ = stop.cancelled() => break,
                    frame = ws.next() => frame,
                };
                let Some(Ok(Message::Text(text))) = frame else {
                    if matches!(frame, Some(Ok(Message::Ping(_)) | Ok(Message::Pong(_)))) {
                        continue;
                    }
                    break;
                };
                let at = Instant::now();
                let Ok(message) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                let id = message["payload"]["data"]["ledgerEvents"]["id"].as_str().and_then(|s| s.parse().ok());
                if let Some(id) = id {
                    seen.push((id, at));
                    received[i].fetch_add(1, Ordering::Relaxed);
                }
            }
            seen
        }));
    }

    // Warm-up: every subscriber has received an event, so all are live.
    eprintln!("warming up...");
    let warm_start = Instant::now();
    let mut warm_events = 0;
    while received.iter().any(|n| n.load(Ordering::Relaxed) == 0) {
        if warm_start.elapsed() > Duration::from_secs(120) {
            let missing = received.iter().filter(|n| n.load(Ordering::Relaxed) == 0).count();
            return Err(format!("{missing} subscribers never received an event").into());
        }
        for f in 0..args.fleets {
            produce(&owner, &format!("fleet{f}"), &format!("warm-{warm_events}")).await?;
            warm_events += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rss_connected = rss_kib(pid, "VmRSS");
    let counts_before: Vec<usize> = received.iter().map(|n| n.load(Ordering::Relaxed)).collect();

    eprintln!("steady phase: {} events/s for {} s...", args.rate, args.seconds);
    let cpu_start = cpu_ticks(pid);
    let started = Instant::now();
    let mut committed: HashMap<Uuid, (Instant, usize)> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut rss_peak = 0;
    let mut n = 0usize;
    while started.elapsed() < Duration::from_secs(args.seconds) {
        tick.tick().await;
        let fleet = n % args.fleets;
        let id = produce(&owner, &format!("fleet{fleet}"), &format!("e-{n}")).await?;
        committed.insert(id, (Instant::now(), fleet));
        n += 1;
        if n.is_multiple_of(args.rate.max(1.0) as usize) {
            rss_peak = rss_peak.max(rss_kib(pid, "VmRSS"));
        }
    }
    let steady = started.elapsed();
    let cpu_used = cpu_ticks(pid).saturating_sub(cpu_start);

    // Drain: each subscriber expects its fleet's share of the steady events.
    let per_fleet: Vec<usize> =
        (0..args.fleets).map(|f| committed.values().filter(|(_, fleet)| *fleet == f).count()).collect();
    let drain_start = Instant::now();
    while drain_start.elapsed() < Duration::from_secs(20) {
        let done = (0..args.subscribers)
            .all(|i| received[i].load(Ordering::Relaxed) >= counts_before[i] + per_fleet[i % args.fleets]);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let mut latencies = Vec::new();
    let (mut missing, mut duplicates) = (0usize, 0usize);
    for (i, handle) in subscribers.into_iter().enumerate() {
        let seen = handle.await.unwrap_or_default();
        let mut got = std::collections::HashSet::new();
        for (id, at) in seen {
            if let Some((sent, _)) = committed.get(&id) {
                if !got.insert(id) {
                    duplicates += 1;
                }
                latencies.push(at.saturating_duration_since(*sent));
            }
        }
        missing += per_fleet[i % args.fleets].saturating_sub(got.len());
    }
    latencies.sort();

    // Stall detection: leases that expire spread over ten seconds, against
    // the server's own sweeper.
    eprintln!("stall detection: {} leases...", args.stalls);
    let mut stall_ws = subscribe(port, &monitor, STALLS).await?;
    seed_stalls(&owner, args.stalls).await?;
    let mut stall_latencies = Vec::new();
    let stall_deadline = Instant::now() + Duration::from_secs(40);
    while stall_latencies.len() < args.stalls && Instant::now() < stall_deadline {
        let Ok(Some(Ok(frame))) = tokio::time::timeout_at(stall_deadline.into(), stall_ws.next()).await else { break };
        let Message::Text(text) = frame else { continue };
        let message: Value = serde_json::from_str(text.as_str())?;
        let expired = message["payload"]["data"]["unitStalled"]["leaseExpiredAt"].as_str();
        if let Some(expired) = expired.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
            let late = Utc::now().signed_duration_since(expired.to_utc());
            stall_latencies.push(late.to_std().unwrap_or_default());
        }
    }
    stall_latencies.sort();

    let rss_hwm = rss_kib(pid, "VmHWM");
    let clock_ticks = 100.0; // USER_HZ on Linux
    let cpu_pct = 100.0 * cpu_used as f64 / clock_ticks / steady.as_secs_f64();
    let deliveries_per_s = latencies.len() as f64 / steady.as_secs_f64();

    println!("Machine: {}; server, subscribers and PostgreSQL share it", support::machine(&owner).await?);
    println!(
        "{} subscribers over {} fleets (ledgerEvents), {} events/s for {} s ({} events, {:.0} deliveries/s); \
         server: release build, defaults but a sweep every {}",
        args.subscribers,
        args.fleets,
        args.rate,
        args.seconds,
        committed.len(),
        deliveries_per_s,
        args.sweep
    );
    println!();
    println!("| measure | value |");
    println!("| --- | ---: |");
    println!("| deliveries measured | {} |", latencies.len());
    println!("| missing / duplicate deliveries | {missing} / {duplicates} |");
    println!("| delivery latency commit→client p50 | {:.1} ms |", pct(&latencies, 0.50));
    println!("| delivery latency p99 | {:.1} ms |", pct(&latencies, 0.99));
    println!("| delivery latency p99.9 | {:.1} ms |", pct(&latencies, 0.999));
    println!("| delivery latency max | {:.1} ms |", pct(&latencies, 1.0));
    println!(
        "| server RSS idle / {} subscribers / peak (VmHWM) | {} / {} / {} MiB |",
        args.subscribers,
        rss_idle / 1024,
        rss_connected.max(rss_peak) / 1024,
        rss_hwm / 1024
    );
    println!("| server CPU during the steady phase | {cpu_pct:.0}% of one core |");
    println!("| stall reports received | {} of {} |", stall_latencies.len(), args.stalls);
    println!("| stall detection lease expiry→client p50 | {:.0} ms |", pct(&stall_latencies, 0.50));
    println!(
        "| stall detection p99 / max | {:.0} / {:.0} ms |",
        pct(&stall_latencies, 0.99),
        pct(&stall_latencies, 1.0)
    );

    let _ = tokio::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await;
    let _ = tokio::time::timeout(Duration::from_secs(10), server.wait()).await;
    owner.close().await?;
    if let Some(pg) = embedded {
        pg.stop().await;
    }
    Ok(())
}

async fn mint(db: &DatabaseConnection, fleet: &str, name: &str) -> Result<String, AnyError> {
    let (secret, hash) = auth::new_token();
    db::tokens::insert(db, fleet, name, &Role::Reader.permissions(), &hash).await?;
    Ok(secret)
}

async fn wait_ready(port: u16) -> Result<(), AnyError> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ready = client.get(format!("http://127.0.0.1:{port}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the server did not become ready".into())
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects, authenticates and starts one subscription (id "1").
async fn subscribe(port: u16, token: &str, query: &str) -> Result<Socket, AnyError> {
    let mut request = format!("ws://127.0.0.1:{port}/graphql/ws").into_client_request()?;
    request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("graphql-transport-ws"));
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    ws.send(Message::Text(init.to_string().into())).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) if text.as_str().contains("connection_ack") => break,
            Some(Ok(Message::Text(text))) => return Err(format!("unexpected {text}").into()),
            Some(Ok(_)) => continue,
            other => return Err(format!("no connection_ack: {other:?}").into()),
        }
    }
    let subscribe = json!({ "type": "subscribe", "id": "1", "payload": { "query": query } });
    ws.send(Message::Text(subscribe.to_string().into())).await?;
    Ok(ws)
}

/// Registers one unit (one `registered` event) in its own transaction;
/// returns the event id once the commit has returned.
async fn produce(db: &DatabaseConnection, fleet: &str, external_ref: &str) -> Result<Uuid, AnyError> {
    let row = db
        .query_one_raw(stmt(
            "WITH u AS (INSERT INTO work_units (fleet, external_ref) VALUES ($1, $2) RETURNING id, fleet, external_ref)
             INSERT INTO work_unit_events (fleet, unit_id, event_type, to_state, agent_id, detail)
             SELECT fleet, id, 'registered', 'ready', 'bench', jsonb_build_object('external_ref', external_ref) FROM u
             RETURNING id",
            [fleet.into(), external_ref.into()],
        ))
        .await?
        .ok_or("no event")?;
    Ok(row.try_get("", "id")?)
}

/// `n` claimed units in fleet `stalls` whose leases expire from 3 s on,
/// spread over 10 s (so expiries fall anywhere between two sweeps).
async fn seed_stalls(db: &DatabaseConnection, n: usize) -> Result<(), AnyError> {
    // Seeded claims come without their events: the commit-time check that
    // each state change has one is off while the seed runs.
    db.execute_unprepared("ALTER TABLE work_units DISABLE TRIGGER work_units_change_recorded").await?;
    // Two statements: an UPDATE cannot see rows its own statement inserted.
    db.execute_raw(stmt(
        "INSERT INTO work_units (fleet, external_ref) SELECT 'stalls', 'stall-' || g FROM generate_series(1, $1) g",
        [(n as i64).into()],
    ))
    .await?;
    db.execute_raw(stmt(
        "WITH a AS (
             INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
             SELECT 'stalls', id, 1, 'agent-' || external_ref FROM work_units WHERE fleet = 'stalls'
             RETURNING id, unit_id, agent_id
         )
         UPDATE work_units w SET state = 'claimed', claimed_by = a.agent_id, current_attempt_id = a.id, attempt_count = 1,
                lease_expires_at = now() + interval '3 seconds'
                                   + (10.0 * (substring(w.external_ref from 7)::int - 1) / $1) * interval '1 second',
                last_heartbeat_at = now()
           FROM a WHERE w.id = a.unit_id",
        [(n as i64).into()],
    ))
    .await?;
    db.execute_unprepared("ALTER TABLE work_units ENABLE TRIGGER work_units_change_recorded").await?;
    Ok(())
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// utime + stime of the process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}
