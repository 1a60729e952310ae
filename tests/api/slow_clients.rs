//! Slow and greedy clients (SPEC §9), each over a real socket: a client
//! trickling headers is disconnected, one trickling its body gets 408, one
//! whose headers never end gets 431 and costs bounded memory, a token past
//! its WebSocket allowance gets close 4429, and a request stuck behind a
//! lock or in a long statement gets UNAVAILABLE with nothing written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// What the server sent on `socket` before it closed it; `None` when it
/// kept the connection open for the guard.
async fn answer(socket: &mut TcpStream) -> Option<String> {
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while let Ok(n) = socket.read(&mut buf).await
            && n > 0
        {
            received.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(GUARD, read).await.ok()?;
    Some(String::from_utf8_lossy(&received).into_owned())
}

/// A request whose headers never end: 400 KB of one header's value.
fn endless_head() -> Vec<u8> {
    format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {}", "a".repeat(400 * 1024)).into_bytes()
}

/// Sends `head` on a new connection (the server may answer and close
/// before all of it is sent).
async fn send_head(addr: std::net::SocketAddr, head: &[u8]) -> Option<TcpStream> {
    let mut socket = TcpStream::connect(addr).await.ok()?;
    let _ = tokio::time::timeout(GUARD, socket.write_all(head)).await;
    Some(socket)
}

/// Attacks memory with headers that never end: each connection that sent a
/// large unfinished header kept a read buffer of about 415 KB (hyper's
/// default), and 6,000 of them took the process to 2.49 GB. Such a client
/// is now told why it is closed (431) as soon as its head passes the
/// limit, and 2,000 of them at once add less than 300 MB. The test server
/// runs in this process, so its resident set is this process's.
#[tokio::test]
async fn headers_that_never_end_get_431_and_cost_bounded_memory() {
    const CONNECTIONS: usize = 2000;
    // Connections opened at once (more overflow the listen backlog, and
    // retried SYNs only slow the test down).
    const AT_ONCE: usize = 25;
    let app = spawn_app_with(test_config()).await;
    let head = Arc::new(endless_head());
    let mut alone = send_head(app.addr, &head).await.expect("connect");
    let told = answer(&mut alone).await.expect("closed");
    assert!(told.starts_with("HTTP/1.1 431 Request Header Fields Too Large"), "{told}");

    let before = crate::listeners::rss_kib(std::process::id());
    let (peak, done) = (Arc::new(AtomicU64::new(before)), Arc::new(AtomicBool::new(false)));
    let sampler = tokio::spawn({
        let (peak, done) = (peak.clone(), done.clone());
        async move {
            while !done.load(Ordering::Acquire) {
                peak.fetch_max(crate::listeners::rss_kib(std::process::id()), Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let mut sockets = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS / AT_ONCE {
        let wave = (0..AT_ONCE).map(|_| send_head(app.addr, &head));
        sockets.extend(futures::future::join_all(wave).await.into_iter().flatten());
    }
    assert_eq!(sockets.len(), CONNECTIONS, "every connection was accepted by the kernel");
    let answers = futures::future::join_all(sockets.iter_mut().map(answer)).await;
    done.store(true, Ordering::Release);
    sampler.await.expect("sampler");

    let grown_mib = peak.load(Ordering::Acquire).saturating_sub(before) / 1024;
    assert!(grown_mib < 300, "{CONNECTIONS} unfinished 400 KB headers took {grown_mib} MiB");
    // Every one was closed; a client the server could not wait for (it
    // lingers over a few closing sockets at a time) may have lost the 431
    // to the reset, but none was told anything else.
    let held = answers.iter().filter(|a| a.is_none()).count();
    assert_eq!(held, 0, "{held} connections were kept open");
    let other = answers.iter().flatten().find(|a| !a.is_empty() && !a.starts_with("HTTP/1.1 431"));
    assert!(other.is_none(), "{other:?}");
    assert_eq!(crate::listeners::healthz(app.addr).await, 200);
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
