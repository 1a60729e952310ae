//! Hostile input (SPEC §5, §9): strings with NUL and other control
//! characters, lone surrogates in JSON escapes, 1 MB, right-to-left marks,
//! SQL fragments; hostile numbers, ids, enums and forged cursors; sent to
//! every argument of every operation through the real server.
//!
//! Every case has one expected answer, worked out by the rules of SPEC §9
//! (the `expect` oracle below): accepted, or refused with a named code and,
//! for `INVALID_INPUT`, the argument it names. A refusal must leave every row
//! the operation could touch as it was (`TestApp::snapshot`: the unit, its
//! attempts, questions and events), and an accepted text must be stored as
//! sent. Each mutation case runs on a fresh unit of a fresh agent, so that no
//! earlier case (an accepted dispose, say) makes a later one meet another
//! refusal first.
//!
//! Two passes: every argument gets every fixed hostile value of its kind,
//! then a generated set of cases (proptest strategies, a deterministic seed,
//! so a failure reproduces) mixes random strings and numbers.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Datelike;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

/// What an argument must be (SPEC §9), with the name a refusal gives it.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// An identifier, ref or label (`externalRef`, `domain`, `workflowId`,
    /// `assigneeGroup`, the read filters): 1..=256 printable characters, no
    /// invisible formatting (Unicode `Cf`, `Zl`, `Zp`).
    Label(&'static str),
    /// An idempotency key: 1..=256 printable characters. Whether a key is an
    /// "identifier" for the invisible-character rule SPEC §9 leaves open.
    Key,
    /// `question`, `answer`, `reason`: non-blank, at most 8000 characters,
    /// printable apart from line breaks and tabs. Invisible formatting: the
    /// SPEC leaves free text open (it allows the joiners inside questions).
    Text(&'static str),
    /// `evidenceUrl`: an absolute http(s) URL of at most 2048 characters.
    Url,
    /// An `Int` argument and its bounds.
    Int(&'static str, i64, i64),
    /// A UUID, and what a well-formed one that names nothing gets.
    Id(Absent),
    /// A keyset cursor of the list with this tag.
    Cursor(&'static str),
    /// An enum value; `true` when the variable is required.
    Enum(bool),
    EnumList,
}

/// A case's unit: READY (and the agent holds nothing), IN_PROGRESS under
/// the case's agent, or BLOCKED with an open question.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    Ready,
    InProgress,
    Blocked,
}

#[derive(Clone, Copy, Debug)]
enum Absent {
    NotFound,
    /// A fence (`attemptId` of a write) that is not the unit's current attempt.
    LeaseLost,
    /// A read: no row, no error.
    Nothing,
}

use Rule::*;

/// One operation: who sends it, the document, valid variables (`$UNIT`,
/// `$ATTEMPT` and `$REF` are filled in), each argument's JSON pointer into the
/// variables with its rule, and the arguments whose accepted value the
/// database must then hold verbatim.
struct Op {
    operator: bool,
    /// Where each case's fresh unit stands when the operation is sent.
    setup: Setup,
    doc: &'static str,
    base: &'static str,
    args: &'static [(&'static str, Rule)],
    stores: &'static [&'static str],
}

impl Op {
    fn is_write(&self) -> bool {
        self.doc.starts_with("mutation")
    }
}

const fn op(doc: &'static str, base: &'static str, args: &'static [(&'static str, Rule)]) -> Op {
    Op { operator: true, setup: Setup::InProgress, doc, base, args, stores: &[] }
}

const LEASE: Rule = Int("leaseSeconds", 30, 86_400);
const FIRST: Rule = Int("first", 1, 500);

