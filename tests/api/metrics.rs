//! `GET /metrics` scraped by a real Prometheus (Debian's `prometheus`,
//! started by the test with a scrape config pointing at the service): a
//! PromQL query through Prometheus's HTTP API returns the claims this test
//! made. Skipped without the binary unless CI is set (`.ci/run` installs it).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app_with, test_config};
use crate::node_client::in_ci;

fn prometheus() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("prometheus")).find(|p| p.is_file()));
    if found.is_none() {
        assert!(!in_ci(), "prometheus is not installed (CI is set, so this fails instead of skipping); see .ci/run");
        eprintln!("SKIPPED metrics: the `prometheus` binary is not installed; see .ci/run");
    }
    found
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test]
async fn a_real_prometheus_scrapes_the_claims_this_test_made() {
    let Some(prometheus) = prometheus() else { return };
    let mut config = test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    let app = spawn_app_with(config).await;
    let target = app.metrics_addr.expect("a metrics listener");

    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["m1", "m2", "m3", "m4", "m5"]).await;
    for i in 0..5 {
        let agent = Agent::new(&app, "f", &format!("agent-{i}"), Role::Agent).await;
        agent.claim_next(json!({})).await.data();
        if i == 0 {
            // A renewal of the held unit is not a claim.
            agent.claim_next(json!({})).await.data();
        }
    }
    let unit = app.sql_id("SELECT id::text FROM work_units WHERE external_ref = 'm1'").await;
    op.dispose(&unit, "DEAD", json!({ "evidence": "https://ci.example/dead" })).await.data();

    // What the service says itself.
    let text =
        app.http.get(format!("http://{target}/metrics")).send().await.expect("scrape").text().await.expect("text");
    assert!(text.contains("work_ledger_claims_total 5"), "{text}");
    assert!(text.contains(r#"work_ledger_dispositions_total{disposition="DEAD"} 1"#), "{text}");
    assert!(text.contains(r#"work_ledger_graphql_operations_total{operation="claimNext",code="OK"} 6"#), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(
        &config_file,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: work-ledger\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("config");
    let port = free_port();
    let mut server = tokio::process::Command::new(prometheus)
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start prometheus");

    // Ask Prometheus until it has scraped; the loop is bounded, the answer is exact.
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=work_ledger_claims_total");
    let mut answer = Value::Null;
    for _ in 0..120 {
        if let Ok(resp) = app.http.get(&query).send().await
            && let Ok(body) = resp.json::<Value>().await
            && body["data"]["result"].as_array().is_some_and(|r| !r.is_empty())
        {
            answer = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = server.kill().await;
    let result = &answer["data"]["result"][0];
    assert_eq!(result["metric"]["job"], "work-ledger", "{answer:#}");
    assert_eq!(result["value"][1], "5", "Prometheus read the 5 claims: {answer:#}");
}
