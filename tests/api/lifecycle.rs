//! The state machine end to end, and every refusal of SPEC §5 that the write
//! path produces, each naming the next legal step and changing nothing.

use serde_json::json;
use uuid::Uuid;
use work_ledger::auth::Role;

use crate::helpers::{Agent, TestApp, spawn_app};

struct World<'a> {
    app: &'a TestApp,
    op: Agent<'a>,
    agent: Agent<'a>,
    other: Agent<'a>,
    triage: Agent<'a>,
}

async fn world(app: &TestApp) -> World<'_> {
    World {
        app,
        op: Agent::new(app, "f", "op", Role::Operator).await,
        agent: Agent::new(app, "f", "agent-1", Role::Agent).await,
        other: Agent::new(app, "f", "agent-2", Role::Agent).await,
        triage: Agent::new(app, "f", "triage", Role::Triage).await,
    }
}

impl World<'_> {
    /// A unit claimed by `agent`, optionally started.
    async fn claimed(&self, name: &str, start: bool) -> (String, String) {
        let id = self.app.register(&self.op.token, &[name]).await[0]["id"].as_str().expect("id").to_owned();
        let claimed = self.agent.claim_unit(&id, json!({})).await;
        let attempt = claimed.str("currentAttemptId");
        if start {
            self.agent.transition(&id, "IN_PROGRESS", json!({})).await.data();
        }
        (id, attempt)
    }
}

#[tokio::test]
async fn a_full_lifecycle_with_a_question_records_every_step() {
    let app = spawn_app().await;
    let w = world(&app).await;
    let (unit, attempt) = w.claimed("full", true).await;

    let blocked =
        w.agent.block(&unit, "Which date format does PAY001 expect?", json!({ "group": "payroll-experts" })).await;
    assert_eq!(blocked.str("state"), "BLOCKED");
    assert_eq!(blocked.unit()["openQuestion"]["status"], "OPEN");
    let answered = w.triage.unblock(&unit, "ISO 8601", json!({})).await;
    assert_eq!(answered.str("state"), "IN_PROGRESS");
    assert_eq!(answered.unit()["openQuestion"], json!(null));
    let answer = app
        .sql_json(&format!(
            "SELECT status::text, answer, answered_by, assignee_group FROM blocking_questions WHERE unit_id = '{unit}'"
        ))
        .await;
    assert_eq!(
        answer[0],
        json!({ "status": "answered", "answer": "ISO 8601", "answered_by": "triage", "assignee_group": "payroll-experts" })
    );

    assert_eq!(w.agent.record_cost(&attempt, 1234, "bill-1").await.unit()["costCents"], 1234);
    let verified = w.agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://git.example/pr/7" })).await;
    assert_eq!(verified.str("state"), "VERIFIED");
    assert_eq!(verified.unit()["leaseExpiresAt"], json!(null));
    assert_eq!(verified.str("claimedBy"), "agent-1");
    // The agent is free for other work while its verified unit awaits dispose.
    let done = w.agent.dispose(&unit, "MIGRATED", json!({})).await;
    assert_eq!(done.str("state"), "DONE");
    assert_eq!(done.str("disposition"), "MIGRATED");
    assert_eq!(done.unit()["evidenceUrls"], json!(["https://git.example/pr/7"]));
    assert_eq!(done.unit()["legalActions"], json!([]));

    // Bills arrive late: cost after dispose still rolls up exactly.
    assert_eq!(w.agent.record_cost(&attempt, 66, "bill-2").await.unit()["costCents"], 1300);
    assert_eq!(
        app.events_of(&unit).await,
        vec![
            "registered",
            "claimed",
            "transitioned",
            "blocked",
            "unblocked",
            "cost_recorded",
            "transitioned",
            "disposed",
            "cost_recorded"
        ]
    );
    let attempt_row = app
        .sql_json(&format!(
            "SELECT outcome::text, evidence_url, cost_cents FROM work_unit_attempts WHERE id = '{attempt}'"
        ))
        .await;
    assert_eq!(
        attempt_row[0],
        json!({ "outcome": "verified", "evidence_url": "https://git.example/pr/7", "cost_cents": 1300 })
    );
}

