//! Idempotency keys: a replay writes nothing and returns the current unit; a
//! key reused for another request is IDEMPOTENCY_KEY_REUSED.

use futures::future::join_all;
use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Agent, Gql, spawn_app};
use crate::mcp::tool;

#[tokio::test]
async fn replaying_every_mutation_writes_no_second_event() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    app.register(&op.token, &["a", "b"]).await;

    // Each step twice with the same key: the second returns the unit, writes nothing.
    let claim = agent.claim_next(json!({ "key": "k-claim" })).await;
    let unit = claim.str("id");
    let attempt = claim.str("currentAttemptId");
    // "Writes nothing" is every row the write could touch as it was (the
    // lease and `updated_at` too), not only "no new event".
    let before = app.snapshot(&unit).await;
    assert_eq!(agent.claim_next(json!({ "key": "k-claim" })).await.str("id"), unit);
    app.assert_unchanged(&unit, &before, "the claim replay (a renewed lease?)").await;

    // Runs the step, then replays it: same unit back, nothing written.
    macro_rules! twice {
        ($name:literal, $step:expr) => {{
            let first = $step.await;
            first.data();
            let before = app.snapshot(&unit).await;
            let replay = $step.await;
            assert_eq!(replay.unit()["id"], first.unit()["id"], $name);
            assert_eq!(replay.unit(), first.unit(), "{} replay returned another unit", $name);
            app.assert_unchanged(&unit, &before, &format!("the {} replay", $name)).await;
        }};
    }
    twice!("start", agent.transition(&unit, "IN_PROGRESS", json!({ "key": "k-start" })));
    twice!("cost", agent.record_cost(&attempt, 100, "k-cost"));
    twice!("block", agent.block(&unit, "q?", json!({ "key": "k-block" })));
    twice!("unblock", op.unblock(&unit, "a!", json!({ "key": "k-unblock" })));
    twice!("verify", agent.transition(&unit, "VERIFIED", json!({ "evidence": "https://ci/9", "key": "k-verify" })));
    twice!("dispose", agent.dispose(&unit, "MIGRATED", json!({ "key": "k-dispose" })));
    // Replays return the *current* unit: the start replayed after dispose shows DONE.
    let before = app.snapshot(&unit).await;
    let late = agent.transition(&unit, "IN_PROGRESS", json!({ "key": "k-start" })).await;
    assert_eq!(late.str("state"), "DONE");
    app.assert_unchanged(&unit, &before, "a late replay").await;
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 100);

    // release and claimUnit replays.
    let other = agent.claim_next(json!({})).await.str("id");
    let released = agent.release(&other, json!({ "key": "k-release" })).await;
    assert_eq!(released.str("state"), "READY");
    let before = app.snapshot(&other).await;
    agent.release(&other, json!({ "key": "k-release" })).await.data();
    app.assert_unchanged(&other, &before, "the release replay").await;
    let n = app.event_count().await;
    let claimed = agent.claim_unit(&other, json!({ "key": "k-claim-unit" })).await;
    claimed.data();
    assert_eq!(app.event_count().await, n + 1);
    let before = app.snapshot(&other).await;
    agent.claim_unit(&other, json!({ "key": "k-claim-unit" })).await.data();
    app.assert_unchanged(&other, &before, "the claimUnit replay").await;
}

#[tokio::test]
async fn a_key_reused_for_another_request_is_refused() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    app.register(&op.token, &["a"]).await;
    let claim = agent.claim_next(json!({ "key": "shared" })).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));

    let before = app.snapshot(&unit).await;
    let r = agent.transition(&unit, "IN_PROGRESS", json!({ "key": "shared" })).await;
    r.assert_code("IDEMPOTENCY_KEY_REUSED");
    assert!(r.message().contains("fresh key"), "{}", r.message());
    app.assert_unchanged(&unit, &before, "a refused key").await;
    agent.record_cost(&attempt, 5, "c").await.data();
    let before = app.snapshot(&unit).await;
    agent.record_cost(&attempt, 6, "c").await.assert_code("IDEMPOTENCY_KEY_REUSED");
    app.assert_unchanged(&unit, &before, "a refused cost key").await;
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 5);

    // Keys are scoped to the fleet: another fleet may use the same key.
    let stranger = Agent::new(&app, "g", "op", Role::Operator).await;
    app.register(&stranger.token, &["a"]).await;
    stranger.claim_next(json!({ "key": "shared" })).await.data();
}

#[tokio::test]
async fn record_cost_replayed_ten_times_concurrently_counts_once() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    app.register(&op.token, &["billed"]).await;
    let claim = agent.claim_next(json!({})).await;
    let (unit, attempt) = (claim.str("id"), claim.str("currentAttemptId"));

    let results = join_all((0..10).map(|_| agent.record_cost(&attempt, 4200, "invoice-77"))).await;
    for r in &results {
        assert_eq!(r.unit()["costCents"], 4200, "{:#}", r.body);
    }
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_units WHERE id = '{unit}'")).await, 4200);
    assert_eq!(app.sql_i64(&format!("SELECT cost_cents FROM work_unit_attempts WHERE id = '{attempt}'")).await, 4200);
    assert_eq!(app.sql_i64("SELECT count(*) FROM work_unit_events WHERE event_type = 'cost_recorded'").await, 1);
}

