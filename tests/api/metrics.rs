//! `GET /metrics` scraped by a real Prometheus (Debian's `prometheus`,
//! started by the test with a scrape config pointing at the service): a
//! PromQL query through Prometheus's HTTP API returns the claims this test
//! made. Skipped without the binary unless CI is set (`.ci/run` installs it).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use work_ledger::auth::Role;

use sea_orm::ConnectionTrait;
use sea_orm::TransactionTrait;
use sea_orm::sqlx::Connection;

use crate::helpers::{Agent, TestApp, loopback_ports, spawn_app_with, test_config};
use crate::operator::{text as text_of, work_ledger};
use crate::skip::skip;
use crate::ws_client::Ws;

fn prometheus() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("prometheus")).find(|p| p.is_file()));
    if found.is_none() {
        skip("the `prometheus` binary is not installed (apt-get install prometheus)");
    }
    found
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
    let port = loopback_ports(1);
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

/// The value of one sample line (`name{labels}` exactly as exposed).
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

pub(crate) async fn scrape(app: &TestApp) -> String {
    let target = app.metrics_addr.expect("a metrics listener");
    app.http.get(format!("http://{target}/metrics")).send().await.expect("scrape").text().await.expect("text")
}

/// Scrapes until `series` has `expected` (a state the service reaches on its own, bounded).
pub(crate) async fn scrape_until(app: &TestApp, series: &str, expected: f64) -> String {
    scrape_until_true(app, series, &format!("{expected}"), |v| v == expected).await
}

/// Scrapes until `series` is above 0 (a state sampled at the next health tick).
async fn scrape_until_positive(app: &TestApp, series: &str) -> String {
    scrape_until_true(app, series, "above 0", |v| v > 0.0).await
}