const OPS: &[Op] = &[
    Op {
        operator: false,
        doc: "mutation($domain: String, $lease: Int, $key: String) { claimNext(domain: $domain, leaseSeconds: $lease, idempotencyKey: $key) { id } }",
        base: "{}",
        args: &[("/domain", Label("domain")), ("/lease", LEASE), ("/key", Key)],
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($id: UUID!, $lease: Int, $key: String) { claimUnit(id: $id, leaseSeconds: $lease, idempotencyKey: $key) { id } }",
        base: r#"{"id": "$UNIT"}"#,
        args: &[("/id", Id(Absent::NotFound)), ("/lease", LEASE), ("/key", Key)],
        setup: Setup::Ready,
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($a: UUID!, $lease: Int) { heartbeat(attemptId: $a, leaseSeconds: $lease) { id } }",
        base: r#"{"a": "$ATTEMPT"}"#,
        args: &[("/a", Id(Absent::NotFound)), ("/lease", LEASE)],
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $to: WorkState!, $e: String, $key: String, $a: UUID) { transition(unitId: $u, to: $to, evidenceUrl: $e, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "to": "VERIFIED", "e": "https://ci.example/1"}"#,
        args: &[
            ("/u", Id(Absent::NotFound)),
            ("/to", Enum(true)),
            ("/e", Url),
            ("/key", Key),
            ("/a", Id(Absent::LeaseLost)),
        ],
        stores: &["/e"],
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $q: String!, $g: String, $key: String, $a: UUID) { block(unitId: $u, question: $q, assigneeGroup: $g, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "q": "which schema?"}"#,
        args: &[
            ("/u", Id(Absent::NotFound)),
            ("/q", Text("question")),
            ("/g", Label("assigneeGroup")),
            ("/key", Key),
            ("/a", Id(Absent::LeaseLost)),
        ],
        stores: &["/q", "/g"],
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $r: String, $o: AttemptOutcome, $key: String, $a: UUID) { release(unitId: $u, reason: $r, outcome: $o, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "r": "done for today"}"#,
        args: &[
            ("/u", Id(Absent::NotFound)),
            ("/r", Text("reason")),
            ("/o", Enum(false)),
            ("/key", Key),
            ("/a", Id(Absent::LeaseLost)),
        ],
        stores: &["/r"],
        ..op("", "", &[])
    },
    Op {
        operator: false,
        doc: "mutation($a: UUID!, $c: Int!, $key: String!) { recordCost(attemptId: $a, cents: $c, idempotencyKey: $key) { id } }",
        base: r#"{"a": "$ATTEMPT", "c": 1, "key": "cost-$REF"}"#,
        args: &[("/a", Id(Absent::NotFound)), ("/c", Int("cents", 0, 1_000_000_000)), ("/key", Key)],
        ..op("", "", &[])
    },
    Op {
        doc: "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }",
        base: r#"{"u": [{"externalRef": "reg-$REF", "domain": "cobol", "workflowId": "wf-1"}]}"#,
        args: &[
            ("/u/0/externalRef", Label("units[0].externalRef")),
            ("/u/0/domain", Label("units[0].domain")),
            ("/u/0/workflowId", Label("units[0].workflowId")),
        ],
        stores: &["/u/0/externalRef", "/u/0/domain", "/u/0/workflowId"],
        ..op("", "", &[])
    },
    Op {
        setup: Setup::Blocked,
        doc: "mutation($u: UUID!, $ans: String!, $key: String) { unblock(unitId: $u, answer: $ans, idempotencyKey: $key) { id } }",
        base: r#"{"u": "$UNIT", "ans": "v2"}"#,
        args: &[("/u", Id(Absent::NotFound)), ("/ans", Text("answer")), ("/key", Key)],
        stores: &["/ans"],
        ..op("", "", &[])
    },
    Op {
        doc: "mutation($u: UUID!, $d: Disposition!, $e: String, $r: String, $key: String, $a: UUID) { dispose(unitId: $u, disposition: $d, evidenceUrl: $e, reason: $r, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "d": "DEFERRED", "e": "https://wiki.example/1", "r": "later"}"#,
        args: &[
            ("/u", Id(Absent::NotFound)),
            ("/d", Enum(true)),
            ("/e", Url),
            ("/r", Text("reason")),
            ("/key", Key),
            ("/a", Id(Absent::LeaseLost)),
        ],
        stores: &["/e", "/r"],
        ..op("", "", &[])
    },
    op("query($id: UUID!) { unit(id: $id) { id } }", r#"{"id": "$UNIT"}"#, &[("/id", Id(Absent::Nothing))]),
    op("query($r: String!) { unitByRef(externalRef: $r) { id } }", r#"{"r": "u-0"}"#, &[("/r", Label("externalRef"))]),
    op(
        "query($f: Int, $after: String, $filter: UnitFilter) { units(first: $f, after: $after, filter: $filter) { edges { node { id } } } }",
        r#"{"filter": {}}"#,
        &[
            ("/f", FIRST),
            ("/after", Cursor("u")),
            ("/filter/state", Enum(false)),
            ("/filter/domain", Label("filter.domain")),
            ("/filter/disposition", Enum(false)),
            ("/filter/claimedBy", Label("filter.claimedBy")),
            ("/filter/externalRefPrefix", Label("filter.externalRefPrefix")),
        ],
    ),
    op(
        "query($f: Int, $after: String, $filter: EventFilter) { events(first: $f, after: $after, filter: $filter) { edges { node { id } } } }",
        r#"{"filter": {}}"#,
        &[
            ("/f", FIRST),
            ("/after", Cursor("e")),
            ("/filter/unitId", Id(Absent::Nothing)),
            ("/filter/types", EnumList),
            ("/filter/agentId", Label("filter.agentId")),
        ],
    ),
    op(
        "query($f: Int, $after: String, $s: QuestionStatus, $g: String) { questions(first: $f, after: $after, status: $s, assigneeGroup: $g) { edges { node { id } } } }",
        "{}",
        &[("/f", FIRST), ("/after", Cursor("q")), ("/s", Enum(false)), ("/g", Label("assigneeGroup"))],
    ),
    op("query($d: String) { queueDepth(domain: $d) { domain } }", "{}", &[("/d", Label("domain"))]),
    op(
        "query($f: Int, $after: String) { stalls(first: $f, after: $after) { edges { node { id } } } }",
        "{}",
        &[("/f", FIRST), ("/after", Cursor("s"))],
    ),
    op(
        "query($f: Int, $after: String, $d: String) { costPerUnit(first: $f, after: $after, domain: $d) { edges { node { costCents } } } }",
        "{}",
        &[("/f", FIRST), ("/after", Cursor("c")), ("/d", Label("domain"))],
    ),
    op(
        "query($f: Int, $after: String) { rework(first: $f, after: $after) { edges { node { id } } } }",
        "{}",
        &[("/f", FIRST), ("/after", Cursor("r"))],
    ),
    op("query($d: String) { dispositionSummary(domain: $d) { count } }", "{}", &[("/d", Label("domain"))]),
    op(
        "query($f: Int, $after: String, $disp: Disposition, $d: String) { dispositions(first: $f, after: $after, disposition: $disp, domain: $d) { edges { node { id } } } }",
        "{}",
        &[("/f", FIRST), ("/after", Cursor("d")), ("/disp", Enum(false)), ("/d", Label("domain"))],
    ),
    op(
        "query($id: UUID!, $f: Int, $after: String) { unit(id: $id) { events(first: $f, after: $after) { edges { node { id } } } } }",
        r#"{"id": "$UNIT"}"#,
        &[("/id", Id(Absent::Nothing)), ("/f", FIRST), ("/after", Cursor("e"))],
    ),
];

/// The answer one case must get.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Accepted,
    /// `INVALID_INPUT` naming this argument.
    Invalid(&'static str),
    /// Accepted, or `INVALID_INPUT` naming this argument: the SPEC leaves it
    /// open. Either way nothing is corrupted (stored as sent, or not at all).
    Either(&'static str),
    /// A request error for the variable (a value of the wrong type, or none
    /// for a required one): `GRAPHQL_VALIDATION_FAILED`, naming it.
    Validation,
    /// A refusal with this code.
    Code(&'static str),
    /// A body over 256 KiB: HTTP 413, `INVALID_INPUT`.
    TooLarge,
    /// A body that is not JSON (a lone surrogate): HTTP 400, `INVALID_INPUT`.
    NotJson,
}

/// Unicode `Cf` (format) characters, and `Zl`, `Zp` (Unicode 15.1).
const INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{2028}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

fn invisible(c: char) -> bool {
    INVISIBLE.iter().any(|&(from, to)| (from..=to).contains(&c))
}

fn has_control(s: &str, allow_breaks: bool) -> bool {
    s.chars().any(|c| c.is_control() && !(allow_breaks && matches!(c, '\n' | '\r' | '\t')))
}

/// The oracle: what SPEC §9 says `value` at an argument with `rule` gets.
fn expect(rule: Rule, value: &Value) -> Expect {
    use Expect::*;
    if value.as_str() == Some(LONE_SURROGATE) {
        return NotJson;
    }
    match (rule, value) {
        (Label(arg), Value::String(s)) => {
            let n = s.chars().count();
            if n == 0 || n > 256 || has_control(s, false) || s.chars().any(invisible) { Invalid(arg) } else { Accepted }
        }
        (Key, Value::String(s)) => {
            let n = s.chars().count();
            match (n == 0 || n > 256 || has_control(s, false), s.chars().any(invisible)) {
                (true, _) => Invalid("idempotencyKey"),
                (false, true) => Either("idempotencyKey"),
                (false, false) => Accepted,
            }
        }
        (Text(arg), Value::String(s)) => {
            match (s.trim().is_empty() || s.chars().count() > 8000 || has_control(s, true), s.chars().any(invisible)) {
                (true, _) => Invalid(arg),
                (false, true) => Either(arg),
                (false, false) => Accepted,
            }
        }
        (Url, Value::String(s)) => {
            let link = url::Url::parse(s)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty()));
            let clean = !has_control(s, false) && !s.contains(char::is_whitespace) && !s.chars().any(invisible);
            if s.len() <= 2048 && clean && link { Accepted } else { Invalid("evidenceUrl") }
        }
        (Int(arg, min, max), Value::Number(n)) => match n.as_i64().filter(|n| i32::try_from(*n).is_ok()) {
            Some(n) if (min..=max).contains(&n) => Accepted,
            Some(_) => Invalid(arg),
            None => Validation,
        },
        (Id(absent), Value::String(s)) if uuid::Uuid::parse_str(s).is_ok() => match absent {
            Absent::NotFound => Code("NOT_FOUND"),
            Absent::LeaseLost => Code("LEASE_LOST"),
            Absent::Nothing => Accepted,
        },
        (Cursor(tag), Value::String(s)) => {
            let decoded = URL_SAFE_NO_PAD.decode(s).ok().and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
            let parts: Vec<&str> = decoded.split(':').collect();
            let ours = match parts[..] {
                ["wl1", t, micros, id] => {
                    t == tag
                        && micros
                            .parse::<i64>()
                            .ok()
                            .and_then(chrono::DateTime::from_timestamp_micros)
                            .is_some_and(|t| (1..=9999).contains(&t.year()))
                        && uuid::Uuid::parse_str(id).is_ok()
                }
                _ => false,
            };
            if ours { Accepted } else { Invalid("after") }
        }
        (Enum(required), Value::Null) => {
            if required {
                Validation
            } else {
                Accepted
            }
        }
        (EnumList, Value::Array(items)) if items.is_empty() => Accepted,
        (EnumList, Value::String(s)) if s == "CLAIMED" => Accepted,
        (Enum(_) | EnumList, Value::String(s)) => {
            assert!(!is_enum_name(s), "the oracle does not know what the valid enum value {s:?} does here");
            Validation
        }
        _ => Validation,
    }
}

/// Every value of the schema's enums.
fn is_enum_name(s: &str) -> bool {
    const NAMES: &[&str] = &[
        "READY",
        "CLAIMED",
        "IN_PROGRESS",
        "BLOCKED",
        "VERIFIED",
        "DONE",
        "ABANDONED",
        "MIGRATED",
        "DROPPED",
        "DEFERRED",
        "DEAD",
        "FAILED",
        "SUPERSEDED",
        "REGISTERED",
        "HEARTBEAT",
        "TRANSITIONED",
        "UNBLOCKED",
        "COST_RECORDED",
        "DISPOSED",
        "RELEASED",
        "STALE_RECLAIMED",
        "STALLED",
        "OPEN",
        "ANSWERED",
        "CANCELLED",
    ];
    NAMES.contains(&s)
}

/// Stands for a lone surrogate: JSON text can carry `\ud800`, a Rust string cannot.
const LONE_SURROGATE: &str = "\u{E000}lone-surrogate\u{E000}";
const MAX_BODY: usize = 256 * 1024;

fn fixed_texts() -> Vec<Value> {
    let mut texts: Vec<Value> = [
        "\0",
        "a\0b",
        "\u{1}\u{2}\u{1b}[31m",
        "line\nbreak\ttab\r",
        "\u{7f}\u{85}\u{9f}",
        "\u{202e}gnp.exe\u{200f}\u{200e}",
        "report\u{202e}fdp.exe",
        "zero\u{200b}width",
        "\u{feff}bom",
        "'; DROP TABLE work_units; --",
        "' OR '1'='1",
        "%_\\",
        "$1 $$ $body$",
        "",
        "   ",
        "😀\u{10ffff}",
        LONE_SURROGATE,
    ]
    .into_iter()
    .map(Value::from)
    .collect();
    texts.push(Value::from("q".repeat(8001)));
    texts.push(Value::from("r".repeat(257)));
    texts.push(Value::from("x".repeat(1 << 20)));
    texts.push(json!(12));
    texts.push(json!(["a"]));
    texts
}

fn fixed_urls() -> Vec<Value> {
    let mut urls = fixed_texts();
    for url in [
        "https://ci.example/\u{202e}fdp.exe",
        "https://ci.example/a\0b",
        "https://ci.example/a b",
        "javascript:alert(1)",
        "ftp://ci.example/x",
        "https://",
        "//ci.example/x",
    ] {
        urls.push(Value::from(url));
    }
    urls.push(Value::from(format!("https://ci.example/{}", "a".repeat(2048))));
    urls
}

fn fixed_ints() -> Vec<Value> {
    vec![
        json!(i64::MIN),
        json!(-1),
        json!(0),
        json!(29),
        json!(86_401),
        json!(i32::MAX),
        json!(i64::from(i32::MAX) + 1),
        json!(1_i64 << 53),
        json!(i64::MAX),
        json!(1.5),
        json!(1e300),
        json!("12"),
        json!(true),
    ]
}

fn fixed_ids() -> Vec<Value> {
    vec![json!("not-a-uuid"), json!(""), json!("\0"), json!(uuid::Uuid::new_v4()), json!(uuid::Uuid::nil()), json!(7)]
}

fn cursor(tag: &str, micros: &str, id: &str) -> Value {
    Value::from(URL_SAFE_NO_PAD.encode(format!("wl1:{tag}:{micros}:{id}")))
}

fn fixed_cursors(tag: &str) -> Vec<Value> {
    let id = uuid::Uuid::new_v4().to_string();
    let mut cursors: Vec<Value> = [
        i64::MAX.to_string(),
        i64::MIN.to_string(),
        "253402300800000000".to_owned(),  // year 10000
        "-62167219200000001".to_owned(),  // before year 0
        "9223372036854775808".to_owned(), // beyond i64
        "-210866803200000000".to_owned(), // 4714 BC: before PostgreSQL's range
        "9224318016000000000".to_owned(), // past PostgreSQL's range
        "0".to_owned(),
    ]
    .iter()
    .map(|micros| cursor(tag, micros, &id))
    .collect();
    cursors.push(cursor(tag, "0", "\0"));
    cursors.push(cursor(if tag == "u" { "e" } else { "u" }, "0", &id)); // another list's
    cursors.push(Value::from("\0"));
    cursors.push(Value::from("!!!"));
    cursors.push(json!(12));
    cursors
}

fn fixed_enums() -> Vec<Value> {
    vec![json!("NOPE"), json!(""), json!("\0"), json!("ready"), json!(1), json!(null)]
}

fn fixed_values(rule: Rule) -> Vec<Value> {
    match rule {
        Label(_) | Key | Text(_) => fixed_texts(),
        Url => fixed_urls(),
        Int(..) => fixed_ints(),
        Id(_) => fixed_ids(),
        Cursor(tag) => fixed_cursors(tag),
        Enum(_) => fixed_enums(),
        EnumList => vec![json!(["NOPE"]), json!([null]), json!("CLAIMED"), json!([]), json!(["\0"])],
    }
}

struct World<'a> {
    app: &'a TestApp,
    /// Every case that got another answer than the oracle's: all of them
    /// are reported at the end, not only the first.
    wrong: std::sync::Mutex<Vec<String>>,
    operator: Agent<'a>,
    /// The unit and attempt the reads name.
    unit: String,
    attempt: String,
}

/// A unit for one case, with a fresh agent and a fresh operator (keys are
/// scoped to the token's name: an earlier case's key must not meet this one).
struct Case<'a> {
    agent: Agent<'a>,
    /// For the operations an operator sends.
    operator: Option<Agent<'a>>,
    unit: String,
    attempt: String,
}

