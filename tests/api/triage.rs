//! The triage desk (issue 26): one answer for the same question. Questions
//! compare by their normalised text; `openQuestionGroups` lists them
//! most-waited first, `unblock(alsoAnswerSimilar: true)` answers a whole
//! group in one transaction (each unit with its own event), and an agent
//! that blocks on a question answered before sees those answers.

use serde_json::{Value, json};
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

const ROUNDING: [&str; 6] = [
    "Is the ROUNDING_MODE flag still read by the nightly batch?",
    "is the rounding_mode flag still read by the nightly batch",
    "  Is the ROUNDING_MODE   flag still read by the nightly batch?!",
    "IS THE ROUNDING_MODE FLAG STILL READ BY THE NIGHTLY BATCH?",
    "Is the ROUNDING_MODE flag\tstill read by the nightly batch ?",
    "Is the ROUNDING_MODE flag still read by the nightly batch...",
];

const UNBLOCK: &str = "mutation($u: UUID!, $q: UUID, $a: String!, $similar: Boolean, $key: String) {
    r: unblock(unitId: $u, questionId: $q, answer: $a, alsoAnswerSimilar: $similar, idempotencyKey: $key) {
        id state openQuestion { id } questions { status answer answeredBy } } }";

/// `n` agents of `fleet`, each holding one unit blocked on its question; the units' ids.
async fn blocked(app: &TestApp, fleet: &str, questions: &[&str]) -> Vec<(String, String)> {
    let op = app.token(fleet, "op", Role::Operator).await;
    let refs: Vec<String> = (0..questions.len()).map(|i| format!("{fleet}/q{i}")).collect();
    let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
    app.register(&op, &refs).await;
    let mut out = Vec::new();
    for (i, question) in questions.iter().enumerate() {
        let agent = Agent::new(app, fleet, &format!("asker-{i}"), Role::Agent).await;
        let unit = agent.claim_next(json!({})).await.str("id");
        agent.transition(&unit, "IN_PROGRESS", json!({})).await.unit();
        let asked = agent.block(&unit, question, json!({})).await;
        out.push((unit, asked.unit()["openQuestion"]["id"].as_str().expect("question").to_owned()));
    }
    out
}

async fn unblocked_events(app: &TestApp, unit: &str) -> i64 {
    app.sql_i64(&format!("SELECT count(*) FROM work_unit_events WHERE unit_id = '{unit}' AND event_type = 'unblocked'"))
        .await
}

