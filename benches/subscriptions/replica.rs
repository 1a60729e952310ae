//! The servers under test: `work-ledger serve` (release build) in processes of
//! their own on one database, so that their RSS and CPU are their own; one of
//! them is killed and restarted on the same port during the churn.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::support::AnyError;

pub struct Replica {
    pub port: u16,
    metrics_port: u16,
    child: tokio::process::Child,
    pub pid: u32,
}

/// What every replica is started with.
#[derive(Clone)]
pub struct ServeArgs {
    pub url: String,
    pub max_connections: usize,
    pub sweep: String,
    /// `WORK_LEDGER_DB_POOL_SIZE`: the replicas' pools must fit PostgreSQL's `max_connections`.
    pub db_pool_size: u32,
}

impl Replica {
    /// A new server on a free port (and a metrics port of its own: replicas
    /// on one machine cannot share the default).
    pub async fn start(args: &ServeArgs) -> Result<Self, AnyError> {
        let port = free_port()?;
        let metrics_port = free_port()?;
        Self::start_on(args, port, metrics_port).await
    }

    async fn start_on(args: &ServeArgs, port: u16, metrics_port: u16) -> Result<Self, AnyError> {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
            .arg("serve")
            .env("DATABASE_URL", &args.url)
            .env("WORK_LEDGER_LISTEN", format!("127.0.0.1:{port}"))
            .env("WORK_LEDGER_METRICS_LISTEN", format!("127.0.0.1:{metrics_port}"))
            .env("WORK_LEDGER_LOG", "warn")
            // Every subscriber is a connection; the default cap is half the open-files limit.
            .env("WORK_LEDGER_MAX_CONNECTIONS", args.max_connections.to_string())
            .env("WORK_LEDGER_SWEEP_INTERVAL", &args.sweep)
            .env("WORK_LEDGER_DB_POOL_SIZE", args.db_pool_size.to_string())
            .stdout(std::process::Stdio::null())
            // The servers' warnings (pool waits under the reconnect storm)
            // are worth reading after a run, not in the report.
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log_path(port))?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start `work-ledger serve`: {e}"))?;
        let pid = child.id().ok_or("the server exited at once")?;
        Ok(Self { port, metrics_port, child, pid })
    }

    /// SIGKILL (no goodbye to any client), then the same server again on the
    /// same ports; returns once the process is spawned, not once it is ready.
    pub async fn kill_and_restart(&mut self, args: &ServeArgs) -> Result<(), AnyError> {
        self.child.start_kill()?;
        self.child.wait().await?;
        *self = Self::start_on(args, self.port, self.metrics_port).await?;
        Ok(())
    }

    pub async fn stop(mut self) {
        let _ = tokio::process::Command::new("kill").arg("-TERM").arg(self.pid.to_string()).status().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// Where the server on `port` logs (its warnings and errors).
pub fn log_path(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("wl-subs-{}-{port}.log", std::process::id()))
}

/// Live subscriptions open in the server, from its metrics.
pub async fn subscriptions(replica: &Replica) -> u64 {
    let url = format!("http://127.0.0.1:{}/metrics", replica.metrics_port);
    let Ok(response) = reqwest::get(url).await else { return 0 };
    let Ok(text) = response.text().await else { return 0 };
    text.lines()
        .find(|l| l.starts_with("work_ledger_live_subscriptions "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

fn free_port() -> Result<u16, AnyError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub async fn wait_ready(port: u16) -> Result<(), AnyError> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ready = client.get(format!("http://127.0.0.1:{port}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the server on port {port} did not become ready within 60 s").into())
}

/// RSS of the replicas' current processes, sampled every 250 ms until
/// `stop`: the highest seen per replica (a restarted replica keeps one slot).
pub fn sample_rss(pids: Arc<Mutex<Vec<u32>>>, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<u64>> {
    tokio::spawn(async move {
        let mut peak = vec![0u64; pids.lock().map(|p| p.len()).unwrap_or(0)];
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return peak,
                _ = tick.tick() => {}
            }
            let now: Vec<u32> = pids.lock().map(|p| p.clone()).unwrap_or_default();
            for (slot, pid) in now.iter().enumerate() {
                if let Some(p) = peak.get_mut(slot) {
                    *p = (*p).max(rss_kib(*pid, "VmRSS"));
                }
            }
        }
    })
}

pub fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// utime + stime of the process, in clock ticks (USER_HZ, 100 on Linux).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}
