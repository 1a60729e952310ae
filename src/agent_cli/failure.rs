//! Why a command did not end with a result on stdout: the envelope every
//! surface shares, and the exit code of its kind (see [`super::AFTER_HELP`]).

use serde_json::{Map, Value, json};

use crate::contract::Surface;
use crate::graphql::envelope;

/// Why a command did not end with a result on stdout.
#[derive(Debug)]
pub struct Failure {
    pub code: String,
    pub message: String,
    /// The rest of the envelope (`argument`, `unitId`, `state`, `legalActions`, ...).
    pub details: Map<String, Value>,
    /// The server could not be reached or said it is unavailable.
    pub unavailable: bool,
}

impl Failure {
    pub(super) fn new(code: &str, message: impl Into<String>) -> Self {
        Failure { code: code.to_owned(), message: message.into(), details: Map::new(), unavailable: false }
    }

    pub(super) fn usage(message: impl Into<String>) -> Self {
        Self::new("USAGE", message)
    }

    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        Failure { unavailable: true, ..Self::new("UNAVAILABLE", message) }
    }

    pub(super) fn unexpected(message: impl Into<String>) -> Self {
        Self::new("UNEXPECTED_RESPONSE", message)
    }

    /// The envelope every surface shares ([`envelope::refusal`]).
    pub(super) fn from_envelope(mut envelope: Map<String, Value>) -> Self {
        let code = match envelope.remove("code") {
            Some(Value::String(code)) => code,
            _ => "NO_CODE".to_owned(),
        };
        let message = match envelope.remove("message") {
            Some(Value::String(message)) => message,
            _ => "(no message)".to_owned(),
        };
        Failure { unavailable: code == "UNAVAILABLE", code, message, details: envelope }
    }

    /// One error object of a GraphQL response.
    pub(super) fn from_graphql(error: Value) -> Self {
        Self::from_envelope(envelope::refusal(&error, Surface::Cli))
    }

    pub(super) fn with_legal_actions(mut self, actions: Value) -> Self {
        self.details.entry("legalActions").or_insert(actions);
        self
    }

    /// The documented exit code (see [`super::AFTER_HELP`]).
    pub fn exit_code(&self) -> u8 {
        if self.unavailable {
            return 6;
        }
        match self.code.as_str() {
            "USAGE" => 2,
            "NOTHING_TO_CLAIM" if self.details.get("outcome") == Some(&json!("drained")) => 7,
            "NOTHING_TO_CLAIM" => 3,
            "UNAUTHENTICATED" | "FORBIDDEN" => 5,
            "INTERNAL" | "NO_CODE" | "UNEXPECTED_RESPONSE" => 1,
            code if code.starts_with("GRAPHQL_") => 1,
            _ => 4,
        }
    }

    /// The stderr line: `code`, `message`, then the details.
    pub(super) fn to_json(&self) -> Value {
        let mut line = Map::new();
        line.insert("code".into(), json!(self.code));
        line.insert("message".into(), json!(self.message));
        line.extend(self.details.clone());
        Value::Object(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_failure_has_its_exit_code() {
        let exit =
            |code: &str| Failure::from_graphql(json!({ "message": "m", "extensions": { "code": code } })).exit_code();
        assert_eq!(exit("ILLEGAL_TRANSITION"), 4);
        assert_eq!(exit("EVIDENCE_REQUIRED"), 4);
        assert_eq!(exit("NOT_FOUND"), 4);
        assert_eq!(exit("UNAUTHENTICATED"), 5);
        assert_eq!(exit("FORBIDDEN"), 5);
        assert_eq!(exit("UNAVAILABLE"), 6);
        assert_eq!(exit("INTERNAL"), 1);
        assert_eq!(exit("GRAPHQL_VALIDATION_FAILED"), 1);
        assert_eq!(Failure::from_graphql(json!({ "message": "no code" })).exit_code(), 1);
        assert_eq!(Failure::new("NOTHING_TO_CLAIM", "").exit_code(), 3);
        let mut drained = Failure::new("NOTHING_TO_CLAIM", "");
        drained.details.insert("outcome".into(), json!("drained"));
        assert_eq!(drained.exit_code(), 7);
        assert_eq!(Failure::new("NOTHING_HELD", "").exit_code(), 4);
        assert_eq!(Failure::usage("").exit_code(), 2);
        assert_eq!(Failure { unavailable: true, ..Failure::new("INTERNAL", "HTTP 503") }.exit_code(), 6);
    }

    #[test]
    fn the_error_line_keeps_the_servers_details_and_adds_legal_actions_only_when_missing() {
        let failure = Failure::from_graphql(json!({
            "message": "unit u is IN_PROGRESS and cannot go to IN_PROGRESS",
            "extensions": { "code": "ILLEGAL_TRANSITION", "legalActions": ["release", "transition(to: VERIFIED, evidenceUrl)"], "from": "IN_PROGRESS" }
        }))
        .with_legal_actions(json!(["stale"]));
        assert_eq!(
            failure.to_json(),
            json!({
                "code": "ILLEGAL_TRANSITION",
                "message": "unit u is IN_PROGRESS and cannot go to IN_PROGRESS",
                "legalActions": ["release", "verify <evidence-url>"],
                "from": "IN_PROGRESS"
            })
        );
        let added = Failure::new("EVIDENCE_REQUIRED", "m").with_legal_actions(json!(["release"]));
        assert_eq!(added.to_json()["legalActions"], json!(["release"]));
    }
}
