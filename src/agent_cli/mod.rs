//! `work-ledger agent`: the lifecycle for shell-driven agents, one verb per
//! step, over GraphQL on HTTP to a running server (never the database). The
//! verbs are the operation contract's ([`crate::contract`]): each runs its
//! GraphQL field with the arguments given as flags ([`verbs`]), and prints the
//! result MCP returns for the same call; a refusal is the same envelope, one
//! JSON line on stderr, and the exit code says which kind it was (see
//! [`AFTER_HELP`]). The unit acted on is the one the server says the token's
//! agent holds (or `--unit`); the attempt is the one this session last
//! claimed ([`state`]), so a superseded session's write is `LEASE_LOST`.

mod client;
mod failure;
mod state;
mod verbs;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::contract::{Operation, Surface};
use crate::graphql::envelope;
use client::Client;
pub use failure::Failure;

/// The epilogue of `work-ledger agent --help`.
pub const AFTER_HELP: &str = "\
Connection: WORK_LEDGER_URL (e.g. http://127.0.0.1:8080) and WORK_LEDGER_TOKEN, or --url and --token.
The unit: the one the server says your token's agent holds (or --unit ID). The attempt: the one this
session last claimed, kept in --state (WORK_LEDGER_STATE; default one file per URL and token under
$XDG_STATE_HOME/work-ledger): a session whose unit was claimed again since gets LEASE_LOST.
Output: the same JSON object the MCP tool returns: {\"unit\": {...}}, the unit as it is now with its
`legalActions` (the verbs you may run next); `status` and `wait` add its `questions` with answers and
its `attempts`; `claim` adds `outcome` (and, with no unit, the domain's counts).
Errors: one JSON line on stderr: {\"code\", \"message\", \"argument\", \"unitId\", \"state\", \"legalActions\", ...}.
Writes carry a fresh idempotency key per invocation; a network error, HTTP 5xx or
UNAVAILABLE is retried with the same key (--retries, --retry-backoff), so a retried
write counts once.

Exit codes:
  0  done
  1  unexpected (INTERNAL, or an answer the CLI does not understand)
  2  usage (a bad flag or argument, no URL or token)
  3  nothing to claim right now: units are blocked or leased elsewhere (outcome `busy`)
  4  refused by the ledger (ILLEGAL_TRANSITION, EVIDENCE_REQUIRED, NOT_CLAIM_HOLDER,
     LEASE_LOST, ...; NOTHING_HELD when you hold no unit to act on)
  5  unauthenticated or forbidden (UNAUTHENTICATED, FORBIDDEN)
  6  unavailable: network down, HTTP 5xx or UNAVAILABLE after the retries
  7  nothing left to claim: the domain is drained (outcome `drained`): stop

Example:
  export WORK_LEDGER_URL=http://127.0.0.1:8080 WORK_LEDGER_TOKEN=...
  work-ledger agent claim --lease 15m && work-ledger agent start
  work-ledger agent cost 120
  work-ledger agent verify https://github.com/acme/estate/pull/42
  work-ledger agent dispose migrated";

/// `work-ledger agent` on its own (without the database flags of the
/// other commands): what `work-ledger agent ...` is parsed with.
#[derive(Debug, clap::Parser)]
#[command(name = "work-ledger agent", bin_name = "work-ledger agent", version, after_help = AFTER_HELP)]
pub struct AgentCli {
    #[command(flatten)]
    pub args: AgentArgs,
}

/// `work-ledger agent`: connection and retries, then one verb.
#[derive(Debug, Args, Clone)]
pub struct AgentArgs {
    /// Base URL of a running server, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "WORK_LEDGER_URL", global = true)]
    pub url: Option<String>,
    /// Bearer token; its name is the agent id recorded on claims and events.
    #[arg(long, env = "WORK_LEDGER_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Act on this unit instead of the one the server says you hold; with `claim`, claim it by id.
    #[arg(long, global = true)]
    pub unit: Option<Uuid>,
    /// The file that keeps the attempt of this session's last claim (see below).
    #[arg(long, env = "WORK_LEDGER_STATE", global = true)]
    pub state: Option<PathBuf>,
    /// Retries of a request that met a network error, HTTP 5xx or UNAVAILABLE (same idempotency key).
    #[arg(long, env = "WORK_LEDGER_RETRIES", default_value_t = 5, global = true)]
    pub retries: u32,
    /// Wait before the first retry; it doubles each time, up to 10s.
    #[arg(long, env = "WORK_LEDGER_RETRY_BACKOFF", default_value = "500ms", value_parser = crate::duration::parse, global = true)]
    pub retry_backoff: Duration,
    /// Time limit of one HTTP request.
    #[arg(long, env = "WORK_LEDGER_TIMEOUT", default_value = "75s", value_parser = crate::duration::parse, global = true)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub command: verbs::Verb,
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
    let state = state::path(args.state.as_deref(), url, token);
    let agent = Agent { client, state };
    let verb = &args.command;
    let ops: Vec<&Operation> = crate::graphql::bindings::verb(&verb.name).collect();
    // `claim` is `claimNext`, or `claimUnit` when a unit is named.
    let takes_unit = |op: &Operation| op.args().iter().any(|arg| arg.name == "unitId");
    let op = match ops.as_slice() {
        [] => return Err(Failure::usage(format!("no verb `{}`", verb.name))),
        [op] => Some(*op),
        _ => ops.iter().copied().find(|op| takes_unit(op) == args.unit.is_some()),
    }
    .ok_or_else(|| Failure::usage(format!("`{}` cannot take --unit", verb.name)))?;
    let mut given = verbs::given(op, &verb.matches).map_err(Failure::usage)?;
    let target = agent.fill(op, args.unit, &mut given).await?;
    let legal = target.as_ref().map(|unit| unit["legalActions"].clone());
    let result = agent.call(op, given).await.map_err(|failure| match legal {
        Some(legal) => failure.with_legal_actions(legal),
        None => failure,
    })?;
    agent.after(op, result)
}

struct Agent {
    client: Client,
    state: Option<PathBuf>,
}

/// What the server says this agent has: the unit it holds (CLAIMED,
/// IN_PROGRESS or BLOCKED) and the VERIFIED units awaiting its disposition.
struct Mine {
    name: String,
    held: Option<Value>,
    awaiting: Vec<Value>,
}

impl Agent {
    /// Runs `op` with `given` as variables: its result, or its refusal.
    async fn call(&self, op: &Operation, given: Map<String, Value>) -> Result<Map<String, Value>, Failure> {
        let refused = |err| Failure::from_envelope(envelope::refusal(&crate::graphql::error_object(err), Surface::Cli));
        let document = op.document(&given, Surface::Cli).map_err(refused)?;
        let response = self.client.run(&document, Value::Object(given)).await?;
        envelope::result(op, &response, Surface::Cli).map_err(Failure::from_envelope)
    }

    /// Fills what the CLI supplies itself: `unitId` with the unit this agent
    /// holds (or `--unit`); `attemptId` with this
    /// session's last claim of that unit, else its current attempt (an
    /// optional `attemptId` beside a required `unitId` is the attempt fence;
    /// a required one names the attempt, as `heartbeat` does); a fresh
    /// idempotency key per invocation. Returns the unit acted on.
    async fn fill(
        &self,
        op: &Operation,
        unit: Option<Uuid>,
        given: &mut Map<String, Value>,
    ) -> Result<Option<Value>, Failure> {
        let args = op.args();
        let takes = |name: &str| args.iter().find(|arg| arg.name == name);
        if takes("idempotencyKey").is_some() {
            given.insert("idempotencyKey".into(), json!(format!("agent-cli-{}", Uuid::new_v4())));
        }
        let unit_arg = takes("unitId");
        let attempt_arg = takes("attemptId");
        let fenced =
            attempt_arg.is_some_and(|a| a.required) || (attempt_arg.is_some() && unit_arg.is_some_and(|u| u.required));
        if unit_arg.is_none() && !fenced {
            return Ok(None);
        }
        let target = self.target(op, unit, given).await?;
        if unit_arg.is_some() {
            given.insert("unitId".into(), target["id"].clone());
        }
        if fenced {
            let remembered = self.state.as_deref().and_then(state::load);
            let attempt = match remembered {
                Some(last) if json!(last.unit_id) == target["id"] => json!(last.attempt_id),
                _ => target["currentAttemptId"].clone(),
            };
            given.insert("attemptId".into(), attempt);
        }
        Ok(Some(target))
    }

    /// The unit a verb acts on: `--unit`, else what the server says this
    /// agent has. A verb that only makes sense for a held unit refuses here
    /// when there is none; otherwise the server's own refusal (with its
    /// legal actions) teaches better than a guess of the CLI's.
    async fn target(&self, op: &Operation, unit: Option<Uuid>, given: &Map<String, Value>) -> Result<Value, Failure> {
        if let Some(id) = unit {
            // The contract's own read of a unit (`get_unit`), as every surface renders it.
            let read = bound(crate::graphql::bindings::tool("get_unit"), "get_unit")?;
            let found = self.call(read, json!({ "unitId": id }).as_object().cloned().unwrap_or_default()).await?;
            return match found.get("unit") {
                Some(unit) if !unit.is_null() => Ok(unit.clone()),
                _ => Err(Failure::new("NOT_FOUND", format!("no unit with id {id} exists in your fleet"))),
            };
        }
        let Mine { name, held, awaiting } = self.mine().await?;
        // Where the holder takes this action: only on a unit it no longer
        // holds (a VERIFIED unit's MIGRATED) it acts on that one first; on
        // both (a bill arrives late) on the held one, else on that one.
        let (on_held, on_awaiting) = holder_reach(op, given);
        let migrate = on_awaiting && !on_held;
        let late = on_awaiting;
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

    /// What `status` shows (the contract's `me`), read to pick the unit a verb acts on.
    async fn mine(&self) -> Result<Mine, Failure> {
        let status = bound(crate::graphql::bindings::verb("status").next(), "status")?;
        let mut found = self.call(status, Map::new()).await?;
        let me = found.get_mut("me").map(Value::take).unwrap_or(Value::Null);
        let Some(name) = me["name"].as_str().map(str::to_owned) else {
            return Err(Failure::unexpected(format!("`me` without a name: {me}")));
        };
        let held = Some(me["heldUnit"].clone()).filter(|unit| !unit.is_null());
        let awaiting = me["awaitingDisposition"].as_array().cloned().unwrap_or_default();
        Ok(Mine { name, held, awaiting })
    }

    /// A claim that got no unit is a failure saying whether to stop or wait;
    /// one that got a unit is remembered for the fence.
    fn after(&self, op: &Operation, result: Map<String, Value>) -> Result<Value, Failure> {
        if !matches!(op.field, "claimNext" | "claimUnit") {
            return Ok(Value::Object(result));
        }
        let unit = &result["unit"];
        if unit.is_null() {
            let drained = result.get("outcome") == Some(&json!("drained"));
            let message = if drained {
                "nothing is left to claim: no unit is READY, stale, blocked or leased (the domain is drained); stop"
            } else {
                "no unit is claimable right now (units are blocked or leased elsewhere: see `blocked`, `leased` and \
                 `earliestLeaseEnd`); try again later"
            };
            let mut failure = Failure::new("NOTHING_TO_CLAIM", message);
            failure.details = result;
            failure.details.remove("unit");
            return Err(failure.with_legal_actions(json!(["claim"])));
        }
        let claimed = serde_json::from_value::<Uuid>(unit["id"].clone())
            .ok()
            .zip(serde_json::from_value::<Uuid>(unit["currentAttemptId"].clone()).ok());
        if let (Some(path), Some((unit_id, attempt_id))) = (&self.state, claimed)
            && let Err(err) = state::save(path, &state::LastClaim { unit_id, attempt_id })
        {
            eprintln!(
                "warning: cannot record the claim in {} ({err}); later writes are fenced to the unit's current \
                     attempt instead",
                path.display()
            );
        }
        Ok(Value::Object(result))
    }
}

/// A row of the contract the CLI relies on (a unit test checks they exist).
fn bound(op: Option<&'static Operation>, name: &str) -> Result<&'static Operation, Failure> {
    op.ok_or_else(|| Failure::unexpected(format!("the operation contract has no `{name}`")))
}

/// Whether the holder takes the actions of `op` (with the arguments it
/// fixes and those `given`) on a unit it holds, and on one it holds no
/// longer but is the holder of record of (VERIFIED), from the actions'
/// declarations ([`crate::ledger::state_machine::actions`]).
fn holder_reach(op: &Operation, given: &Map<String, Value>) -> (bool, bool) {
    let fits = |(arg, value): &(&str, &str)| {
        let preset = op.preset.iter().find(|(name, _)| name == arg).map(|(_, v)| (*v).to_owned());
        let said = preset.or_else(|| given.get(*arg).and_then(Value::as_str).map(str::to_owned));
        said.is_none_or(|said| value.split('|').any(|v| v == said))
    };
    let actions = crate::ledger::state_machine::actions().filter(|a| a.field == op.field && a.fixed.iter().all(fits));
    let states: Vec<_> = actions.flat_map(|action| action.holder.iter().copied()).collect();
    (states.iter().any(|s| s.is_live_claim()), states.iter().any(|s| !s.is_live_claim() && !s.is_terminal()))
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
    .with_legal_actions(json!(["claim"]))
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
