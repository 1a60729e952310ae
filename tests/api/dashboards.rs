//! The Grafana dashboards, tested without Grafana: every SQL panel of
//! `deploy/grafana/dashboards/*.json` runs as a reader login made by
//! `work-ledger reader create` over a worked ledger, succeeds and returns
//! the columns the panel was built on; every metric a Prometheus panel
//! queries is one the service exports (checked against a real scrape).

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::sqlx::{AssertSqlSafe, Column, Connection, Executor, Row, SqlSafeStr, Statement};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app_with, test_config};
use crate::operator::{text, work_ledger, worked_ledger};

fn dashboards() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/dashboards");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(dir)
        .expect("dashboards dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let json = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("valid JSON");
            (path.file_name().expect("name").to_string_lossy().into_owned(), json)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// (panel type and title, query) pairs.
type Queries = Vec<(String, String)>;

/// The SQL of every SQL target; the PromQL of every Prometheus one.
fn targets() -> (Queries, Queries) {
    let (mut sql, mut promql) = (Vec::new(), Vec::new());
    for (_, dashboard) in dashboards() {
        for panel in dashboard["panels"].as_array().expect("panels") {
            let name = format!("{} {}", panel["type"].as_str().unwrap_or("?"), panel["title"].as_str().unwrap_or("?"));
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(raw) = target["rawSql"].as_str() {
                    sql.push((name.clone(), raw.to_owned()));
                } else if let Some(expr) = target["expr"].as_str() {
                    promql.push((name.clone(), expr.to_owned()));
                } else {
                    panic!("a target with neither SQL nor PromQL in {name}: {target}");
                }
            }
        }
    }
    (sql, promql)
}

fn expected_columns() -> BTreeMap<&'static str, Vec<&'static str>> {
    let units = ["unit_id", "fleet", "external_ref", "domain", "state", "disposition"];
    BTreeMap::from([
        ("stat Ready units", vec!["ready"]),
        ("stat Stalled units", vec!["stalled"]),
        ("stat Reworked units", vec!["reworked"]),
        ("stat Total cost", vec!["cost"]),
        (
            "barchart Queue depth by fleet / domain",
            vec!["queue", "ready", "claimed", "in_progress", "blocked", "verified", "stalled"],
        ),
        (
            "table Stalled units",
            vec![
                "unit_id",
                "fleet",
                "external_ref",
                "domain",
                "state",
                "claimed_by",
                "current_attempt_id",
                "last_heartbeat_at",
                "lease_expires_at",
                "stalled_for",
                "created_at",
            ],
        ),
        ("table Rework", [&units[..], &["attempt_count", "cost_cents", "created_at"]].concat()),
        ("table Cost per unit (top 100)", [&units[..], &["cost_cents", "attempt_count", "created_at"]].concat()),
        ("table Disposition summary", vec!["fleet", "domain", "disposition", "units", "cost_cents"]),
        ("barchart Disposition mix per week", vec!["week", "migrated", "dropped", "deferred", "dead"]),
        (
            "table Verified throughput and cycle time per week",
            vec!["week", "verified_units", "verified_cost", "median_hours", "p90_hours"],
        ),
        (
            "table Claims per week",
            vec!["week", "claims", "conversion", "stale_rate", "never_transitioned", "rework_rate"],
        ),
        ("barchart Daily claiming agents", vec!["day", "agents"]),
        (
            "table Claimed and never transitioned (anti-metric)",
            vec!["external_ref", "domain", "agent_id", "attempt_no", "outcome", "started_at", "ended_at"],
        ),
        (
            "table Fleet roster",
            vec![
                "name",
                "status",
                "held_external_ref",
                "held_state",
                "lease_expires_at",
                "last_claim_at",
                "last_heartbeat_at",
                "claims_today",
                "cost_cents_today",
                "token_last_used_at",
            ],
        ),
    ])
}

