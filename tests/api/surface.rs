//! The HTTP surface a browser or a network peer sees (issue 17), over real
//! sockets: security headers, the `Host` and WebSocket `Origin`
//! allow-lists, body-read errors, WebSocket close handshakes, and input
//! that would spoof what GraphiQL and Grafana display.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};
use crate::ws_client::GUARD;

/// What came back on a raw HTTP/1.1 connection.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}\n{}", self.head, self.body))
    }
}

/// Sends `request` as written (any `Host`, any framing) and reads the answer
/// until the server closes the connection.
async fn raw(app: &TestApp, request: &[u8]) -> Raw {
    let mut socket = TcpStream::connect(app.addr).await.expect("connect");
    socket.write_all(request).await.expect("write");
    let mut bytes = Vec::new();
    tokio::time::timeout(GUARD, socket.read_to_end(&mut bytes)).await.expect("guard").expect("read");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {text}"));
    // Bodies here are small and sent whole, or in one chunk.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.split("\r\n").nth(1).unwrap_or_default().to_owned()
    } else {
        body.to_owned()
    };
    Raw { status, head: head.to_owned(), body }
}

fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn a_foreign_host_header_gets_421_with_a_graphql_error_body() {
    let app = spawn_app().await;
    let token = app.token("f", "op", Role::Operator).await;
    let port = app.addr.port();

    // DNS rebinding: a hostile name that resolves to 127.0.0.1.
    for path in ["/", "/readyz", "/graphql/ws"] {
        let refused = raw(&app, &get(path, &format!("rebind.example:{port}"))).await;
        assert_eq!(refused.status, 421, "{path}: {}", refused.head);
        assert_eq!(refused.header("x-frame-options"), Some("DENY"), "{}", refused.head);
        let body = refused.json();
        assert_eq!(body["errors"][0]["extensions"]["code"], "FORBIDDEN", "{body:#}");
        assert!(body["errors"][0]["message"].as_str().unwrap_or_default().contains("--allowed-hosts"), "{body:#}");
    }
    let query = json!({ "query": "{ me { name } }" }).to_string();
    let post = format!(
        "POST /graphql HTTP/1.1\r\nHost: rebind.example\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{query}",
        query.len()
    );
    let refused = raw(&app, post.as_bytes()).await;
    assert_eq!(refused.status, 421, "{}", refused.head);
    assert!(refused.json()["data"].is_null());

    // The names of the listen address, localhost, and addresses by number.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "LocalHost".into(), "[::1]:8080".into()] {
        let ok = raw(&app, &get("/readyz", &host)).await;
        assert_eq!(ok.status, 200, "{host}: {}", ok.head);
    }
}

#[tokio::test]
async fn security_headers_on_the_page_the_api_and_refusals() {
    let app = spawn_app().await;
    let token = app.token("f", "op", Role::Operator).await;

    // A browser's request (anyone else gets the plain-text quick start).
    let page = app.http.get(app.url("/")).header("accept", "text/html").send().await.expect("GET /");
    let csp = page.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self' 'sha256-",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "the page's CSP lacks {directive}: {csp}");
    }
    assert!(!csp.contains("style-src 'self' 'unsafe-inline'"), "{csp}");
    assert_eq!(page.headers().get("x-frame-options").map(|v| v.as_bytes()), Some(&b"DENY"[..]));
    assert_eq!(page.headers().get("referrer-policy").map(|v| v.as_bytes()), Some(&b"no-referrer"[..]));

    let ok = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(&token)
        .json(&json!({ "query": "{ me { name } }" }))
        .send()
        .await
        .expect("POST");
    assert_eq!(ok.status(), 200);
    for (name, value) in [
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(ok.headers().get(name).and_then(|v| v.to_str().ok()), Some(value), "{name} on POST /graphql");
    }

    let failures = work_ledger::auth::failed_authentications();
    let unauthenticated =
        app.http.post(app.url("/graphql")).json(&json!({ "query": "{ me { name } }" })).send().await.expect("POST");
    // Counted (and logged with the client's address, at a bounded rate).
    assert!(work_ledger::auth::failed_authentications() > failures);
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(unauthenticated.headers().get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    assert_eq!(unauthenticated.headers().get("cache-control").map(|v| v.as_bytes()), Some(&b"no-store"[..]));
    let body: Value = unauthenticated.json().await.expect("JSON");
    assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_bad_request_not_too_large() {
    let app = spawn_app().await;
    let token = app.token("f", "op", Role::Operator).await;
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         zz\r\n{{}}\r\n0\r\n\r\n"
    );
    let answer = raw(&app, request.as_bytes()).await;
    assert_eq!(answer.status, 400, "{}\n{}", answer.head, answer.body);
    let body = answer.json();
    assert_eq!(body["errors"][0]["extensions"]["code"], "INVALID_INPUT", "{body:#}");
    assert!(!body["errors"][0]["message"].as_str().unwrap_or_default().contains("limited to"), "{body:#}");
}

fn ws_request(app: &TestApp, origin: Option<&str>) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut request = format!("ws://{}/graphql/ws", app.addr).into_client_request().expect("request");
    let headers = request.headers_mut();
    headers.insert("sec-websocket-protocol", HeaderValue::from_static("graphql-transport-ws"));
    if let Some(origin) = origin {
        headers.insert("origin", HeaderValue::from_str(origin).expect("origin"));
    }
    request
}