#[tokio::test]
async fn one_answer_clears_a_burst_of_the_same_question_and_nothing_else() {
    let app = spawn_app().await;
    let mut questions: Vec<&str> = ROUNDING.to_vec();
    questions.push("Which codepage does PAY001 write?");
    let units = blocked(&app, "f", &questions).await;
    // Another fleet asks the same: it is not ours to answer.
    let theirs = blocked(&app, "g", &[ROUNDING[0]]).await;
    let triage = app.token("f", "triage", Role::Triage).await;

    let groups = app
        .gql(&triage, "{ openQuestionGroups { question waiting questionIds unitIds answeredBefore } }", json!({}))
        .await;
    let groups = groups.data()["openQuestionGroups"].as_array().expect("groups").clone();
    assert_eq!(groups.len(), 2, "two distinct questions: {groups:#?}");
    assert_eq!(groups[0]["waiting"], 6, "most-waited first: {groups:#?}");
    assert_eq!(groups[0]["question"], ROUNDING[0], "the first asker's words: {groups:#?}");
    assert_eq!(groups[0]["answeredBefore"], false);
    assert_eq!(groups[1]["waiting"], 1);
    let first_question = groups[0]["questionIds"][0].as_str().expect("id").to_owned();
    let first_unit = groups[0]["unitIds"][0].as_str().expect("id").to_owned();
    assert_eq!(first_unit, units[0].0);

    let events_before = app.event_count().await;
    let answer = app
        .gql(
            &triage,
            UNBLOCK,
            json!({ "u": first_unit, "q": first_question, "a": "No: retired in 2019.", "similar": true, "key": "t-1" }),
        )
        .await;
    assert_eq!(answer.unit()["state"], "IN_PROGRESS", "{:#}", answer.body);
    assert_eq!(answer.body["extensions"]["unblock"]["alsoAnswered"], 5, "{:#}", answer.body);
    let also = answer.body["extensions"]["unblock"]["alsoAnsweredUnitIds"].as_array().expect("ids").clone();
    let mut expected: Vec<&str> = units[1..6].iter().map(|(u, _)| u.as_str()).collect();
    let mut got: Vec<&str> = also.iter().filter_map(Value::as_str).collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected);
    // Each unit of the group: answered once, with its own event, back to its holder.
    for (unit, _) in &units[..6] {
        assert_eq!(unblocked_events(&app, unit).await, 1, "{unit}");
        let state = app.sql_json(&format!("SELECT state::text AS s FROM work_units WHERE id = '{unit}'")).await;
        assert_eq!(state, [json!({ "s": "in_progress" })]);
    }
    assert_eq!(app.event_count().await, events_before + 6, "six events, nothing else");
    let answers =
        app.sql_json("SELECT DISTINCT answer, answered_by FROM blocking_questions WHERE status = 'answered'").await;
    assert_eq!(answers, [json!({ "answer": "No: retired in 2019.", "answered_by": "triage" })]);
    // The other question and the other fleet's identical one stay open.
    assert_eq!(unblocked_events(&app, &units[6].0).await, 0);
    assert_eq!(unblocked_events(&app, &theirs[0].0).await, 0);

    // A replay of the same request writes nothing more.
    let again = app
        .gql(
            &triage,
            UNBLOCK,
            json!({ "u": first_unit, "q": first_question, "a": "No: retired in 2019.", "similar": true, "key": "t-1" }),
        )
        .await;
    assert_eq!(again.unit()["id"], first_unit.as_str(), "{:#}", again.body);
    assert_eq!(app.event_count().await, events_before + 6, "the replay wrote nothing");

    // The next agent to ask sees the earlier answers and may decide on them.
    let late = Agent::new(&app, "f", "late-asker", Role::Agent).await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["f/late"]).await;
    let unit = late.claim_next(json!({})).await.str("id");
    late.transition(&unit, "IN_PROGRESS", json!({})).await.unit();
    let asked = late
        .run(
            "mutation($u: UUID!, $q: String!) { block(unitId: $u, question: $q) {
                openQuestion { id similarAnswered { question answer answeredBy } } } }",
            json!({ "u": unit, "q": "is the Rounding_Mode flag still read by the nightly batch?" }),
        )
        .await;
    let similar = asked.data()["block"]["openQuestion"]["similarAnswered"].as_array().expect("similar").clone();
    assert_eq!(similar.len(), 5, "at most five: {similar:#?}");
    assert!(similar.iter().all(|q| q["answer"] == "No: retired in 2019."), "{similar:#?}");
    let state = app.sql_json(&format!("SELECT state::text AS s FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(state, [json!({ "s": "blocked" })], "never unblocked automatically");
    // The other fleet sees none of it.
    let g_agent = app.token("g", "asker-0", Role::Agent).await;
    let theirs_q = app
        .gql(
            &g_agent,
            "query($u: UUID!) { unit(id: $u) { openQuestion { similarAnswered { id } } } }",
            json!({ "u": theirs[0].0 }),
        )
        .await;
    assert_eq!(theirs_q.data()["unit"]["openQuestion"]["similarAnswered"], json!([]));
}

/// `alsoAnswerSimilar` answers within the named question's assignee group
/// (SPEC §7): the same text asked of another group waits for that group's
/// triage, which subscribes to its own questions.
#[tokio::test]
async fn a_similar_answer_stays_within_the_named_questions_group() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["f/p0", "f/p1", "f/l0"]).await;
    let mut asked = Vec::new();
    for (i, group) in ["payroll", "payroll", "ledger"].iter().enumerate() {
        let agent = Agent::new(&app, "f", &format!("grouped-{i}"), Role::Agent).await;
        let unit = agent.claim_next(json!({})).await.str("id");
        agent.transition(&unit, "IN_PROGRESS", json!({})).await.unit();
        let blocked = agent.block(&unit, ROUNDING[i], json!({ "group": group })).await;
        asked.push((unit, blocked.unit()["openQuestion"]["id"].as_str().expect("question").to_owned()));
    }
    let triage = app.token("f", "triage", Role::Triage).await;
    let (unit, question) = &asked[0];
    let answer = app
        .gql(&triage, UNBLOCK, json!({ "u": unit, "q": question, "a": "Yes.", "similar": true, "key": "g-1" }))
        .await;
    assert_eq!(answer.unit()["state"], "IN_PROGRESS", "{:#}", answer.body);
    assert_eq!(answer.body["extensions"]["unblock"]["alsoAnsweredUnitIds"], json!([asked[1].0]), "{:#}", answer.body);
    assert_eq!(unblocked_events(&app, &asked[1].0).await, 1, "payroll's other question is answered");
    assert_eq!(unblocked_events(&app, &asked[2].0).await, 0, "ledger's question waits for ledger's triage");
    let open =
        app.sql_json(&format!("SELECT status::text AS s FROM blocking_questions WHERE id = '{}'", asked[2].1)).await;
    assert_eq!(open, [json!({ "s": "open" })]);
}

