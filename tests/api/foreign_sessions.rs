//! Nothing outside the service can stop or stall the ledger (issue 23,
//! SPEC §6): a reader login's advisory locks neither block a write nor hold
//! live delivery back, event notifications do not even say which fleet is
//! busy, and the sweeper never reports a stall after a disposition.
//! Driven through the real server and a real `reader create` login.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait};
use serde_json::{Value, json};
use work_ledger::auth::Role;
use work_ledger::db;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::ws_client::Ws;

const EVENTS: &str = "subscription($after: String, $types: [EventType!]) {
    ledgerEvents(after: $after, types: $types) { id eventType unit { externalRef } } }";

/// The marker key space of the event writers (migration 0004): the key of floor `n`.
fn marker(n: i64) -> i64 {
    (0x776c_i64 << 48) | n
}

async fn last_batch(app: &TestApp) -> i64 {
    app.sql_i64("SELECT coalesce(pg_sequence_last_value('work_unit_events_batch_seq'), 0) AS n").await
}

#[tokio::test]
async fn a_reader_logins_advisory_locks_block_no_write() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["a", "b"]).await;
    let reader: DatabaseConnection =
        db::connect(app.reader_login("other").await.as_str(), 1).await.expect("reader connects");
    // Exclusively, every key the next writers could ask for, and some below.
    let next = last_batch(&app).await;
    let keys: Vec<String> = ((next - 3).max(1)..next + 20).map(|n| marker(n).to_string()).collect();
    reader
        .execute_unprepared(&format!("SELECT pg_advisory_lock(k) FROM unnest(ARRAY[{}]::bigint[]) k", keys.join(",")))
        .await
        .expect("any login may take advisory locks");

    // The writes go through at once (a blocked one would be UNAVAILABLE after the 5 s lock timeout).
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let claimed = tokio::time::timeout(Duration::from_secs(4), agent.claim_next(json!({}))).await.expect("not blocked");
    assert_eq!(claimed.unit()["state"], "CLAIMED", "{:#}", claimed.body);
    let registered =
        tokio::time::timeout(Duration::from_secs(4), app.register(&op, &["c"])).await.expect("not blocked");
    assert_eq!(registered[0]["state"], "READY");
    reader.close().await.expect("close");
}

/// The live log's read (migration 0034's `live_events_below`) and a resumed
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

#[tokio::test]
async fn a_reader_logins_idle_marker_lock_holds_no_delivery_back() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let watcher = app.token("f", "watcher", Role::Reader).await;
    app.register(&op, &["origin"]).await;
    // From a cursor: the stream replays what follows it, so the first event
    // cannot be missed by a subscription still starting.
    let origin = app.gql(&watcher, "{ events(first: 1) { edges { cursor } } }", json!({})).await;
    let after = origin.data()["events"]["edges"][0]["cursor"].as_str().expect("cursor").to_owned();
    let mut ws = Ws::subscription(&app, &watcher, EVENTS, json!({ "after": after, "types": ["REGISTERED"] })).await;
    app.register(&op, &["before"]).await;
    let first = tokio::time::timeout(Duration::from_secs(5), ws.next_data()).await.expect("delivered");
    assert_eq!(first["ledgerEvents"]["unit"]["externalRef"], "before");

    // Idle (no transaction), holding the lowest marker key shared.
    let reader: DatabaseConnection =
        db::connect(app.reader_login("other").await.as_str(), 1).await.expect("reader connects");
    reader.execute_unprepared(&format!("SELECT pg_advisory_lock_shared({})", marker(0))).await.expect("lock");
    app.register(&op, &["while-held"]).await;
    let event = tokio::time::timeout(Duration::from_secs(5), ws.next_data())
        .await
        .expect("delivered while a foreign session holds a marker key");
    assert_eq!(event["ledgerEvents"]["unit"]["externalRef"], "while-held");
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
            "SELECT result FROM ledger_dispose('f', 'op', NULL, NULL, NULL, $1, NULL, 'DROPPED', 'abandoned',
                                               'https://ci.example/drop', NULL, ARRAY[]::text[],
                                               ARRAY['ready', 'claimed', 'in_progress', 'blocked', 'verified'])",
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