#[tokio::test]
async fn a_websocket_upgrade_from_a_foreign_origin_is_refused() {
    let app = spawn_app().await;
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        match tokio_tungstenite::connect_async(ws_request(&app, Some(origin))).await {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 403, "{origin}"),
            Err(other) => panic!("{origin}: {other}"),
            Ok(_) => panic!("{origin}: a foreign Origin was upgraded"),
        }
    }
    // The page's own origin (GraphiQL), and clients that send no Origin.
    let own = format!("http://{}", app.addr);
    for origin in [Some(own.as_str()), None] {
        let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(&app, origin)).await.expect("upgrade");
        ws.close(None).await.expect("close");
    }
}

/// The first frame the server sends, `None` when it closes the TCP
/// connection without one.
async fn next_close(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
) -> Option<(u16, String)> {
    loop {
        match tokio::time::timeout(GUARD, ws.next()).await.expect("guard") {
            Some(Ok(Message::Close(frame))) => {
                return Some(frame.map(|f| (f.code.into(), f.reason.as_str().to_owned())).unwrap_or((1005, "".into())));
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

#[tokio::test]
async fn a_client_initiated_close_gets_a_close_frame_back() {
    let app = spawn_app().await;
    let token = app.token("f", "triage", Role::Triage).await;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(&app, None)).await.expect("upgrade");
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    ws.send(Message::Text(init.to_string().into())).await.expect("init");
    let ack = tokio::time::timeout(GUARD, ws.next()).await.expect("guard");
    assert!(matches!(ack, Some(Ok(Message::Text(ref t))) if t.contains("connection_ack")), "{ack:?}");

    ws.send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "bye".into() }))).await.expect("close");
    assert_eq!(next_close(&mut ws).await.map(|(code, _)| code), Some(1000), "the close frame echoed");
}

/// Attacks with a message over the size limit: the server says why (1009)
/// and the connection ends cleanly. It used to close with the client's
/// bytes unread, which resets the connection: the client's send failed, and
/// a client that stops at the failed write (or a stack that drops what it
/// received on a reset) lost the close frame and saw 1006.
#[tokio::test]
async fn an_oversized_websocket_message_is_closed_with_1009() {
    let app = spawn_app().await;
    for size in [300 * 1024, 4 * 1024 * 1024] {
        let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(&app, None)).await.expect("upgrade");
        let huge = json!({ "type": "connection_init", "payload": { "pad": "x".repeat(size) } }).to_string();
        let sent = tokio::time::timeout(GUARD, ws.send(Message::Text(huge.into()))).await.expect("guard");
        assert!(sent.is_ok(), "{size} bytes: the send failed: {sent:?}");
        assert_eq!(next_close(&mut ws).await.map(|(code, _)| code), Some(1009), "{size} bytes");
        let end = tokio::time::timeout(GUARD, ws.next()).await.expect("guard");
        assert!(matches!(end, None | Some(Err(WsError::ConnectionClosed))), "{size} bytes, then {end:?}");
    }
}

/// Invisible formatting characters make one text display as another (a
/// reversed ref, a name padded with zero-width spaces): refused where the
/// ledger's text is shown to people.
#[tokio::test]
async fn invisible_formatting_characters_are_invalid_input() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let register = "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }";
    for bad in ['\u{202E}', '\u{202A}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200F}'] {
        for unit in [
            json!({ "externalRef": format!("pay{bad}001") }),
            json!({ "externalRef": "ok", "domain": format!("pay{bad}roll") }),
        ] {
            let resp = app.gql(&op, register, json!({ "u": [unit] })).await;
            resp.assert_code("INVALID_INPUT");
            assert!(resp.message().contains("invisible"), "{}", resp.message());
        }
    }
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_units").await, 0);

    app.register(&op, &["unit"]).await;
    let agent = Agent::new(&app, "f", "agent", Role::Agent).await;
    let unit = agent.claim_next(json!({})).await.str("id");
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let resp = agent.block(&unit, "Approve the \u{202E}txt.exe file?", json!({})).await;
    resp.assert_code("INVALID_INPUT");
    assert!(resp.message().contains("question"), "{}", resp.message());
    assert_eq!(app.sql_i64("SELECT count(*) FROM blocking_questions").await, 0);
    // Joiners at an edge or beside a space hide nothing visible: refused too.
    let resp = agent.block(&unit, "Approve \u{200D} this?", json!({})).await;
    resp.assert_code("INVALID_INPUT");
    assert_eq!(app.sql_i64("SELECT count(*) FROM blocking_questions").await, 0);
    // Visible text in any script is fine, with the non-joiner Persian needs
    // inside a word and the joiner of an emoji sequence; stored as written.
    let question = "Is «שלום» or «\u{645}\u{6cc}\u{200C}\u{62e}\u{648}\u{627}\u{647}\u{645}» right for 👩\u{200D}💻?";
    agent.block(&unit, question, json!({})).await.data();
    let stored = app.sql_json("SELECT question FROM blocking_questions").await;
    assert_eq!(stored, vec![json!({ "question": question })]);
}
