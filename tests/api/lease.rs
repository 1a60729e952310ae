//! Leases: a dead agent's unit comes back, and the old holder can change nothing.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, spawn_app};

#[tokio::test]
async fn an_expired_lease_is_reclaimed_and_the_old_holder_loses_it() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["unit"]).await;
    let old = Agent::new(&app, "f", "old", Role::Agent).await;
    let new = Agent::new(&app, "f", "new", Role::Agent).await;

    let claimed = old.claim_next(json!({ "lease": 30 })).await;
    let (unit, old_attempt) = (claimed.str("id"), claimed.str("currentAttemptId"));
    old.transition(&unit, "IN_PROGRESS", json!({})).await.data();

    // A live lease is not claimable by others.
    assert!(new.claim_next(json!({})).await.unit().is_null());

    // Lease ran out, nobody reclaimed yet: the holder may still heartbeat.
    app.expire_lease(&unit).await;
    let stalled =
        app.gql(&op, "query($id: UUID!) { unit(id: $id) { stalled legalActions } }", json!({ "id": unit })).await;
    assert_eq!(stalled.data()["unit"]["stalled"], true);
    old.heartbeat(&old_attempt, json!({})).await.data();

    app.expire_lease(&unit).await;
    let reclaimed = new.claim_next(json!({})).await;
    assert_eq!(reclaimed.str("id"), unit, "stale units are taken");
    assert_eq!(reclaimed.unit()["attemptCount"], 2);
    assert_eq!(reclaimed.str("claimedBy"), "new");
    let new_attempt = reclaimed.str("currentAttemptId");
    assert_ne!(new_attempt, old_attempt);

    let attempts = app
        .sql_json(&format!("SELECT attempt_no, agent_id, outcome::text FROM work_unit_attempts WHERE unit_id = '{unit}' ORDER BY attempt_no"))
        .await;
    assert_eq!(
        attempts,
        vec![
            json!({ "attempt_no": 1, "agent_id": "old", "outcome": "superseded" }),
            json!({ "attempt_no": 2, "agent_id": "new", "outcome": null }),
        ]
    );
    assert_eq!(
        app.events_of(&unit).await,
        vec!["registered", "claimed", "transitioned", "heartbeat", "stale_reclaimed", "claimed"]
    );

    let before = app.snapshot(&unit).await;
    let lost = old.heartbeat(&old_attempt, json!({})).await;
    lost.assert_code("LEASE_LOST");
    assert!(lost.message().contains("claimNext"), "{}", lost.message());
    old.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci/1" })).await.assert_code("LEASE_LOST");
    old.release(&unit, json!({})).await.assert_code("LEASE_LOST");
    old.block(&unit, "still mine?", json!({})).await.assert_code("LEASE_LOST");
    app.assert_unchanged(&unit, &before, "the old holder's writes").await;

    // The old holder's unit is gone, so it is free to claim other work.
    assert!(old.claim_next(json!({})).await.unit().is_null());
}

#[tokio::test]
async fn a_stale_unit_is_taken_before_ready_ones() {
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["first", "second"]).await;
    let a = Agent::new(&app, "f", "a", Role::Agent).await;
    let first = a.claim_next(json!({})).await.str("id");
    app.expire_lease(&first).await;
    let b = Agent::new(&app, "f", "b", Role::Agent).await;
    assert_eq!(b.claim_next(json!({})).await.str("id"), first);
}

#[tokio::test]
async fn a_blocked_unit_never_stalls_and_unblock_gives_a_fresh_lease() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    app.register(&op.token, &["u"]).await;
    let a = Agent::new(&app, "f", "a", Role::Agent).await;
    let unit = a.claim_next(json!({})).await.str("id");
    a.transition(&unit, "IN_PROGRESS", json!({})).await.data();
    let blocked = a.block(&unit, "which schema?", json!({})).await;
    assert_eq!(blocked.unit()["leaseExpiresAt"], json!(null), "lease suspended");
    let b = Agent::new(&app, "f", "b", Role::Agent).await;
    assert!(b.claim_next(json!({})).await.unit().is_null(), "a blocked unit is not claimable");
    let unblocked = op.unblock(&unit, "v2", json!({})).await;
    assert_eq!(unblocked.str("state"), "IN_PROGRESS");
    assert_eq!(unblocked.str("claimedBy"), "a");
    assert!(!unblocked.str("leaseExpiresAt").is_empty());
}

/// The holder renews its stale lease (`claimUnit` on its own unit) while
/// another agent reclaims it. A third session holding the unit's row lock
/// lines them up: the reclaim first, then the renewal. The renewal must be
/// LEASE_LOST, never INTERNAL.
#[tokio::test]
async fn a_renewal_racing_a_reclaim_is_lease_lost() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let app = spawn_app().await;
    let op = app.token("f", "op", Role::Operator).await;
    app.register(&op, &["unit"]).await;
    let old = Agent::new(&app, "f", "old", Role::Agent).await;
    let new = Agent::new(&app, "f", "new", Role::Agent).await;
    let claimed = old.claim_next(json!({})).await;
    let unit = claimed.str("id");
    app.expire_lease(&unit).await;

    let gate = app.owner.begin().await.expect("begin");
    gate.execute_unprepared(&format!("SELECT 1 FROM work_units WHERE id = '{unit}' FOR UPDATE")).await.expect("lock");
    let reclaim = tokio::spawn({
        let (app_url, token, unit) = (app.url("/graphql"), new.token.clone(), unit.clone());
        async move { claim_unit_over_http(&app_url, &token, &unit).await }
    });
    app.wait_for_lock_waiters(1).await;
    let renew = tokio::spawn({
        let (app_url, token, unit) = (app.url("/graphql"), old.token.clone(), unit.clone());
        async move { claim_unit_over_http(&app_url, &token, &unit).await }
    });
    app.wait_for_lock_waiters(2).await;
    gate.rollback().await.expect("release the gate");

    let reclaimed = reclaim.await.expect("reclaim task");
    assert_eq!(reclaimed["data"]["r"]["claimedBy"], "new", "{reclaimed:#}");
    let renewed = renew.await.expect("renew task");
    assert_eq!(renewed["errors"][0]["extensions"]["code"], "LEASE_LOST", "{renewed:#}");
    assert_eq!(
        app.events_of(&unit).await,
        vec!["registered", "claimed", "stale_reclaimed", "claimed"],
        "the renewal wrote nothing"
    );
}

async fn claim_unit_over_http(url: &str, token: &str, unit: &str) -> serde_json::Value {
    let body = json!({
        "query": "mutation($id: UUID!) { r: claimUnit(id: $id) { id claimedBy } }",
        "variables": { "id": unit },
    });
    let resp = reqwest::Client::new().post(url).bearer_auth(token).json(&body).send().await.expect("request");
    resp.json().await.expect("JSON body")
}
