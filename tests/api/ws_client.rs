//! A graphql-transport-ws client for the tests: one connection, raw frames
//! when a test needs them, typed helpers otherwise. Every wait is bounded by
//! a generous guard that only ever fires when a test is failing.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

use crate::helpers::TestApp;

/// A failing test's guard, never a pace.
pub const GUARD: Duration = Duration::from_secs(30);

/// What the server sent.
#[derive(Debug)]
pub enum Frame {
    Json(Value),
    Close(u16, String),
    Ping,
}

pub struct Ws {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Ws {
    /// Connects offering graphql-transport-ws.
    pub async fn connect(app: &TestApp) -> Ws {
        Self::connect_offering(app, Some("graphql-transport-ws")).await
    }

    pub async fn connect_offering(app: &TestApp, protocol: Option<&str>) -> Ws {
        Self::connect_at(&app.addr.to_string(), protocol).await
    }

    /// Connects to the server at `addr` (`host:port`), offering `protocol`.
    pub async fn connect_at(addr: &str, protocol: Option<&str>) -> Ws {
        let mut request = format!("ws://{addr}/graphql/ws").into_client_request().expect("request");
        if let Some(protocol) = protocol {
            request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_str(protocol).expect("header"));
        }
        let (stream, response) = connect_async(request).await.expect("WebSocket handshake");
        if protocol == Some("graphql-transport-ws") {
            assert_eq!(
                response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()),
                Some("graphql-transport-ws")
            );
        }
        Ws { stream }
    }

    /// Connects, initialises with `token` and expects `connection_ack`.
    pub async fn authenticated(app: &TestApp, token: &str) -> Ws {
        Self::authenticated_at(&app.addr.to_string(), token).await
    }

    /// [`Ws::authenticated`] with the server at `addr` (`host:port`).
    pub async fn authenticated_at(addr: &str, token: &str) -> Ws {
        let mut ws = Self::connect_at(addr, Some("graphql-transport-ws")).await;
        ws.send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })).await;
        ws.expect_type("connection_ack").await;
        ws
    }

    /// A connection running one subscription, id "1". It returns as soon as
    /// `subscribe` is sent, not once the server runs the subscription: before
    /// producing what the test waits for, receive a sentinel (an open
    /// question, an event after the cursor) that proves it runs.
    pub async fn subscription(app: &TestApp, token: &str, query: &str, variables: Value) -> Ws {
        let mut ws = Self::authenticated(app, token).await;
        ws.subscribe("1", query, variables).await;
        ws
    }

    pub async fn send(&mut self, message: Value) {
        self.send_text(&message.to_string()).await;
    }

    pub async fn send_text(&mut self, text: &str) {
        self.stream.send(Message::Text(text.into())).await.expect("send");
    }

    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        self.send(json!({ "type": "subscribe", "id": id, "payload": { "query": query, "variables": variables } }))
            .await;
    }

    /// The next frame, pings included.
    pub async fn frame(&mut self) -> Frame {
        loop {
            let next = tokio::time::timeout(GUARD, self.stream.next()).await.expect("a frame within the guard");
            match next {
                Some(Ok(Message::Text(text))) => {
                    return Frame::Json(serde_json::from_str(text.as_str()).expect("JSON from the server"));
                }
                Some(Ok(Message::Close(frame))) => {
                    return frame
                        .map(|f| Frame::Close(f.code.into(), f.reason.as_str().to_owned()))
                        .unwrap_or(Frame::Close(1005, String::new()));
                }
                Some(Ok(Message::Ping(_))) => return Frame::Ping,
                Some(Ok(_)) => continue,
                // The server closed the socket while this client wrote to it
                // (a `subscribe` or a pong racing the server's close frame):
                // the close frame is lost with the connection, as a browser
                // would report it (1006).
                Some(Err(tokio_tungstenite::tungstenite::Error::Io(err)))
                    if matches!(err.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) =>
                {
                    return Frame::Close(1006, format!("connection lost: {err}"));
                }
                Some(Err(err)) => panic!("WebSocket error: {err}"),
                None => return Frame::Close(1006, "closed without a close frame".into()),
            }
        }
    }

    /// The next protocol message, skipping pings.
    pub async fn message(&mut self) -> Value {
        loop {
            match self.frame().await {
                Frame::Json(v) => return v,
                Frame::Ping => continue,
                Frame::Close(code, reason) => panic!("closed with {code} {reason:?} while a message was expected"),
            }
        }
    }

    pub async fn expect_type(&mut self, kind: &str) -> Value {
        let message = self.message().await;
        assert_eq!(message["type"], kind, "{message:#}");
        message
    }

    /// The first `ledgerEvents` item of a subscription started without a
    /// cursor: such a stream starts whenever the server runs it, and a unit
    /// registered before that is rightly never sent, so units
    /// `{prefix}-{k}` are registered until one arrives (proof that it runs).
    pub async fn first_probe(&mut self, app: &TestApp, token: &str, prefix: &str) -> Value {
        for k in 0..30 {
            app.register(token, &[&format!("{prefix}-{k}")]).await;
            if let Ok(data) = tokio::time::timeout(Duration::from_secs(1), self.next_data()).await {
                return data["ledgerEvents"].clone();
            }
        }
        panic!("no `{prefix}` probe reached the subscription within 30 tries");
    }

    /// The payload of the next `next` message (of any id), asserting it has no errors.
    pub async fn next_data(&mut self) -> Value {
        let message = self.expect_type("next").await;
        assert!(message["payload"].get("errors").is_none(), "errors: {message:#}");
        message["payload"]["data"].clone()
    }

    /// The close code and reason, skipping anything before them.
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            if let Frame::Close(code, reason) = self.frame().await {
                return (code, reason);
            }
        }
    }
}
