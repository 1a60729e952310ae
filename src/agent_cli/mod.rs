//! `work-ledger agent`: the lifecycle for shell-driven agents, one command
//! per step, over GraphQL on HTTP to a running server (never the database).
//! It keeps no local state: each command asks the server which unit the
//! token's agent holds (or which verified unit awaits its disposition) and
//! acts on that. The unit goes to stdout as JSON with its `legalActions`;
//! an error goes to stderr as one JSON line, and the exit code says which
//! kind it was (see [`AFTER_HELP`]).

mod client;

use std::io::Write;
use std::process::ExitCode;

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::config::{AgentArgs, AgentCommand, DispositionArg};
use client::Client;

/// The epilogue of `work-ledger agent --help`.
pub const AFTER_HELP: &str = "\
Connection: WORK_LEDGER_URL (e.g. http://127.0.0.1:8080) and WORK_LEDGER_TOKEN, or --url and --token.
No local state: each command asks the server what your token's agent holds.
Output: the unit as JSON on stdout, with `legalActions` (what you may do next).
Errors: one JSON line on stderr: {\"code\", \"message\", \"legalActions\", ...}.
Writes carry a fresh idempotency key per invocation; a network error, HTTP 5xx or
UNAVAILABLE is retried with the same key (--retries, --retry-backoff), so a retried
write counts once.

Exit codes:
  0  done
  1  unexpected (INTERNAL, or an answer the CLI does not understand)
  2  usage (a bad flag or argument, no URL or token)
  3  nothing to claim (NOTHING_TO_CLAIM)
  4  refused by the ledger (ILLEGAL_TRANSITION, EVIDENCE_REQUIRED, NOT_CLAIM_HOLDER,
     LEASE_LOST, ...; NOTHING_HELD when you hold no unit to act on)
  5  unauthenticated or forbidden (UNAUTHENTICATED, FORBIDDEN)
  6  unavailable: network down, HTTP 5xx or UNAVAILABLE after the retries

Example:
  export WORK_LEDGER_URL=http://127.0.0.1:8080 WORK_LEDGER_TOKEN=...
  work-ledger agent claim --lease 15m && work-ledger agent start
  work-ledger agent cost 120
  work-ledger agent verify https://github.com/acme/estate/pull/42
  work-ledger agent dispose migrated";

/// The fields of a unit the CLI prints (the API's own names and values).
const UNIT: &str = "id fleet externalRef domain workflowId state disposition disposedAt claimedBy \
    currentAttemptId leaseExpiresAt lastHeartbeatAt stalled attemptCount costCents evidenceUrls \
    createdAt updatedAt legalActions openQuestion { id question status assigneeGroup askedBy createdAt }";

/// Why a command did not end with a unit on stdout.
#[derive(Debug)]
pub struct Failure {
    pub code: String,
    pub message: String,
    /// The rest of the error's `extensions` (e.g. `legalActions`, `holder`).
    pub details: Map<String, Value>,
    /// The server could not be reached or said it is unavailable.
    pub unavailable: bool,
}

impl Failure {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Failure { code: code.to_owned(), message: message.into(), details: Map::new(), unavailable: false }
    }

    fn usage(message: impl Into<String>) -> Self {
        Self::new("USAGE", message)
    }

    fn unavailable(message: impl Into<String>) -> Self {
        Failure { unavailable: true, ..Self::new("UNAVAILABLE", message) }
    }

    fn unexpected(message: impl Into<String>) -> Self {
        Self::new("UNEXPECTED_RESPONSE", message)
    }

    /// One error object of a GraphQL response.
    fn from_graphql(error: Value) -> Self {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("(no message)").to_owned();
        let mut details = match error.get("extensions") {
            Some(Value::Object(extensions)) => extensions.clone(),
            _ => Map::new(),
        };
        let code = match details.remove("code") {
            Some(Value::String(code)) => code,
            _ => "NO_CODE".to_owned(),
        };
        Failure { unavailable: code == "UNAVAILABLE", code, message, details }
    }

    fn with_legal_actions(mut self, actions: Value) -> Self {
        self.details.entry("legalActions").or_insert(actions);
        self
    }

    /// The documented exit code (see [`AFTER_HELP`]).
    pub fn exit_code(&self) -> u8 {
        if self.unavailable {
            return 6;
        }
        match self.code.as_str() {
            "USAGE" => 2,
            "NOTHING_TO_CLAIM" => 3,
            "UNAUTHENTICATED" | "FORBIDDEN" => 5,
            "INTERNAL" | "NO_CODE" | "UNEXPECTED_RESPONSE" => 1,
            code if code.starts_with("GRAPHQL_") => 1,
            _ => 4,
        }
    }

    /// The stderr line: `code`, `message`, then the details.
    fn to_json(&self) -> Value {
        let mut line = Map::new();
        line.insert("code".into(), json!(self.code));
        line.insert("message".into(), json!(self.message));
        line.extend(self.details.clone());
        Value::Object(line)
    }
}

