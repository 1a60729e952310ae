//! Live-events benchmark (SPEC §11, issue 27): many WebSocket subscribers
//! over two replicas of the server while events commit at a steady rate,
//! then all of them dropped at once and reconnected while the writer keeps
//! writing; then stall detection latency from lease expiry to the
//! `unitStalled` payload.
//!
//!   cargo bench --bench subscriptions -- [--subscribers 1000] [--fleets 10]
//!       [--rate 50] [--seconds 30] [--after 30] [--stalls 40] [--sweep 5s]
//!       [--connecting 256] [--dump FILE]
//!
//! With `--subscribers 10000` and more, `--fleets` defaults to 100 and
//! `--rate` to 500 (issue 27's goal). Phases:
//!
//! 1. Two `work-ledger serve` processes (the release binary, default
//!    settings apart from the sweep interval) on one database; the
//!    subscribers, one token each, spread over both and over the fleets, a
//!    third each on `ledgerEvents`, `blockingQuestionOpened` and
//!    `unitStalled`. The writer (`subscriptions/writer.rs`) runs real ledger
//!    operations in this process at `--rate` events per second.
//! 2. Warm-up until every subscriber has received something, then the
//!    steady phase (`--seconds`): commit-to-client latency (of what
//!    commits up to 5 s before the cut: see [`BEFORE_CUT`]), RSS, CPU.
//! 3. The churn: replica 0 is killed (SIGKILL) and restarted on its port,
//!    and replica 1's subscribers cut their sockets, all at once; every one
//!    reconnects (`ledgerEvents` with the cursor of the last event it saw)
//!    while the writer goes on for `--after` seconds. Catch-up: the time
//!    from the cut until every subscriber's lag is back under a second.
//! 4. The writer stops, deliveries drain, and what every subscriber
//!    received is checked against the event log in the database
//!    (`subscriptions/check.rs`): missing and duplicated items over both
//!    phases.
//!
//! `--dump FILE` writes every item's first arrival at every subscriber as
//! CSV (subscriber, fleet, kind, replica, item, committed, arrived; times in
//! seconds on the run's clock), to see which items were late and when.
//!
//! Uses DATABASE_URL when set (a scratch database is created next to it and
//! dropped at the end), otherwise an embedded PostgreSQL in a temporary
//! folder. Prints a Markdown report for docs/BENCHMARKS.md, then one summary
//! line for scripts, last:
//! `subscriptions: subscribers=N p99_ms=X missing=0 duplicated=0 rss_mib=Y catchup_s=Z`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use work_ledger::auth::{self, Permission, Principal, Role};
use work_ledger::db::{self, stmt};
use work_ledger::ledger::{Ledger, RegisterUnit};

#[path = "subscriptions/check.rs"]
mod check;
#[path = "subscriptions/client.rs"]
mod client;
#[path = "subscriptions/replica.rs"]
mod replica;
mod support;
#[path = "subscriptions/writer.rs"]
mod writer;

use check::{Clock, Phases, Verdict};
use client::{Kind, Shared, Subscriber};
use replica::{Replica, ServeArgs, cpu_ticks, rss_kib};
use support::AnyError;
use writer::{Commits, FleetWriter};

struct Args {
    subscribers: usize,
    fleets: usize,
    /// Events per second, all fleets together.
    rate: f64,
    /// The steady phase.
    seconds: u64,
    /// The writer goes on this long after the churn began.
    after: u64,
    stalls: usize,
    /// The servers' sweep interval (`WORK_LEDGER_SWEEP_INTERVAL`).
    sweep: String,
    /// Handshakes in flight at once from this process.
    connecting: usize,
    /// Where to write every delivery (`--dump`).
    dump: Option<String>,
}

/// The goal's size (issue 27): from this many subscribers on, the defaults
/// are its 100 fleets and 500 events per second.
const GOAL_SUBSCRIBERS: usize = 10_000;
/// Catch-up and CPU after the churn are read in two windows: the goal's 15 s
/// from the cut, and what follows.
const CHURN_WINDOW: Duration = Duration::from_secs(15);
/// A subscriber has caught up once its lag is back under this.
const CAUGHT_UP_LAG: f64 = 1.0;
/// The steady phase's latency is that of the items committed up to this
/// long before the cut. What commits in the last moments before it is still
/// on its way when the sockets are cut and arrives after the reconnect,
/// tens of seconds later: counted as steady, one sweep's stall reports just
/// before the cut made the steady p99 swing from 1 s to 40 s between runs
/// of one build. Those items' arrival is the catch-up's measure; the report
/// also prints the p99 with them, for comparison with earlier runs.
const BEFORE_CUT: Duration = Duration::from_secs(5);
/// Linux's USER_HZ: /proc's CPU times are in these ticks.
const CLOCK_TICKS: f64 = 100.0;