impl<'a> World<'a> {
    async fn case(&self, n: usize, op: &Op) -> Case<'a> {
        let agent = Agent::new(self.app, "f", &format!("agent-{n}"), Role::Agent).await;
        let operator =
            if op.operator { Some(Agent::new(self.app, "f", &format!("op-{n}"), Role::Operator).await) } else { None };
        let setup = op.setup;
        let unit = self.app.register(&self.operator.token, &[&format!("case-{n}")]).await[0]["id"]
            .as_str()
            .expect("unit id")
            .to_owned();
        if setup == Setup::Ready {
            return Case { agent, operator, unit, attempt: uuid::Uuid::nil().to_string() };
        }
        let attempt = agent.claim_unit(&unit, json!({})).await.str("currentAttemptId");
        agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
        if setup == Setup::Blocked {
            agent.block(&unit, "which schema?", json!({})).await.data();
        }
        Case { agent, operator, unit, attempt }
    }

    /// Sends `op` with `value` at `path` (or the base variables when None)
    /// and checks the answer against the oracle and the database.
    async fn send(&self, n: usize, op: &Op, arg: Option<(&'static str, Rule, Value)>) {
        let case = if op.is_write() { Some(self.case(n, op).await) } else { None };
        let (unit, attempt) = case.as_ref().map_or((&self.unit, &self.attempt), |c| (&c.unit, &c.attempt));
        let base = op.base.replace("$UNIT", unit).replace("$ATTEMPT", attempt).replace("$REF", &n.to_string());
        let mut vars: Value = serde_json::from_str(&base).expect("base variables");
        let mut expected = Expect::Accepted;
        if let Some((path, rule, value)) = &arg {
            expected = expect(*rule, value);
            set(&mut vars, path, value.clone());
        }
        let body = json!({ "query": op.doc, "variables": vars }).to_string();
        if body.len() > MAX_BODY {
            expected = Expect::TooLarge;
        }
        // The placeholder becomes a real lone surrogate escape in the JSON text.
        let body = body.replace(LONE_SURROGATE, "\\ud800");
        let who = case.as_ref().map_or(&self.operator, |c| c.operator.as_ref().unwrap_or(&c.agent));
        let before = self.app.snapshot(unit).await;
        let resp = self.app.post_raw(Some(&format!("Bearer {}", who.token)), body).await;
        let path = arg.as_ref().map(|(path, ..)| *path);
        let sent = arg.as_ref().map(|(.., value)| short(value)).unwrap_or_default();
        let what = format!(
            "{} {path:?} = {sent} expecting {expected:?}: HTTP {} {}",
            op.doc.split(['{', '(']).nth(2).unwrap_or_default().trim(),
            resp.status,
            short(&resp.body)
        );
        let errors = resp.body["errors"].as_array().cloned().unwrap_or_default();
        let error = &resp.body["errors"][0]["extensions"];
        let refused_as = |code: &str| errors.len() == 1 && error["code"] == code;
        let named = |argument: &str| error["argument"] == argument;
        let accepted = errors.is_empty() && resp.status == 200 && !resp.body["data"].is_null();
        let ok = match expected {
            Expect::Accepted => accepted,
            Expect::Invalid(argument) => resp.status == 200 && refused_as("INVALID_INPUT") && named(argument),
            Expect::Either(argument) => accepted || (refused_as("INVALID_INPUT") && named(argument)),
            Expect::Validation => {
                // The variable's name: the first step of the path.
                let variable = path.and_then(|p| p.split('/').nth(1)).unwrap_or_default();
                let message = resp.body["errors"][0]["message"].as_str().unwrap_or_default();
                refused_as("GRAPHQL_VALIDATION_FAILED") && message.contains(variable)
            }
            Expect::Code(code) => resp.status == 200 && refused_as(code),
            Expect::TooLarge => resp.status == 413 && refused_as("INVALID_INPUT"),
            Expect::NotJson => resp.status == 400 && refused_as("INVALID_INPUT"),
        };
        let after = self.app.snapshot(unit).await;
        let mut wrong = Vec::new();
        if !ok {
            wrong.push(format!("another answer: {what}"));
        }
        if (!accepted || !op.is_write()) && after != before {
            wrong.push(format!("wrote although it was refused or a read: {what}"));
        }
        if accepted && op.is_write() && after == before {
            wrong.push(format!("an accepted write changed nothing: {what}"));
        }
        // An accepted text is stored as sent: not trimmed, escaped or cut.
        if let Some((path, _, Value::String(text))) = &arg
            && accepted
            && op.stores.contains(path)
        {
            let held = if op.doc.contains("registerUnits") { self.newest_units().await } else { after };
            if !holds(&held, text) {
                wrong.push(format!("{text:?} is not stored verbatim: {what}"));
            }
        }
        self.wrong.lock().unwrap_or_else(|e| e.into_inner()).extend(wrong);
    }

    /// Fails on every case that went wrong, all of them listed.
    fn assert_all_right(&self, cases: usize) {
        let wrong = self.wrong.lock().unwrap_or_else(|e| e.into_inner());
        assert!(wrong.is_empty(), "{} of {cases} cases went wrong:\n{}", wrong.len(), wrong.join("\n"));
    }

    async fn newest_units(&self) -> Value {
        Value::Array(
            self.app
                .sql_json("SELECT * FROM work_units WHERE created_at = (SELECT max(created_at) FROM work_units)")
                .await,
        )
    }
}