#[tokio::test]
async fn release_returns_the_unit_and_a_released_blocked_unit_waits_for_its_answer() {
    let app = spawn_app().await;
    let w = world(&app).await;
    let (unit, attempt) = w.claimed("released", true).await;
    let released = w.agent.release(&unit, json!({ "outcome": "FAILED", "reason": "tests do not build" })).await;
    assert_eq!(released.str("state"), "READY");
    assert_eq!(released.unit()["claimedBy"], json!(null));
    let outcome = app.sql_json(&format!("SELECT outcome::text FROM work_unit_attempts WHERE id = '{attempt}'")).await;
    assert_eq!(outcome[0]["outcome"], "failed");

    let (blocked, attempt) = w.claimed("blocked", true).await;
    w.agent.block(&blocked, "Is PAY002 dead code?", json!({})).await.data();
    let let_go = w.agent.release(&blocked, json!({})).await;
    assert_eq!(let_go.str("state"), "BLOCKED", "stays blocked until answered");
    assert_eq!(let_go.unit()["claimedBy"], json!(null));
    let outcome = app.sql_json(&format!("SELECT outcome::text FROM work_unit_attempts WHERE id = '{attempt}'")).await;
    assert_eq!(outcome[0]["outcome"], "blocked");
    // Free to take other work meanwhile: the released unit is claimable again.
    assert_eq!(w.agent.claim_next(json!({})).await.str("externalRef"), "released");
    let answered = w.triage.unblock(&blocked, "yes, drop it", json!({})).await;
    assert_eq!(answered.str("state"), "READY");
    assert_eq!(w.other.claim_unit(&blocked, json!({})).await.unit()["attemptCount"], 2);
}

#[tokio::test]
async fn dispose_rules_holder_operator_and_permanence() {
    let app = spawn_app().await;
    let w = world(&app).await;

    // Holder may abandon from IN_PROGRESS; a blocked unit's question is cancelled.
    let (unit, _) = w.claimed("abandon", true).await;
    w.agent.block(&unit, "?", json!({})).await.data();
    let dropped = w
        .agent
        .dispose(&unit, "DROPPED", json!({ "evidence": "https://wiki/decision/1", "reason": "dead code" }))
        .await;
    assert_eq!((dropped.str("state"), dropped.str("disposition")), ("ABANDONED".to_owned(), "DROPPED".to_owned()));
    let q = app.sql_json(&format!("SELECT status::text FROM blocking_questions WHERE unit_id = '{unit}'")).await;
    assert_eq!(q[0]["status"], "cancelled");
    let again = w.agent.dispose(&unit, "DEAD", json!({ "evidence": "https://wiki/2" })).await;
    again.assert_code("DISPOSITION_IMMUTABLE");
    assert!(again.message().contains("DROPPED") && again.message().contains("superseding"), "{}", again.message());

    // Operator may dispose any non-terminal unit, even READY; MIGRATED needs VERIFIED.
    let ready = app.register(&w.op.token, &["ready"]).await[0]["id"].as_str().expect("id").to_owned();
    let early = w.op.dispose(&ready, "MIGRATED", json!({ "evidence": "https://x/1" })).await;
    early.assert_code("ILLEGAL_TRANSITION");
    assert_eq!(early.body["errors"][0]["extensions"]["from"], "READY");
    let deferred = w.op.dispose(&ready, "DEFERRED", json!({ "evidence": "https://x/2" })).await;
    assert_eq!(deferred.str("state"), "ABANDONED");

    // A holder may not abandon from CLAIMED (start first, or release); another agent never.
    let (claimed, _) = w.claimed("claimed", false).await;
    let refused = w.agent.dispose(&claimed, "DEAD", json!({ "evidence": "https://x/3" })).await;
    refused.assert_code("ILLEGAL_TRANSITION");
    let legal = refused.body["errors"][0]["extensions"]["legalActions"].as_array().expect("legalActions").clone();
    assert!(legal.contains(&json!("transition(to: IN_PROGRESS)")), "{legal:?}");
    w.other.dispose(&claimed, "DEAD", json!({ "evidence": "https://x/3" })).await.assert_code("NOT_CLAIM_HOLDER");
    w.agent.dispose(&claimed, "DEAD", json!({})).await.assert_code("EVIDENCE_REQUIRED");
}