async fn scrape_until_true(app: &TestApp, series: &str, what: &str, ok: impl Fn(f64) -> bool) -> String {
    for _ in 0..200 {
        let text = scrape(app).await;
        if sample(&text, series).is_some_and(&ok) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{series} never became {what}:\n{}", scrape(app).await);
}

fn metrics_app_config() -> work_ledger::http::ServerConfig {
    let mut config = test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    config.live.listener.health_interval = Duration::from_millis(100);
    config
}

#[tokio::test]
async fn claims_reclaims_stalls_and_dispositions_are_counted_as_they_commit() {
    let app = spawn_app_with(metrics_app_config()).await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["s1", "s2"]).await;
    let first = Agent::new(&app, "f", "first", Role::Agent).await;
    let unit = first.claim_next(json!({})).await.str("id");
    let text = scrape(&app).await;
    assert_eq!(value(&text, "work_ledger_claims_total"), 1.0);
    assert_eq!(value(&text, "work_ledger_stale_reclaims_total"), 0.0);
    assert_eq!(value(&text, "work_ledger_stalls_total"), 0.0);

    app.expire_lease(&unit).await;
    assert_eq!(app.live.sweep_now().await.expect("sweep"), 1);
    let second = Agent::new(&app, "f", "second", Role::Agent).await;
    assert_eq!(second.claim_unit(&unit, json!({})).await.str("id"), unit, "the stale unit, reclaimed");
    let other = Agent::new(&app, "f", "third", Role::Agent).await;
    other.claim_next(json!({})).await.data();
    op.dispose(&unit, "DROPPED", json!({ "evidence": "https://ci.example/dropped" })).await.data();

    let text = scrape(&app).await;
    assert_eq!(value(&text, "work_ledger_claims_total"), 3.0, "{text}");
    assert_eq!(value(&text, "work_ledger_stale_reclaims_total"), 1.0, "only the expired lease's claim");
    assert_eq!(value(&text, "work_ledger_stalls_total"), 1.0);
    assert_eq!(value(&text, r#"work_ledger_dispositions_total{disposition="DROPPED"}"#), 1.0);
    let events =
        app.sql_json("SELECT event_type::text AS t, count(*) AS n FROM work_unit_events GROUP BY 1 ORDER BY 1").await;
    assert!(events.contains(&json!({ "t": "stale_reclaimed", "n": 1 })), "the log agrees: {events:?}");
    assert!(events.contains(&json!({ "t": "stalled", "n": 1 })), "the log agrees: {events:?}");
}

#[tokio::test]
async fn live_metrics_follow_connections_subscriptions_deliveries_reconnects_and_writers() {
    let app = spawn_app_with(metrics_app_config()).await;
    let op = app.token("f", "op", Role::Operator).await;
    let text = scrape_until(&app, "work_ledger_listener_up", 1.0).await;
    assert_eq!(value(&text, "work_ledger_websocket_connections"), 0.0);
    assert_eq!(value(&text, "work_ledger_live_subscriptions"), 0.0);
    assert_eq!(value(&text, "work_ledger_listener_reconnects_total"), 0.0);
    assert_eq!(value(&text, r#"work_ledger_db_pool_waiting{pool="requests"}"#), 0.0);
    assert_eq!(value(&text, r#"work_ledger_db_pool_in_use_connections{pool="requests"}"#), 0.0);
    let open = value(&text, r#"work_ledger_db_pool_connections{pool="requests"}"#);
    assert_eq!(value(&text, r#"work_ledger_db_pool_idle_connections{pool="requests"}"#), open);
    assert!(value(&text, r#"work_ledger_db_pool_connections{pool="live"}"#) >= 1.0, "the health ticks use it");

    // One connection, one subscription; two events delivered.
    let mut ws = Ws::subscription(&app, &op, "subscription { ledgerEvents { id } }", json!({})).await;
    let delivered = |text: &str| value(text, "work_ledger_live_delivery_seconds_count");
    // A feed that starts while the subscriber catches up can skip an event
    // committed in between (open on issue 9): register until one arrives.
    app.register(&op, &["e1"]).await;
    let mut n = 0;
    while tokio::time::timeout(Duration::from_secs(3), ws.next_data()).await.is_err() {
        n += 1;
        assert!(n < 10, "no event reached the subscription");
        app.register(&op, &[&format!("e1-{n}")]).await;
    }
    let text = scrape(&app).await;
    assert_eq!(value(&text, "work_ledger_websocket_connections"), 1.0);
    assert_eq!(value(&text, "work_ledger_live_subscriptions"), 1.0);
    let before = delivered(&text);
    // The tail is past its catch-up now: the next event comes live.
    app.register(&op, &["e2"]).await;
    tokio::time::timeout(Duration::from_secs(30), ws.next_data()).await.expect("e2 delivered");
    assert_eq!(delivered(&scrape(&app).await), before + 1.0, "one more event handed over live");

    // An event writer left open holds delivery back; its age is exported.
    let unit = app.sql_id("SELECT id::text FROM work_units WHERE external_ref = 'e1'").await;
    let writer = app.owner.begin().await.expect("begin");
    writer
        .execute_unprepared(&format!(
            "INSERT INTO work_unit_events (fleet, unit_id, event_type, agent_id, detail)
             VALUES ('f', '{unit}', 'heartbeat', 'writer', '{{}}')"
        ))
        .await
        .expect("insert");
    scrape_until_positive(&app, "work_ledger_live_oldest_writer_age_seconds").await;
    writer.commit().await.expect("commit");
    scrape_until(&app, "work_ledger_live_oldest_writer_age_seconds", 0.0).await;

    // A notification nobody has read yet fills the queue a little.
    let mut listening = sea_orm::sqlx::postgres::PgConnection::connect(&app.db_url).await.expect("connect");
    sea_orm::sqlx::query("LISTEN wl_metrics_test").execute(&mut listening).await.expect("listen");
    sea_orm::sqlx::query("BEGIN").execute(&mut listening).await.expect("begin");
    sea_orm::sqlx::query("SELECT 1").execute(&mut listening).await.expect("hold a snapshot");
    app.sql("NOTIFY wl_metrics_test, 'x'").await;
    // The queue holds the unread notification.
    scrape_until_positive(&app, "work_ledger_notification_queue_usage_ratio").await;
    // Closing the session ends its transaction and its LISTEN.
    drop(listening);

    // The LISTEN connection killed: one reconnect.
    let mut connects = app.live.listener_connects();
    let first = *connects.borrow_and_update();
    app.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'work-ledger-listener'",
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), connects.wait_for(|n| *n > first)).await.expect("reconnected").ok();
    assert_eq!(value(&scrape(&app).await, "work_ledger_listener_reconnects_total"), 1.0);

    drop(ws);
    let text = scrape_until(&app, "work_ledger_websocket_connections", 0.0).await;
    assert_eq!(value(&text, "work_ledger_live_subscriptions"), 0.0, "the subscription ended with its connection");
}

#[tokio::test]
async fn the_last_recorded_audit_of_each_scope_is_exported() {
    let app = spawn_app_with(metrics_app_config()).await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["a1"]).await;
    let text = scrape(&app).await;
    assert!(!text.contains("work_ledger_audit_findings{"), "no audit recorded yet:\n{text}");

    let clean = work_ledger(&app, &["audit"], None);
    assert!(clean.status.success(), "{}", text_of(&clean.stderr));
    let text = scrape(&app).await;
    for rule in work_ledger::operator::audit::rules() {
        assert_eq!(value(&text, &format!(r#"work_ledger_audit_findings{{scope="*",rule="{rule}"}}"#)), 0.0);
    }
    let when = value(&text, r#"work_ledger_audit_last_run_timestamp_seconds{scope="*"}"#);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    assert!((now - when).abs() < 300.0, "finished just now: {when} vs {now}");

    app.sql(
        "SET session_replication_role = replica;
         UPDATE work_units SET cost_cents = cost_cents + 1 WHERE external_ref = 'a1';",
    )
    .await;
    let broken = work_ledger(&app, &["audit", "--fleet", "f"], None);
    assert_eq!(broken.status.code(), Some(1), "{}", text_of(&broken.stderr));
    let text = scrape(&app).await;
    assert_eq!(value(&text, r#"work_ledger_audit_findings{scope="f",rule="cost_rollup"}"#), 1.0, "{text}");
    assert_eq!(value(&text, r#"work_ledger_audit_findings{scope="f",rule="state_matches_event_log"}"#), 0.0, "{text}");
    assert_eq!(value(&text, r#"work_ledger_audit_findings{scope="*",rule="cost_rollup"}"#), 0.0, "the older run");
}

/// A server whose requests wait a minute for locks (so that a test can hold
/// its pool's connections), and its fleet's one unit.
async fn saturable() -> (TestApp, String) {
    let mut config = metrics_app_config();
    config.db.lock_timeout = Duration::from_secs(60);
    config.db.statement_timeout = Duration::from_secs(60);
    let app = spawn_app_with(config).await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["contended"]).await[0]["id"].as_str().expect("id").to_owned();
    (app, unit)
}

/// `n` agents of fleet `f`.
async fn agents(app: &TestApp, n: usize) -> Vec<Agent<'_>> {
    let mut agents = Vec::new();
    for i in 0..n {
        agents.push(Agent::new(app, "f", &format!("a{i}"), Role::Agent).await);
    }
    agents
}

#[tokio::test]
async fn a_saturated_request_pool_shows_its_waiters() {
    let (app, unit) = saturable().await;
    let agents = agents(&app, 22).await;
    // A third session holds the unit's row: each claim waits for it inside
    // its transaction, holding one of the pool's 20 connections.
    let holder = app.owner.begin().await.expect("begin");
    holder.execute_unprepared(&format!("SELECT 1 FROM work_units WHERE id = '{unit}' FOR UPDATE")).await.expect("lock");
    let claims = futures::future::join_all(agents.iter().map(|a| a.claim_unit(&unit, json!({}))));
    let watch = async {
        app.wait_for_lock_waiters(20).await;
        let text = scrape_until(&app, r#"work_ledger_db_pool_waiting{pool="requests"}"#, 2.0).await;
        assert_eq!(value(&text, r#"work_ledger_db_pool_in_use_connections{pool="requests"}"#), 20.0, "{text}");
        assert_eq!(value(&text, r#"work_ledger_db_pool_idle_connections{pool="requests"}"#), 0.0);
        holder.rollback().await.expect("release the row");
    };
    let (results, ()) = tokio::join!(claims, watch);
    let won = results.iter().filter(|r| r.body["errors"].is_null()).count();
    assert_eq!(won, 1, "one claim took the unit once the row was free");
    let text = scrape(&app).await;
    assert_eq!(value(&text, r#"work_ledger_db_pool_waiting{pool="requests"}"#), 0.0, "nobody waits any more");
}

/// The one-statement writes (claimNext, heartbeat, transition and dispose
/// without a key or fence) take their connection outside a request
/// transaction: they are counted as the pool's users too, so those beyond
/// its size show as waiters (they were not counted before).
#[tokio::test]
async fn one_statement_writes_waiting_for_a_connection_are_counted() {
    let (app, _) = saturable().await;
    let agents = agents(&app, 23).await;
    // A third session locks the table against claims: each claimNext that
    // gets one of the pool's 20 connections waits for the lock holding it,
    // and the other 3 wait for a connection. Tokens are looked up just
    // before (the lookups take connections and are not counted).
    futures::future::join_all(agents.iter().map(|a| a.run("{ me { name } }", json!({})))).await;
    let holder = app.owner.begin().await.expect("begin");
    holder.execute_unprepared("LOCK TABLE work_units IN EXCLUSIVE MODE").await.expect("lock");
    let claims = futures::future::join_all(agents.iter().map(|a| a.claim_next(json!({}))));
    let watch = async {
        app.wait_for_lock_waiters(20).await;
        let text = scrape_until(&app, r#"work_ledger_db_pool_waiting{pool="requests"}"#, 3.0).await;
        assert_eq!(value(&text, r#"work_ledger_db_pool_in_use_connections{pool="requests"}"#), 20.0, "{text}");
        holder.rollback().await.expect("release the table");
    };
    let (results, ()) = tokio::join!(claims, watch);
    let won = results.iter().filter(|r| !r.body["data"]["r"].is_null()).count();
    assert_eq!(won, 1, "one claim took the only unit");
    let text = scrape(&app).await;
    assert_eq!(value(&text, r#"work_ledger_db_pool_waiting{pool="requests"}"#), 0.0, "nobody waits any more");
}

/// The common `claimNext` (no domain, no key) runs as one autocommit
/// statement of its own (issue 13): its reclaims are counted too.
#[tokio::test]
async fn a_reclaim_by_the_one_statement_claim_next_is_counted() {
    let app = spawn_app_with(metrics_app_config()).await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["only"]).await;
    let first = Agent::new(&app, "f", "first", Role::Agent).await;
    let unit = first.claim_next(json!({})).await.str("id");
    app.expire_lease(&unit).await;
    let second = Agent::new(&app, "f", "second", Role::Agent).await;
    assert_eq!(second.claim_next(json!({})).await.str("id"), unit, "the stale unit, reclaimed by claimNext");
    let text = scrape(&app).await;
    assert_eq!(value(&text, "work_ledger_claims_total"), 2.0, "{text}");
    assert_eq!(value(&text, "work_ledger_stale_reclaims_total"), 1.0, "{text}");
    let reclaims = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'stale_reclaimed'").await;
    assert_eq!(reclaims, 1, "the event log agrees");
}
