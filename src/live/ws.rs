//! `GET /graphql/ws`: GraphQL over WebSocket, protocol `graphql-transport-ws`.
//!
//! async-graphql's `WebSocket` runs the operations; around it this module
//! holds the parts of the protocol it leaves out or answers with other close
//! codes. Every client message is checked here before async-graphql sees it:
//! 4400 for a malformed message, 4401 for `subscribe` before
//! `connection_ack`, 4409 for an id already in use, 4429 for a second
//! `connection_init`, 4408 when no `connection_init` comes in time. The
//! token is checked in `on_connection_init` and a refusal closes with 4403
//! (async-graphql would say 1002). Revoking the token closes the connection
//! with 4403 too. The server sends WebSocket pings so that idle sockets
//! survive proxies, and drops a peer that stops answering. A connection
//! holds at most `max_subscriptions` operations.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::Data;
use async_graphql::http::{WebSocket as GqlWebSocket, WebSocketProtocols, WsMessage};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::stream::{SplitSink, StreamExt};
use futures::{SinkExt, channel::mpsc};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use uuid::Uuid;

use super::Live;
use crate::auth::{self, Principal};
use crate::db;
use crate::graphql::LedgerSchema;
use crate::http::MAX_BODY_BYTES;
use crate::ledger::{Ledger, LedgerError};

pub const PROTOCOL: &str = "graphql-transport-ws";

#[derive(Debug, Clone)]
pub struct WsConfig {
    /// How long a client has to send `connection_init` (4408 after).
    pub init_timeout: Duration,
    /// Time between server pings; a peer silent for two of them is dropped.
    pub ping_interval: Duration,
    /// Operations one connection may run at once.
    pub max_subscriptions: usize,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self { init_timeout: Duration::from_secs(10), ping_interval: Duration::from_secs(15), max_subscriptions: 64 }
    }
}

/// A send that takes longer means the peer stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Client messages queued for async-graphql before the client is cut off.
const INBOX: usize = 64;
/// Small buffers: a thousand idle subscribers must not cost 256 KiB each.
const READ_BUFFER: usize = 4 * 1024;
const WRITE_BUFFER: usize = 8 * 1024;