/// Whether `text` is one of the strings anywhere in `value` (or an element of one of its arrays).
fn holds(value: &Value, text: &str) -> bool {
    match value {
        Value::String(s) => s == text,
        Value::Array(items) => items.iter().any(|v| holds(v, text)),
        Value::Object(map) => map.values().any(|v| holds(v, text)),
        _ => false,
    }
}

fn set(vars: &mut Value, path: &str, value: Value) {
    let (parent, key) = path.rsplit_once('/').unwrap_or(("", path));
    match vars.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(key.to_owned(), value);
        }
        Some(Value::Array(items)) => {
            if let Some(slot) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *slot = value;
            }
        }
        _ => panic!("no {parent} in {vars}"),
    }
}

fn short(body: &Value) -> String {
    let text = body.to_string();
    text.chars().take(400).collect()
}

async fn world(app: &TestApp) -> World<'_> {
    let operator = Agent::new(app, "f", "op", Role::Operator).await;
    let agent = Agent::new(app, "f", "reads-agent", Role::Agent).await;
    app.register(&operator.token, &["u-0"]).await;
    let claim = agent.claim_next(json!({})).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    World { app, wrong: Default::default(), operator, unit, attempt }
}

#[tokio::test]
async fn every_argument_of_every_operation_refuses_hostile_input_cleanly() {
    let app = spawn_app().await;
    let world = world(&app).await;
    let mut n = 0;
    for op in OPS {
        // The base variables are accepted: a refusal below is the hostile value's.
        n += 1;
        world.send(n, op, None).await;
        for &(path, rule) in op.args {
            for value in fixed_values(rule) {
                n += 1;
                world.send(n, op, Some((path, rule, value))).await;
            }
        }
    }
    world.assert_all_right(n);
}

