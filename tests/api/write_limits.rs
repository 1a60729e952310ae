//! Every SPEC §9 limit on the write path: INVALID_INPUT (or a GraphQL
//! validation error), nothing written.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, Gql, spawn_app};

fn assert_invalid(r: &Gql, argument: &str) {
    r.assert_code("INVALID_INPUT");
    assert_eq!(r.body["errors"][0]["extensions"]["argument"], argument, "{:#}", r.body);
    assert!(r.message().contains(argument), "{}", r.message());
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
    let before = app.event_count().await;
    let long = "q".repeat(8001);
    let long_url = format!("https://x/{}", "a".repeat(2040));

    assert_invalid(&agent.claim_next(json!({ "lease": 29 })).await, "leaseSeconds");
    assert_invalid(&agent.claim_next(json!({ "lease": 86_401 })).await, "leaseSeconds");
    assert_invalid(&agent.claim_unit(&unit, json!({ "lease": 0 })).await, "leaseSeconds");
    assert_invalid(&agent.heartbeat(&attempt, json!({ "lease": 100_000 })).await, "leaseSeconds");
    assert_invalid(&agent.claim_next(json!({ "key": "k".repeat(257) })).await, "idempotencyKey");
    assert_invalid(&agent.claim_next(json!({ "key": "" })).await, "idempotencyKey");
    assert_invalid(&agent.record_cost(&attempt, -1, "c1").await, "cents");
    assert_invalid(&agent.record_cost(&attempt, 1_000_000_001, "c2").await, "cents");
    assert_invalid(&agent.block(&unit, &long, json!({})).await, "question");
    assert_invalid(&agent.block(&unit, "   ", json!({})).await, "question");
    assert_invalid(&op.unblock(&unit, &long, json!({})).await, "answer");
    for bad in ["ftp://x/y", "not a url", "/relative/path", "data:text/plain,payload", long_url.as_str()] {
        assert_invalid(&agent.transition(&unit, "VERIFIED", json!({ "evidence": bad })).await, "evidenceUrl");
        assert_invalid(&agent.dispose(&unit, "DEAD", json!({ "evidence": bad })).await, "evidenceUrl");
    }
    assert_invalid(&agent.release(&unit, json!({ "outcome": "VERIFIED" })).await, "outcome");
    assert_invalid(&agent.release(&unit, json!({ "reason": long })).await, "reason");

    // Beyond 32 bits is the GraphQL layer's own validation error; still nothing written.
    let r = agent.claim_next(json!({ "lease": 5_000_000_000i64 })).await;
    assert!(r.body.get("errors").is_some(), "{:#}", r.body);

    assert_eq!(app.event_count().await, before, "nothing written");
    // The boundaries pass.
    agent.heartbeat(&attempt, json!({ "lease": 86_400 })).await.data();
    agent.record_cost(&attempt, 1_000_000_000, "max").await.data();
    agent.record_cost(&attempt, 0, "zero").await.data();
    agent.transition(&unit, "VERIFIED", json!({ "evidence": format!("https://x/{}", "a".repeat(2038)) })).await.data();
}
