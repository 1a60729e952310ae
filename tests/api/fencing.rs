//! Fencing by attempt (SPEC §3): `transition`, `block`, `release` and
//! `dispose` take an optional `attemptId`; a stale process of the same agent
//! that still holds an older attempt id cannot write onto the newer attempt.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app};

const TRANSITION: &str =
    "mutation($u: UUID!, $a: UUID) { r: transition(unitId: $u, to: IN_PROGRESS, attemptId: $a) { id state } }";
const BLOCK: &str =
    "mutation($u: UUID!, $a: UUID) { r: block(unitId: $u, question: \"q?\", attemptId: $a) { id state } }";
const RELEASE: &str = "mutation($u: UUID!, $a: UUID) { r: release(unitId: $u, attemptId: $a) { id state } }";
const DISPOSE: &str = "mutation($u: UUID!, $a: UUID) { r: dispose(unitId: $u, disposition: DEAD, evidenceUrl: \"https://wiki/x\", attemptId: $a) { id state } }";

#[tokio::test]
async fn a_stale_attempt_id_is_lease_lost_and_writes_nothing() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["u"]).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;

    // Attempt 1, released; the same agent claims again: attempt 2.
    let first = agent.claim_next(json!({})).await;
    let (unit, old) = (first.str("id"), first.str("currentAttemptId"));
    agent.release(&unit, json!({})).await.data();
    let second = agent.claim_next(json!({})).await;
    assert_eq!(second.str("id"), unit);
    let current = second.str("currentAttemptId");
    assert_ne!(current, old);

    let before = app.snapshot(&unit).await;
    for (name, query) in [("transition", TRANSITION), ("block", BLOCK), ("release", RELEASE), ("dispose", DISPOSE)] {
        let r = agent.run(query, json!({ "u": unit, "a": old })).await;
        assert_eq!(r.code(), "LEASE_LOST", "{name}: {:#}", r.body);
        assert_eq!(r.body["errors"][0]["extensions"]["unitId"], unit.as_str(), "{name}");
        // An attempt id that never existed is no better.
        let r = agent.run(query, json!({ "u": unit, "a": uuid::Uuid::new_v4() })).await;
        assert_eq!(r.code(), "LEASE_LOST", "{name}: {:#}", r.body);
    }
    app.assert_unchanged(&unit, &before, "the stale attempt's writes").await;
    let state = app
        .sql_json(&format!("SELECT state::text, current_attempt_id::text FROM work_units WHERE id = '{unit}'"))
        .await;
    assert_eq!(state[0], json!({ "state": "claimed", "current_attempt_id": current }));

    // The current attempt id passes, and leaving it out still works.
    let r = agent.run(TRANSITION, json!({ "u": unit, "a": current })).await;
    assert_eq!(r.unit()["state"], "IN_PROGRESS", "{:#}", r.body);
    agent.run(DISPOSE, json!({ "u": unit, "a": current })).await.data();
    // A disposed unit says so before any argument is looked at.
    agent.run(DISPOSE, json!({ "u": unit, "a": old })).await.assert_code("DISPOSITION_IMMUTABLE");
}