#[tokio::test]
async fn every_panel_query_runs_as_a_reader_and_every_metric_exists() {
    let mut config = test_config();
    config.metrics_listen = Some("127.0.0.1:0".into());
    let app = spawn_app_with(config).await;
    worked_ledger(&app).await;
    // Another fleet's agent, holding a unit: never on this fleet's roster.
    let other = Agent::new(&app, "other", "other-agent", Role::Operator).await;
    app.register(&other.token, &["other-unit"]).await;
    other.claim_next(json!({})).await.data();
    let role = format!("grafana_t{}", uuid::Uuid::new_v4().simple());
    let made = work_ledger(&app, &["reader", "create", "--fleet", "f", "--name", &role, "--password", "s3cret"], None);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let mut url = url::Url::parse(&app.db_url).expect("url");
    url.set_username(&role).expect("user");
    url.set_password(Some("s3cret")).expect("password");
    let mut reader = sea_orm::sqlx::PgConnection::connect(url.as_str()).await.expect("the reader logs in");

    let (sql, promql) = targets();
    let expected = expected_columns();
    let mut seen = BTreeSet::new();
    let mut rows_seen = 0;
    for (panel, query) in &sql {
        let described = (&mut reader)
            .prepare(AssertSqlSafe(query.clone()).into_sql_str())
            .await
            .unwrap_or_else(|e| panic!("{panel}: {e}"));
        let columns: Vec<&str> = described.columns().iter().map(|c| c.name()).collect();
        let want = expected.get(panel.as_str()).unwrap_or_else(|| panic!("no expected columns for panel {panel}"));
        assert_eq!(&columns, want, "{panel}");
        let rows =
            (&mut reader).fetch_all(AssertSqlSafe(query.clone())).await.unwrap_or_else(|e| panic!("{panel}: {e}"));
        rows_seen += rows.len();
        seen.insert(panel.as_str());
    }
    assert_eq!(seen, expected.keys().copied().collect(), "every expected panel is on a dashboard");
    assert!(rows_seen > 0, "the worked ledger shows on the dashboard");

    // The roster panel: the reader's own fleet's agents (the names of tokens
    // that may claim and of attempts), the one that waits on triage first.
    let (_, roster) = sql.iter().find(|(panel, _)| panel == "table Fleet roster").expect("roster panel");
    let rows = (&mut reader).fetch_all(AssertSqlSafe(roster.clone())).await.expect("roster");
    let agents: Vec<(String, String)> =
        rows.iter().map(|r| (r.get::<String, _>("name"), r.get::<String, _>("status"))).collect();
    let expected_roster = [("agent-b", "BLOCKED"), ("agent-a", "IDLE"), ("op", "IDLE")];
    assert_eq!(agents, expected_roster.map(|(n, s)| (n.to_owned(), s.to_owned())), "{agents:?}");

    // The metric families the Prometheus panels read, against what the service exports
    // (after actions that make every labelled family appear).
    let op = Agent::new(&app, "f", "op-m", Role::Operator).await;
    op.run("{ units(first: 1) { edges { node { id } } } }", json!({})).await.data();
    let audit = work_ledger(&app, &["audit"], None);
    assert!(audit.status.success(), "{}{}", text(&audit.stdout), text(&audit.stderr));
    let target = app.metrics_addr.expect("metrics");
    let exposed =
        app.http.get(format!("http://{target}/metrics")).send().await.expect("scrape").text().await.expect("text");
    let names: BTreeSet<&str> = exposed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or(l))
        .collect();
    assert!(!promql.is_empty(), "the operations dashboard has Prometheus panels");
    for (panel, expr) in &promql {
        let mut rest = expr.as_str();
        let mut any = false;
        while let Some(at) = rest.find("work_ledger_") {
            let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(names.contains(name.as_str()), "{panel}: {name} is not exported; exported: {names:?}");
            rest = &rest[at + name.len()..];
            any = true;
        }
        assert!(any, "{panel} reads no work_ledger metric: {expr}");
    }
}
