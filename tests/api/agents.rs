//! What a new agent meets with only a URL and a token (issue: agents
//! unassisted): errors that say what was meant, refusals ordered by what
//! matters most and carrying the unit's facts, one identifier per call, and
//! `me` saying what the agent holds.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, Gql, spawn_app};

fn assert_unit_facts(r: &Gql, unit: &str, state: &str) {
    let ext = &r.body["errors"][0]["extensions"];
    assert_eq!(ext["unitId"], unit, "{:#}", r.body);
    assert_eq!(ext["state"], state, "{:#}", r.body);
    assert!(ext["legalActions"].is_array(), "{:#}", r.body);
}

#[tokio::test]
async fn unknown_names_get_a_code_and_what_was_probably_meant() {
    let app = spawn_app().await;
    let agent = Agent::new(&app, "f", "newcomer", Role::Agent).await;

    // The guess a new agent makes first.
    let r = agent.run("mutation { claim { id } }", json!({})).await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    assert!(r.message().contains(r#"Did you mean "claimNext", "claimUnit"?"#), "{}", r.message());

    // Nothing close: the entry points are listed, with where the quick start is.
    let r = agent.run("mutation { frobnicate }", json!({})).await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    for entry in ["claimNext", "heartbeat", "transition", "recordCost", "dispose"] {
        assert!(r.message().contains(entry), "{entry} missing: {}", r.message());
    }
    assert!(r.message().contains("GET /"), "{}", r.message());

    let r = agent.run("{ unitz(first: 1) { edges { cursor } } }", json!({})).await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    assert!(r.message().contains(r#""units""#), "{}", r.message());

    let r = agent
        .run(r#"mutation { transition(unitId: "00000000-0000-0000-0000-000000000000", to: VERIFY) { id } }"#, json!({}))
        .await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    assert!(r.message().contains(r#""VERIFIED""#), "{}", r.message());

    let r = agent.run("mutation { claimNext(leaseSecs: 60) { id } }", json!({})).await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    assert!(r.message().contains(r#""leaseSeconds""#), "{}", r.message());

    let r = agent.run("mutation { claimNext( { id } }", json!({})).await;
    r.assert_code("GRAPHQL_PARSE_FAILED");
}

#[tokio::test]
async fn a_disposed_unit_is_refused_as_such_before_any_argument_is_checked() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let unit = app.register(&op.token, &["done"]).await[0]["id"].as_str().expect("id").to_owned();
    agent.claim_unit(&unit, json!({})).await.data();
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci.example/1" })).await.data();
    agent.dispose(&unit, "MIGRATED", json!({})).await.data();
    let events = app.event_count().await;

    // A second dispose without evidence: the permanence matters more than the missing link.
    let r = agent.dispose(&unit, "DROPPED", json!({})).await;
    r.assert_code("DISPOSITION_IMMUTABLE");
    assert_unit_facts(&r, &unit, "DONE");
    assert_eq!(r.body["errors"][0]["extensions"]["legalActions"], json!([]));
    // Bad arguments on any other write of a disposed unit: ILLEGAL_TRANSITION first.
    let r = agent.transition(&unit, "VERIFIED", json!({})).await;
    r.assert_code("ILLEGAL_TRANSITION");
    assert_unit_facts(&r, &unit, "DONE");
    let r = agent.block(&unit, &"?".repeat(9000), json!({})).await;
    r.assert_code("ILLEGAL_TRANSITION");
    let r = agent.release(&unit, json!({ "outcome": "FAILED" })).await;
    r.assert_code("ILLEGAL_TRANSITION");
    assert_eq!(app.event_count().await, events, "refusals write nothing");

    // On a live unit the argument error stays, with the unit's facts.
    let live = app.register(&op.token, &["live"]).await[0]["id"].as_str().expect("id").to_owned();
    agent.claim_unit(&live, json!({})).await.data();
    agent.transition(&live, "IN_PROGRESS", json!({})).await.data();
    let r = agent.transition(&live, "VERIFIED", json!({})).await;
    r.assert_code("EVIDENCE_REQUIRED");
    assert_unit_facts(&r, &live, "IN_PROGRESS");
}

#[tokio::test]
async fn every_refusal_about_a_unit_carries_its_id_state_and_legal_actions() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let holder = Agent::new(&app, "f", "holder", Role::Agent).await;
    let other = Agent::new(&app, "f", "other", Role::Agent).await;
    let units = app.register(&op.token, &["a", "b"]).await;
    let (a, b) = (units[0]["id"].as_str().expect("id"), units[1]["id"].as_str().expect("id"));
    holder.claim_unit(a, json!({})).await.data();

    let r = other.transition(a, "IN_PROGRESS", json!({})).await;
    r.assert_code("NOT_CLAIM_HOLDER");
    assert_unit_facts(&r, a, "CLAIMED");
    let r = other.claim_unit(a, json!({})).await;
    r.assert_code("UNIT_ALREADY_CLAIMED");
    assert_unit_facts(&r, a, "CLAIMED");
    assert!(r.body["errors"][0]["extensions"]["leaseExpiresAt"].is_string(), "{:#}", r.body);
    let r = holder.claim_unit(b, json!({})).await;
    r.assert_code("AGENT_BUSY");
    assert_unit_facts(&r, b, "READY");
    let r = holder.transition(a, "VERIFIED", json!({ "evidence": "https://ci.example/x" })).await;
    r.assert_code("ILLEGAL_TRANSITION");
    assert_unit_facts(&r, a, "CLAIMED");
    assert_eq!(
        r.body["errors"][0]["extensions"]["legalActions"],
        json!([
            "heartbeat(attemptId)",
            "transition(to: IN_PROGRESS)",
            "release",
            "recordCost(unitId, cents, idempotencyKey)"
        ])
    );
}

#[tokio::test]
async fn record_cost_takes_a_unit_id_and_me_says_what_is_held_and_awaits_disposition() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let other = Agent::new(&app, "f", "agent-2", Role::Agent).await;
    app.register(&op.token, &["first", "second"]).await;
    let me = "{ me { name heldUnit { externalRef state } awaitingDisposition { externalRef } } }";
    let cost = "mutation($u: UUID, $a: UUID, $k: String!) { r: recordCost(unitId: $u, attemptId: $a, cents: 125, idempotencyKey: $k) { costCents } }";

    assert_eq!(agent.run(me, json!({})).await.data()["me"]["heldUnit"], json!(null));
    let first = agent.claim_next(json!({})).await.str("id");
    agent.transition(&first, "IN_PROGRESS", json!({})).await.data();
    let held = agent.run(me, json!({})).await;
    assert_eq!(held.data()["me"]["heldUnit"], json!({ "externalRef": "first", "state": "IN_PROGRESS" }));

    // One identifier per call: the unit the agent works on.
    let r = agent.run(cost, json!({ "u": first, "k": "bill-1" })).await;
    assert_eq!(r.data()["r"]["costCents"], 125);
    let r = agent.run(cost, json!({ "u": first, "k": "bill-1" })).await;
    assert_eq!(r.data()["r"]["costCents"], 125, "a replay counts once");
    let r = agent.run(cost, json!({ "k": "bill-2" })).await;
    r.assert_code("INVALID_INPUT");
    let attempt = agent.run("{ me { heldUnit { currentAttemptId } } }", json!({})).await.data()["me"]["heldUnit"]
        ["currentAttemptId"]
        .clone();
    let r = agent.run(cost, json!({ "u": first, "a": attempt, "k": "bill-3" })).await;
    r.assert_code("INVALID_INPUT");
    let r = other.run(cost, json!({ "u": first, "k": "bill-4" })).await;
    r.assert_code("NOT_CLAIM_HOLDER");
    assert_unit_facts(&r, &first, "IN_PROGRESS");

    // After VERIFIED the unit is no longer held: the next claim gives a second unit,
    // and the verified one waits for its disposition.
    agent.transition(&first, "VERIFIED", json!({ "evidence": "https://ci.example/1" })).await.data();
    let after = agent.run(me, json!({})).await;
    assert_eq!(after.data()["me"]["heldUnit"], json!(null));
    assert_eq!(after.data()["me"]["awaitingDisposition"], json!([{ "externalRef": "first" }]));
    let second = agent.claim_next(json!({})).await;
    assert_eq!(second.str("externalRef"), "second");
    // A late bill on the verified unit still lands on its attempt.
    let r = agent.run(cost, json!({ "u": first, "k": "bill-5" })).await;
    assert_eq!(r.data()["r"]["costCents"], 250);
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{first}'")).await, 250);
    agent.dispose(&first, "MIGRATED", json!({})).await.data();
    let done = agent.run(me, json!({})).await;
    assert_eq!(done.data()["me"]["awaitingDisposition"], json!([]));
    assert_eq!(done.data()["me"]["heldUnit"]["externalRef"], "second");
}

#[tokio::test]
async fn a_client_that_is_not_a_browser_gets_a_quick_start_whose_documents_are_valid() {
    let app = spawn_app().await;
    let resp = app.http.get(app.url("/")).header("accept", "*/*").send().await.expect("GET /");
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().expect("type").to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = resp.text().await.expect("text");
    for needed in ["Authorization: Bearer", "/graphql", "/mcp", "claim_next", "DISPOSITION_IMMUTABLE", "legalActions"]
        .into_iter()
        // The triage desk's section: what to subscribe to, which group, how to answer, on both doors.
        .chain(["TRIAGE", "includeOpen", "agent-questions", "questionId", "alsoAnswerSimilar", "answer_question"])
    {
        assert!(text.contains(needed), "{needed} missing from:\n{text}");
    }
    // The schema's own description of claimNext explains the step.
    assert!(text.contains("Claims the oldest claimable unit"), "{text}");

    // Every document the text shows is valid against the schema: sent as shown, with
    // the <...> placeholders filled, none is refused as unparsable or invalid.
    let agent = Agent::new(&app, "f", "reader-of-docs", Role::Agent).await;
    let documents: Vec<(String, &str)> = work_ledger::http::quickstart::documents().collect();
    assert!(documents.len() >= 8);
    for (document, variables) in documents {
        assert!(text.contains(&document), "the text shows {document}");
        let mut vars: serde_json::Value = serde_json::from_str(variables).expect("variables are JSON");
        for value in vars.as_object_mut().expect("object").values_mut() {
            if value.as_str().is_some_and(|v| v.starts_with('<')) {
                *value = json!(uuid::Uuid::new_v4().to_string());
            }
        }
        let r = agent.run(&document, vars).await;
        let code = r.body["errors"][0]["extensions"]["code"].as_str().unwrap_or("");
        assert!(!code.starts_with("GRAPHQL_"), "{document}: {:#}", r.body);
    }

    // A request without a token is pointed to the quick start.
    let r = app.post_raw(None, json!({ "query": "{ me { name } }" }).to_string()).await;
    assert_eq!(r.status, 401);
    assert!(r.message().contains("GET /"), "{}", r.message());
}