fn args() -> Result<Args, AnyError> {
    let argv: Vec<String> = std::env::args().collect();
    let flag = |name: &str| argv.windows(2).find(|p| p[0] == name).map(|p| p[1].clone());
    fn parsed<T: std::str::FromStr>(name: &str, value: Option<String>, default: T) -> Result<T, AnyError> {
        match value {
            Some(v) => v.parse().map_err(|_| format!("{name}: cannot read {v:?}").into()),
            None => Ok(default),
        }
    }
    let subscribers = parsed("--subscribers", flag("--subscribers"), 1000)?;
    let goal = subscribers >= GOAL_SUBSCRIBERS;
    let args = Args {
        subscribers,
        fleets: parsed("--fleets", flag("--fleets"), if goal { 100 } else { 10 })?,
        rate: parsed("--rate", flag("--rate"), if goal { 500.0 } else { 50.0 })?,
        seconds: parsed("--seconds", flag("--seconds"), 30)?,
        after: parsed("--after", flag("--after"), 30)?,
        stalls: parsed("--stalls", flag("--stalls"), 40)?,
        sweep: flag("--sweep").unwrap_or_else(|| "5s".to_owned()),
        connecting: parsed("--connecting", flag("--connecting"), 256)?,
        dump: flag("--dump"),
    };
    if args.fleets == 0 || args.rate <= 0.0 || args.connecting == 0 {
        return Err("--fleets, --rate and --connecting must be positive".into());
    }
    if args.subscribers < 6 * args.fleets {
        return Err("--subscribers must be at least 6 per fleet (3 kinds on 2 replicas)".into());
    }
    if Duration::from_secs(args.seconds) <= BEFORE_CUT {
        return Err(format!("--seconds must be longer than the last {} s before the cut", BEFORE_CUT.as_secs()).into());
    }
    if Duration::from_secs(args.after) <= CHURN_WINDOW {
        return Err(format!("--after must be longer than the {} s churn window", CHURN_WINDOW.as_secs()).into());
    }
    Ok(args)
}

/// Connections of each of this process's two pools (the owner's, the
/// writer's ledger): the writer's operations take about a millisecond each,
/// so a few connections carry its rate.
const BENCH_POOL: u32 = 8;
/// A replica's connections besides its request pool: the live pool's default
/// and the notifier's (the LISTEN connection is counted apart).
fn replica_live() -> u32 {
    work_ledger::live::LiveConfig::default().pool_size + 1
}
/// This process's connections: its two pools and the writer's notifier.
fn bench_connections() -> u32 {
    2 * BENCH_POOL + 1
}
/// The default request pool (`WORK_LEDGER_DB_POOL_SIZE`).
const REPLICA_POOL: u32 = 32;
/// Kept free for a `psql` or a monitor during the run.
const SPARE: i64 = 4;

struct Budget {
    max_connections: i64,
    replica_pool: u32,
}

/// Everything the run opens must fit PostgreSQL's `max_connections`, or new
/// connections are refused under load (a replica's LISTEN reconnect among
/// them, then its subscribers wait for the 1 s re-read): two replicas'
/// pools (request, live, LISTEN, notifier) and this process's
/// ([`bench_connections`]). The replicas keep
/// their default request pool when it fits, else the largest that does.
async fn connection_budget(owner: &DatabaseConnection) -> Result<Budget, AnyError> {
    let row = owner
        .query_one_raw(stmt("SELECT current_setting('max_connections')::bigint AS n", []))
        .await?
        .ok_or("max_connections: no row")?;
    let max_connections: i64 = row.try_get("", "n")?;
    let per_replica = (max_connections - SPARE - i64::from(bench_connections())) / 2 - i64::from(replica_live()) - 1;
    if per_replica < 4 {
        return Err(format!("PostgreSQL's max_connections ({max_connections}) leaves no room for two replicas").into());
    }
    Ok(Budget { max_connections, replica_pool: REPLICA_POOL.min(per_replica as u32) })
}

