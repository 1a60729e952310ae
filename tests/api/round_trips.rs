//! Round trips per write are part of the design (issues 13 and 22), kept by
//! counting what the server sends, not by timing it: every write is one
//! autocommit call of its SQL function, with or without an idempotency key,
//! an attemptId fence or a domain, and a refusal comes back from that same
//! call, after the token's lookup (every request asks: issue 23). A request
//! transaction would show as its `set_config('role', ...)` statement, which
//! `db::in_fleet` always sends first.

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
    assert!(statements.last().is_some_and(|s| s.contains("ledger_claim(")), "{statements:#?}");
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

    // With a domain and an idempotency key, as the project's own clients
    // send it, claimNext is still the one statement.
    let other = app.token("rt", "agent-2", Role::Agent).await;
    let (resp, by_domain) = sent_with_known_token(
        &app,
        &other,
        "mutation { claimNext(domain: \"default\", idempotencyKey: \"k-claim\") { state } }",
    )
    .await;
    assert_eq!(resp.data()["claimNext"]["state"], "CLAIMED");
    assert_eq!(by_domain.len(), 1, "{by_domain:#?}");
    assert_one_claim_statement(&by_domain);
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
async fn every_write_is_one_statement_with_or_without_keys_fences_and_refusals() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt2', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt2", "agent-1", Role::Agent).await;
    let triage = app.token("rt2", "triage", Role::Triage).await;
    let (claimed, _) = sent_with_known_token(&app, &token, "mutation { claimNext { id currentAttemptId } }").await;
    let unit = claimed.data()["claimNext"]["id"].as_str().expect("claimed").to_owned();
    let attempt = claimed.data()["claimNext"]["currentAttemptId"].as_str().expect("attempt").to_owned();

    // (token, mutation, field, what it leaves, the one function it calls):
    // plain, keyed and fenced shapes alike.
    let writes = [
        (
            &token,
            format!("transition(unitId: \"{unit}\", to: IN_PROGRESS)"),
            "transition",
            "IN_PROGRESS",
            "ledger_transition",
        ),
        (&token, format!("heartbeat(attemptId: \"{attempt}\")"), "heartbeat", "IN_PROGRESS", "ledger_heartbeat"),
        (
            &token,
            format!(
                "block(unitId: \"{unit}\", question: \"Which?\", idempotencyKey: \"k1\", attemptId: \"{attempt}\")"
            ),
            "block",
            "BLOCKED",
            "ledger_block",
        ),
        (
            &triage,
            format!("unblock(unitId: \"{unit}\", answer: \"That one\", idempotencyKey: \"k2\")"),
            "unblock",
            "IN_PROGRESS",
            "ledger_unblock",
        ),
        (
            &token,
            format!("recordCost(unitId: \"{unit}\", cents: 12, idempotencyKey: \"k3\")"),
            "recordCost",
            "IN_PROGRESS",
            "ledger_record_cost",
        ),
        (
            &token,
            format!(
                "transition(unitId: \"{unit}\", to: VERIFIED, evidenceUrl: \"https://ci.example/1\", idempotencyKey: \"k4\", attemptId: \"{attempt}\")"
            ),
            "transition",
            "VERIFIED",
            "ledger_transition",
        ),
        (
            &token,
            format!(
                "dispose(unitId: \"{unit}\", disposition: MIGRATED, idempotencyKey: \"k5\", attemptId: \"{attempt}\")"
            ),
            "dispose",
            "DONE",
            "ledger_dispose",
        ),
        // A replay of the same key and request: the same one statement, nothing written.
        (
            &token,
            format!(
                "dispose(unitId: \"{unit}\", disposition: MIGRATED, idempotencyKey: \"k5\", attemptId: \"{attempt}\")"
            ),
            "dispose",
            "DONE",
            "ledger_dispose",
        ),
    ];
    for (who, call, field, state, function) in writes {
        let (answer, statements) =
            sent_with_known_token(&app, who, &format!("mutation {{ {call} {{ state }} }}")).await;
        assert_eq!(answer.data()[field]["state"], state, "{call}: {:#}", answer.body);
        assert_one_statement(&statements, function);
    }
    let disposition = app.sql_json(&format!("SELECT disposition::text AS d FROM work_units WHERE id = '{unit}'")).await;
    assert_eq!(disposition, vec![json!({ "d": "MIGRATED" })]);

    // Each wrote its event in that one statement, and the replay none.
    let events = app
        .sql_json(&format!("SELECT event_type::text AS t FROM work_unit_events WHERE unit_id = '{unit}' ORDER BY seq"))
        .await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["t"].as_str()).collect();
    assert_eq!(
        types,
        ["claimed", "transitioned", "heartbeat", "blocked", "unblocked", "cost_recorded", "transitioned", "disposed"]
    );

    // A refused write is one statement too: the call says why.
    for call in [
        format!("transition(unitId: \"{unit}\", to: IN_PROGRESS)"),
        format!("release(unitId: \"{unit}\", idempotencyKey: \"k6\", attemptId: \"{attempt}\")"),
    ] {
        let (refused, statements) =
            sent_with_known_token(&app, &token, &format!("mutation {{ {call} {{ state }} }}")).await;
        assert_eq!(refused.body["errors"][0]["extensions"]["code"], "ILLEGAL_TRANSITION", "{:#}", refused.body);
        assert_eq!(refused.body["errors"][0]["extensions"]["state"], "DONE", "{:#}", refused.body);
        assert_eq!(statements.len(), 1, "{statements:#?}");
        assert!(!statements.iter().any(|s| s.contains("set_config('role'")), "{statements:#?}");
    }
}
