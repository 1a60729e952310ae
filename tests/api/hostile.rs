//! No input reaches the client as INTERNAL or HTTP 500 (SPEC §5, §9): hostile
//! strings (NUL and other control characters, lone surrogates in JSON
//! escapes, 1 MB, right-to-left marks, SQL fragments), hostile numbers, ids,
//! enums and forged cursors, sent to every argument of every operation
//! through the real server. A refusal writes nothing.
//!
//! Two passes: every argument gets every fixed hostile value of its kind,
//! then a generated set of cases (proptest strategies, a deterministic seed,
//! so a failure reproduces) mixes random strings and numbers.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Text,
    Int,
    Id,
    Cursor(char),
    Enum,
    EnumList,
}

/// One operation: who sends it, the document, valid variables (`$UNIT`,
/// `$ATTEMPT` and `$REF` are filled in), and each argument's JSON pointer
/// into the variables with its kind.
struct Op {
    operator: bool,
    doc: &'static str,
    base: &'static str,
    args: &'static [(&'static str, Kind)],
}

use Kind::*;

const OPS: &[Op] = &[
    Op {
        operator: false,
        doc: "mutation($domain: String, $lease: Int, $key: String) { claimNext(domain: $domain, leaseSeconds: $lease, idempotencyKey: $key) { id } }",
        base: "{}",
        args: &[("/domain", Text), ("/lease", Int), ("/key", Text)],
    },
    Op {
        operator: false,
        doc: "mutation($id: UUID!, $lease: Int, $key: String) { claimUnit(id: $id, leaseSeconds: $lease, idempotencyKey: $key) { id } }",
        base: r#"{"id": "$UNIT"}"#,
        args: &[("/id", Id), ("/lease", Int), ("/key", Text)],
    },
    Op {
        operator: false,
        doc: "mutation($a: UUID!, $lease: Int) { heartbeat(attemptId: $a, leaseSeconds: $lease) { id } }",
        base: r#"{"a": "$ATTEMPT"}"#,
        args: &[("/a", Id), ("/lease", Int)],
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $to: WorkState!, $e: String, $key: String, $a: UUID) { transition(unitId: $u, to: $to, evidenceUrl: $e, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "to": "VERIFIED", "e": "https://ci.example/1"}"#,
        args: &[("/u", Id), ("/to", Enum), ("/e", Text), ("/key", Text), ("/a", Id)],
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $q: String!, $g: String, $key: String, $a: UUID) { block(unitId: $u, question: $q, assigneeGroup: $g, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "q": "which schema?"}"#,
        args: &[("/u", Id), ("/q", Text), ("/g", Text), ("/key", Text), ("/a", Id)],
    },
    Op {
        operator: false,
        doc: "mutation($u: UUID!, $r: String, $o: AttemptOutcome, $key: String, $a: UUID) { release(unitId: $u, reason: $r, outcome: $o, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "r": "done for today"}"#,
        args: &[("/u", Id), ("/r", Text), ("/o", Enum), ("/key", Text), ("/a", Id)],
    },
    Op {
        operator: false,
        doc: "mutation($a: UUID!, $c: Int!, $key: String!) { recordCost(attemptId: $a, cents: $c, idempotencyKey: $key) { id } }",
        base: r#"{"a": "$ATTEMPT", "c": 1, "key": "cost-$REF"}"#,
        args: &[("/a", Id), ("/c", Int), ("/key", Text)],
    },
    Op {
        operator: true,
        doc: "mutation($u: [RegisterUnitInput!]!) { registerUnits(units: $u) { id } }",
        base: r#"{"u": [{"externalRef": "reg-$REF", "domain": "cobol", "workflowId": "wf-1"}]}"#,
        args: &[("/u/0/externalRef", Text), ("/u/0/domain", Text), ("/u/0/workflowId", Text)],
    },
    Op {
        operator: true,
        doc: "mutation($u: UUID!, $ans: String!, $key: String) { unblock(unitId: $u, answer: $ans, idempotencyKey: $key) { id } }",
        base: r#"{"u": "$UNIT", "ans": "v2"}"#,
        args: &[("/u", Id), ("/ans", Text), ("/key", Text)],
    },
    Op {
        operator: true,
        doc: "mutation($u: UUID!, $d: Disposition!, $e: String, $r: String, $key: String, $a: UUID) { dispose(unitId: $u, disposition: $d, evidenceUrl: $e, reason: $r, idempotencyKey: $key, attemptId: $a) { id } }",
        base: r#"{"u": "$UNIT", "d": "DEFERRED", "e": "https://wiki.example/1", "r": "later"}"#,
        args: &[("/u", Id), ("/d", Enum), ("/e", Text), ("/r", Text), ("/key", Text), ("/a", Id)],
    },
    Op {
        operator: true,
        doc: "query($id: UUID!) { unit(id: $id) { id } }",
        base: r#"{"id": "$UNIT"}"#,
        args: &[("/id", Id)],
    },
    Op {
        operator: true,
        doc: "query($r: String!) { unitByRef(externalRef: $r) { id } }",
        base: r#"{"r": "u-0"}"#,
        args: &[("/r", Text)],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String, $filter: UnitFilter) { units(first: $f, after: $after, filter: $filter) { edges { node { id } } } }",
        base: r#"{"filter": {}}"#,
        args: &[
            ("/f", Int),
            ("/after", Cursor('u')),
            ("/filter/state", Enum),
            ("/filter/domain", Text),
            ("/filter/disposition", Enum),
            ("/filter/claimedBy", Text),
            ("/filter/externalRefPrefix", Text),
        ],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String, $filter: EventFilter) { events(first: $f, after: $after, filter: $filter) { edges { node { id } } } }",
        base: r#"{"filter": {}}"#,
        args: &[
            ("/f", Int),
            ("/after", Cursor('e')),
            ("/filter/unitId", Id),
            ("/filter/types", EnumList),
            ("/filter/agentId", Text),
        ],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String, $s: QuestionStatus, $g: String) { questions(first: $f, after: $after, status: $s, assigneeGroup: $g) { edges { node { id } } } }",
        base: "{}",
        args: &[("/f", Int), ("/after", Cursor('q')), ("/s", Enum), ("/g", Text)],
    },
    Op {
        operator: true,
        doc: "query($d: String) { queueDepth(domain: $d) { domain } }",
        base: "{}",
        args: &[("/d", Text)],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String) { stalls(first: $f, after: $after) { edges { node { id } } } }",
        base: "{}",
        args: &[("/f", Int), ("/after", Cursor('s'))],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String, $d: String) { costPerUnit(first: $f, after: $after, domain: $d) { edges { node { costCents } } } }",
        base: "{}",
        args: &[("/f", Int), ("/after", Cursor('c')), ("/d", Text)],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String) { rework(first: $f, after: $after) { edges { node { id } } } }",
        base: "{}",
        args: &[("/f", Int), ("/after", Cursor('r'))],
    },
    Op {
        operator: true,
        doc: "query($d: String) { dispositionSummary(domain: $d) { count } }",
        base: "{}",
        args: &[("/d", Text)],
    },
    Op {
        operator: true,
        doc: "query($f: Int, $after: String, $disp: Disposition, $d: String) { dispositions(first: $f, after: $after, disposition: $disp, domain: $d) { edges { node { id } } } }",
        base: "{}",
        args: &[("/f", Int), ("/after", Cursor('d')), ("/disp", Enum), ("/d", Text)],
    },
    Op {
        operator: true,
        doc: "query($id: UUID!, $f: Int, $after: String) { unit(id: $id) { events(first: $f, after: $after) { edges { node { id } } } } }",
        base: r#"{"id": "$UNIT"}"#,
        args: &[("/id", Id), ("/f", Int), ("/after", Cursor('e'))],
    },
];

