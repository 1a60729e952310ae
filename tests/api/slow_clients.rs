//! Slow and greedy clients (SPEC §9), each over a real socket: a client
//! trickling headers is disconnected, one trickling its body gets 408, a
//! token past its WebSocket allowance gets close 4429, and a request stuck
//! behind a lock or in a long statement gets UNAVAILABLE with nothing written.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use work_ledger::auth::Role;
use work_ledger::db::SessionLimits;
use work_ledger::http::{HttpConfig, ServerConfig};

use crate::helpers::{Agent, spawn_app_with, test_config};
use crate::ws_client::{Frame, GUARD, Ws};

fn config(edit: impl FnOnce(&mut ServerConfig)) -> ServerConfig {
    let mut config = test_config();
    edit(&mut config);
    config
}

/// Everything the server sends until it closes the connection (bounded by a guard).
async fn read_until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept a stalled connection open for 10 s"),
        }
    }
    (String::from_utf8_lossy(&received).into_owned(), started.elapsed())
}

#[tokio::test]
async fn a_client_trickling_headers_is_disconnected() {
    let limit = Duration::from_millis(500);
    let app = spawn_app_with(config(|c| c.http.header_read_timeout = limit)).await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    stream.write_all(b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").await.expect("partial headers");
    let (_, after) = read_until_closed(&mut stream).await;
    assert!(after >= limit - Duration::from_millis(100), "closed after {after:?}, before the limit");
    // Everyone else is still served.
    let op = app.token("f", "op", Role::Operator).await;
    app.gql(&op, "{ me { name } }", json!({})).await.data();
}

#[tokio::test]
async fn a_client_trickling_its_body_gets_408_and_writes_nothing() {
    let limit = Duration::from_millis(500);
    let app =
        spawn_app_with(config(|c| c.http = HttpConfig { body_read_timeout: limit, ..HttpConfig::default() })).await;
    let op = app.token("f", "op", Role::Operator).await;
    let body = json!({ "query": "mutation { registerUnits(units: [{externalRef: \"slow\"}]) { id } }" }).to_string();
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    let head = format!(
        "POST /graphql HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {op}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    stream.write_all(&body.as_bytes()[..10]).await.expect("part of the body");
    let (response, after) = read_until_closed(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(after >= limit - Duration::from_millis(100), "answered after {after:?}");
    let json: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("JSON body");
    assert_eq!(json["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{json:#}");
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);
}

#[tokio::test]
async fn a_token_past_its_websocket_allowance_is_closed_with_4429() {
    let app = spawn_app_with(config(|c| c.ws.max_per_token = 2)).await;
    let token = app.token("f", "watcher", Role::Reader).await;
    let other = app.token("f", "other", Role::Reader).await;
    let first = Ws::authenticated(&app, &token).await;
    let _second = Ws::authenticated(&app, &token).await;
    let mut third = Ws::connect(&app).await;
    third.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })).await;
    let (code, reason) = third.closed().await;
    assert_eq!(code, 4429, "{reason}");
    assert!(reason.contains("at most 2"), "{reason}");
    // Another token is not affected, and closing one frees a slot.
    let _other = Ws::authenticated(&app, &other).await;
    drop(first);
    // The server frees the slot when it sees the close: until then a new
    // connection is closed with 4429, and the client tries again.
    let deadline = Instant::now() + GUARD;
    loop {
        let mut again = Ws::connect(&app).await;
        again
            .send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } }))
            .await;
        match again.frame().await {
            Frame::Json(message) if message["type"] == "connection_ack" => break,
            Frame::Close(4429, _) => {}
            other => panic!("neither an ack nor 4429: {other:?}"),
        }
        assert!(Instant::now() < deadline, "the closed connection's slot never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A third session holds the unit's row lock; the agent's write waits on it.
async fn write_behind_a_lock(limits: SessionLimits) -> (String, Duration) {
    let app = spawn_app_with(config(|c| c.db = limits)).await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["u"]).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let unit = agent.claim_next(json!({})).await.str("id");
    let before = app.event_count().await;
    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared(&format!("SELECT 1 FROM work_units WHERE id = '{unit}' FOR UPDATE")).await.expect("lock");
    let started = Instant::now();
    let resp = agent.transition(&unit, "IN_PROGRESS", json!({ "key": "start" })).await;
    let took = started.elapsed();
    gate.rollback().await.expect("rollback");
    assert_eq!(resp.status, 200);
    resp.assert_code("UNAVAILABLE");
    assert!(resp.message().contains("same idempotency key"), "{}", resp.message());
    assert_eq!(app.event_count().await, before, "nothing written");
    // Once the lock is gone the same request goes through.
    agent.transition(&unit, "IN_PROGRESS", json!({ "key": "start" })).await.data();
    (resp.message().to_owned(), took)
}

#[tokio::test]
async fn a_write_waiting_past_the_lock_timeout_is_unavailable() {
    let limits = SessionLimits { lock_timeout: Duration::from_millis(300), statement_timeout: Duration::from_secs(10) };
    let (message, took) = write_behind_a_lock(limits).await;
    assert!(message.contains("lock timeout"), "{message}");
    // Before the other limit could have ended it (not a speed bound).
    assert!(took < limits.statement_timeout, "waited {took:?}");
}

#[tokio::test]
async fn a_statement_running_past_the_statement_timeout_is_unavailable() {
    let limits = SessionLimits { statement_timeout: Duration::from_millis(300), lock_timeout: Duration::from_secs(10) };
    let (message, took) = write_behind_a_lock(limits).await;
    assert!(message.contains("statement timeout"), "{message}");
    // Before the other limit could have ended it (not a speed bound).
    assert!(took < limits.lock_timeout, "waited {took:?}");
}
