//! `GET /graphql/ws`: GraphQL over WebSocket, protocol `graphql-transport-ws`.
//!
//! async-graphql's `WebSocket` runs the operations; around it this module
//! holds the parts of the protocol it leaves out or answers with other close
//! codes (see [`close`]). Every client message is checked here before
//! async-graphql sees it: a malformed message, `subscribe` before
//! `connection_ack`, an id already in use, a second `connection_init`, and no
//! `connection_init` in time each close the connection with the protocol's
//! code. The token is checked in `on_connection_init` and a refusal closes
//! with 4403 (async-graphql would say 1002). Revoking the token closes the
//! connection with 4403 too. The server sends WebSocket pings so that idle
//! sockets survive proxies, and drops a peer that stops answering. A
//! connection holds at most `max_subscriptions` operations.

use std::collections::HashSet;
use std::net::SocketAddr;
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
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::MAX_BODY_BYTES;
use crate::auth::{self, Principal, TokenHash};
use crate::graphql::{LedgerSchema, error_object};
use crate::ledger::{Ledger, LedgerError};
use crate::live::Live;

pub const PROTOCOL: &str = "graphql-transport-ws";

/// The close codes this server sends: RFC 6455's and graphql-transport-ws's.
pub mod close {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const POLICY_VIOLATION: u16 = 1008;
    /// A message over the size limit.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    pub const INTERNAL_ERROR: u16 = 1011;
    /// A malformed message.
    pub const BAD_REQUEST: u16 = 4400;
    /// `subscribe` before `connection_ack`.
    pub const UNAUTHORIZED: u16 = 4401;
    /// A missing, unknown or revoked token.
    pub const FORBIDDEN: u16 = 4403;
    /// The client did not offer `graphql-transport-ws`.
    pub const SUBPROTOCOL_NOT_ACCEPTABLE: u16 = 4406;
    /// No `connection_init` in time.
    pub const INIT_TIMEOUT: u16 = 4408;
    /// A `subscribe` with an id already in use.
    pub const DUPLICATE_ID: u16 = 4409;
    /// A second `connection_init`.
    pub const TOO_MANY_INIT: u16 = 4429;
    /// More WebSockets for one token than the server allows (the same code:
    /// "too many requests").
    pub const TOO_MANY_CONNECTIONS: u16 = 4429;
}

#[derive(Debug, Clone)]
pub struct WsConfig {
    /// How long a client has to send `connection_init` (4408 after).
    pub init_timeout: Duration,
    /// Time between server pings; a peer silent for two of them is dropped.
    pub ping_interval: Duration,
    /// Operations one connection may run at once.
    pub max_subscriptions: usize,
    /// Open connections one token may have (4429 for the next one).
    pub max_per_token: usize,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(15),
            max_subscriptions: 64,
            max_per_token: 32,
        }
    }
}

/// A send that takes longer means the peer stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long answering a peer's close may take.
const CLOSE_FLUSH: Duration = Duration::from_secs(5);
/// Client messages queued for async-graphql before the client is cut off.
const INBOX: usize = 64;
/// Small buffers: a thousand idle subscribers must not cost 256 KiB each.
const READ_BUFFER: usize = 4 * 1024;
const WRITE_BUFFER: usize = 8 * 1024;

