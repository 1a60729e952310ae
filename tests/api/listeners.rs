//! Every listener defended alike (issue 24, SPEC §10), over real sockets:
//! the metrics port gets the API's header timeout, `Host` allow-list, 404
//! and duplicate-`Host` 400; `/mcp` gets the body-read timeout and the
//! `Origin` check, and its failed logins are logged and counted like the
//! others'; unknown paths are 404 before any authentication; a connection
//! flood is refused at the door while `/healthz` answers; a listener that
//! cannot bind says which one and how to move it; the quick start at
//! `GET /` runs, literally, from READY to MIGRATED.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use work_ledger::auth::Role;
use work_ledger::http::{Application, ServerConfig};
use work_ledger::ledger::Ledger;

use crate::helpers::{Agent, spawn_app_with, test_config};
use crate::ws_client::GUARD;

pub(crate) fn config(edit: impl FnOnce(&mut ServerConfig)) -> ServerConfig {
    let mut config = test_config();
    edit(&mut config);
    config
}

fn with_metrics() -> ServerConfig {
    config(|c| c.metrics_listen = Some("127.0.0.1:0".into()))
}

/// What came back on a raw HTTP/1.1 connection.
#[derive(Debug)]
pub(crate) struct Raw {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` as written and reads the answer until the server closes
/// the connection (every request here says `Connection: close`).
pub(crate) async fn exchange(addr: SocketAddr, request: &[u8]) -> Raw {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket.write_all(request).await.expect("write");
    let mut bytes = Vec::new();
    tokio::time::timeout(GUARD, socket.read_to_end(&mut bytes)).await.expect("guard").expect("read");
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text}"));
    Raw { status, head: head.to_owned(), body: body.to_owned() }
}

pub(crate) fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Reads until the server closes the connection; panics when it keeps a
/// stalled connection open for `GUARD`.
async fn closed_within_guard(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(GUARD, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept a stalled connection open for {GUARD:?}"),
        }
    }
    (String::from_utf8_lossy(&received).into_owned(), started.elapsed())
}

#[tokio::test]
async fn the_metrics_listener_closes_a_connection_that_trickles_headers() {
    let app = spawn_app_with(config(|c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.http.header_read_timeout = Duration::from_millis(500);
    }))
    .await;
    let metrics = app.metrics_addr.expect("metrics listener");
    let mut stream = TcpStream::connect(metrics).await.expect("connect");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.expect("partial headers");
    let (answer, after) = closed_within_guard(&mut stream).await;
    assert!(!answer.contains("200 OK"), "{answer}");
    assert!(after >= Duration::from_millis(400), "closed after {after:?}, before the limit");
    // Scrapes still work.
    let ok = exchange(metrics, &get("/metrics", "127.0.0.1")).await;
    assert_eq!(ok.status, 200, "{}", ok.head);
}

/// The metrics listener's own checks; its 404 names its own paths, not the
/// API's (which it told a prober of the metrics port about).
#[tokio::test]
async fn the_metrics_listener_checks_host_answers_404_and_refuses_two_hosts() {
    let app = spawn_app_with(with_metrics()).await;
    let metrics = app.metrics_addr.expect("metrics listener");
    let port = metrics.port();

    // DNS rebinding: a page on a hostile name that resolves to 127.0.0.1.
    let refused = exchange(metrics, &get("/metrics", &format!("rebind.evil.example:{port}"))).await;
    assert_eq!(refused.status, 421, "{}", refused.head);
    assert!(!refused.body.contains("work_ledger_"), "{}", refused.body);
    assert!(refused.body.contains("--allowed-hosts"), "{}", refused.body);
    assert!(refused.head.to_ascii_lowercase().contains("x-frame-options: deny"), "{}", refused.head);

    let two_hosts = format!(
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: rebind.evil.example\r\nConnection: close\r\n\r\n"
    );
    let refused = exchange(metrics, two_hosts.as_bytes()).await;
    assert_eq!(refused.status, 400, "{}", refused.head);

    let unknown = exchange(metrics, &get("/nope", "127.0.0.1")).await;
    assert_eq!(unknown.status, 404, "{}", unknown.head);
    assert!(unknown.body.contains("GET /metrics"), "{}", unknown.body);
    for api in ["/graphql", "/mcp", "describes them"] {
        assert!(!unknown.body.contains(api), "the metrics port's 404 names {api}: {}", unknown.body);
    }

    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let ok = exchange(metrics, &get("/metrics", &host)).await;
        assert_eq!(ok.status, 200, "{host}: {}", ok.head);
        assert!(ok.body.contains("work_ledger_claims_total"), "{}", ok.body);
    }
}

#[tokio::test]
async fn two_host_headers_get_400_on_the_api() {
    let app = spawn_app_with(test_config()).await;
    let port = app.addr.port();
    for hosts in [
        format!("Host: 127.0.0.1:{port}\r\nHost: rebind.evil.example\r\n"),
        format!("Host: 127.0.0.1:{port}\r\nHost: 127.0.0.1:{port}\r\n"),
    ] {
        let request = format!("GET /healthz HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
        let refused = exchange(app.addr, request.as_bytes()).await;
        assert_eq!(refused.status, 400, "{hosts}: {}", refused.head);
    }
    let ok = exchange(app.addr, &get("/healthz", &format!("127.0.0.1:{port}"))).await;
    assert_eq!(ok.status, 200);
}

#[tokio::test]
async fn unknown_paths_get_404_before_any_token_lookup() {
    let app = spawn_app_with(test_config()).await;
    let token = app.token("f", "op", Role::Operator).await;
    let forged = format!("wl_{}", "A".repeat(43));
    let before = app.statements.load(std::sync::atomic::Ordering::SeqCst);
    for auth in [None, Some(token.as_str()), Some(forged.as_str())] {
        for path in ["/nope", "/mcpx", "/mcp/nope", "/graphql/nope", "/metrics"] {
            let mut request = app.http.post(app.url(path));
            if let Some(auth) = auth {
                request = request.bearer_auth(auth);
            }
            let response = request.send().await.expect("send");
            assert_eq!(response.status(), 404, "{path} with {auth:?}");
        }
    }
    assert_eq!(
        app.statements.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "an unknown path looked a token up in the database"
    );
}

/// An MCP `initialize` request, as a client sends it.
fn mcp_initialize(addr: SocketAddr, token: &str, origin: Option<&str>) -> Vec<u8> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } }
    })
    .to_string();
    let origin = origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n{origin}\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn mcp_refuses_pages_of_other_origins() {
    let app = spawn_app_with(test_config()).await;
    let agent = app.token("f", "agent", Role::Agent).await;
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let refused = exchange(app.addr, &mcp_initialize(app.addr, &agent, Some(origin))).await;
        assert_eq!(refused.status, 403, "{origin}: {}\n{}", refused.head, refused.body);
        assert!(refused.body.contains("--allowed-origins"), "{}", refused.body);
    }
    // The server's own origin, and clients that send none (agents).
    let own = format!("http://{}", app.addr);
    for origin in [Some(own.as_str()), None] {
        let ok = exchange(app.addr, &mcp_initialize(app.addr, &agent, origin)).await;
        assert_eq!(ok.status, 200, "{origin:?}: {}\n{}", ok.head, ok.body);
        assert!(ok.body.contains("serverInfo"), "{}", ok.body);
    }
    // An origin the operator allowed.
    let allowed = spawn_app_with(config(|c| c.surface.allowed_origins = vec!["https://agents.example".into()])).await;
    let agent = allowed.token("f", "agent", Role::Agent).await;
    let ok = exchange(allowed.addr, &mcp_initialize(allowed.addr, &agent, Some("https://agents.example"))).await;
    assert_eq!(ok.status, 200, "{}", ok.head);
}

#[tokio::test]
async fn mcp_answers_a_trickled_body_with_408() {
    let limit = Duration::from_millis(500);
    let app = spawn_app_with(config(|c| c.http.body_read_timeout = limit)).await;
    let agent = app.token("f", "agent", Role::Agent).await;
    let mut stream = TcpStream::connect(app.addr).await.expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {agent}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n",
        app.addr
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    stream.write_all(b"{\"jsonrpc\"").await.expect("part of the body");
    let (answer, after) = closed_within_guard(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(after >= limit - Duration::from_millis(100), "answered after {after:?}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("JSON");
    assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_INPUT", "the body /graphql sends: {body:#}");

    // Over the size limit: 413, without reading further.
    let big = "x".repeat(work_ledger::http::MAX_BODY_BYTES + 1);
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {agent}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{big}",
        app.addr,
        big.len()
    );
    let too_large = exchange(app.addr, request.as_bytes()).await;
    assert_eq!(too_large.status, 413, "{}", too_large.head);
}

async fn scrape(addr: SocketAddr) -> String {
    exchange(addr, &get("/metrics", "127.0.0.1")).await.body
}

fn counted(metrics: &str, surface: &str) -> u64 {
    let key = format!("work_ledger_auth_failures_total{{surface=\"{surface}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&key)).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn failed_logins_are_counted_alike_on_graphql_websockets_and_mcp() {
    let app = spawn_app_with(with_metrics()).await;
    let metrics = app.metrics_addr.expect("metrics listener");
    let forged = format!("wl_{}", "A".repeat(43));
    let process_wide = work_ledger::auth::failed_authentications();

    let mcp = exchange(app.addr, &mcp_initialize(app.addr, &forged, None)).await;
    assert_eq!(mcp.status, 401, "{}", mcp.head);
    assert!(mcp.head.contains("WWW-Authenticate: Bearer") || mcp.head.contains("www-authenticate: Bearer"));
    let graphql = app.post_raw(Some(&forged), json!({ "query": "{ me { name } }" }).to_string()).await;
    assert_eq!(graphql.status, 401);
    let mut ws = crate::ws_client::Ws::connect(&app).await;
    ws.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {forged}") } })).await;
    assert_eq!(ws.closed().await.0, 4403);

    let text = scrape(metrics).await;
    for surface in ["mcp", "http", "websocket"] {
        assert_eq!(counted(&text, surface), 1, "{surface}: {text}");
    }
    // The process-wide count (the rate-limited log's) saw them too.
    assert!(work_ledger::auth::failed_authentications() >= process_wide + 3);
}

#[tokio::test]
async fn a_listener_that_cannot_bind_names_its_address_and_setting() {
    let app = spawn_app_with(test_config()).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    let ledger = Ledger::new(work_ledger::db::connect(&app.db_url, 2).await.expect("connect"));

    let config = config(|c| c.metrics_listen = Some(taken_addr.clone()));
    let err = Application::build_with(ledger.clone(), "127.0.0.1:0", config).await.err().expect("refused");
    let text = err.to_string();
    for needed in [taken_addr.as_str(), "metrics", "--metrics-listen", "WORK_LEDGER_METRICS_LISTEN", "in use"] {
        assert!(text.contains(needed), "{needed} missing from: {text}");
    }
    let err = Application::build_with(ledger, &taken_addr, test_config()).await.err().expect("refused");
    let text = err.to_string();
    for needed in [taken_addr.as_str(), "--listen", "WORK_LEDGER_LISTEN"] {
        assert!(text.contains(needed), "{needed} missing from: {text}");
    }

    // What an operator sees when a second server starts with the metrics address taken.
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_work-ledger"))
        .arg("serve")
        .env("DATABASE_URL", &app.db_url)
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_METRICS_LISTEN", &taken_addr)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(GUARD, run).await.expect("guard").expect("run serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let expected = format!("error: cannot listen on {taken_addr} for Prometheus metrics: ");
    assert!(stderr.contains(&expected) && stderr.contains("--metrics-listen"), "{stderr}");
    drop(taken);
}

/// `GET /healthz` on a new connection: its status, or 0 when the
/// connection failed.
pub(crate) async fn healthz(addr: SocketAddr) -> u16 {
    let probe = async {
        let mut socket = TcpStream::connect(addr).await.ok()?;
        socket.write_all(&get("/healthz", "127.0.0.1")).await.ok()?;
        let mut bytes = Vec::new();
        socket.read_to_end(&mut bytes).await.ok()?;
        Some(parse(&bytes).status)
    };
    tokio::time::timeout(Duration::from_secs(5), probe).await.ok().flatten().unwrap_or(0)
}

/// `GET path` on an established keep-alive connection: the status, or 0
/// when the connection failed or was closed.
pub(crate) async fn request_on(socket: &mut TcpStream, path: &str) -> u16 {
    let probe = async {
        socket.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.ok()?;
        let mut bytes = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = socket.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            bytes.extend_from_slice(&buf[..n]);
            let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
            let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
            let length: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())?;
            if bytes.len() >= end + 4 + length {
                return head.split(' ').nth(1)?.parse().ok();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), probe).await.ok().flatten().unwrap_or(0)
}

/// Whether the server closed `socket` (within a short wait).
pub(crate) async fn closed_by_server(socket: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_millis(500), socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // A refusal's 503, then the close.
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// Opens `n` idle sockets (they never send a byte) to `target` as fast as
/// the machine allows, asking `/healthz` of `probe` on new connections
/// throughout; returns the sockets and every probe's status.
async fn flood_while_probing(target: SocketAddr, probe: SocketAddr, n: usize) -> (Vec<TcpStream>, Vec<u16>) {
    let flood = tokio::spawn(async move {
        let mut sockets = Vec::with_capacity(n);
        for _ in 0..n {
            if let Ok(socket) = TcpStream::connect(target).await {
                sockets.push(socket);
            }
        }
        sockets
    });
    let mut probes = Vec::new();
    while !flood.is_finished() {
        probes.push(healthz(probe).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sockets = flood.await.expect("flood");
    assert_eq!(sockets.len(), n, "every flood connection was accepted by the kernel");
    for _ in 0..5 {
        probes.push(healthz(probe).await);
    }
    (sockets, probes)
}

/// How many of `sockets` the server has closed.
async fn closed_count(sockets: &mut [TcpStream]) -> usize {
    futures::future::join_all(sockets.iter_mut().map(closed_by_server)).await.into_iter().filter(|c| *c).count()
}

#[tokio::test]
async fn a_connection_flood_is_refused_at_the_door_while_healthz_and_agents_are_served() {
    const CAP: usize = 1000;
    const FLOOD: usize = 2000;
    // Idle connections are not reaped by the header-read timeout during the test: only the cap closes them.
    let app = spawn_app_with(config(|c| {
        c.http.max_connections = CAP;
        c.http.header_read_timeout = Duration::from_secs(120);
    }))
    .await;
    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    // An agent's established keep-alive connection, from before the flood.
    let mut established = TcpStream::connect(app.addr).await.expect("connect");
    assert_eq!(request_on(&mut established, "/healthz").await, 200);

    let started = Instant::now();
    let (mut sockets, probes) = flood_while_probing(app.addr, app.addr, FLOOD).await;
    assert!(probes.iter().all(|s| *s == 200), "/healthz during the flood: {probes:?}");
    assert_eq!(request_on(&mut established, "/healthz").await, 200, "the established connection still works");
    agent.run("{ me { name } }", json!({})).await.data();

    // The server holds at most CAP of them: the others were closed at the door.
    let closed = closed_count(&mut sockets).await;
    assert!(closed >= FLOOD - CAP, "only {closed} of {FLOOD} flood connections were closed; the cap is {CAP}");
    assert!(started.elapsed() < Duration::from_secs(120), "the header-read timeout may have closed them");
}

#[tokio::test]
async fn a_flood_on_the_metrics_port_holds_at_most_its_cap() {
    const FLOOD: usize = 2000;
    let app = spawn_app_with(config(|c| {
        c.metrics_listen = Some("127.0.0.1:0".into());
        c.http.header_read_timeout = Duration::from_secs(120);
    }))
    .await;
    let metrics = app.metrics_addr.expect("metrics listener");
    let cap = work_ledger::http::METRICS_MAX_CONNECTIONS;
    let started = Instant::now();
    let (mut sockets, probes) = flood_while_probing(metrics, app.addr, FLOOD).await;
    assert!(probes.iter().all(|s| *s == 200), "/healthz on the API during the flood: {probes:?}");
    // A scrape still gets through (it takes the place of an idle flood connection).
    let scrape = exchange(metrics, &get("/metrics", "127.0.0.1")).await;
    assert_eq!(scrape.status, 200, "{}", scrape.head);
    let closed = closed_count(&mut sockets).await;
    assert!(closed >= FLOOD - cap, "only {closed} of {FLOOD} flood connections were closed; the cap is {cap}");
    assert!(started.elapsed() < Duration::from_secs(120), "the header-read timeout may have closed them");
}

#[tokio::test]
async fn open_websockets_count_towards_the_cap() {
    let app = spawn_app_with(config(|c| c.http.max_connections = 3)).await;
    let token = app.token("f", "watcher", Role::Reader).await;
    let mut sockets = Vec::new();
    for _ in 0..3 {
        sockets.push(crate::ws_client::Ws::authenticated(&app, &token).await);
    }
    let refused = exchange(app.addr, &get("/healthz", "127.0.0.1")).await;
    assert_eq!(refused.status, 503, "{}", refused.head);
    // One closes: its place is free again.
    drop(sockets.pop());
    let mut waited = Duration::ZERO;
    while healthz(app.addr).await != 200 {
        assert!(waited < GUARD, "the closed WebSocket's place was not freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
}

/// The numbered steps (`1.` ...) or the lettered detours (`a.` ...) of the
/// quick start: the document and the variables as the text shows them.
fn shown_steps(text: &str, lettered: bool) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut steps = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((label, rest)) = line.split_once(". ") else { continue };
        let is_step = if lettered {
            label.len() == 1 && label.chars().all(|c| c.is_ascii_lowercase())
        } else {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_digit())
        };
        let Some((field, _)) = rest.split_once(':') else { continue };
        if !is_step || i + 2 >= lines.len() {
            continue;
        }
        let variables = lines[i + 2].trim().strip_prefix("variables: ").unwrap_or_else(|| panic!("{}", lines[i + 2]));
        steps.push((field.to_owned(), lines[i + 1].trim().to_owned(), variables.to_owned()));
    }
    steps
}

/// Runs `step` as shown, the `<...>` filled in from `unit` (the last answer
/// about the unit); returns the unit it answers with.
async fn run_shown(agent: &Agent<'_>, (field, document, variables): &(String, String, String), unit: &Value) -> Value {
    let mut vars: Value = serde_json::from_str(variables).unwrap_or_else(|e| panic!("{variables}: {e}"));
    for value in vars.as_object_mut().expect("an object").values_mut() {
        let Some(placeholder) = value.as_str().filter(|v| v.starts_with('<')) else { continue };
        *value = match placeholder {
            "<id>" => unit["id"].clone(),
            "<currentAttemptId>" => unit["currentAttemptId"].clone(),
            "<the domain you work on; null for any>" => json!("docs"),
            "<any string unique to this bill>" => json!(format!("bill-{}", uuid::Uuid::new_v4())),
            "<https link to the evidence>" => json!("https://ci.example/runs/1"),
            "<what you need answered>" => json!("Which API version should the port target?"),
            other => panic!("the test does not know how to fill {other} (in {document})"),
        };
    }
    let answer = agent.run(document, vars).await;
    let data = answer.data();
    match field.as_str() {
        "me" => unit.clone(),
        _ => data[field].clone(),
    }
}

#[tokio::test]
async fn the_quick_start_runs_literally_from_ready_to_migrated() {
    let app = spawn_app_with(test_config()).await;
    let op = app.token("f", "op", Role::Operator).await;
    let register = "mutation { registerUnits(units: [{externalRef: \"q1\", domain: \"docs\"}, \
                    {externalRef: \"q2\", domain: \"docs\"}, {externalRef: \"q3\", domain: \"docs\"}]) { id } }";
    app.gql(&op, register, json!({})).await.data();
    let text = app.http.get(app.url("/")).send().await.expect("GET /").text().await.expect("text");

    let steps = shown_steps(&text, false);
    let detours = shown_steps(&text, true);
    assert!(steps.len() >= 7 && detours.len() == 2, "{steps:#?}\n{detours:#?}\n{text}");
    assert_eq!(steps[1].0, "claimNext");
    assert!(steps[1].1.contains("domain:"), "claimNext takes the domain: {}", steps[1].1);

    // The steps in order, on one unit.
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let mut unit = Value::Null;
    for step in &steps {
        unit = run_shown(&agent, step, &unit).await;
    }
    let row = app.sql_json("SELECT disposition::text AS d FROM work_units WHERE external_ref = 'q1'").await;
    assert_eq!(row[0]["d"], "MIGRATED", "{row:?}");

    // Each detour instead of the step it replaces, on a unit of its own.
    let from = work_ledger::http::quickstart::DETOUR_FROM;
    for (i, (detour, expected)) in detours.iter().zip(["BLOCKED", "READY"]).enumerate() {
        let agent = Agent::new(&app, "f", &format!("detour-{i}"), Role::Agent).await;
        let mut unit = Value::Null;
        for step in &steps[..from - 1] {
            unit = run_shown(&agent, step, &unit).await;
        }
        let after = run_shown(&agent, detour, &unit).await;
        assert_eq!(after["state"], expected, "{} left {after:#}", detour.0);
    }

    // Subscriptions are a WebSocket URL.
    assert!(text.contains(&format!("ws://{}/graphql/ws", app.addr)), "{text}");
    assert!(!text.contains(&format!("http://{}/graphql/ws", app.addr)), "{text}");
}

#[tokio::test]
async fn the_quick_start_prints_the_public_url() {
    let app = spawn_app_with(config(|c| c.surface.public_url = Some("https://ledger.example.com".into()))).await;
    let text = app.http.get(app.url("/")).send().await.expect("GET /").text().await.expect("text");
    for needed in [
        "https://ledger.example.com/graphql",
        "wss://ledger.example.com/graphql/ws",
        "POST https://ledger.example.com/mcp",
    ] {
        assert!(text.contains(needed), "{needed} missing from:\n{text}");
    }
    assert!(!text.contains("http://127.0.0.1"), "{text}");
}

/// The resident set of process `pid`, in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// What the server holds, for a failure's message: its status lines about
/// memory (anonymous and file-backed) and threads, and its open files.
fn memory_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let wanted = ["VmRSS", "RssAnon", "RssFile", "Threads"];
    let mut out: Vec<String> = status
        .lines()
        .filter(|l| wanted.iter().any(|w| l.starts_with(w)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
    out.push(format!("fds: {fds}"));
    out.join(", ")
}

/// One wave of a flood: `n` connections that each send part of a request's
/// headers (the server buffers them) and are held until the server closes
/// them at its header-read timeout, or refuses them.
async fn flood_wave(addr: SocketAddr, n: usize) -> usize {
    let mut sockets = Vec::with_capacity(n);
    let partial = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {}", "a".repeat(12_000));
    for _ in 0..n {
        if let Ok(mut socket) = TcpStream::connect(addr).await {
            let _ = socket.write_all(partial.as_bytes()).await;
            sockets.push(socket);
        }
    }
    let opened = sockets.len();
    let waits = sockets.into_iter().map(|mut socket| async move {
        let mut buf = [0u8; 512];
        let read = async { while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(GUARD, read).await;
    });
    futures::future::join_all(waits).await;
    opened
}

/// The real binary (SPEC §11: memory back within 2x of idle a minute after a
/// connection flood), measured from outside: its resident set after waves
/// of connections that each made the server buffer part of a request.
/// Measured on a 2-core machine: idle 29 MB, peak 97 MB; before the trim
/// (the server of commit 401aa8e) still 91 MB a minute later, with it 30 MB
/// within 5 s.
#[tokio::test]
async fn memory_taken_by_a_connection_flood_is_given_back() {
    const WAVES: usize = 3;
    const FLOOD: usize = 2000;
    let app = spawn_app_with(test_config()).await;
    let binary = std::env::var("WL_FLOOD_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_work-ledger").to_owned());
    let mut child = tokio::process::Command::new(binary)
        .arg("serve")
        .env("DATABASE_URL", &app.db_url)
        .env("WORK_LEDGER_LISTEN", "127.0.0.1:0")
        .env("WORK_LEDGER_METRICS_LISTEN", "")
        .env("WORK_LEDGER_LOG", "info")
        .env("WORK_LEDGER_DB_POOL_SIZE", "4")
        // Above the flood: this is about the memory of connections the server held.
        .env("WORK_LEDGER_MAX_CONNECTIONS", "4000")
        .env("WORK_LEDGER_HEADER_READ_TIMEOUT", "2s")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn work-ledger serve");
    let pid = child.id().expect("pid");
    let addr: SocketAddr =
        crate::helpers::serving_addr(&mut child, Duration::from_secs(60)).await.parse().expect("addr");
    for _ in 0..20 {
        assert_eq!(healthz(addr).await, 200);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_kib(pid);
    let idle_state = memory_of(pid);

    let mut peak = idle;
    for _ in 0..WAVES {
        let probe = tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..40 {
                peak = peak.max(rss_kib(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        });
        flood_wave(addr, FLOOD).await;
        peak = peak.max(probe.await.expect("probe"));
    }
    assert_eq!(healthz(addr).await, 200);

    // Back within 2x of idle within a minute.
    let started = Instant::now();
    let mut now = rss_kib(pid);
    while now > 2 * idle && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        now = rss_kib(pid);
    }
    eprintln!("RSS idle {idle} KiB, peak {peak} KiB, after {now} KiB ({:?} after the flood)", started.elapsed());
    assert!(
        now <= 2 * idle,
        "RSS {now} KiB a minute after the flood; idle it was {idle} KiB (peak {peak} KiB)\nidle: {idle_state}\nnow: {}",
        memory_of(pid)
    );
}