#[tokio::test]
async fn every_write_path_error_code_names_the_next_step_and_changes_nothing() {
    let app = spawn_app().await;
    let w = world(&app).await;
    let (unit, attempt) = w.claimed("errors", false).await;
    let before = app.snapshot(&unit).await;

    let r = w.agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci/1" })).await;
    r.assert_code("ILLEGAL_TRANSITION");
    assert!(r.message().contains("CLAIMED") && r.message().contains("transition(to: IN_PROGRESS)"), "{}", r.message());
    assert_eq!(r.body["errors"][0]["extensions"]["to"], "VERIFIED");

    let r = w.agent.transition(&unit, "DONE", json!({})).await;
    r.assert_code("ILLEGAL_TRANSITION");

    let r = w.other.transition(&unit, "IN_PROGRESS", json!({})).await;
    r.assert_code("NOT_CLAIM_HOLDER");
    assert!(r.message().contains("agent-1") && r.message().contains("claimNext"), "{}", r.message());
    w.other.heartbeat(&attempt, json!({})).await.assert_code("NOT_CLAIM_HOLDER");
    w.other.record_cost(&attempt, 5, "steal").await.assert_code("NOT_CLAIM_HOLDER");

    let r = w.agent.transition(&unit, "VERIFIED", json!({})).await;
    r.assert_code("EVIDENCE_REQUIRED");
    assert!(r.message().contains("evidenceUrl"), "{}", r.message());

    let r = w.agent.unblock(&unit, "answer", json!({})).await;
    r.assert_code("FORBIDDEN");
    assert!(r.message().contains("questions:answer"), "{}", r.message());
    let r = w.triage.unblock(&unit, "answer", json!({})).await;
    r.assert_code("ILLEGAL_TRANSITION");
    let r = w.triage.claim_next(json!({})).await;
    r.assert_code("FORBIDDEN");

    let missing = Uuid::new_v4().to_string();
    let r = w.agent.claim_unit(&missing, json!({})).await;
    r.assert_code("NOT_FOUND");
    assert!(r.message().contains("unitByRef"), "{}", r.message());
    w.agent.heartbeat(&missing, json!({})).await.assert_code("NOT_FOUND");
    w.agent.record_cost(&missing, 1, "k").await.assert_code("NOT_FOUND");
    w.agent.release(&missing, json!({})).await.assert_code("NOT_FOUND");
    w.op.dispose(&missing, "DEAD", json!({ "evidence": "https://x" })).await.assert_code("NOT_FOUND");

    // Another fleet's ids are NOT_FOUND, never FORBIDDEN.
    let stranger = Agent::new(&app, "g", "agent-1", Role::Operator).await;
    stranger.claim_unit(&unit, json!({})).await.assert_code("NOT_FOUND");
    stranger.heartbeat(&attempt, json!({})).await.assert_code("NOT_FOUND");
    stranger.dispose(&unit, "DEAD", json!({ "evidence": "https://x" })).await.assert_code("NOT_FOUND");
    stranger.record_cost(&attempt, 1, "k").await.assert_code("NOT_FOUND");

    app.assert_unchanged(&unit, &before, "the refusals").await;
}

/// `unblock(questionId:)` answers only the question it names (SPEC §5,
/// QUESTION_NOT_OPEN): a late or repeated delivery of an old question
/// cannot answer the newer one on the same unit, and changes nothing.
#[tokio::test]
async fn an_answer_to_a_question_no_longer_open_is_question_not_open() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    let unit = app.register(&op, &["asks-twice"]).await[0]["id"].as_str().expect("id").to_owned();
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let triage = Agent::new(&app, "f", "triage", Role::Triage).await;
    agent.claim_next(json!({})).await.unit();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let first = agent.block(&unit, "Which calendar?", json!({})).await.data()["r"]["openQuestion"]["id"]
        .as_str()
        .expect("question")
        .to_owned();
    let answered = triage.unblock(&unit, "Gregorian", json!({ "q": first })).await;
    assert_eq!(answered.data()["r"]["state"], "IN_PROGRESS", "{:#}", answered.body);
    let second = agent.block(&unit, "Which time zone?", json!({})).await.data()["r"]["openQuestion"]["id"]
        .as_str()
        .expect("question")
        .to_owned();
    let before = app.sql_json(&format!("SELECT state::text, (SELECT count(*) FROM work_unit_events e WHERE e.unit_id = u.id) AS events FROM work_units u WHERE id = '{unit}'")).await;

    // The first question's answer delivered again: refused, naming the open one.
    let late = triage.unblock(&unit, "Gregorian", json!({ "q": first })).await;
    let ext = &late.body["errors"][0]["extensions"];
    assert_eq!(ext["code"], "QUESTION_NOT_OPEN", "{:#}", late.body);
    assert_eq!(ext["questionId"], first.as_str());
    assert_eq!(ext["openQuestionId"], second.as_str());
    assert_eq!(ext["state"], "BLOCKED");
    let after = app.sql_json(&format!("SELECT state::text, (SELECT count(*) FROM work_unit_events e WHERE e.unit_id = u.id) AS events FROM work_units u WHERE id = '{unit}'")).await;
    assert_eq!(after, before, "the refused answer changed nothing");
    let open = app.sql_json(&format!("SELECT status::text AS s FROM blocking_questions WHERE id = '{second}'")).await;
    assert_eq!(open, vec![json!({ "s": "open" })]);

    // The right question is answered.
    let answered = triage.unblock(&unit, "UTC", json!({ "q": second })).await;
    assert_eq!(answered.data()["r"]["state"], "IN_PROGRESS", "{:#}", answered.body);
}