pub async fn run(args: AgentArgs) -> ExitCode {
    let failure = match execute(args).await {
        Ok(output) => {
            let mut stdout = std::io::stdout().lock();
            match serde_json::to_string_pretty(&output).map(|text| writeln!(stdout, "{text}")) {
                Ok(Ok(())) => return ExitCode::SUCCESS,
                _ => Failure::new("STDOUT", "cannot write the result to stdout"),
            }
        }
        Err(failure) => failure,
    };
    eprintln!("{}", failure.to_json());
    ExitCode::from(failure.exit_code())
}

async fn execute(args: AgentArgs) -> Result<Value, Failure> {
    let (Some(url), Some(token)) = (&args.url, &args.token) else {
        return Err(Failure::usage("set WORK_LEDGER_URL and WORK_LEDGER_TOKEN (or pass --url and --token)"));
    };
    let client = Client::new(url, token, args.retries, args.retry_backoff, args.timeout)?;
    // One key per invocation: every retry of this command's write reuses it.
    let key = format!("agent-cli-{}", Uuid::new_v4());
    let agent = Agent { client, key };
    match args.command {
        AgentCommand::Claim { domain, lease } => agent.claim(args.unit, domain, lease.map(seconds)).await,
        AgentCommand::Status => agent.status().await,
        command => {
            let target = agent.target(args.unit, &command).await?;
            let legal = target["legalActions"].clone();
            agent.act(&target, command).await.map_err(|failure| failure.with_legal_actions(legal))
        }
    }
}

/// A lease in whole seconds, as `leaseSeconds` takes it; the server checks the range.
fn seconds(lease: std::time::Duration) -> i64 {
    i64::try_from(lease.as_secs()).unwrap_or(i64::MAX)
}

struct Agent {
    client: Client,
    key: String,
}

/// What the server says this agent has: the unit it holds (CLAIMED,
/// IN_PROGRESS or BLOCKED) and the VERIFIED units awaiting its disposition.
struct Mine {
    name: String,
    fleet: String,
    held: Option<Value>,
    awaiting: Vec<Value>,
}

impl Agent {
    async fn unit(&self, mutation: &str, variables: Value) -> Result<Value, Failure> {
        let data = self.client.run(&format!("{mutation} {{ {UNIT} }} }}"), variables).await?;
        Ok(data.get("unit").cloned().unwrap_or(Value::Null))
    }

    async fn claim(&self, unit: Option<Uuid>, domain: Option<String>, lease: Option<i64>) -> Result<Value, Failure> {
        let claimed = match unit {
            Some(id) => {
                self.unit(
                    "mutation($id: UUID!, $lease: Int, $key: String) { \
                     unit: claimUnit(id: $id, leaseSeconds: $lease, idempotencyKey: $key)",
                    json!({ "id": id, "lease": lease, "key": self.key }),
                )
                .await?
            }
            None => {
                self.unit(
                    "mutation($domain: String, $lease: Int, $key: String) { \
                     unit: claimNext(domain: $domain, leaseSeconds: $lease, idempotencyKey: $key)",
                    json!({ "domain": domain, "lease": lease, "key": self.key }),
                )
                .await?
            }
        };
        if claimed.is_null() {
            let scope = domain.map(|d| format!(" in domain `{d}`")).unwrap_or_default();
            return Err(Failure::new(
                "NOTHING_TO_CLAIM",
                format!("no unit is claimable{scope} right now (none READY, none stale); try again later"),
            )
            .with_legal_actions(json!(["claimNext"])));
        }
        Ok(claimed)
    }

