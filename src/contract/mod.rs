//! The operation contract: every operation an agent, triage or an operator
//! calls is declared once, as its GraphQL field (the resolver's arguments,
//! their types, documentation and validation, and the ledger call behind
//! it), and bound here, one row each, to its MCP tool and its agent CLI verb.
//! The tool's input schema, its description and the GraphQL document it
//! sends are derived from the schema ([`crate::graphql::shape`]); the CLI's flags likewise.
//! Every surface therefore runs the same resolver through the same executor:
//! one authentication, one set of per-operation metrics and spans, one error
//! envelope ([`envelope`]), one rendering of a unit ([`UNIT`]).
//!
//! Adding an operation: `CONTRIBUTING.md`.

pub mod envelope;

use crate::auth::{Permission, Principal};
use crate::ledger::state_machine::{ACTIONS, Action, HOLDER_LOOP};

/// Which door a request came through; `legalActions` speak its language.
#[derive(async_graphql::Enum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Surface {
    /// Mutation call shapes: `transition(to: VERIFIED, evidenceUrl)`.
    #[default]
    Graphql,
    /// MCP tool names with their arguments: `verify(evidenceUrl)`.
    Mcp,
    /// `work-ledger agent` verbs: `verify <evidence-url>`.
    Cli,
}

impl Surface {
    pub fn api_name(self) -> &'static str {
        match self {
            Self::Graphql => "GRAPHQL",
            Self::Mcp => "MCP",
            Self::Cli => "CLI",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Query,
    Mutation,
}

/// One operation's bindings. Everything else about it (arguments, types,
/// documentation, validation, result type) is its GraphQL field's.
#[derive(Debug)]
pub struct Operation {
    /// The GraphQL root field.
    pub field: &'static str,
    pub root: Root,
    /// The MCP tool, if agents or triage call it through MCP.
    pub tool: Option<&'static str>,
    /// The `work-ledger agent` verb, if the agent CLI offers it.
    pub verb: Option<&'static str>,
    /// Arguments the binding fixes (name, GraphQL literal): `start_work` is
    /// `transition` with `to: IN_PROGRESS`.
    pub preset: &'static [(&'static str, &'static str)],
    /// The CLI's positional argument (the rest are `--flags`).
    pub positional: Option<&'static str>,
    /// Any of these permissions lets a token use it (tools are listed, and
    /// actions named, only for tokens that may).
    pub needs: &'static [Permission],
    /// The selection of the field's result (empty for a scalar); `UNIT`
    /// for a `WorkUnit`.
    pub selection: &'static str,
    /// The key the result is returned under on MCP (and printed by the CLI).
    pub result: &'static str,
    /// What a tool's or verb's user needs to know beyond the field's
    /// documentation (appended to it).
    pub note: &'static str,
    /// What this binding alone does, said instead of the field's
    /// documentation: for a binding that fixes arguments of a field that
    /// does more (`start_work` and `verify` are both `transition`).
    pub doc: &'static str,
    /// Arguments this binding names otherwise than its field, (binding's
    /// name, field's name): every tool and verb calls the unit `unitId`,
    /// also where the GraphQL field's argument is `unit(id:)`.
    pub renamed: &'static [(&'static str, &'static str)],
    /// Optional arguments of the field this binding does not take, because
    /// what it does never uses them (`start_work` takes no evidence).
    pub omits: &'static [&'static str],
}

/// The fields of a unit every read binding returns (writes return
/// [`UNIT_NOW`]): what an agent needs to decide (its questions with
/// answers, its attempts with outcomes, what it may do next). `SURFACE` is replaced by the binding's [`Surface`], and `$UNIT` in
/// another selection by this one.
pub const UNIT: &str = "{ id externalRef domain workflowId state disposition disposedAt dispositionReason disposedBy \
    claimedBy currentAttemptId leaseExpiresAt lastHeartbeatAt stalled attemptCount costCents evidenceUrls createdAt \
    updatedAt legalActions(surface: SURFACE) \
    openQuestion { id question status assigneeGroup askedBy createdAt \
    similarAnswered { id unitId question answer answeredBy answeredAt } } \
    questions { id question status answer answeredBy answeredAt askedBy createdAt cancelledAt } \
    attempts { id attemptNo agentId outcome endReason endedBy reclaimedBy costCents evidenceUrl startedAt endedAt } }";