/// Random strings (any Unicode scalar, control characters and
/// direction marks weighted in) and numbers, at random arguments.
fn hostile_value(rule: Rule) -> BoxedStrategy<Value> {
    let odd_char = prop_oneof![
        Just('\0'),
        (1u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or('?')),
        (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap_or('?')),
        Just('\u{202e}'),
        Just('\u{200f}'),
        Just('\u{feff}'),
        Just('\''),
        Just('%'),
        any::<char>(),
    ];
    let text = prop::collection::vec(odd_char, 0..40).prop_map(String::from_iter);
    match rule {
        Label(_) | Key | Text(_) | Url | Enum(_) | EnumList => text.prop_map(Value::from).boxed(),
        Int(..) => prop_oneof![any::<i64>().prop_map(Value::from), any::<i32>().prop_map(Value::from)].boxed(),
        Id(_) => prop_oneof![
            any::<u128>().prop_map(|n| Value::from(uuid::Uuid::from_u128(n).to_string())),
            text.prop_map(Value::from),
        ]
        .boxed(),
        Cursor(tag) => (any::<i64>(), text)
            .prop_map(move |(micros, junk)| {
                let id = if junk.is_empty() { uuid::Uuid::nil().to_string() } else { junk };
                cursor(tag, &micros.to_string(), &id)
            })
            .boxed(),
    }
}

