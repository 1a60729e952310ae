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
//! connection with 4403 too, and so does its expiry, when the database said
//! it comes: a timer per connection, since the instant is known at
//! `connection_init` and nothing needs asking again (the token checker of
//! revocations runs on notices and reconnects only; run every few seconds
//! it would close late and ask the database all day for nothing). The
//! server sends WebSocket pings so that idle sockets survive proxies, and
//! drops a peer that stops answering. A connection holds at most
//! `max_subscriptions` operations.
//!
//! | module | holds |
//! | --- | --- |
//! | this one | the upgrade, the configuration, the connection loop (timers, pings, shutdown) |
//! | [`session`] | one connection's protocol state and what each message does to it |
//! | [`auth`] | `connection_init`: the token and the token's connection slot |
//! | [`protocol`] | the client messages' validation, the server messages it reads |
//! | [`close`] | the close codes |

mod auth;
pub mod close;
mod protocol;
mod session;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::http::{WebSocket as GqlWebSocket, WebSocketProtocols};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::channel::mpsc;
use futures::stream::StreamExt;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_util::task::TaskTracker;

use super::MAX_BODY_BYTES;
use crate::graphql::LedgerSchema;
use crate::ledger::Ledger;
use crate::live::Live;
use auth::{Verdict, init};
use session::{Next, Session, send_close};

pub const PROTOCOL: &str = "graphql-transport-ws";

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

struct Connection {
    schema: LedgerSchema,
    ledger: Ledger,
    live: Live,
    config: WsConfig,
    /// The peer's address, for the log of failed authentications.
    client: SocketAddr,
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
    let mut session = Session::new(sink, inbox, verdict, tracked, config.max_subscriptions);
    let mut revocations = conn.live.revocations();
    let init_deadline = tokio::time::sleep(config.init_timeout);
    tokio::pin!(init_deadline);
    let mut ping = tokio::time::interval_at(Instant::now() + config.ping_interval, config.ping_interval);
    let mut heard = Instant::now();
    // Set once the token is acknowledged, if it expires.
    let mut expiry = None;
    let expired = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(expired);

    let closing = loop {
        let next = tokio::select! {
            _ = conn.live.stopping() => Next::close(close::GOING_AWAY, "server shutting down"),
            _ = &mut init_deadline, if session.awaiting_init() => {
                Next::close(close::INIT_TIMEOUT, "Connection initialisation timeout")
            }
            frame = stream.next() => match frame {
                Some(Ok(frame)) => {
                    heard = Instant::now();
                    session.client_frame(frame).await
                }
                Some(Err(err)) if too_big(&err) => {
                    Next::close(close::MESSAGE_TOO_BIG, format!("a message holds at most {MAX_BODY_BYTES} bytes"))
                }
                Some(Err(_)) => Next::quietly("a read from the client failed"),
                None => Next::quietly("the client's stream ended"),
            },
            out = gql.next() => session.server_message(out).await,
            _ = ping.tick() => {
                if heard.elapsed() > config.ping_interval * 2 {
                    // A peer that is gone gets nothing from this; one that
                    // stopped reading learns why.
                    Next::close(close::GOING_AWAY, format!("nothing heard for {:?}", config.ping_interval * 2))
                } else {
                    session.send_or_close(Message::Ping(Default::default())).await
                }
            }
            revoked = revocations.recv(), if session.has_token() => session.revocation(revoked, &conn.ledger).await,
            _ = &mut expired, if expiry.is_some() => expiry.map_or(Next::Continue, Session::expired),
        };
        if let Next::End(ending) = next {
            break ending;
        }
        if expiry.is_none()
            && let Some(at) = session.expiry()
        {
            expired.as_mut().reset(at.deadline);
            expiry = Some(at);
        }
    };
    session.finish(closing).await;
}

/// Whether a read failed for a message or frame over the size limit.
fn too_big(err: &axum::Error) -> bool {
    let cause = std::error::Error::source(err).and_then(|e| e.downcast_ref::<WsError>());
    matches!(cause, Some(WsError::Capacity(_)))
}
