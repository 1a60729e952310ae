//! `work-ledger serve` with no DATABASE_URL: the embedded PostgreSQL starts,
//! keeps its data across a restart, and stops with the process.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

struct Serve {
    child: Child,
    addr: String,
    printed_token: Option<String>,
}

async fn start_serve(data_dir: &Path) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env("WORK_LEDGER_DATA_DIR", data_dir)
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_METRICS_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn work-ledger serve");
    let addr = crate::helpers::serving_addr(&mut child, Duration::from_secs(90)).await;
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let printed_token =
        tokio::time::timeout(Duration::from_millis(500), stdout.next_line()).await.ok().and_then(|l| l.ok().flatten());
    Serve { child, addr, printed_token }
}

async fn terminate(mut serve: Serve) {
    let pid = serve.child.id().expect("pid").to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().await.expect("kill");
    assert!(status.success());
    let exit =
        tokio::time::timeout(Duration::from_secs(30), serve.child.wait()).await.expect("exits in time").expect("wait");
    assert!(exit.success(), "serve exited with {exit}");
}

async fn gql(addr: &str, token: &str, query: &str) -> serde_json::Value {
    reqwest::Client::new()
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "query": query }))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

fn postmaster_pid(data_dir: &Path) -> Option<String> {
    let pid_file = std::fs::read_to_string(data_dir.join("pgdata/postmaster.pid")).ok()?;
    pid_file.lines().next().map(str::to_owned)
}

#[tokio::test]
async fn embedded_postgres_survives_a_restart_and_stops_with_the_process() {
    let dir = tempfile::Builder::new().prefix("wl-serve-").tempdir().expect("tempdir");
    let data_dir = dir.path().join("state");

    let first = start_serve(&data_dir).await;
    let token = first.printed_token.clone().expect("first start prints an operator token");
    assert!(token.starts_with("wl_"));
    let created =
        gql(&first.addr, &token, r#"mutation { registerUnits(units: [{externalRef: "kept"}]) { id } }"#).await;
    let id = created["data"]["registerUnits"][0]["id"].as_str().expect("unit id").to_owned();
    let pg_pid = postmaster_pid(&data_dir).expect("postgres running under the data dir");
    assert!(Path::new(&format!("/proc/{pg_pid}")).exists());

    terminate(first).await;
    assert!(!Path::new(&format!("/proc/{pg_pid}")).exists(), "embedded PostgreSQL outlived serve");
    assert!(postmaster_pid(&data_dir).is_none(), "PostgreSQL did not shut down cleanly");

    let second = start_serve(&data_dir).await;
    assert_eq!(second.printed_token, None, "the operator token is minted once");
    let found = gql(&second.addr, &token, r#"{ unitByRef(externalRef: "kept") { id } }"#).await;
    assert_eq!(found["data"]["unitByRef"]["id"], id.as_str());
    terminate(second).await;
}

#[tokio::test]
async fn without_postgres_binaries_serve_names_the_three_ways_out() {
    let empty = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env(work_ledger::embedded_pg::BIN_DIR_ENV, empty.path())
        .env("WORK_LEDGER_DATA_DIR", empty.path().join("state"))
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .output()
        .await
        .expect("run work-ledger serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for way_out in ["install PostgreSQL", "DATABASE_URL", "docker compose up"] {
        assert!(stderr.contains(way_out), "{way_out} missing from: {stderr}");
    }
    assert!(out.stdout.is_empty(), "no token printed");
}