    async fn status(&self) -> Result<Value, Failure> {
        let mine = self.mine().await?;
        Ok(json!({ "agent": mine.name, "fleet": mine.fleet, "held": mine.held, "awaitingDisposition": mine.awaiting }))
    }

    async fn mine(&self) -> Result<Mine, Failure> {
        let mut data = self
            .client
            .run(
                &format!("{{ me {{ name fleet heldUnit {{ {UNIT} }} awaitingDisposition {{ {UNIT} }} }} }}"),
                json!({}),
            )
            .await?;
        let me = &mut data["me"];
        let (Some(name), Some(fleet)) = (me["name"].as_str(), me["fleet"].as_str()) else {
            return Err(Failure::unexpected(format!("`me` without a name and a fleet: {me}")));
        };
        let (name, fleet) = (name.to_owned(), fleet.to_owned());
        let held = Some(me["heldUnit"].take()).filter(|unit| !unit.is_null());
        let awaiting = match me["awaitingDisposition"].take() {
            Value::Array(units) => units,
            _ => Vec::new(),
        };
        Ok(Mine { name, fleet, held, awaiting })
    }

    /// The unit a command acts on: `--unit`, else what the server says this
    /// agent has. A command that only makes sense for a held unit refuses
    /// here when there is none; otherwise the server's own refusal (with its
    /// legal actions) teaches better than a guess of the CLI's.
    async fn target(&self, unit: Option<Uuid>, command: &AgentCommand) -> Result<Value, Failure> {
        if let Some(id) = unit {
            let data = self
                .client
                .run(&format!("query($id: UUID!) {{ unit(id: $id) {{ {UNIT} }} }}"), json!({ "id": id }))
                .await?;
            return match data.get("unit") {
                Some(unit) if !unit.is_null() => Ok(unit.clone()),
                _ => Err(Failure::new("NOT_FOUND", format!("no unit with id {id} exists in your fleet"))),
            };
        }
        let Mine { name, held, awaiting, .. } = self.mine().await?;
        let migrate = matches!(command, AgentCommand::Dispose { disposition: DispositionArg::Migrated, .. });
        // Bills arrive late and a verified unit still needs its disposition.
        let late = matches!(command, AgentCommand::Cost { .. } | AgentCommand::Dispose { .. });
        let only_awaiting = || match awaiting.as_slice() {
            [] => Ok(None),
            [unit] => Ok(Some(unit.clone())),
            many => Err(ambiguous(many)),
        };
        let target = if migrate {
            only_awaiting()?.or(held)
        } else if held.is_some() {
            held
        } else if late {
            only_awaiting()?
        } else {
            None
        };
        target.ok_or_else(|| nothing_held(&name, &awaiting))
    }