#[tokio::test]
async fn generated_hostile_input_gets_the_answer_the_rules_give() {
    const CASES: usize = 200;
    let app = spawn_app().await;
    let world = world(&app).await;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let pick = (0..OPS.len(), any::<prop::sample::Index>());
    for n in 0..CASES {
        let (op_index, arg_index) = pick.new_tree(&mut runner).expect("case").current();
        let op = &OPS[op_index];
        let (path, rule) = op.args[arg_index.index(op.args.len())];
        let value = hostile_value(rule).new_tree(&mut runner).expect("value").current();
        world.send(n, op, Some((path, rule, value))).await;
    }
    world.assert_all_right(CASES);
}

#[test]
fn the_oracle_knows_the_rules() {
    assert_eq!(expect(Label("x"), &json!("a\0b")), Expect::Invalid("x"));
    assert_eq!(expect(Label("x"), &json!("\u{202e}x")), Expect::Invalid("x"));
    assert_eq!(expect(Label("x"), &json!("\u{feff}x")), Expect::Invalid("x"));
    assert_eq!(expect(Label("x"), &json!("   ")), Expect::Accepted);
    assert_eq!(expect(Text("q"), &json!("   ")), Expect::Invalid("q"));
    assert_eq!(expect(Text("q"), &json!("line\nbreak")), Expect::Accepted);
    assert_eq!(expect(Text("q"), &json!("a\0b")), Expect::Invalid("q"));
    assert_eq!(expect(Url, &json!("https://ci.example/1")), Expect::Accepted);
    assert_eq!(expect(Url, &json!("https://ci.example/\u{202e}1")), Expect::Invalid("evidenceUrl"));
    assert_eq!(expect(LEASE, &json!(29)), Expect::Invalid("leaseSeconds"));
    assert_eq!(expect(LEASE, &json!(1.5)), Expect::Validation);
    assert_eq!(expect(Cursor("u"), &cursor("u", "0", &uuid::Uuid::nil().to_string())), Expect::Accepted);
    assert_eq!(expect(Cursor("u"), &cursor("u", "253402300800000000", "x")), Expect::Invalid("after"));
}