/// The unit as a write leaves it, what an agent needs for its next step:
/// its state, current attempt, lease, open question (with the answers to
/// the same question elsewhere) and `legalActions`. Its history (attempts
/// and questions) is one `get_unit` away; a write does not resend it.
pub const UNIT_NOW: &str = "{ id externalRef domain workflowId state disposition claimedBy currentAttemptId \
    leaseExpiresAt lastHeartbeatAt stalled attemptCount costCents evidenceUrls updatedAt legalActions(surface: SURFACE) \
    currentAttempt { id attemptNo agentId costCents startedAt } \
    openQuestion { id question status assigneeGroup askedBy createdAt \
    similarAnswered { id unitId question answer answeredBy answeredAt } } }";

const QUESTIONS: &str = "{ totalCount pageInfo { hasNextPage endCursor } nodes { id unitId question status \
    assigneeGroup askedBy createdAt openForSeconds similarAnswered { id question answer answeredBy answeredAt } } }";
const QUEUE_DEPTH: &str = "{ domain ready claimed inProgress blocked verified stalled done disposed }";
const MY_WORK: &str = "{ fleet name grants { permission allows } heldUnit $UNIT awaitingDisposition $UNIT }";

const AGENT: &[Permission] = &[Permission::UnitsClaim];
const BILLING: &[Permission] = &[Permission::UnitsClaim, Permission::UnitsDisposeAny];
const TRIAGE: &[Permission] = &[Permission::QuestionsAnswer];
const READER: &[Permission] = &[Permission::LedgerRead];

const fn op(field: &'static str, root: Root, needs: &'static [Permission]) -> Operation {
    Operation {
        field,
        root,
        tool: None,
        verb: None,
        preset: &[],
        positional: None,
        needs,
        selection: match root {
            Root::Query => UNIT,
            Root::Mutation => UNIT_NOW,
        },
        result: "unit",
        note: "",
        doc: "",
        renamed: &[],
        omits: &[],
    }
}

/// `unitId` for a field's `id`.
const UNIT_ID: &[(&str, &str)] = &[("unitId", "id")];

