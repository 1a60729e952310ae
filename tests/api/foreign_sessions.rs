//! Nothing outside the service can stop or stall the ledger (issue 23,
//! SPEC §6): a reader login reads no other fleet's events, event
//! notifications do not even say which fleet is busy, and the sweeper never
//! reports a stall after a disposition. (A reader login takes no advisory
//! lock at all: `shared_pools`.)
//! Driven through the real server and a real `reader create` login.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::db;

use crate::helpers::{Agent, hash_sql, spawn_app};

/// The live log's read (`live_events_below`) and a resumed
/// subscription's start take the app role and the fleet they are given: no
/// login outside the service may call them, or it would read any fleet's
/// events.
#[tokio::test]
async fn a_reader_login_cannot_call_the_feeds_reads_of_another_fleet() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["a"]).await;
    let reader: DatabaseConnection =
        db::connect(app.reader_login("other").await.as_str(), 1).await.expect("reader connects");
    let events = app.sql_i64("SELECT count(*) FROM work_unit_events WHERE fleet = 'f'").await;
    assert!(events > 0, "the fleet has events to read");
    let reads = [
        (
            "live_events_below(text, bigint, bigint, bigint, bigint, integer)",
            "SELECT (event).id FROM live_events_below('f', 0, 0, 0, NULL, 10)",
        ),
        (
            "live_events_resumed(text, uuid, bigint, bigint, integer)",
            "SELECT (event).id FROM live_events_resumed('f', (SELECT id FROM work_unit_events LIMIT 1), NULL, NULL, 10)",
        ),
    ];
    for (function, call) in reads {
        let err = reader.query_all_raw(db::stmt(call, [])).await.expect_err("a reader login may not call it");
        assert!(err.to_string().contains("permission denied"), "{function}: {err}");
        let callers = app
            .sql_i64(&format!(
                "SELECT count(*) FROM unnest(ARRAY['public', 'work_ledger_writer', 'work_ledger_reader']) AS r(name)
                  WHERE has_function_privilege(r.name, '{function}', 'EXECUTE')"
            ))
            .await;
        assert_eq!(callers, 0, "{function}: neither PUBLIC nor the writer or reader role may call it");
    }
    reader.close().await.expect("close");
}

/// Two fleets' notifications look alike, and so do two of one fleet: every
/// event notification's payload is new (a fresh nonce and its MAC), so a
/// listener cannot count one fleet's writes.
#[tokio::test]
async fn notifications_do_not_say_which_fleet_is_busy() {
    let app = spawn_app().await;
    let mut listener = PgListener::connect(app.reader_login("other").await.as_str()).await.expect("connect");
    listener.listen("work_ledger_events").await.expect("listen");
    let op = app.token("busy", "op", Role::Operator).await;
    // One write at a time, each heard before the next.
    let mut payloads = Vec::new();
    for r in ["r1", "r2", "r3", "r4"] {
        app.register(&op, &[r]).await;
        let n =
            tokio::time::timeout(Duration::from_secs(5), listener.recv()).await.expect("heard").expect("notification");
        payloads.push(n.payload().to_owned());
    }
    let distinct: HashSet<&String> = payloads.iter().collect();
    assert_eq!(distinct.len(), payloads.len(), "one fleet's notifications repeat a payload: {payloads:?}");
    for payload in &payloads {
        assert!(!payload.contains("busy"), "{payload}");
    }
}

/// The sweeper reports only what is still stalled when it commits: a
/// dispose in flight on an expired unit keeps the sweep off that unit, and
/// once the disposition is committed there is nothing to report.
#[tokio::test]
async fn no_stall_is_reported_after_a_disposition() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["expiring"]).await[0]["id"].as_str().expect("id").to_owned();
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    agent.claim_next(json!({})).await.unit();
    app.expire_lease(&unit).await;

    // The operator's dispose, in flight (its transaction not yet committed).
    let dispose = app.owner.begin().await.expect("begin");
    let disposed = dispose
        .query_one_raw(db::stmt(
            &format!(
                "SELECT result FROM ledger_dispose({}, NULL, NULL, NULL, $1, NULL, 'DROPPED', 'https://ci.example/drop', NULL)",
                hash_sql(&op)
            ),
            [uuid::Uuid::parse_str(&unit).expect("uuid").into()],
        ))
        .await
        .expect("dispose")
        .expect("row");
    assert_eq!(disposed.try_get::<String>("", "result").expect("result"), "ok");
    // The server's sweeper passes meanwhile, then the dispose commits and it passes again.
    app.live.sweep_now().await.expect("sweep");
    dispose.commit().await.expect("commit");
    app.live.sweep_now().await.expect("sweep");

    let events: Vec<Value> = app
        .sql_json(&format!("SELECT event_type::text AS t FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"))
        .await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["t"].as_str()).collect();
    assert_eq!(types, ["registered", "claimed", "disposed"], "a stall reported around the disposition");
}
