//! Every SPEC §9 limit on the write path: INVALID_INPUT (or a GraphQL
//! validation error), nothing written.

use std::future::Future;

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, Gql, TestApp, spawn_app};

/// `request` is refused as INVALID_INPUT naming `argument`, and every row it
/// could have touched (the unit, its attempt, question and events, the
/// ledger's counts) is as it was. Each refusal is checked on its own, so the
/// unit every case meets is the same as a fresh one would be.
async fn refused(app: &TestApp, unit: &str, argument: &str, request: impl Future<Output = Gql>) {
    let before = app.snapshot(unit).await;
    let r = request.await;
    r.assert_code("INVALID_INPUT");
    assert_eq!(r.body["errors"][0]["extensions"]["argument"], argument, "{:#}", r.body);
    assert!(r.message().contains(argument), "{}", r.message());
    app.assert_unchanged(unit, &before, &format!("the refusal of {argument}")).await;
}

#[tokio::test]
async fn write_path_limits_are_invalid_input_and_write_nothing() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    app.register(&op.token, &["a"]).await;
    let claim = agent.claim_next(json!({ "lease": 30 })).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));
    agent.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let long = "q".repeat(8001);
    let long_url = format!("https://x/{}", "a".repeat(2040));
    let u = unit.as_str();

    refused(&app, u, "leaseSeconds", agent.claim_next(json!({ "lease": 29 }))).await;
    refused(&app, u, "leaseSeconds", agent.claim_next(json!({ "lease": 86_401 }))).await;
    refused(&app, u, "leaseSeconds", agent.claim_unit(&unit, json!({ "lease": 0 }))).await;
    refused(&app, u, "leaseSeconds", agent.heartbeat(&attempt, json!({ "lease": 100_000 }))).await;
    refused(&app, u, "idempotencyKey", agent.claim_next(json!({ "key": "k".repeat(257) }))).await;
    refused(&app, u, "idempotencyKey", agent.claim_next(json!({ "key": "" }))).await;
    refused(&app, u, "cents", agent.record_cost(&attempt, -1, "c1")).await;
    refused(&app, u, "cents", agent.record_cost(&attempt, 1_000_000_001, "c2")).await;
    refused(&app, u, "question", agent.block(&unit, &long, json!({}))).await;
    refused(&app, u, "question", agent.block(&unit, "   ", json!({}))).await;
    refused(&app, u, "answer", op.unblock(&unit, &long, json!({}))).await;
    for bad in ["ftp://x/y", "not a url", "/relative/path", "data:text/plain,payload", long_url.as_str()] {
        refused(&app, u, "evidenceUrl", agent.transition(&unit, "VERIFIED", json!({ "evidence": bad }))).await;
        refused(&app, u, "evidenceUrl", agent.dispose(&unit, "DEAD", json!({ "evidence": bad }))).await;
    }
    refused(&app, u, "reason", agent.release(&unit, json!({ "reason": long }))).await;

    // Beyond 32 bits is the GraphQL layer's own validation error, naming the
    // variable; still nothing written.
    let before = app.snapshot(u).await;
    let r = agent.claim_next(json!({ "lease": 5_000_000_000i64 })).await;
    r.assert_code("GRAPHQL_VALIDATION_FAILED");
    assert!(r.message().contains("$lease"), "{}", r.message());
    app.assert_unchanged(u, &before, "the 64-bit lease").await;

    // The boundaries pass.
    agent.heartbeat(&attempt, json!({ "lease": 86_400 })).await.data();
    agent.record_cost(&attempt, 1_000_000_000, "max").await.data();
    agent.record_cost(&attempt, 0, "zero").await.data();
    agent.transition(&unit, "VERIFIED", json!({ "evidence": format!("https://x/{}", "a".repeat(2038)) })).await.data();
}
