//! `GET /` for whoever is not a browser (curl, an agent's fetch tool): a
//! plain-text quick start. The lifecycle is shown as copyable GraphQL
//! documents, each explained by its field's own description in the schema
//! (read once through introspection, so the text cannot drift from the
//! API), followed by the error codes and the MCP tools.

use serde_json::Value;

use crate::graphql::LedgerSchema;

/// One step: the mutation or query field, a document using it, and the
/// variables it takes (`<...>` marks what to fill in from earlier answers).
pub struct Step {
    pub field: &'static str,
    pub root: &'static str,
    pub document: &'static str,
    pub variables: &'static str,
}

const UNIT: &str = "id externalRef state currentAttemptId leaseExpiresAt costCents legalActions";

/// The steps of the quick start, in the order an agent takes them: run as
/// shown, one after the other, they take a unit from READY to MIGRATED
/// (tests/api/listeners.rs runs the served text literally).
pub const STEPS: &[Step] = &[
    Step {
        field: "me",
        root: "Query",
        document: "{ me { fleet name permissions heldUnit { id state } } }",
        variables: "{}",
    },
    Step {
        field: "claimNext",
        root: "Mutation",
        document: "mutation($domain: String) { claimNext(domain: $domain, leaseSeconds: 900) { UNIT } }",
        variables: r#"{"domain": "<the domain you work on; null for any>"}"#,
    },
    Step {
        field: "heartbeat",
        root: "Mutation",
        document: "mutation($attempt: UUID!) { heartbeat(attemptId: $attempt, leaseSeconds: 900) { UNIT } }",
        variables: r#"{"attempt": "<currentAttemptId>"}"#,
    },
    Step {
        field: "transition",
        root: "Mutation",
        document: "mutation($unit: UUID!, $attempt: UUID) { transition(unitId: $unit, to: IN_PROGRESS, attemptId: $attempt) { UNIT } }",
        variables: r#"{"unit": "<id>", "attempt": "<currentAttemptId>"}"#,
    },
    Step {
        field: "recordCost",
        root: "Mutation",
        document: "mutation($unit: UUID!, $key: String!) { recordCost(unitId: $unit, cents: 1250, idempotencyKey: $key) { UNIT } }",
        variables: r#"{"unit": "<id>", "key": "<any string unique to this bill>"}"#,
    },
    Step {
        field: "transition",
        root: "Mutation",
        document: "mutation($unit: UUID!, $attempt: UUID, $url: String!) { transition(unitId: $unit, to: VERIFIED, evidenceUrl: $url, attemptId: $attempt) { UNIT } }",
        variables: r#"{"unit": "<id>", "attempt": "<currentAttemptId>", "url": "<https link to the evidence>"}"#,
    },
    Step {
        field: "dispose",
        root: "Mutation",
        document: "mutation($unit: UUID!) { dispose(unitId: $unit, disposition: MIGRATED) { UNIT } }",
        variables: r#"{"unit": "<id>"}"#,
    },
];

/// The step that [`DETOURS`] replace (the 1-based number of VERIFIED in [`STEPS`]).
pub const DETOUR_FROM: usize = 6;

/// Instead of verifying: each ends the agent's work on the unit for now.
pub const DETOURS: &[Step] = &[
    Step {
        field: "block",
        root: "Mutation",
        document: "mutation($unit: UUID!, $attempt: UUID, $q: String!) { block(unitId: $unit, question: $q, attemptId: $attempt) { UNIT } }",
        variables: r#"{"unit": "<id>", "attempt": "<currentAttemptId>", "q": "<what you need answered>"}"#,
    },
    Step {
        field: "release",
        root: "Mutation",
        document: "mutation($unit: UUID!, $attempt: UUID) { release(unitId: $unit, reason: \"out of scope\", attemptId: $attempt) { UNIT } }",
        variables: r#"{"unit": "<id>", "attempt": "<currentAttemptId>"}"#,
    },
];

/// The documents of [`STEPS`] and [`DETOURS`] as sent (the unit's field list filled in).
pub fn documents() -> impl Iterator<Item = (String, &'static str)> {
    STEPS.iter().chain(DETOURS).map(|step| (step.document.replace("UNIT", UNIT), step.variables))
}