/// Every bound operation. A GraphQL field without a row here is GraphQL
/// only (the operator's reads, registration, tokens).
pub const OPERATIONS: &[Operation] = &[
    Operation { tool: Some("claim_next"), verb: Some("claim"), ..op("claimNext", Root::Mutation, AGENT) },
    Operation {
        tool: Some("claim_unit"),
        verb: Some("claim"),
        renamed: UNIT_ID,
        ..op("claimUnit", Root::Mutation, AGENT)
    },
    Operation { tool: Some("heartbeat"), verb: Some("heartbeat"), ..op("heartbeat", Root::Mutation, AGENT) },
    Operation {
        tool: Some("start_work"),
        verb: Some("start"),
        preset: &[("to", "IN_PROGRESS")],
        omits: &["evidenceUrl"],
        doc: "Starts work on the unit you claimed: CLAIMED -> IN_PROGRESS. Heartbeat before the lease runs out.",
        ..op("transition", Root::Mutation, AGENT)
    },
    Operation {
        tool: Some("verify"),
        verb: Some("verify"),
        preset: &[("to", "VERIFIED")],
        positional: Some("evidenceUrl"),
        doc: "Records that the work is done and verified: IN_PROGRESS -> VERIFIED, with `evidenceUrl` a link to the \
              evidence (a pull request, a CI run). Your attempt ends and the lease is cleared: claim your next unit, \
              and still dispose of this one with MIGRATED.",
        ..op("transition", Root::Mutation, AGENT)
    },
    Operation {
        tool: Some("block"),
        verb: Some("block"),
        positional: Some("question"),
        note: "You keep the unit: wait for the answer (wait_for_answer, or the unit's `questions`) or release it. \
               When `openQuestion.similarAnswered` lists answers to the same question, read them first.",
        ..op("block", Root::Mutation, AGENT)
    },
    Operation { tool: Some("release"), verb: Some("release"), ..op("release", Root::Mutation, AGENT) },
    Operation {
        tool: Some("record_cost"),
        verb: Some("cost"),
        positional: Some("cents"),
        ..op("recordCost", Root::Mutation, BILLING)
    },
    Operation {
        tool: Some("dispose"),
        verb: Some("dispose"),
        positional: Some("disposition"),
        ..op("dispose", Root::Mutation, BILLING)
    },
    Operation { tool: Some("answer_question"), ..op("unblock", Root::Mutation, TRIAGE) },
    Operation {
        tool: Some("my_work"),
        verb: Some("status"),
        selection: MY_WORK,
        result: "me",
        note: "`heldUnit` is what you hold; `awaitingDisposition` what you verified and still have to dispose of.",
        ..op("me", Root::Query, AGENT)
    },
    Operation {
        tool: Some("wait_for_answer"),
        verb: Some("wait"),
        note: "Use it instead of polling while your unit is BLOCKED.",
        ..op("waitForAnswer", Root::Query, AGENT)
    },
    Operation { tool: Some("get_unit"), renamed: UNIT_ID, ..op("unit", Root::Query, READER) },
    Operation { tool: Some("get_unit_by_ref"), ..op("unitByRef", Root::Query, READER) },
    Operation {
        tool: Some("open_questions"),
        preset: &[("status", "OPEN")],
        selection: QUESTIONS,
        result: "questions",
        note: "Here: OPEN questions only, oldest first.",
        ..op("questions", Root::Query, TRIAGE)
    },
    Operation {
        tool: Some("open_question_groups"),
        selection: "{ question waiting oldestAskedAt questionIds unitIds answeredBefore }",
        result: "groups",
        note: "Answer a group at once: answer_question with its first questionId and `alsoAnswerSimilar: true`.",
        ..op("openQuestionGroups", Root::Query, TRIAGE)
    },
    Operation {
        tool: Some("fleet_roster"),
        selection: "{ totalCount pageInfo { hasNextPage endCursor } nodes { name status \
            heldUnit { id externalRef state leaseExpiresAt } lastClaimAt lastHeartbeatAt claimsToday costCentsToday \
            tokenLastUsedAt } }",
        result: "agents",
        note: "Who is alive: SILENT agents hold a unit whose lease ran out.",
        ..op("agents", Root::Query, READER)
    },
    Operation {
        tool: Some("queue_depth"),
        selection: QUEUE_DEPTH,
        result: "queueDepth",
        ..op("queueDepth", Root::Query, READER)
    },
];

/// Arguments every CLI verb fills itself: the unit (the one you hold, or
/// `--unit`), your attempt (the CLI's own record of its last claim) and a
/// fresh idempotency key per invocation.
pub const CLI_FILLS: &[&str] = &["unitId", "attemptId", "idempotencyKey"];

impl Operation {
    pub fn permitted(&self, who: &Principal) -> bool {
        self.needs.iter().any(|p| who.has(*p))
    }

    /// The selection with `$UNIT` and `SURFACE` replaced.
    pub fn selection_for(&self, surface: Surface) -> String {
        self.selection.replace("$UNIT", UNIT).replace("SURFACE", surface.api_name())
    }

    pub(crate) fn binding(&self, surface: Surface) -> Option<&'static str> {
        match surface {
            Surface::Graphql => Some(self.field),
            Surface::Mcp => self.tool,
            Surface::Cli => self.verb,
        }
    }
}

pub fn tool(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|op| op.tool == Some(name))
}

/// The rows of a CLI verb (`claim` is `claimNext`, or `claimUnit` with `--unit`).
pub fn verb(name: &str) -> impl Iterator<Item = &'static Operation> + use<'_> {
    OPERATIONS.iter().filter(move |op| op.verb == Some(name))
}

/// The operation bound to `action` on a surface: the row of its field whose
/// presets the action fixes (the most specific one).
fn bound(action: &Action, surface: Surface) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .filter(|op| op.field == action.field && op.binding(surface).is_some())
        .filter(|op| op.preset.iter().all(|preset| action.fixed.contains(preset)))
        .max_by_key(|op| op.preset.len())
}

