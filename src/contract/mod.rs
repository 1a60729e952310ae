//! The operation contract: every operation an agent, triage or an operator
//! calls is declared once, as its GraphQL field (the resolver's arguments,
//! their types, documentation and validation, and the ledger call behind
//! it), and bound beside it, one [`Operation`] row each, to its MCP tool and
//! its agent CLI verb (`BINDINGS` in the field's module, collected by
//! [`crate::graphql::bindings`]). The tool's input schema, its description
//! and the GraphQL document it sends are derived from the schema
//! ([`crate::graphql::shape`]); the CLI's flags likewise. Every surface
//! therefore runs the same resolver through the same executor: one
//! authentication, one set of per-operation metrics and spans, one error
//! envelope ([`crate::graphql::envelope`]), one rendering of a unit ([`UNIT`]).
//!
//! Adding an operation: `CONTRIBUTING.md`.

use crate::auth::{Permission, Principal};

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
    /// for a `WorkUnit`, [`SCALARS`] for every scalar field of the result's
    /// type (the placeholders are filled by [`crate::graphql::shape`]).
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

/// A selection of every field of the result's type that is a scalar or an
/// enum, read from the schema ([`crate::graphql::shape`]).
pub const SCALARS: &str = "$SCALARS";

pub const AGENT: &[Permission] = &[Permission::UnitsClaim];
pub const BILLING: &[Permission] = &[Permission::UnitsClaim, Permission::UnitsDisposeAny];
pub const TRIAGE: &[Permission] = &[Permission::QuestionsAnswer];
pub const READER: &[Permission] = &[Permission::LedgerRead];

pub const fn op(field: &'static str, root: Root, needs: &'static [Permission]) -> Operation {
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
pub const UNIT_ID: &[(&str, &str)] = &[("unitId", "id")];

/// Arguments every CLI verb fills itself: the unit (the one you hold, or
/// `--unit`), your attempt (the CLI's own record of its last claim) and a
/// fresh idempotency key per invocation.
pub const CLI_FILLS: &[&str] = &["unitId", "attemptId", "idempotencyKey"];

impl Operation {
    pub fn permitted(&self, who: &Principal) -> bool {
        self.needs.iter().any(|p| who.has(*p))
    }

    pub(crate) fn binding(&self, surface: Surface) -> Option<&'static str> {
        match surface {
            Surface::Graphql => Some(self.field),
            Surface::Mcp => self.tool,
            Surface::Cli => self.verb,
        }
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
