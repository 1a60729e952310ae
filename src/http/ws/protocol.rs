//! The messages of graphql-transport-ws as this server reads and writes
//! them: a client message validated before async-graphql sees it, the id of
//! a `complete` the server sends, and the refusal of a `subscribe` over the
//! connection's limit.

use serde_json::{Value, json};

use crate::graphql::error_object;
use crate::ledger::LedgerError;

/// The client messages of graphql-transport-ws.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Inbound {
    Init,
    Subscribe(String),
    Complete(String),
    Ping,
    Pong,
}

/// Validates a client message as the protocol's reference server does; the
/// error is the reason of the 4400 close.
pub(super) fn parse(text: &str) -> Result<Inbound, String> {
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
pub(super) fn completed(text: &str) -> Option<String> {
    if !text.starts_with(r#"{"type":"complete""#) {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    value.get("id")?.as_str().map(str::to_owned)
}

pub(super) fn too_many(id: &str, max: usize) -> String {
    let err = LedgerError::invalid(
        "subscribe",
        format!("a connection runs at most {max} operations at once; complete one or open another connection"),
    );
    json!({ "type": "error", "id": id, "payload": [error_object(err)] }).to_string()
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
