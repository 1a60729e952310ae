//! Round trips per write are part of the design (issue 13), kept by counting
//! what the server sends, not by timing it: `claimNext` without a domain or
//! an idempotency key is one autocommit statement (`ledger_claim_next`, which
//! sets role and fleet itself), and so are `heartbeat`, `transition` and
//! `dispose` without a key or an attemptId fence (migration 0011), after the
//! token's lookup (every request asks: issue 23). A request transaction would show as its
//! `set_config('role', ...)` statement, which `db::in_fleet` always sends
//! first; BEGIN and COMMIT come with it.

use serde_json::json;
use work_ledger::auth::Role;

use crate::helpers::{Gql, TestApp, spawn_app};

const CLAIM: &str = "mutation { claimNext { id state } }";

/// The statements the server sent while `run` ran.
async fn sent<F: std::future::Future<Output = ()>>(app: &TestApp, run: F) -> Vec<String> {
    let before = app.statement_log.lock().expect("log").len();
    run.await;
    app.statement_log.lock().expect("log")[before..].to_vec()
}

fn assert_one_claim_statement(statements: &[String]) {
    assert!(statements.last().is_some_and(|s| s.contains("ledger_claim_next(")), "{statements:#?}");
    assert!(!statements.iter().any(|s| s.contains("set_config('role'")), "no request transaction: {statements:#?}");
}

#[tokio::test]
async fn claim_next_is_one_statement_after_the_token_lookup() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt", "agent-1", Role::Agent).await;

    // The token's lookup, then the claim.
    let first = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert_eq!(first.len(), 2, "{first:#?}");
    assert!(first[0].contains("authenticate_token("), "{first:#?}");
    assert_one_claim_statement(&first);

    // The same agent again: the lookup again (a revocation takes effect on
    // the next request), and its lease is renewed by the same one statement.
    let again = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert_eq!(again.len(), 2, "{again:#?}");
    assert!(again[0].contains("authenticate_token("), "{again:#?}");
    assert_one_claim_statement(&again);

    // Both wrote their events in that statement: the claim and the renewal.
    let events = app
        .sql_json("SELECT event_type::text AS t FROM work_unit_events WHERE fleet = 'rt' AND agent_id = 'agent-1' ORDER BY seq")
        .await;
    assert_eq!(events, vec![json!({ "t": "claimed" }), json!({ "t": "heartbeat" })]);

    // With a domain (or an idempotency key) claimNext is the request
    // transaction: set_config, the claim (BEGIN and COMMIT besides).
    let other = app.token("rt", "agent-2", Role::Agent).await;
    let _ = app.gql(&other, "{ me { name } }", json!({})).await;
    let by_domain = sent(&app, async {
        let resp = app.gql(&other, "mutation { claimNext(domain: \"default\") { state } }", json!({})).await;
        assert_eq!(resp.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert!(by_domain.iter().any(|s| s.contains("set_config('role'")), "{by_domain:#?}");
}

/// One request and the statements it sent for the write: the token's
/// lookup, which every request starts with, is left out, since it says
/// nothing about the write (and the write is never sent twice).
async fn sent_with_known_token(app: &TestApp, token: &str, query: &str) -> (Gql, Vec<String>) {
    let mut response = None;
    let mut statements = sent(app, async { response = Some(app.gql(token, query, json!({})).await) }).await;
    assert!(statements.first().is_some_and(|s| s.contains("authenticate_token(")), "{statements:#?}");
    statements.remove(0);
    (response.expect("sent"), statements)
}

fn assert_one_statement(statements: &[String], function: &str) {
    assert_eq!(statements.len(), 1, "{statements:#?}");
    assert!(statements[0].contains(&format!("{function}(")), "{statements:#?}");
}

#[tokio::test]
async fn the_agents_hot_writes_are_one_statement_each_and_keyed_or_fenced_ones_a_transaction() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt2', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt2", "agent-1", Role::Agent).await;
    let (claimed, _) = sent_with_known_token(&app, &token, "mutation { claimNext { id currentAttemptId } }").await;
    let unit = claimed.data()["claimNext"]["id"].as_str().expect("claimed").to_owned();
    let attempt = claimed.data()["claimNext"]["currentAttemptId"].as_str().expect("attempt").to_owned();

    // (mutation, field, what it leaves, the one function it calls)
    let writes = [
        (format!("transition(unitId: \"{unit}\", to: IN_PROGRESS)"), "transition", "IN_PROGRESS", "ledger_start"),
        (format!("heartbeat(attemptId: \"{attempt}\")"), "heartbeat", "IN_PROGRESS", "ledger_heartbeat"),
        (
            format!("transition(unitId: \"{unit}\", to: VERIFIED, evidenceUrl: \"https://ci.example/1\")"),
            "transition",
            "VERIFIED",
            "ledger_verify",
        ),
        (format!("dispose(unitId: \"{unit}\", disposition: MIGRATED)"), "dispose", "DONE", "ledger_dispose"),
    ];
    for (call, field, state, function) in writes {
        let (answer, statements) =
            sent_with_known_token(&app, &token, &format!("mutation {{ {call} {{ state }} }}")).await;
        assert_eq!(answer.data()[field]["state"], state, "{call}");
        assert_one_statement(&statements, function);
    }
    let disposition = app.sql_json(&format!("SELECT disposition::text AS d FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(disposition, vec![json!({ "d": "MIGRATED" })]);

    // Each wrote its event in that one statement.
    let events = app
        .sql_json(&format!(
            "SELECT event_type::text AS t, to_state::text AS s FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"
        ))
        .await;
    assert_eq!(
        events,
        vec![
            json!({ "t": "claimed", "s": "claimed" }),
            json!({ "t": "transitioned", "s": "in_progress" }),
            json!({ "t": "heartbeat", "s": "in_progress" }),
            json!({ "t": "transitioned", "s": "verified" }),
            json!({ "t": "disposed", "s": "done" }),
        ]
    );

    // A refused write is still one statement, then a read that explains it.
    let (refused, statements) = sent_with_known_token(
        &app,
        &token,
        &format!("mutation {{ transition(unitId: \"{unit}\", to: IN_PROGRESS) {{ state }} }}"),
    )
    .await;
    assert_eq!(refused.body["errors"][0]["extensions"]["code"], "ILLEGAL_TRANSITION", "{:#}", refused.body);
    assert!(statements[0].contains("ledger_start("), "{statements:#?}");
    assert!(statements.iter().skip(1).any(|s| s.contains("set_config('role'")), "{statements:#?}");

    // An attemptId fence (or an idempotency key) keeps the request
    // transaction: the lock and the fence check, then the same function.
    let (claimed, _) = sent_with_known_token(&app, &token, "mutation { claimNext { id currentAttempt { id } } }").await;
    let data = claimed.data();
    let (unit, attempt) = (data["claimNext"]["id"].as_str().expect("id"), &data["claimNext"]["currentAttempt"]["id"]);
    let (started, fenced) = sent_with_known_token(
        &app,
        &token,
        &format!("mutation {{ transition(unitId: \"{unit}\", to: IN_PROGRESS, attemptId: {attempt}) {{ state }} }}"),
    )
    .await;
    assert_eq!(started.data()["transition"]["state"], "IN_PROGRESS");
    assert!(fenced.iter().any(|s| s.contains("set_config('role'")), "{fenced:#?}");
    assert!(fenced.last().is_some_and(|s| s.contains("ledger_start(")), "{fenced:#?}");
}
