//! The protocol state of one connection: where it is in the handshake, the
//! operations it runs, its token; what each client frame, each message of
//! async-graphql and each revocation notice does to it, and when its token
//! expires; and its writes, each bounded in time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_graphql::http::WsMessage;
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::stream::SplitSink;
use futures::{SinkExt, channel::mpsc};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::auth::{Verdict, lock};
use super::close::{self, Closing};
use super::protocol::{Inbound, completed, parse, too_many};
use crate::auth::{self, Credential, Expiry};
use crate::ledger::Ledger;

/// A send that takes longer means the peer stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long answering a peer's close may take.
const CLOSE_FLUSH: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitingInit,
    Authenticating,
    Ready,
}

/// What the connection does after handling one thing.
pub(super) enum Next {
    Continue,
    End(Ending),
}

/// How a connection ends.
pub(super) enum Ending {
    /// With this close frame.
    Close(Closing),
    /// Without a close frame of the server's: the peer closed (its close
    /// frame is answered with the echo) or is gone. The reason is logged.
    Quietly(&'static str),
}

impl Next {
    pub(super) fn close(code: u16, reason: impl Into<String>) -> Self {
        Self::End(Ending::Close((code, reason.into())))
    }

    pub(super) fn quietly(why: &'static str) -> Self {
        Self::End(Ending::Quietly(why))
    }
}

pub(super) type Sink = SplitSink<WebSocket, Message>;

/// The protocol state of one connection.
pub(super) struct Session {
    sink: Sink,
    inbox: mpsc::Sender<String>,
    phase: Phase,
    /// Ids of the operations running now.
    active: HashSet<String>,
    verdict: Arc<Mutex<Option<Verdict>>>,
    /// The token's connection slot, taken by `connection_init`.
    tracked: Arc<Mutex<Option<crate::live::TrackedToken>>>,
    /// The token, once acknowledged, and its registration for revocation checks.
    token: Option<(Uuid, Credential)>,
    _tracked: Option<crate::live::TrackedToken>,
    max_subscriptions: usize,
}

impl Session {
    /// A connection awaiting `connection_init`: client messages go to
    /// async-graphql through `inbox`; `connection_init` leaves its verdict
    /// and the token's slot in `verdict` and `tracked`.
    pub(super) fn new(
        sink: Sink,
        inbox: mpsc::Sender<String>,
        verdict: Arc<Mutex<Option<Verdict>>>,
        tracked: Arc<Mutex<Option<crate::live::TrackedToken>>>,
        max_subscriptions: usize,
    ) -> Self {
        Self {
            sink,
            inbox,
            phase: Phase::AwaitingInit,
            active: HashSet::new(),
            verdict,
            tracked,
            token: None,
            _tracked: None,
            max_subscriptions,
        }
    }

    /// No `connection_init` yet (the init deadline runs).
    pub(super) fn awaiting_init(&self) -> bool {
        self.phase == Phase::AwaitingInit
    }

    /// Acknowledged with a token, whose revocation closes the connection.
    pub(super) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// When the acknowledged token expires, which closes the connection.
    pub(super) fn expiry(&self) -> Option<Expiry> {
        self.token.and_then(|(_, credential)| credential.expiry)
    }

    /// A frame from the client: checked against the protocol, then handed to
    /// async-graphql.
    pub(super) async fn client_frame(&mut self, frame: Message) -> Next {
        let text = match frame {
            Message::Text(text) => text.to_string(),
            Message::Binary(_) => return Next::close(close::BAD_REQUEST, "messages are JSON text"),
            Message::Ping(_) | Message::Pong(_) => return Next::Continue,
            Message::Close(_) => return Next::quietly("the client closed"),
        };
        let message = match parse(&text) {
            Ok(message) => message,
            Err(reason) => return Next::close(close::BAD_REQUEST, reason),
        };
        match message {
            Inbound::Init => {
                if self.phase != Phase::AwaitingInit {
                    return Next::close(close::TOO_MANY_INIT, "Too many initialisation requests");
                }
                self.phase = Phase::Authenticating;
            }
            Inbound::Subscribe(id) => {
                if self.phase != Phase::Ready {
                    return Next::close(close::UNAUTHORIZED, "Unauthorized");
                }
                if self.active.contains(&id) {
                    return Next::close(close::DUPLICATE_ID, format!("Subscriber for {id} already exists"));
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
            return Next::close(close::POLICY_VIOLATION, "too many messages in flight");
        }
        Next::Continue
    }

    /// A message async-graphql produced: the acknowledgement of
    /// `connection_init` makes the connection ready; a close during
    /// authentication is a refusal.
    pub(super) async fn server_message(&mut self, out: Option<WsMessage>) -> Next {
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
            Some(WsMessage::Close(code, reason)) => Next::End(Ending::Close(match self.phase {
                Phase::Authenticating => {
                    lock(&self.verdict).clone().and_then(Result::err).unwrap_or((close::FORBIDDEN, "Forbidden".into()))
                }
                _ => (code, reason),
            })),
            None => Next::close(close::NORMAL, String::new()),
        }
    }

    /// A revocation notice: closes the connection when it names this
    /// connection's token (or, when notices were missed, when the database
    /// says the token is no longer live). The token checker names expired
    /// tokens too, once their connections' own timers are past.
    pub(super) async fn revocation(&self, revoked: Result<Uuid, RecvError>, ledger: &Ledger) -> Next {
        let Some((mine, credential)) = self.token else { return Next::Continue };
        let revoked = match revoked {
            Ok(id) => id == mine,
            Err(RecvError::Lagged(_)) => matches!(auth::principal_of(ledger.db(), &credential.hash).await, Ok(None)),
            Err(RecvError::Closed) => false,
        };
        if !revoked {
            return Next::Continue;
        }
        match credential.expiry {
            Some(expiry) if expiry.deadline <= tokio::time::Instant::now() => Self::expired(expiry),
            _ => Next::close(close::FORBIDDEN, "Forbidden: the token was revoked"),
        }
    }

    /// The token expired: 4403, saying when.
    pub(super) fn expired(expiry: Expiry) -> Next {
        Next::close(close::FORBIDDEN, format!("Forbidden: {}", auth::expired(expiry.at)))
    }

    pub(super) async fn send_or_close(&mut self, message: Message) -> Next {
        if send(&mut self.sink, message).await {
            Next::Continue
        } else {
            Next::quietly("a write to the client failed or timed out")
        }
    }

    /// Ends the connection: with the server's close frame, or, when the peer
    /// closed (its close frame is answered by flushing the echo the WebSocket
    /// layer queued) or is gone (this fails fast), without one.
    pub(super) async fn finish(mut self, ending: Ending) {
        match ending {
            Ending::Close(closing) => {
                tracing::debug!(code = closing.0, reason = %closing.1, "WebSocket closed by the server");
                let _ = send_close(&mut self.sink, closing).await;
            }
            Ending::Quietly(why) => {
                tracing::debug!(why, "WebSocket ended");
                let _ = tokio::time::timeout(CLOSE_FLUSH, self.sink.close()).await;
            }
        }
    }
}

async fn send(sink: &mut Sink, message: Message) -> bool {
    matches!(tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await, Ok(Ok(())))
}

pub(super) async fn send_close(sink: &mut Sink, (code, reason): Closing) -> bool {
    // A close reason is at most 123 bytes.
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let frame = CloseFrame { code, reason: reason[..end].to_owned().into() };
    send(sink, Message::Close(Some(frame))).await
}