#[tokio::test]
async fn keys_belong_to_the_agent_that_used_them() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let a = Agent::new(&app, "f", "agent-a", Role::Agent).await;
    let b = Agent::new(&app, "f", "agent-b", Role::Agent).await;
    app.register(&op.token, &["one", "two"]).await;

    // B replaying A's claim key does not get A's unit: it is B's own new key.
    let claim_a = a.claim_next(json!({ "key": "claim-1" })).await;
    let claim_b = b.claim_next(json!({ "key": "claim-1" })).await;
    assert_eq!(claim_b.str("claimedBy"), "agent-b", "{:#}", claim_b.body);
    assert_ne!(claim_b.str("id"), claim_a.str("id"), "two agents doing one unit");
    // A's replay still returns A's unit.
    assert_eq!(a.claim_next(json!({ "key": "claim-1" })).await.str("id"), claim_a.str("id"));

    // The same simple key on unrelated writes of two agents: both count.
    a.record_cost(&claim_a.str("currentAttemptId"), 100, "cost-1").await.data();
    b.record_cost(&claim_b.str("currentAttemptId"), 250, "cost-1").await.data();
    let costs = app
        .sql_json("SELECT agent_id, cost_delta_cents FROM work_unit_events WHERE source_event_id = 'cost-1' ORDER BY agent_id")
        .await;
    assert_eq!(
        costs,
        vec![
            json!({ "agent_id": "agent-a", "cost_delta_cents": 100 }),
            json!({ "agent_id": "agent-b", "cost_delta_cents": 250 }),
        ]
    );
    // Within one agent a key still means one request.
    b.record_cost(&claim_b.str("currentAttemptId"), 999, "cost-1").await.assert_code("IDEMPOTENCY_KEY_REUSED");
}

/// Attacks the claim outcome of a replay (issue item 7): replaying a claim's
/// key answered `held` whatever the first call did. The replay answers what
/// the first call answered (`claimed` for a new attempt, also on a stale
/// unit, `renewed` for the unit already held), on GraphQL
/// (`extensions.claim.outcome`) and MCP (`outcome`) alike, and writes nothing.
#[tokio::test]
async fn a_replayed_claim_answers_the_first_calls_outcome() {
    let app = spawn_app().await;
    let op = Agent::new(&app, "f", "op", Role::Operator).await;
    let agent = Agent::new(&app, "f", "agent-1", Role::Agent).await;
    let rival = Agent::new(&app, "f", "agent-2", Role::Agent).await;
    app.register(&op.token, &["a", "b"]).await;
    let outcome = |r: &Gql| r.body["extensions"]["claim"]["outcome"].clone();

    // Each first call, then its replay by GraphQL and by MCP (the key is the
    // agent's, whatever the surface): the same outcome, nothing written.
    let first = agent.claim_next(json!({ "key": "k-claimed" })).await;
    assert_eq!(outcome(&first), "claimed", "{:#}", first.body);
    let unit = first.str("id");
    let renewed = agent.claim_next(json!({ "key": "k-renewed" })).await;
    assert_eq!(outcome(&renewed), "renewed", "{:#}", renewed.body);
    for (key, said) in [("k-claimed", "claimed"), ("k-renewed", "renewed")] {
        let before = app.snapshot(&unit).await;
        let replay = agent.claim_next(json!({ "key": key })).await;
        assert_eq!(outcome(&replay), said, "{key}: {:#}", replay.body);
        assert_eq!(replay.str("id"), unit);
        let by_tool = tool(&app, &agent.token, "claim_next", json!({ "idempotencyKey": key })).await;
        assert_eq!(by_tool["structuredContent"]["outcome"], said, "{key}: {by_tool:#}");
        app.assert_unchanged(&unit, &before, &format!("the replay of {key}")).await;
    }

    // A stale unit taken by another agent: its first call said `claimed`.
    app.expire_lease(&unit).await;
    let reclaim = rival.claim_next(json!({ "key": "k-reclaim" })).await;
    assert_eq!((reclaim.str("id"), outcome(&reclaim)), (unit.clone(), json!("claimed")), "{:#}", reclaim.body);
    let before = app.snapshot(&unit).await;
    let replay = rival.claim_next(json!({ "key": "k-reclaim" })).await;
    assert_eq!(outcome(&replay), "claimed", "{:#}", replay.body);
    app.assert_unchanged(&unit, &before, "the replay of a reclaim").await;

    // claimUnit's replay too.
    let named = app.sql_json("SELECT id::text AS id FROM work_units WHERE external_ref = 'b'").await;
    let other = named[0]["id"].as_str().expect("unit b").to_owned();
    let claimed = agent.claim_unit(&other, json!({ "key": "k-named" })).await;
    assert_eq!(outcome(&claimed), "claimed", "{:#}", claimed.body);
    let before = app.snapshot(&other).await;
    let replay = agent.claim_unit(&other, json!({ "key": "k-named" })).await;
    assert_eq!(outcome(&replay), "claimed", "{:#}", replay.body);
    let by_tool = tool(&app, &agent.token, "claim_unit", json!({ "unitId": other, "idempotencyKey": "k-named" })).await;
    assert_eq!(by_tool["structuredContent"]["outcome"], "claimed", "{by_tool:#}");
    app.assert_unchanged(&other, &before, "the replay of claimUnit").await;
}