    async fn act(&self, unit: &Value, command: AgentCommand) -> Result<Value, Failure> {
        let id = &unit["id"];
        // Every write is fenced to the attempt the command found the unit
        // in: a write after someone reclaimed it is LEASE_LOST, not applied.
        let attempt = &unit["currentAttemptId"];
        let key = &self.key;
        match command {
            AgentCommand::Heartbeat { lease } => {
                self.unit(
                    "mutation($attempt: UUID!, $lease: Int) { unit: heartbeat(attemptId: $attempt, leaseSeconds: $lease)",
                    json!({ "attempt": unit["currentAttemptId"], "lease": lease.map(seconds) }),
                )
                .await
            }
            AgentCommand::Start => {
                self.unit(
                    "mutation($id: UUID!, $attempt: UUID, $key: String) { \
                     unit: transition(unitId: $id, to: IN_PROGRESS, idempotencyKey: $key, attemptId: $attempt)",
                    json!({ "id": id, "attempt": attempt, "key": key }),
                )
                .await
            }
            AgentCommand::Cost { cents } => {
                self.unit(
                    "mutation($attempt: UUID!, $cents: Int!, $key: String!) { \
                     unit: recordCost(attemptId: $attempt, cents: $cents, idempotencyKey: $key)",
                    json!({ "attempt": unit["currentAttemptId"], "cents": cents, "key": key }),
                )
                .await
            }
            AgentCommand::Verify { evidence_url } => {
                self.unit(
                    "mutation($id: UUID!, $attempt: UUID, $url: String, $key: String) { \
                     unit: transition(unitId: $id, to: VERIFIED, evidenceUrl: $url, idempotencyKey: $key, \
                     attemptId: $attempt)",
                    json!({ "id": id, "attempt": attempt, "url": evidence_url, "key": key }),
                )
                .await
            }
            AgentCommand::Block { question, group } => {
                self.unit(
                    "mutation($id: UUID!, $attempt: UUID, $question: String!, $group: String, $key: String) { \
                     unit: block(unitId: $id, question: $question, assigneeGroup: $group, idempotencyKey: $key, \
                     attemptId: $attempt)",
                    json!({ "id": id, "attempt": attempt, "question": question, "group": group, "key": key }),
                )
                .await
            }
            AgentCommand::Release { reason, failed } => {
                self.unit(
                    "mutation($id: UUID!, $attempt: UUID, $reason: String, $outcome: AttemptOutcome, $key: String) { \
                     unit: release(unitId: $id, reason: $reason, outcome: $outcome, idempotencyKey: $key, \
                     attemptId: $attempt)",
                    json!({ "id": id, "attempt": attempt, "reason": reason, "outcome": failed.then_some("FAILED"), "key": key }),
                )
                .await
            }
            AgentCommand::Dispose { disposition, evidence, reason } => {
                self.unit(
                    "mutation($id: UUID!, $attempt: UUID, $disposition: Disposition!, $url: String, $reason: String, \
                     $key: String) { \
                     unit: dispose(unitId: $id, disposition: $disposition, evidenceUrl: $url, reason: $reason, \
                     idempotencyKey: $key, attemptId: $attempt)",
                    json!({
                        "id": id, "attempt": attempt, "disposition": disposition.api_name(), "url": evidence,
                        "reason": reason, "key": key
                    }),
                )
                .await
            }
            AgentCommand::Claim { .. } | AgentCommand::Status => {
                Err(Failure::usage("claim and status act on no held unit"))
            }
        }
    }
}

fn nothing_held(name: &str, awaiting: &[Value]) -> Failure {
    let hint = match awaiting {
        [] => String::new(),
        [unit] => format!("; unit {} is VERIFIED and awaits your disposition (`dispose migrated`)", unit["id"]),
        _ => format!("; {} VERIFIED units await your disposition (see `status`)", awaiting.len()),
    };
    Failure::new(
        "NOTHING_HELD",
        format!("`{name}` holds no unit (none CLAIMED, IN_PROGRESS or BLOCKED){hint}; `work-ledger agent claim` first"),
    )
    .with_legal_actions(json!(["claimNext"]))
}

fn ambiguous(awaiting: &[Value]) -> Failure {
    let ids: Vec<&Value> = awaiting.iter().map(|unit| &unit["id"]).collect();
    let mut failure = Failure::new(
        "AMBIGUOUS_UNIT",
        format!("{} VERIFIED units await your disposition; name one with --unit ID", ids.len()),
    );
    failure.details.insert("unitIds".into(), json!(ids));
    failure
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
        assert_eq!(Failure::new("NOTHING_HELD", "").exit_code(), 4);
        assert_eq!(Failure::usage("").exit_code(), 2);
        assert_eq!(Failure { unavailable: true, ..Failure::new("INTERNAL", "HTTP 503") }.exit_code(), 6);
    }

    #[test]
    fn the_error_line_keeps_the_servers_details_and_adds_legal_actions_only_when_missing() {
        let failure = Failure::from_graphql(json!({
            "message": "unit u is IN_PROGRESS and cannot go to IN_PROGRESS",
            "extensions": { "code": "ILLEGAL_TRANSITION", "legalActions": ["release"], "from": "IN_PROGRESS" }
        }))
        .with_legal_actions(json!(["stale"]));
        assert_eq!(
            failure.to_json(),
            json!({
                "code": "ILLEGAL_TRANSITION",
                "message": "unit u is IN_PROGRESS and cannot go to IN_PROGRESS",
                "legalActions": ["release"],
                "from": "IN_PROGRESS"
            })
        );
        let added = Failure::new("EVIDENCE_REQUIRED", "m").with_legal_actions(json!(["release"]));
        assert_eq!(added.to_json()["legalActions"], json!(["release"]));
    }
}
