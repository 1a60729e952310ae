//! One subscriber: a WebSocket (graphql-transport-ws) to its replica, one
//! subscription, and every item it receives noted with its arrival time.
//! When its connection ends (the server was killed) or the bench cuts it, it
//! connects again and subscribes as a client that follows the API's advice
//! would: `ledgerEvents(after:)` with the cursor of the last event it saw,
//! `blockingQuestionOpened` and `unitStalled` with their snapshots of what
//! is open (stalled) right now first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::support::AnyError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Events,
    Questions,
    Stalls,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Events, Kind::Questions, Kind::Stalls];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Events => "ledgerEvents",
            Kind::Questions => "blockingQuestionOpened",
            Kind::Stalls => "unitStalled",
        }
    }

    fn query(self) -> &'static str {
        match self {
            Kind::Events => {
                "subscription($after: String) { ledgerEvents(after: $after) { id cursor unitId eventType createdAt } }"
            }
            Kind::Questions => "subscription { blockingQuestionOpened { id unitId question createdAt } }",
            Kind::Stalls => "subscription { unitStalled { attempt { id } agentId leaseExpiredAt } }",
        }
    }

    /// The id an item is de-duplicated by (SPEC §6): the event's, the
    /// question's, the stalled attempt's.
    fn key(self, data: &Value) -> Option<Uuid> {
        let item = &data[self.name()];
        let id = match self {
            Kind::Events | Kind::Questions => &item["id"],
            Kind::Stalls => &item["attempt"]["id"],
        };
        id.as_str()?.parse().ok()
    }
}

/// One item as it arrived; `session` counts connections from 0.
pub struct Receipt {
    pub key: Uuid,
    pub at: Instant,
    pub session: u8,
}

pub struct Subscriber {
    pub index: usize,
    pub port: u16,
    pub token: String,
    pub kind: Kind,
    /// Cut by the bench (client side) rather than by the server's death.
    pub cut: Option<CancellationToken>,
}

/// What every subscriber shares with the bench.
pub struct Shared {
    /// Items received per subscriber (the warm-up waits for one each).
    pub received: Vec<AtomicUsize>,
    /// Subscribers whose first subscription was sent.
    pub connected: AtomicUsize,
    /// Subscriptions sent again after a connection ended.
    pub resubscribed: AtomicUsize,
    pub connecting: Semaphore,
    pub stop: CancellationToken,
}

pub struct Outcome {
    pub receipts: Vec<Receipt>,
    /// What the server answered with instead of an item (`error`,
    /// `complete`, a payload without the item), for the report.
    pub errors: Vec<String>,
    /// Connection attempts that failed (the killed replica refuses them
    /// until it is back).
    pub refused: usize,
}

impl Subscriber {
    pub async fn run(self, shared: Arc<Shared>) -> Outcome {
        let mut out = Outcome { receipts: Vec::new(), errors: Vec::new(), refused: 0 };
        let mut cursor: Option<String> = None;
        let mut cut_done = false;
        let mut session: u8 = 0;
        loop {
            let Some(mut ws) = self.connect(&shared, cursor.as_deref(), &mut out.refused).await else { return out };
            let count = if session == 0 { &shared.connected } else { &shared.resubscribed };
            count.fetch_add(1, Ordering::Relaxed);
            loop {
                let cut = async {
                    match (&self.cut, cut_done) {
                        (Some(cut), false) => cut.cancelled().await,
                        _ => std::future::pending().await,
                    }
                };
                let frame = tokio::select! {
                    _ = shared.stop.cancelled() => return out,
                    _ = cut => { cut_done = true; break }
                    frame = ws.next() => frame,
                };
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => continue,
                };
                let at = Instant::now();
                let Ok(message) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                match message["type"].as_str() {
                    Some("next") => {
                        let data = &message["payload"]["data"];
                        if let Some(key) = self.kind.key(data) {
                            out.receipts.push(Receipt { key, at, session });
                            shared.received[self.index].fetch_add(1, Ordering::Relaxed);
                            if let Some(c) = data[self.kind.name()]["cursor"].as_str() {
                                cursor = Some(c.to_owned());
                            }
                        } else {
                            out.errors.push(format!("subscriber {}: {text}", self.index));
                        }
                    }
                    Some("error" | "complete") => {
                        out.errors.push(format!("subscriber {}: {text}", self.index));
                        break;
                    }
                    _ => {}
                }
            }
            // Closing a cut socket properly is the bench's business, not
            // the measurement's: dropping it closes the TCP connection.
            drop(ws);
            session = session.saturating_add(1);
        }
    }

    /// Connects and subscribes, retrying every 200-300 ms until it works or
    /// the bench stops (None); failed attempts are counted in `refused`.
    async fn connect(&self, shared: &Shared, cursor: Option<&str>, refused: &mut usize) -> Option<Socket> {
        let jitter = Duration::from_millis((self.index % 100) as u64);
        loop {
            let attempt = async {
                let _permit = shared.connecting.acquire().await?;
                subscribe(self.port, &self.token, self.kind.query(), cursor).await
            };
            tokio::select! {
                _ = shared.stop.cancelled() => return None,
                ws = attempt => match ws {
                    Ok(ws) => return Some(ws),
                    Err(_) => *refused += 1,
                },
            };
            tokio::select! {
                _ = shared.stop.cancelled() => return None,
                _ = tokio::time::sleep(Duration::from_millis(200) + jitter) => {}
            }
        }
    }
}

pub type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects, authenticates and starts one subscription (id "1").
pub async fn subscribe(port: u16, token: &str, query: &str, after: Option<&str>) -> Result<Socket, AnyError> {
    let mut request = format!("ws://127.0.0.1:{port}/graphql/ws").into_client_request()?;
    request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("graphql-transport-ws"));
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await?;
    let init = json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } });
    ws.send(Message::Text(init.to_string().into())).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) if text.as_str().contains("connection_ack") => break,
            Some(Ok(Message::Text(text))) => return Err(format!("unexpected {text}").into()),
            Some(Ok(_)) => continue,
            other => return Err(format!("no connection_ack: {other:?}").into()),
        }
    }
    let payload = match after {
        Some(after) => json!({ "query": query, "variables": { "after": after } }),
        None => json!({ "query": query }),
    };
    let subscribe = json!({ "type": "subscribe", "id": "1", "payload": payload });
    ws.send(Message::Text(subscribe.to_string().into())).await?;
    Ok(ws)
}