/// The error codes of SPEC §5 and what to do about each.
const CODES: &[(&str, &str)] = &[
    ("UNAUTHENTICATED", "no, unknown, revoked or expired token (HTTP 401): send `Authorization: Bearer <token>`"),
    ("FORBIDDEN", "the token lacks the permission the message names"),
    ("NOT_FOUND", "no such unit/attempt/question in your fleet"),
    ("INVALID_INPUT", "an argument breaks a rule; `extensions.argument` names it"),
    ("UNIT_ALREADY_CLAIMED", "someone holds that unit: call claimNext for another"),
    ("AGENT_BUSY", "you already hold a unit (`extensions.heldUnitId`): finish or release it first"),
    ("WORKFLOW_OWNED", "a Temporal workflow runs that unit (`extensions.workflowId`): call claimNext for another"),
    ("ILLEGAL_TRANSITION", "the state machine forbids it: see `extensions.legalActions`"),
    ("NOT_CLAIM_HOLDER", "another agent holds the unit"),
    ("LEASE_LOST", "your attempt was superseded after its lease expired: stop, call claimNext"),
    ("EVIDENCE_REQUIRED", "pass `evidenceUrl`, an https link to the evidence"),
    ("DISPOSITION_IMMUTABLE", "dispositions are permanent: registerUnits (units:register) records a new decision"),
    ("QUESTION_NOT_OPEN", "the question you answer is no longer the unit's open one (`extensions.openQuestionId`)"),
    ("IDEMPOTENCY_KEY_REUSED", "that key was used for another request: use a fresh key"),
    ("GRAPHQL_VALIDATION_FAILED", "the document does not fit the schema; the message suggests names"),
    ("GRAPHQL_PARSE_FAILED", "the document does not parse"),
    ("INTERNAL", "unexpected; the request changed nothing and may be retried with the same idempotency key"),
];