pub fn upgrade(
    ws: WebSocketUpgrade,
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
    config: WsConfig,
    connections: TaskTracker,
    client: SocketAddr,
) -> Response {
    let offered = ws.requested_protocols().any(|p| p.as_bytes() == PROTOCOL.as_bytes());
    ws.protocols([PROTOCOL])
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(MAX_BODY_BYTES)
        .max_frame_size(MAX_BODY_BYTES)
        .on_upgrade(move |socket| {
            connections.track_future(async move {
                if offered {
                    serve(Connection { schema, ledger, live, config, client }, socket).await;
                } else {
                    let (mut sink, _) = socket.split();
                    let reason = "Subprotocol not acceptable: use graphql-transport-ws";
                    let _ = send_close(&mut sink, (close::SUBPROTOCOL_NOT_ACCEPTABLE, reason.into())).await;
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

/// A close code and its reason.
type Closing = (u16, String);

/// What `on_connection_init` decided, for the connection loop to act on.
type Verdict = Result<(Uuid, TokenHash), Closing>;

/// What the connection does after handling one thing.
enum Next {
    Continue,
    /// End the connection, with a close frame unless the peer is gone.
    Close(Option<Closing>),
}

struct Connection {
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
    config: WsConfig,
    /// The peer's address, for the log of failed authentications.
    client: SocketAddr,
}

type Sink = SplitSink<WebSocket, Message>;

/// The protocol state of one connection.
struct Session {
    sink: Sink,
    inbox: mpsc::Sender<String>,
    phase: Phase,
    /// Ids of the operations running now.
    active: HashSet<String>,
    verdict: Arc<Mutex<Option<Verdict>>>,
    /// The token's connection slot, taken by `connection_init`.
    tracked: Arc<Mutex<Option<crate::live::TrackedToken>>>,
    /// The token, once acknowledged, and its registration for revocation checks.
    token: Option<(Uuid, TokenHash)>,
    _tracked: Option<crate::live::TrackedToken>,
    max_subscriptions: usize,
}

/// Runs one connection: client frames go through [`Session::client_frame`] to
/// async-graphql, its messages come back through [`Session::server_message`];
/// pings, the init deadline, revocations and shutdown end it when they must.
async fn serve(conn: Connection, socket: WebSocket) {
    let (sink, mut stream) = socket.split();
    let config = conn.config.clone();
    let verdict: Arc<Mutex<Option<Verdict>>> = Arc::default();
    let (inbox, inbox_rx) = mpsc::channel::<String>(INBOX);
    let tracked: Arc<Mutex<Option<crate::live::TrackedToken>>> = Arc::default();
    let gql = GqlWebSocket::new(conn.schema.clone(), inbox_rx, WebSocketProtocols::GraphQLWS).on_connection_init({
        let (ledger, live, verdict, tracked, client) =
            (conn.ledger.clone(), conn.live.clone(), verdict.clone(), tracked.clone(), conn.client);
        let max_per_token = config.max_per_token;
        move |payload| init(ledger, live, verdict, tracked, max_per_token, client, payload)
    });
    futures::pin_mut!(gql);
    let mut session = Session {
        sink,
        inbox,
        phase: Phase::AwaitingInit,
        active: HashSet::new(),
        verdict,
        tracked,
        token: None,
        _tracked: None,
        max_subscriptions: config.max_subscriptions,
    };
    let mut revocations = conn.live.revocations();
    let init_deadline = tokio::time::sleep(config.init_timeout);
    tokio::pin!(init_deadline);
    let mut ping = tokio::time::interval_at(Instant::now() + config.ping_interval, config.ping_interval);
    let mut heard = Instant::now();

    let closing = loop {
        let next = tokio::select! {
            _ = conn.live.stopping() => Next::Close(Some((close::GOING_AWAY, "server shutting down".into()))),
            _ = &mut init_deadline, if session.phase == Phase::AwaitingInit => {
                Next::Close(Some((close::INIT_TIMEOUT, "Connection initialisation timeout".into())))
            }
            frame = stream.next() => match frame {
                Some(Ok(frame)) => {
                    heard = Instant::now();
                    session.client_frame(frame).await
                }
                Some(Err(err)) if too_big(&err) => Next::Close(Some((
                    close::MESSAGE_TOO_BIG,
                    format!("a message holds at most {MAX_BODY_BYTES} bytes"),
                ))),
                _ => Next::Close(None),
            },
            out = gql.next() => session.server_message(out).await,
            _ = ping.tick() => {
                if heard.elapsed() > config.ping_interval * 2 {
                    Next::Close(None)
                } else {
                    session.send_or_close(Message::Ping(Default::default())).await
                }
            }
            revoked = revocations.recv(), if session.token.is_some() => session.revocation(revoked, &conn.ledger).await,
        };
        if let Next::Close(closing) = next {
            break closing;
        }
    };
    match closing {
        Some(closing) => {
            let _ = send_close(&mut session.sink, closing).await;
        }
        // The peer closed (its close frame is answered by flushing the echo
        // the WebSocket layer queued) or is gone (this fails fast).
        None => {
            let _ = tokio::time::timeout(CLOSE_FLUSH, session.sink.close()).await;
        }
    }
}

/// Whether a read failed for a message or frame over the size limit.
fn too_big(err: &axum::Error) -> bool {
    let cause = std::error::Error::source(err).and_then(|e| e.downcast_ref::<WsError>());
    matches!(cause, Some(WsError::Capacity(_)))
}

impl Session {
    /// A frame from the client: checked against the protocol, then handed to
    /// async-graphql.
    async fn client_frame(&mut self, frame: Message) -> Next {
        let text = match frame {
            Message::Text(text) => text.to_string(),
            Message::Binary(_) => return Next::Close(Some((close::BAD_REQUEST, "messages are JSON text".into()))),
            Message::Ping(_) | Message::Pong(_) => return Next::Continue,
            Message::Close(_) => return Next::Close(None),
        };
        let message = match parse(&text) {
            Ok(message) => message,
            Err(reason) => return Next::Close(Some((close::BAD_REQUEST, reason))),
        };
        match message {
            Inbound::Init => {
                if self.phase != Phase::AwaitingInit {
                    return Next::Close(Some((close::TOO_MANY_INIT, "Too many initialisation requests".into())));
                }
                self.phase = Phase::Authenticating;
            }
            Inbound::Subscribe(id) => {
                if self.phase != Phase::Ready {
                    return Next::Close(Some((close::UNAUTHORIZED, "Unauthorized".into())));
                }
                if self.active.contains(&id) {
                    return Next::Close(Some((close::DUPLICATE_ID, format!("Subscriber for {id} already exists"))));
                }
                if self.active.len() >= self.max_subscriptions {
                    let refusal = too_many(&id, self.max_subscriptions);
                    return self.send_or_close(Message::Text(refusal.into())).await;
                }
                self.active.insert(id);
            }
            Inbound::Complete(id) => {
                self.active.remove(&id);
            }
            Inbound::Ping => {}
            // async-graphql has nothing to do with a pong.
            Inbound::Pong => return Next::Continue,
        }
        if self.inbox.try_send(text).is_err() {
            return Next::Close(Some((close::POLICY_VIOLATION, "too many messages in flight".into())));
        }
        Next::Continue
    }

    /// A message async-graphql produced: the acknowledgement of
    /// `connection_init` makes the connection ready; a close during
    /// authentication is a refusal.
    async fn server_message(&mut self, out: Option<WsMessage>) -> Next {
        match out {
            Some(WsMessage::Text(text)) => {
                if self.phase == Phase::Authenticating && text == r#"{"type":"connection_ack"}"# {
                    self.phase = Phase::Ready;
                    self.token = lock(&self.verdict).clone().and_then(Result::ok);
                    self._tracked = lock(&self.tracked).take();
                } else if let Some(id) = completed(&text) {
                    self.active.remove(&id);
                }
                self.send_or_close(Message::Text(text.into())).await
            }
            Some(WsMessage::Close(code, reason)) => Next::Close(Some(match self.phase {
                Phase::Authenticating => {
                    lock(&self.verdict).clone().and_then(Result::err).unwrap_or((close::FORBIDDEN, "Forbidden".into()))
                }
                _ => (code, reason),
            })),
            None => Next::Close(Some((close::NORMAL, String::new()))),
        }
    }

    /// A revocation notice: closes the connection when it names this
    /// connection's token (or, when notices were missed, when the database
    /// says the token is no longer live).
    async fn revocation(&self, revoked: Result<Uuid, RecvError>, ledger: &Ledger) -> Next {
        let Some((mine, hash)) = self.token else { return Next::Continue };
        let revoked = match revoked {
            Ok(id) => id == mine,
            Err(RecvError::Lagged(_)) => matches!(auth::principal_of(ledger.db(), &hash).await, Ok(None)),
            Err(RecvError::Closed) => false,
        };
        if revoked {
            Next::Close(Some((close::FORBIDDEN, "Forbidden: the token was revoked".into())))
        } else {
            Next::Continue
        }
    }

    async fn send_or_close(&mut self, message: Message) -> Next {
        if send(&mut self.sink, message).await { Next::Continue } else { Next::Close(None) }
    }
}

/// Authenticates `connection_init`'s payload `{"Authorization": "Bearer <token>"}`
/// (key in any case) and returns the operations' context.
async fn init(
    ledger: Ledger,
    live: Live,
    verdict: Arc<Mutex<Option<Verdict>>>,
    tracked: Arc<Mutex<Option<crate::live::TrackedToken>>>,
    max_per_token: usize,
    client: SocketAddr,
    payload: Value,
) -> async_graphql::Result<Data> {
    let header = payload.as_object().and_then(|fields| {
        fields.iter().find(|(key, _)| key.eq_ignore_ascii_case("authorization")).and_then(|(_, v)| v.as_str())
    });
    match super::authenticate_token(&ledger, header, Some(client), "websocket").await {
        Ok((principal, hash)) => {
            let Some(slot) = live.try_track_token(principal.token_id, max_per_token) else {
                let reason = format!(
                    "Too many WebSockets for this token: at most {max_per_token} at once; close one, or run all \
                     your subscriptions over one connection"
                );
                *lock(&verdict) = Some(Err((close::TOO_MANY_CONNECTIONS, reason.clone())));
                return Err(async_graphql::Error::new(reason));
            };
            *lock(&tracked) = Some(slot);
            *lock(&verdict) = Some(Ok((principal.token_id, hash)));
            let mut data = Data::default();
            data.insert::<Principal>(principal);
            data.insert(live);
            Ok(data)
        }
        Err(err) => {
            let code =
                if matches!(err, LedgerError::Unauthenticated(_)) { close::FORBIDDEN } else { close::INTERNAL_ERROR };
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
    json!({ "type": "error", "id": id, "payload": [error_object(err)] }).to_string()
}

async fn send(sink: &mut Sink, message: Message) -> bool {
    matches!(tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await, Ok(Ok(())))
}

async fn send_close(sink: &mut Sink, (code, reason): Closing) -> bool {
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
