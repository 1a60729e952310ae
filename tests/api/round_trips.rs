//! Round trips per write are part of the design (issue 13), kept by counting
//! what the server sends, not by timing it: `claimNext` without a domain or
//! an idempotency key is one autocommit statement (`ledger_claim_next`, which
//! sets role and fleet itself), and a token looked up less than a second ago
//! is not looked up again. A request transaction would show as its
//! `set_config('role', ...)` statement, which `db::in_fleet` always sends
//! first; BEGIN and COMMIT come with it.

use std::time::Instant;

use serde_json::json;
use work_ledger::auth::{Role, TokenCache};

use crate::helpers::{TestApp, spawn_app};

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
async fn claim_next_is_one_statement_and_a_known_token_costs_none() {
    let app = spawn_app().await;
    app.sql("INSERT INTO work_units (fleet, external_ref) SELECT 'rt', 'u' || g FROM generate_series(1, 3) g").await;
    let token = app.token("rt", "agent-1", Role::Agent).await;

    // A token the server has not seen: its lookup, then the claim.
    let first_at = Instant::now();
    let first = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    assert_eq!(first.len(), 2, "{first:#?}");
    assert!(first[0].contains("authenticate_token("), "{first:#?}");
    assert_one_claim_statement(&first);

    // The same agent again: its lease is renewed by the same one statement,
    // and the token comes from the cache (unless the TTL ran out meanwhile
    // on a very loaded machine, which adds exactly the lookup back).
    let again = sent(&app, async {
        assert_eq!(app.gql(&token, CLAIM, json!({})).await.data()["claimNext"]["state"], "CLAIMED");
    })
    .await;
    let lookups = usize::from(first_at.elapsed() >= TokenCache::TTL);
    assert_eq!(again.len(), 1 + lookups, "{again:#?}");
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
