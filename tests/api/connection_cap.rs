//! The connection cap against clients that hold its places (SPEC §10), over
//! real sockets: at the cap a kept-alive connection between requests makes
//! room for a newcomer (the one idle longest is closed), while connections
//! with a request in flight are never closed for it; what each listener
//! holds, refuses and closes to make room is on `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app_with};
use crate::listeners::{closed_by_server, config, exchange, get, healthz, request_on};
use crate::metrics::{sample, scrape_until};
use crate::ws_client::GUARD;

/// `n` connections to `addr`, each served `GET path` once and kept alive.
async fn served_connections(addr: SocketAddr, path: &str, n: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        let mut socket = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(request_on(&mut socket, path).await, 200, "{path}");
        sockets.push(socket);
    }
    sockets
}

const QUERY: &str = r#"{"query":"{ me { name } }"}"#;

/// A `POST /graphql` in flight: its headers sent with `Expect:
/// 100-continue`, and the server's `100 Continue` read, which it sends once
/// the handler waits for the body (so the request is surely being served).
async fn request_in_flight(addr: SocketAddr, token: &str) -> TcpStream {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        QUERY.len()
    );
    socket.write_all(head.as_bytes()).await.expect("headers");
    let mut bytes = Vec::new();
    let mut buf = [0u8; 256];
    while !bytes.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(GUARD, socket.read(&mut buf)).await.expect("guard").expect("read");
        assert!(n > 0, "closed before 100 Continue: {}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buf[..n]);
    }
    assert!(bytes.starts_with(b"HTTP/1.1 100 Continue"), "{}", String::from_utf8_lossy(&bytes));
    socket
}

/// Sends the rest of [`request_in_flight`]'s request and returns its status.
async fn finish(socket: &mut TcpStream) -> u16 {
    socket.write_all(QUERY.as_bytes()).await.expect("body");
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while !bytes.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(GUARD, socket.read(&mut buf)).await.expect("guard").expect("read");
        assert!(n > 0, "closed before answering");
        bytes.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&bytes);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text}"))
}

/// Attacks the cap with clients that were served once and re-request on
/// their kept-alive connections inside the header timeout: none of them is
/// ever a connection that has not been served, so none made room, and
/// `/healthz`, `/graphql` and a scrape got 503 for as long as they went on.
#[tokio::test]
async fn kept_alive_clients_cannot_hold_the_cap_shut() {
    const CAP: usize = 8;
    let app = spawn_app_with(config(|c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.http.max_connections = CAP;
        c.http.metrics_max_connections = CAP;
        // Nothing is closed by the header timeout during the test: only the cap closes.
        c.http.header_read_timeout = Duration::from_secs(120);
    }))
    .await;
    let metrics = app.metrics_addr.expect("metrics listener");
    let mut api = served_connections(app.addr, "/healthz", CAP).await;
    let mut scrapers = served_connections(metrics, "/metrics", CAP).await;
    // They come back, in order, as the attack's clients did.
    for socket in &mut api {
        assert_eq!(request_on(socket, "/healthz").await, 200);
    }

    assert_eq!(healthz(app.addr).await, 200, "a health check during the attack");
    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    agent.run("{ me { name } }", json!({})).await.data();
    let scrape = exchange(metrics, &get("/metrics", "127.0.0.1")).await;
    assert_eq!(scrape.status, 200, "a scrape during the attack: {}", scrape.head);

    // Each took the place of the connection idle longest, closed between its requests.
    assert!(closed_by_server(&mut api[0]).await, "the connection idle longest is closed");
    assert!(closed_by_server(&mut scrapers[0]).await, "the scraper idle longest is closed");
    assert_eq!(request_on(&mut api[CAP - 1], "/healthz").await, 200, "the one used last still works");
}

/// Requests in flight are never interrupted to make room: when every place
/// holds one, a newcomer gets 503; once one is answered, its connection is
/// between requests and a newcomer takes its place.
#[tokio::test]
async fn when_every_connection_has_a_request_in_flight_a_new_one_gets_503() {
    const CAP: usize = 4;
    let app = spawn_app_with(config(|c| {
        c.http.max_connections = CAP;
        c.http.body_read_timeout = Duration::from_secs(120);
    }))
    .await;
    let token = app.token("f", "op", Role::Operator).await;
    let mut busy = Vec::new();
    for _ in 0..CAP {
        busy.push(request_in_flight(app.addr, &token).await);
    }
    let refused = exchange(app.addr, &get("/healthz", "127.0.0.1")).await;
    assert_eq!(refused.status, 503, "{}", refused.head);
    assert!(refused.head.contains("Retry-After: 1"), "{}", refused.head);

    assert_eq!(finish(&mut busy[0]).await, 200, "the request in flight was not disturbed");
    let mut waited = Duration::ZERO;
    while healthz(app.addr).await != 200 {
        assert!(waited < GUARD, "the answered connection's place was not taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    assert!(closed_by_server(&mut busy[0]).await, "closed between its requests to make room");
    for socket in &mut busy[1..] {
        assert_eq!(finish(socket).await, 200, "the other requests in flight were not disturbed");
    }
}

/// An operator sees the doors: how many connections each listener holds,
/// how many it closed to make room and how many it refused (none of this
/// was on `/metrics`, so an attack on the cap went unseen).
#[tokio::test]
async fn each_listener_counts_its_open_evicted_and_refused_connections() {
    let app = spawn_app_with(config(|c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.http.max_connections = 2;
        c.http.header_read_timeout = Duration::from_secs(120);
        c.http.body_read_timeout = Duration::from_secs(120);
    }))
    .await;
    let token = app.token("f", "op", Role::Operator).await;
    let mut idle = served_connections(app.addr, "/healthz", 1).await;
    let mut busy = vec![request_in_flight(app.addr, &token).await];
    assert_eq!(healthz(app.addr).await, 200, "in the idle connection's place");
    assert!(closed_by_server(&mut idle[0]).await);
    // The listener counts a connection out when its task ends, just after
    // the client sees the close: the request in flight alone is left.
    scrape_until(&app, r#"work_ledger_http_connections_open{listener="api"}"#, 1.0).await;
    busy.push(request_in_flight(app.addr, &token).await);
    assert_eq!(healthz(app.addr).await, 503, "both places hold a request in flight");

    let text = scrape_until(&app, r#"work_ledger_http_connections_open{listener="api"}"#, 2.0).await;
    for (series, expected) in [
        (r#"work_ledger_http_connections_evicted_total{listener="api"}"#, 1.0),
        (r#"work_ledger_http_connections_refused_total{listener="api"}"#, 1.0),
        (r#"work_ledger_http_connections_open{listener="metrics"}"#, 1.0),
        (r#"work_ledger_http_connections_evicted_total{listener="metrics"}"#, 0.0),
        (r#"work_ledger_http_connections_refused_total{listener="metrics"}"#, 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(expected), "{series}:\n{text}");
    }
    for socket in &mut busy {
        assert_eq!(finish(socket).await, 200);
    }
}