/// `action` as the caller of `surface` writes it, or `None` when that
/// surface has no binding for it (triage's `unblock` in the agent CLI).
pub fn render_action(action: &Action, surface: Surface) -> Option<String> {
    if surface == Surface::Graphql {
        return Some(action.to_string());
    }
    let op = bound(action, surface)?;
    let name = op.binding(surface)?;
    let fixed = action.fixed.iter().filter(|fixed| !op.preset.contains(fixed));
    if surface == Surface::Mcp {
        let parts: Vec<String> = fixed
            .map(|(arg, value)| format!("{arg}: {value}"))
            .chain(action.needs.iter().map(|arg| (*arg).to_owned()))
            .collect();
        return Some(if parts.is_empty() { name.to_owned() } else { format!("{name}({})", parts.join(", ")) });
    }
    let mut words = vec![name.to_owned()];
    if op.field == "claimUnit" {
        words.push("--unit <unit-id>".to_owned());
    }
    for (arg, value) in fixed {
        if op.positional == Some(*arg) {
            words.push(value.to_ascii_lowercase());
        } else {
            words.push(format!("--{} {}", kebab(arg), value.to_ascii_lowercase()));
        }
    }
    for arg in action.needs.iter().filter(|arg| !CLI_FILLS.contains(arg)) {
        if op.positional == Some(*arg) {
            words.push(format!("<{}>", kebab(arg)));
        } else {
            words.push(format!("--{0} <{0}>", kebab(arg)));
        }
    }
    Some(words.join(" "))
}

/// The holder's loop ([`HOLDER_LOOP`]) in `surface`'s words, one line per
/// state: `- IN_PROGRESS: heartbeat(attemptId), verify(evidenceUrl), ...:
/// what to do.` The same rows give the holder its `legalActions`, so what
/// the instructions name in a state is what the unit then offers.
pub fn holder_loop(surface: Surface) -> String {
    let lines = HOLDER_LOOP.iter().map(|step| {
        let actions: Vec<String> = step.actions.iter().filter_map(|action| render_action(action, surface)).collect();
        format!("- {}: {}: {}.", step.state.api_name(), actions.join(", "), step.says)
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// A GraphQL action string (as `legalActions` and error extensions carry
/// it) in another surface's language; `None` when that surface has no such
/// operation. Strings this module does not know pass through unchanged.
pub fn translate(graphql: &str, surface: Surface) -> Option<String> {
    match ACTIONS.iter().find(|action| action.to_string() == graphql) {
        Some(action) => render_action(action, surface),
        None => Some(graphql.to_owned()),
    }
}

/// `evidenceUrl` -> `evidence-url`.
pub fn kebab(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_a_tool_and_every_agent_action_a_verb() {
        for action in ACTIONS {
            assert!(render_action(action, Surface::Mcp).is_some(), "no MCP tool for {action}");
            if action.field != "unblock" {
                assert!(render_action(action, Surface::Cli).is_some(), "no CLI verb for {action}");
            }
        }
    }

    #[test]
    fn actions_speak_the_surface_language() {
        use crate::ledger::state_machine::{DISPOSE_ABANDON, START, VERIFY};
        assert_eq!(render_action(&START, Surface::Mcp).as_deref(), Some("start_work"));
        assert_eq!(render_action(&VERIFY, Surface::Mcp).as_deref(), Some("verify(evidenceUrl)"));
        assert_eq!(render_action(&VERIFY, Surface::Cli).as_deref(), Some("verify <evidence-url>"));
        assert_eq!(
            render_action(&DISPOSE_ABANDON, Surface::Cli).as_deref(),
            Some("dispose dropped|deferred|dead --evidence-url <evidence-url>")
        );
        assert_eq!(translate("transition(to: IN_PROGRESS)", Surface::Cli).as_deref(), Some("start"));
    }

    #[test]
    fn tool_names_are_unique() {
        let mut names: Vec<&str> = OPERATIONS.iter().filter_map(|op| op.tool).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
        // The rows the agent CLI reads a unit and its status through.
        assert!(tool("get_unit").is_some() && verb("status").next().is_some());
    }
}