/// Two triage answers to two units of one group at the same moment: units
/// are locked in id order, so neither deadlocks; every unit is answered
/// exactly once, by one of them.
#[tokio::test]
async fn concurrent_group_answers_never_deadlock_nor_answer_twice() {
    let app = spawn_app().await;
    let units = blocked(&app, "f", &ROUNDING).await;
    let (a, b) = (app.token("f", "triage-a", Role::Triage).await, app.token("f", "triage-b", Role::Triage).await);
    let first = app.gql(&a, UNBLOCK, json!({ "u": units[0].0, "q": units[0].1, "a": "yes", "similar": true }));
    let last = app.gql(&b, UNBLOCK, json!({ "u": units[5].0, "q": units[5].1, "a": "yes", "similar": true }));
    let (first, last) = tokio::join!(first, last);
    for answer in [&first, &last] {
        let code = answer.body["errors"][0]["extensions"]["code"].as_str();
        assert!(code.is_none() || code == Some("QUESTION_NOT_OPEN"), "{:#}", answer.body);
    }
    for (unit, _) in &units {
        assert_eq!(unblocked_events(&app, unit).await, 1, "answered exactly once: {unit}");
    }
}

#[tokio::test]
async fn triage_answers_a_group_through_mcp_with_the_same_contract() {
    let app = spawn_app().await;
    let units = blocked(&app, "f", &ROUNDING[..3]).await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let call = |name: &str, arguments: Value| {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
        app.http
            .post(app.url("/mcp"))
            .header("authorization", format!("Bearer {triage}"))
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
    };
    let groups: Value = call("open_question_groups", json!({})).await.expect("post").json().await.expect("json");
    let group = &groups["result"]["structuredContent"]["groups"][0];
    assert_eq!(group["waiting"], 3, "{groups:#}");
    let answered: Value = call(
        "answer_question",
        json!({ "unitId": group["unitIds"][0], "questionId": group["questionIds"][0], "answer": "yes",
                "alsoAnswerSimilar": true }),
    )
    .await
    .expect("post")
    .json()
    .await
    .expect("json");
    let body = &answered["result"]["structuredContent"];
    assert_eq!(body["alsoAnswered"], 2, "{answered:#}");
    assert_eq!(body["unit"]["state"], "IN_PROGRESS", "{answered:#}");
    for (unit, _) in &units {
        assert_eq!(unblocked_events(&app, unit).await, 1);
    }
}

/// The triage example (examples/triage.mjs, the npm `graphql-ws` client, as
/// a newcomer would write it from the quick start): subscribed with
/// `includeOpen`, it clears a burst of identical questions with one answer
/// and leaves the question it does not know open.
#[tokio::test]
async fn the_triage_example_clears_a_burst_with_one_answer() {
    let Some(node_dir) = crate::node_client::client_dir().await else { return };
    let app = spawn_app().await;
    let mut questions: Vec<&str> = ROUNDING.to_vec();
    questions.push("Which codepage does PAY001 write?");
    let units = blocked(&app, "f", &questions).await;
    let triage = app.token("f", "triage", Role::Triage).await;

    // The example beside the test clients' node_modules, as `npm install graphql-ws ws` would leave it.
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/triage.mjs");
    std::fs::copy(&example, dir.path().join("triage.mjs")).expect("copy the example");
    std::os::unix::fs::symlink(node_dir.join("node_modules"), dir.path().join("node_modules")).expect("link");
    let answers = dir.path().join("answers.json");
    std::fs::write(
        &answers,
        json!({ "Is the ROUNDING_MODE flag still read by the nightly batch?": "No." }).to_string(),
    )
    .expect("answers");
    let run = tokio::process::Command::new("node")
        .arg(dir.path().join("triage.mjs"))
        .arg(app.url(""))
        .arg(&triage)
        .arg(&answers)
        .arg("6")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(crate::ws_client::GUARD * 2, run).await.expect("guard").expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 1, "one answer for the burst: {stdout}");
    assert_eq!(lines[0]["alsoAnswered"], 5, "{stdout}");

    let answers = app
        .sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'unblocked' AND agent_id = 'triage'")
        .await;
    assert_eq!(answers, 6, "each unit of the burst answered once");
    assert_eq!(unblocked_events(&app, &units[6].0).await, 0, "the unknown question stays open");
}

/// SPEC §9 on the triage read: `first` within 1..500, a filter by the
/// rule of the label it matches; refused before anything runs.
#[tokio::test]
async fn open_question_groups_refuses_bad_arguments_by_name() {
    let app = spawn_app().await;
    let triage = app.token("f", "triage", Role::Triage).await;
    let groups =
        "query($first: Int, $group: String) { openQuestionGroups(first: $first, assigneeGroup: $group) { waiting } }";
    for (vars, argument) in [
        (json!({ "first": 0 }), "first"),
        (json!({ "first": 501 }), "first"),
        (json!({ "group": "a\u{0}b" }), "assigneeGroup"),
        (json!({ "group": "rtl\u{202e}group" }), "assigneeGroup"),
    ] {
        let refused = app.gql(&triage, groups, vars.clone()).await;
        refused.assert_code("INVALID_INPUT");
        assert_eq!(refused.body["errors"][0]["extensions"]["argument"], argument, "{vars}: {:#}", refused.body);
    }
    let ok = app.gql(&triage, groups, json!({ "first": 500, "group": "agent-questions" })).await;
    assert_eq!(ok.data()["openQuestionGroups"], json!([]));
}