/// The quick start for a server reached at `base` (e.g. `http://host:8080`).
pub fn render(base: &str, descriptions: &Descriptions) -> String {
    let mut text = format!(
        "work-ledger at {base}: the system of record for a fleet of coding agents.\n\
         This is the plain-text quick start; a browser gets GraphiQL at the same address.\n\n\
         AUTH  Every request carries `Authorization: Bearer <token>`; an operator mints one with\n\
         \x20     `work-ledger token create --fleet <fleet> --name <agent id> --role agent`.\n\n\
         GRAPHQL  POST {base}/graphql with a JSON body {{\"query\": \"...\", \"variables\": {{...}}}}:\n\
         \x20  curl -s {base}/graphql -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \\\n\
         \x20       -d '{{\"query\": \"{{ me {{ name heldUnit {{ id state }} }} }}\"}}'\n\n\
         THE LIFECYCLE  run in order; fill the <...> from earlier answers (`id` and `currentAttemptId` from the\n\
         \x20 claim); every answer's `legalActions` says what you may do next\n"
    );
    let shown = |step: &Step| (step.document.replace("UNIT", UNIT), step.variables);
    for (i, step) in STEPS.iter().enumerate() {
        push_step(&mut text, &format!("{}.", i + 1), step, shown(step), descriptions);
    }
    text.push_str(&format!(
        "\nINSTEAD OF STEP {DETOUR_FROM}  when stuck (a: the unit stays yours, BLOCKED, until triage answers with\n\
         \x20 unblock) or to give the unit up (b: it is READY again for anyone):\n"
    ));
    for (letter, step) in ["a.", "b."].iter().zip(DETOURS) {
        push_step(&mut text, letter, step, shown(step), descriptions);
    }
    text.push_str(
        "\nHOLDING  You hold at most one unit: a live claim (CLAIMED, IN_PROGRESS or BLOCKED). After VERIFIED the unit\n\
         is no longer held: claim the next one, and still dispose of the verified one (`me.awaitingDisposition`).\n\
         DROPPED, DEFERRED and DEAD need `evidenceUrl`; MIGRATED keeps the verification evidence.\n\
         Every write takes an `idempotencyKey`: resend the same key to retry safely.\n\nERRORS  `errors[].extensions.code`:\n",
    );
    for (code, meaning) in CODES {
        text.push_str(&format!("   {code:<26} {meaning}\n"));
    }
    text.push_str(&format!(
        "   Refusals about a unit also carry `extensions.unitId`, `state` and `legalActions`.\n\n\
         MCP  POST {base}/mcp (Model Context Protocol, streamable HTTP, the same bearer token). Tools:\n"
    ));
    for (name, description) in crate::mcp::tool_names() {
        text.push_str(&format!("   {name:<16} {}\n", one_line(&description)));
    }
    // `http://` gives `ws://`, `https://` gives `wss://`.
    let ws_base = format!("ws{}", base.strip_prefix("http").unwrap_or(base));
    text.push_str(&format!(
        "\nTRIAGE  with a token of role triage (`questions:answer`):\n\
         - Subscribe over {ws_base}/graphql/ws (below) to the questions agents ask:\n\
         \x20  subscription {{ blockingQuestionOpened(assigneeGroup: \"agent-questions\", includeOpen: true) {{\n\
         \x20    id unitId question assigneeGroup similarAnswered {{ answer answeredBy }} }} }}\n\
         \x20  includeOpen (the default) sends the questions open now first, so a restarted triage misses none.\n\
         \x20  Follow the assigneeGroup your agents ask with: `agent-questions` unless they pass another\n\
         \x20  (`{{ openQuestionGroups {{ question waiting questionIds }} }}` shows every open one, most-waited first).\n\
         - Answer with unblock, always naming the question (a late or repeated delivery is then QUESTION_NOT_OPEN,\n\
         \x20  never an answer to a newer question); alsoAnswerSimilar answers every open question with the same text:\n\
         \x20  mutation {{ unblock(unitId: \"<unitId>\", questionId: \"<id>\", answer: \"...\", alsoAnswerSimilar: true,\n\
         \x20    idempotencyKey: \"triage/<id>\") {{ id state }} }}   -> extensions.unblock.alsoAnswered\n\
         \x20  The same through MCP: open_question_groups, then answer_question with the same arguments.\n"
    ));
    text.push_str(&format!(
        "\nSUBSCRIPTIONS  {ws_base}/graphql/ws, protocol graphql-transport-ws, token in connection_init:\n\
         \x20  {{\"Authorization\": \"Bearer <token>\"}}; blockingQuestionOpened, unitStalled, ledgerEvents(after:).\n\
         SCHEMA  {base}/assets/graphiql/schema.graphql\n"
    ));
    text
}

fn push_step(text: &mut String, label: &str, step: &Step, (document, variables): (String, &str), about: &Descriptions) {
    let about = about.of(step.root, step.field).unwrap_or_default();
    text.push_str(&format!(
        "\n{label} {}: {}\n   {document}\n   variables: {variables}\n",
        step.field,
        one_line(about)
    ));
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Field descriptions of the root types, read from the schema.
#[derive(Default)]
pub struct Descriptions(Vec<(String, String, String)>);

impl Descriptions {
    /// Reads them through introspection (no token needed: nothing resolves).
    pub async fn of_schema(schema: &LedgerSchema) -> Self {
        let query = "{ q: __type(name: \"Query\") { fields { name description } } \
                       m: __type(name: \"Mutation\") { fields { name description } } }";
        let response = schema.execute(query).await;
        let data = response.data.into_json().unwrap_or(Value::Null);
        let mut all = Vec::new();
        for (root, key) in [("Query", "q"), ("Mutation", "m")] {
            for field in data[key]["fields"].as_array().into_iter().flatten() {
                if let (Some(name), Some(description)) = (field["name"].as_str(), field["description"].as_str()) {
                    all.push((root.to_owned(), name.to_owned(), description.to_owned()));
                }
            }
        }
        Self(all)
    }

    fn of(&self, root: &str, field: &str) -> Option<&str> {
        self.0.iter().find(|(r, f, _)| r == root && f == field).map(|(_, _, d)| d.as_str())
    }
}