/// The bench holds every client socket: the open-files soft limit goes up
/// to the hard one when `needed` is above it.
fn raise_open_files(needed: usize) -> Result<u64, AnyError> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err("getrlimit(RLIMIT_NOFILE) failed".into());
    }
    if (limit.rlim_cur as usize) < needed {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err("setrlimit(RLIMIT_NOFILE) failed".into());
        }
    }
    if (limit.rlim_cur as usize) < needed {
        return Err(format!(
            "{needed} open files needed (the bench holds every subscriber's socket), the hard limit is {}",
            limit.rlim_max
        )
        .into());
    }
    Ok(limit.rlim_cur)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Which kind and replica subscriber `i` is: fleets round-robin, then the
/// three kinds, then the two replicas, so that every fleet has every kind on
/// both.
fn placement(i: usize, fleets: usize) -> (usize, Kind, usize) {
    let j = i / fleets;
    (i % fleets, Kind::ALL[j % 3], (j / 3) % 2)
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = args()?;
    let open_files = raise_open_files(args.subscribers + 512)?;
    let sweep = work_ledger::duration::parse(&args.sweep).map_err(|e| format!("--sweep: {e}"))?;
    let support::Scratch { url, embedded } = support::scratch_database("wl_subs").await?;
    let owner = db::connect(&url, BENCH_POOL).await?;
    let pools = connection_budget(&owner).await?;

    // Tokens first: `serve` mints none when live tokens exist. One per
    // subscriber, as separate processes would have: the server lets one
    // token hold at most 32 WebSockets (SPEC §9).
    eprintln!("minting {} tokens...", args.subscribers);
    let readers: Vec<String> = futures::stream::iter(0..args.subscribers)
        .map(|i| mint(&owner, format!("fleet{}", i % args.fleets), format!("reader-{i}"), Role::Reader))
        .buffered(BENCH_POOL as usize)
        .try_collect()
        .await?;
    let mut writers = Vec::new();
    for f in 0..args.fleets {
        let secret = mint(&owner, format!("fleet{f}"), "writer".to_owned(), Role::Operator).await?;
        let who =
            auth::principal_of(&owner, &auth::hash_token(&secret)).await?.ok_or("the writer's token is unknown")?;
        writers.push(who);
    }
    let monitor = mint(&owner, "stalls".to_owned(), "monitor".to_owned(), Role::Reader).await?;
    let secret = mint(&owner, "stalls".to_owned(), "operator".to_owned(), Role::Operator).await?;
    let stall_operator =
        auth::principal_of(&owner, &auth::hash_token(&secret)).await?.ok_or("the stall operator's token is unknown")?;

    let serve = ServeArgs {
        url: url.clone(),
        max_connections: args.subscribers + 256,
        sweep: args.sweep.clone(),
        db_pool_size: pools.replica_pool,
    };
    let mut replicas = vec![Replica::start(&serve).await?, Replica::start(&serve).await?];
    for r in &replicas {
        replica::wait_ready(r.port).await?;
    }
    let rss_idle: Vec<u64> = replicas.iter().map(|r| rss_kib(r.pid, "VmRSS")).collect();
    let pids = Arc::new(Mutex::new(replicas.iter().map(|r| r.pid).collect::<Vec<_>>()));
    let sampling = CancellationToken::new();
    let sampler = replica::sample_rss(pids.clone(), sampling.clone());

    eprintln!("connecting {} subscribers over {} fleets and 2 replicas...", args.subscribers, args.fleets);
    let clock = Clock::new();
    let cut = CancellationToken::new();
    let shared = Arc::new(Shared {
        received: (0..args.subscribers).map(|_| AtomicUsize::new(0)).collect(),
        connected: AtomicUsize::new(0),
        resubscribed: AtomicUsize::new(0),
        connecting: Semaphore::new(args.connecting),
        stop: CancellationToken::new(),
    });
    let mut subscribers = Vec::new();
    let mut kinds = Vec::new();
    for (i, token) in readers.into_iter().enumerate() {
        let (_, kind, on) = placement(i, args.fleets);
        kinds.push(kind);
        let cut = (on == 1).then(|| cut.clone());
        let subscriber = Subscriber { index: i, port: replicas[on].port, token, kind, cut };
        subscribers.push(tokio::spawn(subscriber.run(shared.clone())));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while shared.connected.load(Ordering::Relaxed) < args.subscribers {
        if Instant::now() > deadline {
            return Err("the subscribers did not all connect within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every subscription is set up in its server (its tail exists) before
    // anything is written.
    while futures::future::join_all(replicas.iter().map(replica::subscriptions)).await.iter().sum::<u64>()
        < args.subscribers as u64
    {
        if Instant::now() > deadline {
            return Err("the servers did not set up every subscription within 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let connected_in = clock.at(Instant::now());

    // The writer: one task per fleet, paced from here.
    let ledger = Ledger::new(db::connect(&url, BENCH_POOL).await?);
    let mut lanes = Vec::new();
    let mut writing = Vec::new();
    for who in writers {
        let (tx, rx) = mpsc::unbounded_channel();
        lanes.push(tx);
        let writer = FleetWriter { ledger: ledger.clone(), owner: owner.clone(), who };
        writing.push(tokio::spawn(writer.run(rx)));
    }
    let pacing = CancellationToken::new();
    let pacer = {
        let (pacing, rate) = (pacing.clone(), args.rate);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut n = 0usize;
            loop {
                tokio::select! {
                    _ = pacing.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if lanes[n % lanes.len()].send(()).is_err() {
                    return; // a writer failed: its error is reported when joined
                }
                n += 1;
            }
        })
    };

    // Warm-up: every subscriber has received something, so all are live.
    eprintln!("warming up at {} events/s...", args.rate);
    let warm_deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let silent: Vec<usize> =
            (0..args.subscribers).filter(|&i| shared.received[i].load(Ordering::Relaxed) == 0).collect();
        if silent.is_empty() {
            break;
        }
        if let Some(failed) = writing.iter_mut().find(|w| w.is_finished()) {
            failed.await??;
            return Err("a writer stopped".into());
        }
        if Instant::now() > warm_deadline {
            let by_kind: Vec<String> = Kind::ALL
                .iter()
                .map(|k| format!("{} {}", silent.iter().filter(|&&i| kinds[i] == *k).count(), k.name()))
                .collect();
            return Err(format!("subscribers that never received anything: {}", by_kind.join(", ")).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rss_connected: Vec<u64> = replicas.iter().map(|r| rss_kib(r.pid, "VmRSS")).collect();

    eprintln!("steady phase: {} s...", args.seconds);
    let steady_start = Instant::now();
    let cpu_steady: Vec<u64> = replicas.iter().map(|r| cpu_ticks(r.pid)).collect();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;

    eprintln!("churn: replica 0 killed and restarted, replica 1's subscribers cut...");
    let cut_at = Instant::now();
    let cpu_cut: Vec<u64> = replicas.iter().map(|r| cpu_ticks(r.pid)).collect();
    let hwm_killed = rss_kib(replicas[0].pid, "VmHWM");
    cut.cancel();
    replicas[0].kill_and_restart(&serve).await?;
    if let Ok(mut p) = pids.lock() {
        p[0] = replicas[0].pid;
    }
    replica::wait_ready(replicas[0].port).await?;
    let restarted_in = cut_at.elapsed();
    // Re-subscriptions are counted while the CPU windows run (the sample
    // at the end of the churn window is taken on time whatever happens).
    let mut resubscribed_in = None;
    while Instant::now() < cut_at + CHURN_WINDOW {
        if resubscribed_in.is_none() && shared.resubscribed.load(Ordering::Relaxed) >= args.subscribers {
            resubscribed_in = Some(cut_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu_window: Vec<u64> = replicas.iter().map(|r| cpu_ticks(r.pid)).collect();
    while Instant::now() < cut_at + Duration::from_secs(args.after) {
        if resubscribed_in.is_none() && shared.resubscribed.load(Ordering::Relaxed) >= args.subscribers {
            resubscribed_in = Some(cut_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resubscribed = shared.resubscribed.load(Ordering::Relaxed);
    let cpu_end: Vec<u64> = replicas.iter().map(|r| cpu_ticks(r.pid)).collect();
    let write_end = Instant::now();

    pacing.cancel();
    let _ = pacer.await;
    let mut commits = Commits::new();
    for w in writing {
        commits.extend(w.await??);
    }
    // Drain: the last leases moved are swept, then nothing more arrives.
    eprintln!("draining...");
    tokio::time::sleep(sweep * 2 + Duration::from_secs(1)).await;
    let total = || shared.received.iter().map(|n| n.load(Ordering::Relaxed)).sum::<usize>();
    let drain_deadline = Instant::now() + Duration::from_secs(60);
    let mut last = total();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = total();
        if now == last || Instant::now() > drain_deadline {
            break;
        }
        last = now;
    }
    shared.stop.cancel();
    let mut outcomes = Vec::new();
    for s in subscribers {
        outcomes.push(s.await?);
    }
    sampling.cancel();
    let rss_peak = sampler.await?;
    let hwm: Vec<u64> = replicas.iter().map(|r| rss_kib(r.pid, "VmHWM")).collect();

    eprintln!("checking against the event log...");
    let log = check::read_log(&owner, &clock, &commits).await?;
    let phases = Phases {
        steady: (clock.at(steady_start), clock.at(cut_at)),
        measured_until: clock.at(cut_at - BEFORE_CUT),
        cut: clock.at(cut_at),
        lag: CAUGHT_UP_LAG,
    };
    let empty = Vec::new();
    if let Some(path) = &args.dump {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        check::dump_header(&mut out)?;
        for (i, o) in outcomes.iter().enumerate() {
            let (fleet, kind, replica) = placement(i, args.fleets);
            let items = log.get(&(format!("fleet{fleet}"), kind)).unwrap_or(&empty);
            check::dump(&mut out, (i, fleet, kind, replica), items, &o.receipts, &clock)?;
        }
        std::io::Write::flush(&mut out)?;
        eprintln!("every delivery written to {path}");
    }
    let verdicts: Vec<Verdict> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (fleet, kind, _) = placement(i, args.fleets);
            let items = log.get(&(format!("fleet{fleet}"), kind)).unwrap_or(&empty);
            check::judge(kind, items, &o.receipts, &clock, &phases)
        })
        .collect();

    // Deliveries per window, for the CPU per delivery.
    let windows = [(steady_start, cut_at), (cut_at, cut_at + CHURN_WINDOW), (cut_at + CHURN_WINDOW, write_end)];
    let mut delivered = [0usize; 3];
    for r in outcomes.iter().flat_map(|o| &o.receipts) {
        if let Some(w) = windows.iter().position(|(from, to)| (*from..*to).contains(&r.at)) {
            delivered[w] += 1;
        }
    }
    // Replica 0's old process ends at the cut; the new one starts from zero.
    let cpu = [
        (cpu_cut[0] - cpu_steady[0]) + (cpu_cut[1] - cpu_steady[1]),
        cpu_window[0] + (cpu_window[1] - cpu_cut[1]),
        (cpu_end[0] - cpu_window[0]) + (cpu_end[1] - cpu_window[1]),
    ];
    let per_delivery_us =
        |w: usize| if delivered[w] == 0 { f64::NAN } else { cpu[w] as f64 / CLOCK_TICKS * 1e6 / delivered[w] as f64 };
    let window_s = |w: usize| windows[w].1.saturating_duration_since(windows[w].0).as_secs_f64();
    let cores = |w: usize| 100.0 * cpu[w] as f64 / CLOCK_TICKS / window_s(w);

    let stalls = stall_detection(replicas[1].port, &monitor, (&ledger, &stall_operator), &owner, args.stalls).await?;

    // The report.
    let sum = |f: fn(&Verdict) -> usize| verdicts.iter().map(f).sum::<usize>();
    let (missing, duplicated, resent, unknown, expected) =
        (sum(|v| v.missing), sum(|v| v.duplicated), sum(|v| v.resent), sum(|v| v.unknown), sum(|v| v.expected));
    let mut latencies: Vec<f64> = verdicts.iter().flat_map(|v| v.latencies.iter().copied()).collect();
    latencies.sort_by(f64::total_cmp);
    let mut to_the_cut: Vec<f64> = verdicts.iter().flat_map(|v| v.latencies_to_the_cut.iter().copied()).collect();
    to_the_cut.sort_by(f64::total_cmp);
    let p99_of = |kind: Kind| {
        let mut l: Vec<f64> = verdicts
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| **k == kind)
            .flat_map(|(v, _)| v.latencies.iter().copied())
            .collect();
        l.sort_by(f64::total_cmp);
        (l.len(), pct(&l, 0.99))
    };
    let never = verdicts.iter().filter(|v| v.catch_up.is_none()).count();
    let mut catch_ups: Vec<f64> = verdicts.iter().filter_map(|v| v.catch_up).collect();
    catch_ups.sort_by(f64::total_cmp);
    let catch_up_max = if never > 0 { f64::INFINITY } else { pct(&catch_ups, 1.0) };
    let steady_events = log
        .iter()
        .filter(|((_, k), _)| *k == Kind::Events)
        .flat_map(|(_, items)| items)
        .filter(|i| (phases.steady.0..phases.steady.1).contains(&i.committed))
        .count();
    let errors: Vec<&String> = outcomes.iter().flat_map(|o| &o.errors).collect();
    let rss_max = rss_peak.iter().chain(&hwm).chain([&hwm_killed]).copied().max().unwrap_or(0);
    let mib = |kib: u64| kib / 1024;

    println!("Machine: {}; servers, subscribers, writer and PostgreSQL share it", support::machine(&owner).await?);
    println!(
        "{} subscribers over {} fleets and 2 replicas (a third each on ledgerEvents, blockingQuestionOpened, \
         unitStalled), {} events/s ({} committed in the {} s steady phase: {:.0}/s), churn at {} s, writer on for \
         {} s after it; servers: release build, defaults but a sweep every {}; open-files soft limit {}; \
         PostgreSQL max_connections {}: request pools of {} per replica (+ {} live and notifier, 1 LISTEN), {} for this process",
        args.subscribers,
        args.fleets,
        args.rate,
        steady_events,
        args.seconds,
        steady_events as f64 / window_s(0),
        args.seconds,
        args.after,
        args.sweep,
        open_files,
        pools.max_connections,
        pools.replica_pool,
        replica_live(),
        bench_connections()
    );
    println!();
    println!("| measure | value |");
    println!("| --- | ---: |");
    println!("| items the log says were due (both phases) | {expected} |");
    println!("| missing / duplicated (both phases) | {missing} / {duplicated} |");
    println!("| re-sent by the includeOpen/includeCurrent snapshot after the reconnect | {resent} |");
    println!("| received but not in the log | {unknown} |");
    println!(
        "| steady phase: deliveries measured (items committed up to {} s before the cut) | {} |",
        BEFORE_CUT.as_secs(),
        latencies.len()
    );
    println!(
        "| steady: commit→client p50 / p99 / p99.9 / max | {:.1} / {:.1} / {:.1} / {:.1} ms |",
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
        pct(&latencies, 0.999),
        pct(&latencies, 1.0)
    );
    println!(
        "| steady: commit→client p99 with the items committed until the cut ({} deliveries) | {:.1} ms |",
        to_the_cut.len(),
        pct(&to_the_cut, 0.99)
    );
    for kind in Kind::ALL {
        let (n, p99) = p99_of(kind);
        println!("| steady: p99 of {} ({n} deliveries) | {p99:.1} ms |", kind.name());
    }
    println!(
        "| server RSS idle / connected (replica 0, 1) | {} + {} / {} + {} MiB |",
        mib(rss_idle[0]),
        mib(rss_idle[1]),
        mib(rss_connected[0]),
        mib(rss_connected[1])
    );
    println!(
        "| server RSS max sampled every 250 ms (replica 0, 1) / VmHWM (0 before kill, 0 after, 1) | {} , {} / {} , {} , {} MiB |",
        mib(rss_peak[0]),
        mib(rss_peak[1]),
        mib(hwm_killed),
        mib(hwm[0]),
        mib(hwm[1])
    );
    let names = ["steady", "churn: first 15 s from the cut", "after the churn"];
    for w in 0..3 {
        println!(
            "| CPU {} (both servers) | {:.0}% of one core, {} deliveries/s, {:.1} µs per delivery |",
            names[w],
            cores(w),
            (delivered[w] as f64 / window_s(w)).round(),
            per_delivery_us(w)
        );
    }
    println!("| {} subscribers connected and subscribed after | {connected_in:.1} s |", args.subscribers);
    println!("| replica 0 restarted and ready after | {:.1} s |", restarted_in.as_secs_f64());
    let resubscribed_in = resubscribed_in.map_or("not all".to_owned(), |t| format!("{:.1} s", t.as_secs_f64()));
    println!(
        "| subscriptions sent again after the cut | {resubscribed} (all {} after: {resubscribed_in}) |",
        args.subscribers
    );
    println!(
        "| catch-up (lag back under {CAUGHT_UP_LAG} s, nothing missing) p50 / p99 / max | {:.1} / {:.1} / {:.1} s |",
        pct(&catch_ups, 0.5),
        pct(&catch_ups, 0.99),
        catch_up_max
    );
    println!("| subscribers never caught up (something missing) | {never} |");
    println!(
        "| connection attempts refused during the churn / server errors instead of items | {} / {} |",
        outcomes.iter().map(|o| o.refused).sum::<usize>(),
        errors.len()
    );
    println!("| stall reports received | {} of {} |", stalls.len(), args.stalls);
    println!(
        "| stall detection lease expiry→client p50 / p99 / max | {:.0} / {:.0} / {:.0} ms |",
        pct(&stalls, 0.5),
        pct(&stalls, 0.99),
        pct(&stalls, 1.0)
    );
    for e in errors.iter().take(5) {
        eprintln!("error: {e}");
    }

    for r in replicas {
        eprintln!("server log: {}", replica::log_path(r.port).display());
        r.stop().await;
    }
    owner.close().await?;
    match embedded {
        Some(pg) => pg.stop().await,
        None => support::drop_scratch(&url).await?,
    }
    println!();
    println!(
        "subscriptions: subscribers={} p99_ms={:.1} missing={missing} duplicated={duplicated} rss_mib={} catchup_s={:.1}",
        args.subscribers,
        pct(&latencies, 0.99),
        mib(rss_max),
        catch_up_max
    );
    Ok(())
}

async fn mint(db: &DatabaseConnection, fleet: String, name: String, role: Role) -> Result<String, AnyError> {
    let (secret, hash) = auth::new_token();
    db::tokens::insert(db, &fleet, &name, &role.permissions(), &hash).await?;
    Ok(secret)
}

/// Stall detection: leases that expire spread over ten seconds, against the
/// server's own sweeper; lease expiry → client in ms, sorted.
async fn stall_detection(
    port: u16,
    monitor: &str,
    (ledger, operator): (&Ledger, &Principal),
    owner: &DatabaseConnection,
    n: usize,
) -> Result<Vec<f64>, AnyError> {
    eprintln!("stall detection: {n} leases...");
    let query = "subscription { unitStalled(includeCurrent: false) { unit { externalRef } agentId leaseExpiredAt } }";
    let mut ws = client::subscribe(port, monitor, query, None).await?;
    seed_stalls(ledger, operator, owner, n).await?;
    let mut late = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while late.len() < n && Instant::now() < deadline {
        let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline.into(), ws.next()).await else { break };
        let Message::Text(text) = frame else { continue };
        let message: Value = serde_json::from_str(text.as_str())?;
        let expired = message["payload"]["data"]["unitStalled"]["leaseExpiredAt"].as_str();
        if let Some(expired) = expired.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
            let ms = Utc::now().signed_duration_since(expired.to_utc()).num_microseconds().unwrap_or(0);
            late.push(ms as f64 / 1000.0);
        }
    }
    late.sort_by(f64::total_cmp);
    Ok(late)
}

/// `n` units of fleet `stalls` claimed through the ledger, each by an
/// agent of its own, whose leases are then moved to expire from 3 s on,
/// spread over 10 s (so expiries fall anywhere between two sweeps); moving a
/// lease is what a heartbeat does, with no event of its own.
async fn seed_stalls(
    ledger: &Ledger,
    operator: &Principal,
    owner: &DatabaseConnection,
    n: usize,
) -> Result<(), AnyError> {
    for i in 0..n {
        let unit = RegisterUnit { external_ref: format!("stall-{i}"), domain: None, workflow_id: None };
        let units = ledger.register_units(operator, vec![unit]).await.map_err(|e| format!("stalls: register: {e}"))?;
        let id = units.first().ok_or("register answered no unit")?.id;
        let agent = auth::mint(
            owner,
            &operator.fleet,
            &format!("agent-stall-{i}"),
            vec![Permission::UnitsClaim],
            Duration::from_secs(86_400),
        )
        .await
        .map_err(|e| format!("stalls: token: {e}"))?;
        ledger.claim_unit(&agent, id, Some(30), None).await.map_err(|e| format!("stalls: claim: {e}"))?;
    }
    owner
        .execute_raw(stmt(
            "UPDATE work_units w SET lease_expires_at = now() + interval '3 seconds'
                    + (10.0 * (substring(w.external_ref from 7)::int) / $1) * interval '1 second'
              WHERE fleet = 'stalls'",
            [(n as i64).into()],
        ))
        .await?;
    Ok(())
}