/// Stands for a lone surrogate: JSON text can carry `\ud800`, a Rust string cannot.
const LONE_SURROGATE: &str = "\u{E000}lone-surrogate\u{E000}";

fn fixed_texts() -> Vec<Value> {
    let mut texts: Vec<Value> = [
        "\0",
        "a\0b",
        "\u{1}\u{2}\u{1b}[31m",
        "line\nbreak\ttab\r",
        "\u{7f}\u{85}\u{9f}",
        "\u{202e}gnp.exe\u{200f}\u{200e}",
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

fn cursor(tag: char, micros: &str, id: &str) -> Value {
    Value::from(URL_SAFE_NO_PAD.encode(format!("wl1:{tag}:{micros}:{id}")))
}

fn fixed_cursors(tag: char) -> Vec<Value> {
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
    cursors.push(Value::from("\0"));
    cursors.push(Value::from("!!!"));
    cursors
}

fn fixed_enums() -> Vec<Value> {
    vec![json!("NOPE"), json!(""), json!("\0"), json!("ready"), json!(1), json!(null)]
}

fn fixed_values(kind: Kind) -> Vec<Value> {
    match kind {
        Text => fixed_texts(),
        Int => fixed_ints(),
        Id => fixed_ids(),
        Cursor(tag) => fixed_cursors(tag),
        Enum => fixed_enums(),
        EnumList => vec![json!(["NOPE"]), json!([null]), json!("CLAIMED"), json!([]), json!(["\0"])],
    }
}

struct World<'a> {
    app: &'a TestApp,
    agent: Agent<'a>,
    operator: Agent<'a>,
    unit: String,
    attempt: String,
}

impl World<'_> {
    /// Sends `op` with `value` at `path` (or the base variables when None);
    /// asserts what every response must satisfy and returns it.
    async fn send(&self, n: usize, op: &Op, path: Option<&str>, value: Option<Value>) {
        let base =
            op.base.replace("$UNIT", &self.unit).replace("$ATTEMPT", &self.attempt).replace("$REF", &n.to_string());
        let mut vars: Value = serde_json::from_str(&base).expect("base variables");
        if let (Some(path), Some(value)) = (path, value) {
            set(&mut vars, path, value);
        }
        let body = json!({ "query": op.doc, "variables": vars }).to_string();
        // The placeholder becomes a real lone surrogate escape in the JSON text.
        let body = body.replace(LONE_SURROGATE, "\\ud800");
        let who = if op.operator { &self.operator } else { &self.agent };
        let before = written(self.app).await;
        let resp = self.app.post_raw(Some(&format!("Bearer {}", who.token)), body).await;
        let case = format!("{} {path:?}: {}", op.doc, short(&resp.body));
        assert_ne!(resp.status, 500, "{case}");
        assert!([200, 400, 413].contains(&resp.status), "status {}: {case}", resp.status);
        let errors = resp.body["errors"].as_array().cloned().unwrap_or_default();
        for error in &errors {
            assert_ne!(error["extensions"]["code"], "INTERNAL", "{case}");
            let message = error["message"].as_str().unwrap_or_default();
            assert!(!message.contains("internal error") && !message.contains("database"), "{case}");
        }
        if !errors.is_empty() {
            assert_eq!(written(self.app).await, before, "a refusal wrote: {case}");
        }
    }
}