pub fn upgrade(ws: WebSocketUpgrade, schema: LedgerSchema, ledger: Ledger, live: Live) -> Response {
    let offered = ws.requested_protocols().any(|p| p.as_bytes() == PROTOCOL.as_bytes());
    let connections = live.connections();
    ws.protocols([PROTOCOL])
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(MAX_BODY_BYTES)
        .max_frame_size(MAX_BODY_BYTES)
        .on_upgrade(move |socket| {
            connections.track_future(async move {
                if offered {
                    Connection { schema, ledger, live }.serve(socket).await;
                } else {
                    let (mut sink, _) = socket.split();
                    let _ = close(&mut sink, 4406, "Subprotocol not acceptable: use graphql-transport-ws").await;
                }
            })
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitingInit,
    Authenticating,
    Ready,
}

/// What `on_connection_init` decided, for the connection loop to act on.
type Verdict = Result<(Uuid, [u8; 32]), (u16, String)>;

struct Connection {
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
}

type Sink = SplitSink<WebSocket, Message>;

impl Connection {
    async fn serve(self, socket: WebSocket) {
        let (mut sink, mut stream) = socket.split();
        let config = self.live.ws_config().clone();
        let verdict: Arc<Mutex<Option<Verdict>>> = Arc::default();
        let (inbox, inbox_rx) = mpsc::channel::<String>(INBOX);
        let gql = GqlWebSocket::new(self.schema.clone(), inbox_rx, WebSocketProtocols::GraphQLWS).on_connection_init({
            let (ledger, live, verdict) = (self.ledger.clone(), self.live.clone(), verdict.clone());
            move |payload| init(ledger, live, verdict, payload)
        });
        futures::pin_mut!(gql);

        let mut inbox = inbox;
        let mut phase = Phase::AwaitingInit;
        let mut active: HashSet<String> = HashSet::new();
        let mut token: Option<(Uuid, [u8; 32])> = None;
        let mut _tracked = None;
        let mut revocations = self.live.revocations();
        let init_deadline = tokio::time::sleep(config.init_timeout);
        tokio::pin!(init_deadline);
        let mut ping = tokio::time::interval_at(Instant::now() + config.ping_interval, config.ping_interval);
        let mut heard = Instant::now();

        let close_with: Option<(u16, String)> = loop {
            tokio::select! {
                _ = self.live.stopping() => break Some((1001, "server shutting down".into())),
                _ = &mut init_deadline, if phase == Phase::AwaitingInit => {
                    break Some((4408, "Connection initialisation timeout".into()));
                }
                frame = stream.next() => {
                    let Some(Ok(frame)) = frame else { break None };
                    heard = Instant::now();
                    let text = match frame {
                        Message::Text(text) => text.to_string(),
                        Message::Binary(_) => break Some((4400, "messages are JSON text".into())),
                        Message::Ping(_) | Message::Pong(_) => continue,
                        Message::Close(_) => break None,
                    };
                    let message = match parse(&text) {
                        Ok(message) => message,
                        Err(reason) => break Some((4400, reason)),
                    };
                    match message {
                        Inbound::Init => {
                            if phase != Phase::AwaitingInit {
                                break Some((4429, "Too many initialisation requests".into()));
                            }
                            phase = Phase::Authenticating;
                        }
                        Inbound::Subscribe(id) => {
                            if phase != Phase::Ready {
                                break Some((4401, "Unauthorized".into()));
                            }
                            if active.contains(&id) {
                                break Some((4409, format!("Subscriber for {id} already exists")));
                            }
                            if active.len() >= config.max_subscriptions {
                                let refusal = too_many(&id, config.max_subscriptions);
                                if !send(&mut sink, Message::Text(refusal.into())).await {
                                    break None;
                                }
                                continue;
                            }
                            active.insert(id);
                        }
                        Inbound::Complete(id) => {
                            active.remove(&id);
                        }
                        Inbound::Ping => {}
                        // async-graphql has nothing to do with a pong.
                        Inbound::Pong => continue,
                    }
                    if inbox.try_send(text).is_err() {
                        break Some((1008, "too many messages in flight".into()));
                    }
                }
                out = gql.next() => match out {
                    Some(WsMessage::Text(text)) => {
                        if phase == Phase::Authenticating && text == r#"{"type":"connection_ack"}"# {
                            phase = Phase::Ready;
                            token = lock(&verdict).clone().and_then(Result::ok);
                            _tracked = token.map(|(id, _)| self.live.track_token(id));
                        } else if let Some(id) = completed(&text) {
                            active.remove(&id);
                        }
                        if !send(&mut sink, Message::Text(text.into())).await {
                            break None;
                        }
                    }
                    // During authentication the only close is a refusal.
                    Some(WsMessage::Close(code, reason)) => break Some(match phase {
                        Phase::Authenticating => lock(&verdict)
                            .clone()
                            .and_then(Result::err)
                            .unwrap_or((4403, "Forbidden".into())),
                        _ => (code, reason),
                    }),
                    None => break Some((1000, String::new())),
                },
                _ = ping.tick() => {
                    if heard.elapsed() > config.ping_interval * 2 {
                        break None;
                    }
                    if !send(&mut sink, Message::Ping(Default::default())).await {
                        break None;
                    }
                }
                revoked = revocations.recv(), if token.is_some() => {
                    let revoked = match (revoked, token) {
                        (Ok(id), Some((mine, _))) => id == mine,
                        // Missed some: ask the database about this one.
                        (Err(RecvError::Lagged(_)), Some((_, hash))) => {
                            matches!(db::tokens::authenticate(self.ledger.db(), &hash).await, Ok(None))
                        }
                        _ => false,
                    };
                    if revoked {
                        break Some((4403, "Forbidden: the token was revoked".into()));
                    }
                }
            }
        };
        if let Some((code, reason)) = close_with {
            let _ = close(&mut sink, code, &reason).await;
        }
    }
}

/// Authenticates `connection_init`'s payload `{"Authorization": "Bearer <token>"}`
/// (key in any case) and returns the operations' context.
async fn init(
    ledger: Ledger,
    live: Live,
    verdict: Arc<Mutex<Option<Verdict>>>,
    payload: Value,
) -> async_graphql::Result<Data> {
    let header = payload.as_object().and_then(|fields| {
        fields.iter().find(|(key, _)| key.eq_ignore_ascii_case("authorization")).and_then(|(_, v)| v.as_str())
    });
    let authenticated = match auth::parse_bearer(header) {
        Ok(secret) => {
            let hash = auth::hash_token(secret);
            match db::tokens::authenticate(ledger.db(), &hash).await {
                Ok(Some(principal)) => Ok((principal, hash)),
                Ok(None) => Err(auth::UNKNOWN_TOKEN),
                Err(err) => Err(LedgerError::from(err)),
            }
        }
        Err(err) => Err(err),
    };
    match authenticated {
        Ok((principal, hash)) => {
            *lock(&verdict) = Some(Ok((principal.token_id, hash)));
            let mut data = Data::default();
            data.insert::<Principal>(principal);
            data.insert(live);
            Ok(data)
        }
        Err(err) => {
            let code = if matches!(err, LedgerError::Unauthenticated(_)) { 4403 } else { 1011 };
            let reason = format!("Forbidden: {err}");
            *lock(&verdict) = Some(Err((code, reason.clone())));
            Err(async_graphql::Error::new(reason))
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The client messages of graphql-transport-ws.
#[derive(Debug, PartialEq, Eq)]
enum Inbound {
    Init,
    Subscribe(String),
    Complete(String),
    Ping,
    Pong,
}

/// Validates a client message as the protocol's reference server does; the
/// error is the reason of the 4400 close.
fn parse(text: &str) -> Result<Inbound, String> {
    let value: Value = serde_json::from_str(text).map_err(|_| "Invalid message received: not JSON".to_owned())?;
    let message = value.as_object().ok_or("Invalid message received: not an object")?;
    let kind = message.get("type").and_then(Value::as_str).ok_or("Invalid message received: no `type`")?;
    let object_or_null = |field: &str| matches!(message.get(field), None | Some(Value::Null) | Some(Value::Object(_)));
    let id = || match message.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err(format!("Invalid message received: `{kind}` needs a non-empty string `id`")),
    };
    match kind {
        "connection_init" | "ping" | "pong" if !object_or_null("payload") => {
            Err(format!("Invalid message received: the payload of `{kind}` must be an object"))
        }
        "connection_init" => Ok(Inbound::Init),
        "ping" => Ok(Inbound::Ping),
        "pong" => Ok(Inbound::Pong),
        "subscribe" => {
            let id = id()?;
            let payload = message.get("payload").and_then(Value::as_object);
            let well_formed = payload.is_some_and(|p| {
                let optional = |field: &str, ok: fn(&Value) -> bool| p.get(field).is_none_or(|v| v.is_null() || ok(v));
                p.get("query").is_some_and(Value::is_string)
                    && optional("variables", Value::is_object)
                    && optional("operationName", Value::is_string)
                    && optional("extensions", Value::is_object)
            });
            if !well_formed {
                return Err("Invalid message received: `subscribe` needs a payload with a string `query`".into());
            }
            // What async-graphql will parse must parse.
            let request =
                serde_json::from_value::<async_graphql::Request>(Value::Object(payload.cloned().unwrap_or_default()));
            request
                .map(|_| Inbound::Subscribe(id))
                .map_err(|_| "Invalid message received: bad `subscribe` payload".into())
        }
        "complete" => Ok(Inbound::Complete(id()?)),
        other => Err(format!("Unexpected message of type {other} received")),
    }
}

/// The id of a `complete` the server sends.
fn completed(text: &str) -> Option<String> {
    if !text.starts_with(r#"{"type":"complete""#) {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    value.get("id")?.as_str().map(str::to_owned)
}

fn too_many(id: &str, max: usize) -> String {
    let err = LedgerError::invalid(
        "subscribe",
        format!("a connection runs at most {max} operations at once; complete one or open another connection"),
    );
    json!({
        "type": "error",
        "id": id,
        "payload": [{ "message": err.to_string(), "extensions": { "code": err.code() } }],
    })
    .to_string()
}

async fn send(sink: &mut Sink, message: Message) -> bool {
    matches!(tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await, Ok(Ok(())))
}

async fn close(sink: &mut Sink, code: u16, reason: &str) -> bool {
    // A close reason is at most 123 bytes.
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let frame = CloseFrame { code, reason: reason[..end].to_owned().into() };
    send(sink, Message::Close(Some(frame))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_client_messages() {
        assert_eq!(parse(r#"{"type":"connection_init"}"#), Ok(Inbound::Init));
        assert_eq!(parse(r#"{"type":"connection_init","payload":{"a":1}}"#), Ok(Inbound::Init));
        assert!(parse(r#"{"type":"connection_init","payload":3}"#).is_err());
        assert_eq!(
            parse(r#"{"type":"subscribe","id":"1","payload":{"query":"subscription { x }","variables":null}}"#),
            Ok(Inbound::Subscribe("1".into()))
        );
        assert!(parse(r#"{"type":"subscribe","id":"","payload":{"query":"x"}}"#).is_err());
        assert!(parse(r#"{"type":"subscribe","id":"1","payload":{}}"#).is_err());
        assert!(parse(r#"{"type":"subscribe","id":"1","payload":{"query":"x","variables":[]}}"#).is_err());
        assert_eq!(parse(r#"{"type":"complete","id":"1"}"#), Ok(Inbound::Complete("1".into())));
        assert!(parse(r#"{"type":"next","id":"1"}"#).is_err());
        assert!(parse("not json").is_err());
        assert!(parse("[]").is_err());
    }

    #[test]
    fn recognises_server_completions() {
        assert_eq!(completed(r#"{"type":"complete","id":"7"}"#), Some("7".into()));
        assert_eq!(completed(r#"{"type":"next","id":"7","payload":{}}"#), None);
    }
}