/// What the ledger holds: events, units, attempts, questions.
async fn written(app: &TestApp) -> Vec<Value> {
    app.sql_json(
        "SELECT (SELECT count(*) FROM work_unit_events) AS e, (SELECT count(*) FROM work_units) AS u,
                (SELECT count(*) FROM work_unit_attempts) AS a, (SELECT count(*) FROM blocking_questions) AS q,
                (SELECT coalesce(sum(cost_cents), 0) FROM work_units) AS c",
    )
    .await
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
    let agent = Agent::new(app, "f", "agent-1", Role::Agent).await;
    let refs: Vec<String> = (0..5).map(|i| format!("u-{i}")).collect();
    app.register(&operator.token, &refs.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let claim = agent.claim_next(json!({})).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    World { app, agent, operator, unit, attempt }
}

#[tokio::test]
async fn every_argument_of_every_operation_refuses_hostile_input_cleanly() {
    let app = spawn_app().await;
    let world = world(&app).await;
    let mut n = 0;
    for op in OPS {
        world.send(n, op, None, None).await;
        for (path, kind) in op.args {
            for value in fixed_values(*kind) {
                n += 1;
                world.send(n, op, Some(path), Some(value)).await;
            }
        }
    }
}

/// Random strings (any Unicode scalar, control characters and
/// direction marks weighted in) and numbers, at random arguments.
fn hostile_value(kind: Kind) -> BoxedStrategy<Value> {
    let odd_char = prop_oneof![
        Just('\0'),
        (1u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or('?')),
        (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap_or('?')),
        Just('\u{202e}'),
        Just('\u{200f}'),
        Just('\''),
        Just('%'),
        any::<char>(),
    ];
    match kind {
        Text | Enum | EnumList => {
            prop::collection::vec(odd_char, 0..40).prop_map(|chars| Value::from(String::from_iter(chars))).boxed()
        }
        Int => prop_oneof![any::<i64>().prop_map(Value::from), any::<i32>().prop_map(Value::from)].boxed(),
        Id => prop_oneof![
            any::<u128>().prop_map(|n| Value::from(uuid::Uuid::from_u128(n).to_string())),
            prop::collection::vec(odd_char, 0..40).prop_map(|chars| Value::from(String::from_iter(chars))),
        ]
        .boxed(),
        Cursor(tag) => (any::<i64>(), prop::collection::vec(odd_char, 0..10))
            .prop_map(move |(micros, junk)| {
                if junk.is_empty() {
                    cursor(tag, &micros.to_string(), &uuid::Uuid::nil().to_string())
                } else {
                    cursor(tag, &micros.to_string(), &String::from_iter(junk))
                }
            })
            .boxed(),
    }
}

#[tokio::test]
async fn generated_hostile_input_never_gets_internal() {
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
        let (path, kind) = op.args[arg_index.index(op.args.len())];
        let value = hostile_value(kind).new_tree(&mut runner).expect("value").current();
        world.send(n, op, Some(path), Some(value)).await;
    }
}
